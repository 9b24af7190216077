"""What a news page says about itself: its URL, its outlet, its headline (its language:
:mod:`tasks.crossgenre.news_language`).

Used by ``tasks/crossgenre/stages/ingest.py`` (the URL of a saved page) and
``tasks/crossgenre/stages/extract.py`` (headline, language). Pages come from any outlet, so
every rule reads what the page states and cross-checks one statement against another:

- **URL of a saved page**: ``og:url``, then the ``url`` / ``mainEntityOfPage`` of a JSON-LD
  article, then ``<link rel=canonical>``, then the ``<!-- saved from url=(N)… -->`` mark a
  browser writes when it saves a page. A candidate is refused when the page names it as the
  story's origin (``<meta name="syndication-source">`` / ``original-source``, Google's
  syndication tags) or when it lies on another site than the page's own navigation (a
  syndicated copy whose canonical points to the wire service that wrote it): the site must
  be the outlet that published *this* copy.
- **Headline**: the visible ``<h1>`` that agrees with one of the titles the page declares
  (``og:title``, ``twitter:title``, JSON-LD ``headline``, ``parsely-title``, ``dc.title``,
  ``<title>``); a declared title may be a truncated form of the ``<h1>`` or carry the site's
  name (" | Site", " - Site", " — Site", "Site · "), so agreement is "same words, one a
  prefix of the other" (a CJK character counts as a word's length). Without an agreeing
  ``<h1>``: the article's own ``<h1>`` (inside ``<article>``/``<main>``, four words or more:
  titles are often rewritten for search engines), or a visible ``<h1>`` that opens with the
  same 20 characters as a declared title (rewritten after its first words), else the first declared title with its site name stripped, lengthened by any
  other title that continues it (an untruncated form).
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from difflib import SequenceMatcher
from typing import Any
from urllib.parse import urljoin, urlsplit

import lxml.html
from courlan import extract_domain
from lxml import etree

HtmlElement = Any  # lxml.html.HtmlElement (lxml ships no type information)

_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
_SAVED_FROM = re.compile(r"<!--\s*saved from url=\(\d+\)(\S+?)\s*-->", re.IGNORECASE)
_ARTICLE_TYPES = re.compile(r"Article$|Posting$|^Report$|^WebPage$", re.IGNORECASE)
_SEPARATOR = re.compile(r"\s+(?:[|\-–—·•»]|::)\s+")
_CHROME_TAGS = ("header", "nav", "footer")  # where a site's own navigation lives
_CHROME_ROLES = ("banner", "navigation", "contentinfo")
_BRAND = re.compile(r"logo|brand|nameplate|masthead|wordmark|site-?title|home", re.IGNORECASE)
_HIDDEN_CLASSES = frozenset({"sr-only", "visually-hidden", "screen-reader-text", "hidden"})
_TRIVIAL_HOST_LABELS = ("www.", "www2.", "m.", "mobile.", "amp.")
_MIN_PREFIX_CHARS = 20
_MIN_HEADLINE_WORDS = 4
_BREAKS = frozenset(
    {"p", "div", "li", "td", "th", "dt", "dd", "tr", "br", "h1", "h2", "h3", "h4", "h5", "h6", "section",
     "table", "ul", "ol", "figcaption", "blockquote", "article", "aside", "header", "footer"}
)  # fmt: skip


def load_document(text: str) -> HtmlElement | None:
    """The page parsed by lxml's HTML parser; None when it holds no element at all."""
    try:
        doc = lxml.html.document_fromstring(_XML_DECLARATION.sub("", text.lstrip("\ufeff"), count=1))
    except (etree.ParserError, ValueError):
        return None
    return doc


def clean_text(text: str) -> str:
    """NFC, whitespace runs collapsed to one space, trimmed."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def block_text(el: HtmlElement) -> str:
    """The text of ``el`` with a space where one block or cell ends and the next starts
    (``<th>DOI</th><td>10.…</td>`` reads "DOI 10.…"); inline markup joins without one."""
    parts: list[str] = []
    for event, node in etree.iterwalk(el, events=("start", "end")):
        breaks = isinstance(node.tag, str) and node.tag.lower() in _BREAKS
        if event == "start":
            parts.append(" " if breaks else "")
            parts.append(node.text or "" if isinstance(node.tag, str) else "")
        else:
            parts.append(" " if breaks else "")
            if node is not el:
                parts.append(node.tail or "")
    return clean_text("".join(parts))


def meta_values(doc: HtmlElement) -> dict[str, list[str]]:
    """``<meta>`` contents by lower-case ``name`` / ``property`` / ``itemprop`` / ``http-equiv``."""
    found: dict[str, list[str]] = {}
    for el in doc.iter("meta"):
        name = (
            el.get("name") or el.get("property") or el.get("itemprop") or el.get("http-equiv") or ""
        ).strip()
        content = clean_text(el.get("content") or el.get("value") or "")  # some savers write value=
        if name and content:
            found.setdefault(name.lower(), []).append(content)
    return found


def json_ld(doc: HtmlElement) -> list[dict[str, Any]]:
    """Every JSON object in the page's JSON-LD scripts (``@graph`` and nested ones too);
    a script that is not valid JSON is skipped."""
    objects: list[dict[str, Any]] = []
    for script in doc.iter("script"):
        if (script.get("type") or "").strip().lower() != "application/ld+json":
            continue
        try:
            data = json.loads(script.text or "", strict=False)
        except ValueError:
            continue
        objects.extend(_objects(data))
    return objects


def _objects(data: Any) -> Iterator[dict[str, Any]]:
    if isinstance(data, dict):
        yield data
        for value in data.values():
            yield from _objects(value)
    elif isinstance(data, list):
        for item in data:
            yield from _objects(item)


def is_article(obj: dict[str, Any]) -> bool:
    types = obj.get("@type")
    names = types if isinstance(types, list) else [types]
    return any(isinstance(t, str) and _ARTICLE_TYPES.search(t) for t in names)


def ld_strings(value: Any) -> list[str]:
    """The strings of a JSON-LD value: a string, ``{"@id"|"url"|"name": …}``, or a list of them."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [v for k in ("url", "@id", "name") if isinstance(v := value.get(k), str)][:1]
    if isinstance(value, list):
        return [s for item in value for s in ld_strings(item)]
    return []


# --- where the page lives --------------------------------------------------------------


def host_of(url: str) -> str:
    """The URL's host, lower-case, as written (``www.`` kept); "" for a URL without one."""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def same_site(host: str, other: str) -> bool:
    """Whether two hosts are one site: equal once a leading ``www.``/``m.``/``amp.`` is dropped.

    Sub-domains stay apart on purpose: ``www.nih.gov`` news links to
    ``pubmed.ncbi.nlm.nih.gov`` are outbound links to a study, not the outlet's own pages.
    """
    return bool(host) and _bare(host) == _bare(other)


def _bare(host: str) -> str:
    host = host.lower().rstrip(".")
    for label in _TRIVIAL_HOST_LABELS:
        if host.startswith(label) and host.count(".") > 1:
            return host[len(label) :]
    return host


def site_label(host: str) -> str:
    """The registered name of a host without its suffix: ``www.dailypulse.co.uk`` → ``dailypulse``."""
    domain = extract_domain(f"http://{host}/") or _bare(host)
    return domain.split(".", 1)[0]


def own_host(doc: HtmlElement) -> str | None:
    """The host the page's own navigation points to (header, nav, footer, logo links).

    Votes: each chrome link for its host, a relative one for "this page's host, unnamed". The
    winner must have two votes or a logo/home link; None when it is the unnamed host, or when
    nothing qualifies (a footer's lone social links never make the site).
    """
    votes: Counter[str] = Counter()
    branded: set[str] = set()
    order: dict[str, int] = {}
    chrome = {el for el in doc.iter() if el.tag in _CHROME_TAGS or el.get("role") in _CHROME_ROLES}
    for anchor in doc.iter("a"):
        href = (anchor.get("href") or "").strip()
        brand = any(
            _BRAND.search(f"{el.get('class') or ''} {el.get('rel') or ''}") for el in _self_and_up(anchor)
        )
        if not (brand or any(el in chrome for el in anchor.iterancestors())) or href.startswith("#"):
            continue
        absolute = href.lower().startswith(("http://", "https://"))
        host = host_of(href) if absolute else ""
        votes[host] += 1
        order.setdefault(host, len(order))
        if brand:
            branded.add(host)
    qualified = [h for h in votes if votes[h] >= 2 or h in branded]
    if not qualified:
        return None
    winner = min(qualified, key=lambda h: (-votes[h], order[h]))
    return winner or None


def _self_and_up(el: HtmlElement, levels: int = 2) -> Iterator[HtmlElement]:
    yield el
    for _, parent in zip(range(levels), el.iterancestors(), strict=False):
        yield parent


def stated_url(doc: HtmlElement, text: str) -> str | None:
    """The page's own URL as the page states it (module doc), or None."""
    metas = meta_values(doc)
    origins = {u for name in ("syndication-source", "original-source") for u in metas.get(name, [])}
    home = own_host(doc)
    candidates = [*metas.get("og:url", [])]
    for obj in json_ld(doc):
        if is_article(obj):
            candidates += ld_strings(obj.get("url")) + ld_strings(obj.get("mainEntityOfPage"))
    candidates += [
        el.get("href") or ""
        for el in doc.iter("link")
        if "canonical" in (el.get("rel") or "").lower().split()
    ]
    saved = _SAVED_FROM.search(text[:4096])
    if saved:
        candidates.append(saved.group(1))
    for candidate in candidates:
        url = candidate.strip()
        if not url.lower().startswith(("http://", "https://")) or url in origins or not host_of(url):
            continue
        if home is not None and site_label(host_of(url)) != site_label(home):
            continue
        return url
    return None


def base_url(doc: HtmlElement, page_url: str) -> str:
    """What relative links resolve against: ``<base href>`` (itself resolved) or the page's URL."""
    base = next((el.get("href") for el in doc.iter("base") if el.get("href")), None)
    return urljoin(page_url, base.strip()) if base else page_url


# --- headline ---------------------------------------------------------------------------


def declared_titles(
    doc: HtmlElement, metas: dict[str, list[str]], objects: list[dict[str, Any]]
) -> list[str]:
    """The titles the page declares, most trusted first (see module doc)."""
    titles = [t for obj in objects if is_article(obj) for t in ld_strings(obj.get("headline"))]
    for name in ("og:title", "twitter:title", "parsely-title", "sailthru.title", "dc.title", "title"):
        titles += metas.get(name, [])
    element = next(iter(doc.iter("title")), None)
    if element is not None:
        titles.append(element.text_content())
    return [t for t in (clean_text(t) for t in titles) if t]


def site_names(metas: dict[str, list[str]], objects: list[dict[str, Any]], host: str) -> list[str]:
    """Names the outlet goes by: ``og:site_name``, ``application-name``, JSON-LD publisher, host label."""
    names = [*metas.get("og:site_name", []), *metas.get("application-name", [])]
    for obj in objects:
        if is_article(obj):
            for key in ("publisher", "isPartOf", "sourceOrganization"):
                names += [n for n in ld_strings(obj.get(key)) if not n.startswith(("http", "#"))]
    if host:
        names.append(site_label(host))
    return [n for n in names if n]


def strip_site_name(title: str, names: list[str]) -> str:
    """``title`` without a leading or trailing part that names the site ("X | Site", "Site - X")."""
    parts = _SEPARATOR.split(title)
    if len(parts) < 2:
        return title
    keys = [_alnum(n) for n in names if len(_alnum(n)) >= 3]
    if _names_site(parts[-1], keys):
        return clean_text(title[: _last_separator(title).start()])
    if _names_site(parts[0], keys):
        return clean_text(title[next(_SEPARATOR.finditer(title)).end() :])
    return title


def _last_separator(title: str) -> re.Match[str]:
    return list(_SEPARATOR.finditer(title))[-1]


def _names_site(part: str, keys: list[str]) -> bool:
    key = _alnum(part)
    if not key:
        return False
    return any(k in key or key in k or SequenceMatcher(None, k, key).ratio() >= 0.8 for k in keys)


def headline(doc: HtmlElement, site_host: str) -> str | None:
    """The article's headline (module doc); None when the page has neither an ``<h1>`` nor a title."""
    metas, objects = meta_values(doc), json_ld(doc)
    titles = declared_titles(doc, metas, objects)
    names = site_names(metas, objects, site_host)
    stripped = [strip_site_name(t, names) for t in titles]
    h1s, framed = visible_h1s(doc)
    keys = [_alnum(n) for n in names if len(_alnum(n)) >= 3]
    h1s = [h for h in h1s if not (_alnum(h) and _alnum(h) in keys)] or h1s  # a logo <h1> names the site
    for h1 in h1s:
        if any(agrees(h1, t) for t in (*titles, *stripped)):
            return h1
    for h1 in h1s:  # "COSMOS+ - Helmholtz-Gemeinschaft …": the h1 is one part of a title, whatever the site
        if any(_alnum(part) == _alnum(h1) for t in titles for part in _SEPARATOR.split(t)):
            return h1
    if framed and len(framed[0].split()) >= _MIN_HEADLINE_WORDS:
        return framed[0]  # the article's own <h1>, under a title written for search engines
    for h1 in h1s:  # a title rewritten after the same opening words ("Wie kann ich …? Die 8 Tipps")
        shared = [os.path.commonprefix([_alnum(h1), _alnum(t)]) for t in stripped]  # noqa: RUF071 -- text
        if any(_weight(prefix) >= _MIN_PREFIX_CHARS for prefix in shared):
            return h1
    if stripped:
        best = stripped[0]
        longer = [t for t in stripped if len(_alnum(t)) > len(_alnum(best)) and agrees(best, t)]
        return max(longer, key=lambda t: len(_alnum(t))) if longer else best
    return h1s[0] if h1s else None


def visible_h1s(doc: HtmlElement) -> tuple[list[str], list[str]]:
    """Texts of the ``<h1>`` elements a reader sees (those inside ``<article>``/``<main>``
    first), and of those inside only."""
    inside: list[str] = []
    outside: list[str] = []
    for h1 in doc.iter("h1"):
        if _hidden(h1):
            continue
        text = clean_text(h1.text_content())
        if text:
            framed = any(a.tag in ("article", "main") or a.get("role") == "main" for a in h1.iterancestors())
            (inside if framed else outside).append(text)
    return inside + outside, inside


def _hidden(el: HtmlElement) -> bool:
    for node in (el, *el.iterancestors()):
        classes = set((node.get("class") or "").lower().split())
        style = (node.get("style") or "").replace(" ", "").lower()
        if (
            node.get("hidden") is not None
            or node.get("aria-hidden") == "true"
            or "display:none" in style
            or classes & _HIDDEN_CLASSES
        ):
            return True
    return False


def agrees(a: str, b: str) -> bool:
    """Same words, or one a prefix of the other (a truncated title, a title with the site's name)."""
    x, y = _alnum(a.rstrip(".…")), _alnum(b.rstrip(".…"))
    if not x or not y:
        return False
    short, long = sorted((x, y), key=len)
    return short == long or (
        _weight(short) >= _MIN_PREFIX_CHARS and long.startswith(short) and len(short) >= len(long) / 2
    )


def _weight(text: str) -> int:
    """Length in Latin-letter equivalents: a CJK character carries a word's worth (three)."""
    return sum(3 if "\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" else 1 for ch in text)


def _alnum(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())
