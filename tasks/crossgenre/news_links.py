"""Outbound links and written identifiers of a news page (``links`` / ``identifiers`` of the extract stage).

Used by ``tasks/crossgenre/stages/extract.py``. A link is kept when it leaves the site and
sits in the main text (what trafilatura keeps, after :func:`tasks.crossgenre.news_blocks.prune_noise`)
or in a reference, metadata or credit block (:func:`tasks.crossgenre.news_blocks.cited_blocks`),
or is named by the page's metadata (``citation_reference`` meta tags; JSON-LD ``isBasedOn`` /
``citation``). Each has:

- ``href``: as written; ``url``: absolute, unwrapped from redirect / tracking wrappers
  (:func:`unwrap`) and normalised (:func:`normalise_url`); links are de-duplicated on it;
- ``block``: ``reference`` > ``metadata`` > ``credit`` > ``main`` when one URL is in several;
- ``context``: the text of the paragraph or block the link sits in (at most
  :data:`CONTEXT_CHARS` around the anchor), what ``single_study`` reads for reporting words.

Same-site links (:func:`tasks.crossgenre.news.same_site`), fragments, ``mailto:`` and
``javascript:`` links are not outbound links.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl, urljoin, urlsplit, urlunsplit

from courlan import normalize_url

from tasks.crossgenre.news import HtmlElement, block_text, clean_text, host_of, ld_strings, same_site
from tasks.crossgenre.news_blocks import Block, cited_blocks
from tasks.crossgenre.news_ids import find_identifiers, texts_of

# Query parameters that redirect and tracking services put the destination in (Google's
# /url?q=, Facebook's l.php?u=, Outlook safelinks' url=, DuckDuckGo's uddg=, ad servers' adurl=).
_WRAPPER_PARAMS = (
    "url", "u", "q", "target", "dest", "destination", "redirect", "redirect_url", "redirect_uri",
    "redirecturl", "redir", "r", "to", "link", "goto", "out", "href", "l", "uddg", "adurl", "murl",
)  # fmt: skip
_MAX_WRAPS = 5
_EMBEDDED_URL = re.compile(r"/(https?:/{1,2}.+)$", re.IGNORECASE)
_SUB_DELIMS = re.compile(r"%(21|24|27|28|29|2A|3B|40|7E)", re.IGNORECASE)
_PRECEDENCE: dict[str, int] = {"reference": 0, "metadata": 1, "credit": 2, "main": 3}
_CITATION_URL_KEYS = (
    "citation_fulltext_html_url",
    "citation_abstract_html_url",
    "citation_pdf_url",
    "citation_url",
)


CONTEXT_CHARS = 400


@dataclass(frozen=True)
class Link:
    href: str
    url: str
    anchor: str
    block: Block
    context: str = ""


def around(text: str, anchor: str, chars: int = CONTEXT_CHARS) -> str:
    """``text`` cut to ``chars`` characters centred on the first ``anchor`` in it."""
    text = clean_text(text)
    if len(text) <= chars:
        return text
    at = text.find(anchor) if anchor else -1
    middle = at + len(anchor) // 2 if at >= 0 else 0
    start = max(0, min(middle - chars // 2, len(text) - chars))
    return text[start : start + chars]


def unwrap(url: str) -> str:
    """The destination of a redirect / tracking wrapper (nested ones too); ``url`` when it is none.

    A wrapper carries the destination as a URL-encoded ``http(s)://`` value of a query
    parameter (a known name first, then any), base64-encoded in one, or after the path
    (``https://web.archive.org/web/2020/https://…``).
    """
    for _ in range(_MAX_WRAPS):
        inner = _inner_url(url)
        if inner is None:
            break
        url = inner
    return url


def _inner_url(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    params = parse_qsl(parts.query)
    named = sorted(
        (p for p in params if p[0].lower() in _WRAPPER_PARAMS),
        key=lambda p: _WRAPPER_PARAMS.index(p[0].lower()),
    )
    for _, value in [*named, *params]:
        candidate = value.strip()
        if not _is_web(candidate):
            candidate = _base64_url(candidate)
        if _is_web(candidate):
            return candidate
    embedded = _EMBEDDED_URL.search(parts.path)
    if embedded:
        return re.sub(r"^(https?):/(?!/)", r"\1://", embedded.group(1), flags=re.IGNORECASE)
    return None


def _base64_url(value: str) -> str:
    if not value.startswith(("aHR0c", "aHR0cHM6")):
        return ""
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return ""


def _is_web(value: str) -> bool:
    return value.lower().startswith(("http://", "https://")) and bool(host_of(value))


def normalise_url(url: str) -> str:
    """courlan's normal form (lower-case host, default port, tracking parameters such as
    ``utm_*`` removed, query sorted), without the fragment, with the path's parentheses and
    other sub-delimiters unescaped again (``S2213-2600(19)30271-1`` as publishers write it)."""
    try:
        normal = normalize_url(url, strict=False, trailing_slash=True)
    except (ValueError, AttributeError):
        normal = url
    parts = urlsplit(normal)
    path = _SUB_DELIMS.sub(lambda m: chr(int(m.group(1), 16)), parts.path)
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class LinkCollector:
    """Outbound links of one page, de-duplicated on the normalised URL (module doc)."""

    def __init__(self, base: str, site: str) -> None:
        self.base, self.site = base, site
        self._links: dict[str, Link] = {}

    def add(self, href: str, anchor: str, block: Block, context: str = "") -> None:
        href = href.strip()
        if not href or href.startswith("#"):
            return
        try:
            absolute = urljoin(self.base, href) if self.base.lower().startswith(("http:", "https:")) else href
        except ValueError:
            return
        target = unwrap(absolute)
        if not _is_web(target) or same_site(host_of(target), self.site):
            return
        url = normalise_url(target)
        known = self._links.get(url)
        if known is None:
            anchor = clean_text(anchor)
            self._links[url] = Link(href, url, anchor, block, around(context, anchor))
        elif _PRECEDENCE[block] < _PRECEDENCE[known.block]:
            self._links[url] = replace(
                known, block=block, context=around(context, known.anchor) or known.context
            )

    def links(self) -> list[Link]:
        return list(self._links.values())


def anchors(element: HtmlElement) -> Iterator[tuple[str, str]]:
    """(href, text) of the links inside an element (itself included)."""
    for anchor in element.iter("a", "area"):
        href = anchor.get("href")
        if href:
            yield href, anchor.text_content()


def metadata_citations(metas: dict[str, list[str]], objects: list[dict[str, Any]]) -> tuple[list[str], str]:
    """(URLs, text) the page's metadata cites: ``citation_reference`` meta tags (Highwire
    ``key=value;`` lists) and JSON-LD ``isBasedOn`` / ``citation`` values."""
    urls: list[str] = []
    texts: list[str] = []
    for reference in metas.get("citation_reference", []):
        texts.append(reference)
        for item in reference.split(";"):
            key, _, value = item.partition("=")
            if key.strip().lower() in _CITATION_URL_KEYS:
                urls.append(value.strip())
    for obj in objects:
        for key in ("isBasedOn", "citation"):
            cited = obj.get(key)
            if cited is not None:
                urls += [u for u in ld_strings(cited) if _is_web(u)]
                texts += list(texts_of(cited))
    return urls, "\n".join(texts)


def identifiers(blocks: Iterable[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(kind, value, where) of the identifiers in ``(where, text)`` blocks; an identifier
    in several keeps the highest-ranked ``where`` (reference > metadata > credit > main)."""
    best: dict[tuple[str, str], str] = {}
    for where, text in blocks:
        for key in find_identifiers(text):
            if key not in best or _PRECEDENCE[where] < _PRECEDENCE[best[key]]:
                best[key] = where
    return [(kind, value, where) for (kind, value), where in best.items()]


def collect(
    main_refs: list[tuple[str, str, str]],
    main_text: str,
    pruned: HtmlElement,
    metadata: tuple[list[str], str],
    base: str,
    site: str,
) -> tuple[list[Link], list[tuple[str, str, str]]]:
    """Links and identifiers of a page: ``main_refs`` (href, anchor, paragraph) and ``main_text``
    from the main-text extractor, the cited blocks of the ``pruned`` page, the page's metadata
    citations."""
    collector = LinkCollector(base, site)
    for href, anchor, paragraph in main_refs:
        collector.add(href, anchor, "main", paragraph)
    texts: list[tuple[str, str]] = []
    for block, element in cited_blocks(pruned):
        text = block_text(element)
        texts.append((block, text))
        for href, anchor in anchors(element):
            collector.add(href, anchor, block, text)
    urls, text = metadata
    for url in urls:
        collector.add(url, "", "metadata")
    texts += [("metadata", text), ("main", main_text)]
    return collector.links(), identifiers(texts)
