"""Stage ``extract``: headline, date, language, main text, outbound links and identifiers of each page.

Paper 003 §2 kept the articles that link to medical journals, from an embedded link or a
reference section at the end, and took their headline as the claim. What each part comes from:

- **headline**: :func:`tasks.crossgenre.news.headline` (the visible ``<h1>`` agreeing with a
  declared title; otherwise a declared title without the site's name);
- **published**: htmldate (https://htmldate.readthedocs.io), from the page's metadata and
  ``<time>`` elements only by default: its search of the visible text mistakes the study's
  publication date or a DOI such as ``…2019.11.006`` for the page's date;
- **language**: what the page declares, checked against its main text
  (:func:`tasks.crossgenre.news_language.language`: py3langid);
- **main_text**: trafilatura (https://trafilatura.readthedocs.io) on the page with its
  furniture pruned first (:func:`tasks.crossgenre.news_blocks.prune_noise`);
- **links** / **identifiers**: :func:`tasks.crossgenre.news_links.collect` (each link with
  the paragraph it sits in);
- **page_types** / **headings**: what the page declares itself (``og:type``, JSON-LD
  ``@type``) and the section headings of its main text — a listicle's numbered items,
  a roundup's one heading per story — for ``single_study``.

Excluded: ``not_html`` (PDF bytes, JSON, plain text, an empty page: the detail says which),
``no_headline``, ``no_main_text`` (less than ``min_main_chars`` characters of text besides
the headline).
"""

from __future__ import annotations

import copy
import warnings
from importlib.metadata import version
from typing import Any, Literal

import htmldate
import pyarrow as pa
import trafilatura
from lxml import etree
from pydantic import Field
from trafilatura.xml import xmltotxt

from irforge.config import StrictModel
from irforge.parallel import CPU
from irforge.stage import (
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
    upstream_source,
)
from tasks.common.text.document import InputRejected
from tasks.common.text.sniff import sniff
from tasks.crossgenre import news
from tasks.crossgenre.news_blocks import prune_noise
from tasks.crossgenre.news_language import declared_languages, language
from tasks.crossgenre.news_links import collect, metadata_citations

_HTML_SIGNS = ("<html", "<body", "<head")


class ExtractConfig(StrictModel):
    favor: Literal["balanced", "precision", "recall"] = Field(
        "balanced", description="trafilatura's trade-off between leaving out noise and keeping all text."
    )
    include_tables: bool = Field(
        True, description="Keep tables of the main text (trafilatura include_tables)."
    )
    date_search: Literal["metadata", "extensive"] = Field(
        "metadata",
        description="htmldate: metadata and <time> only, or also the visible text (finds more dates, "
        "including wrong ones: the study's date, dates inside DOIs).",
    )
    min_main_chars: int = Field(
        100, ge=0, description="Fewer characters of main text besides the headline: excluded as no_main_text."
    )


_S = pa.string()
LINK_TYPE = pa.struct(
    [pa.field(n, _S, nullable=False) for n in ("href", "url", "anchor", "block", "context")]
)
IDENTIFIER_TYPE = pa.struct([pa.field(n, _S, nullable=False) for n in ("kind", "value", "where")])
SCHEMA = pa.schema(
    [
        pa.field("page_id", _S, nullable=False),
        pa.field("url", _S, nullable=False),
        pa.field("site", _S, nullable=False),
        pa.field("headline", _S, nullable=False),
        pa.field("published", _S),
        pa.field("language", _S),
        pa.field("main_text", pa.large_string(), nullable=False),
        pa.field("links", pa.list_(pa.field("item", LINK_TYPE, nullable=False)), nullable=False),
        pa.field("identifiers", pa.list_(pa.field("item", IDENTIFIER_TYPE, nullable=False)), nullable=False),
        pa.field("page_types", pa.list_(_S), nullable=False),
        pa.field("headings", pa.list_(_S), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("page_id", _S, nullable=False), pa.field("url", _S, nullable=False)
)


class PageRejected(InputRejected):
    """A page excluded by :func:`read_page` (``reason``: not_html, no_headline, no_main_text)."""


def read_page(html: str, url: str, site: str, config: ExtractConfig) -> dict[str, Any]:
    """The extracted columns of one page (module doc), or :class:`PageRejected`."""
    _require_html(html)
    doc = news.load_document(html)
    if doc is None:
        raise PageRejected("not_html", "no HTML element in the page")
    title = news.headline(doc, site or news.host_of(url))
    if not title:
        raise PageRejected("no_headline", "no <h1>, og:title, twitter:title, JSON-LD headline or <title>")
    metas, objects = news.meta_values(doc), news.json_ld(doc)
    pruned = copy.deepcopy(doc)
    prune_noise(pruned, keep=_headline_element(pruned, title))
    web_url = url if url.lower().startswith(("http://", "https://")) else None
    body = _main_body(pruned, web_url, config)
    main_text = xmltotxt(_without_refs(body), include_formatting=False) if body is not None else ""
    besides = [line for line in main_text.splitlines() if news.clean_text(line) != title]
    if len("".join(besides).strip()) < config.min_main_chars:
        chars = len("".join(besides).strip())
        raise PageRejected(
            "no_main_text",
            f"{chars} characters of main text besides the headline (min {config.min_main_chars})",
        )
    refs = (
        [(r.get("target") or "", "".join(r.itertext()), _paragraph(r)) for r in body.iter("ref")]
        if body is not None
        else []
    )
    base = news.base_url(doc, web_url or (f"https://{site}/" if site else ""))
    links, identifiers = collect(refs, main_text, pruned, metadata_citations(metas, objects), base, site)
    return {
        "headline": title,
        "published": _published(doc, web_url, config),
        "language": language(declared_languages(doc, metas, objects), main_text),
        "main_text": main_text,
        "links": [
            {"href": k.href, "url": k.url, "anchor": k.anchor, "block": k.block, "context": k.context}
            for k in links
        ],
        "identifiers": [{"kind": k, "value": v, "where": w} for k, v, w in identifiers],
        "page_types": page_types(metas, objects),
        "headings": [news.clean_text("".join(h.itertext())) for h in body.iter("head")]
        if body is not None
        else [],
    }


def page_types(metas: dict[str, list[str]], objects: list[dict[str, Any]]) -> list[str]:
    """What the page says it is: ``og:type`` values and JSON-LD ``@type`` names, in order."""
    found = dict.fromkeys(t.strip() for t in metas.get("og:type", []))
    for obj in objects:
        names = obj.get("@type")
        for name in names if isinstance(names, list) else [names]:
            if isinstance(name, str) and name.strip():
                found[name.strip()] = None
    return [t for t in found if t]


def _paragraph(ref: Any) -> str:
    """The text of the paragraph (or list item, heading, cell) a main-text link sits in."""
    parent = ref.getparent()
    while parent is not None and parent.tag == "hi":  # emphasis around the link
        parent = parent.getparent()
    return "".join(parent.itertext()) if parent is not None else "".join(ref.itertext())


def _require_html(html: str) -> None:
    """``not_html`` for what is no web page, judged by :func:`tasks.common.text.sniff.sniff`."""
    try:
        sniffed = sniff("page.html", html.encode("utf-8", "surrogatepass"))
    except InputRejected as err:
        head = html[:65536].lower()
        if err.reason == "unsupported_format" and any(sign in head for sign in _HTML_SIGNS):
            return  # markup before <html> (a stray <script>, a comment banner): still a page
        raise PageRejected("not_html", f"{err.reason}: {err.detail}") from None
    if sniffed.format != "html":
        raise PageRejected("not_html", f"a {sniffed.format.upper()} XML document, not a web page")


def _headline_element(doc: news.HtmlElement, title: str) -> news.HtmlElement | None:
    return next((h for h in doc.iter("h1") if news.agrees(news.clean_text(h.text_content()), title)), None)


def _main_body(doc: news.HtmlElement, url: str | None, config: ExtractConfig) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trafilatura warns on pages it finds too short
        extracted = trafilatura.bare_extraction(
            copy.deepcopy(doc),  # it cleans the tree it is given; the cited blocks are read after
            url=url,
            include_comments=False,
            include_links=True,
            include_tables=config.include_tables,
            favor_precision=config.favor == "precision",
            favor_recall=config.favor == "recall",
            with_metadata=False,
        )
    return None if extracted is None or isinstance(extracted, dict) else extracted.body


def _without_refs(body: Any) -> Any:
    plain = copy.deepcopy(body)
    etree.strip_tags(plain, "ref")
    return plain


def _published(doc: news.HtmlElement, url: str | None, config: ExtractConfig) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = htmldate.find_date(
            copy.deepcopy(doc),
            url=url,
            original_date=True,
            extensive_search=config.date_search == "extensive",
            outputformat="%Y-%m-%d",
        )
    return found or None


def inputs(_ctx: StageContext[ExtractConfig]) -> dict[str, Any]:
    # The extractors' releases decide what they find: a new one makes the stage stale.
    return {"libraries": {name: version(name) for name in ("trafilatura", "htmldate", "courlan", "lxml")}}


def process(chunk: pa.Table, ctx: StageContext[ExtractConfig]) -> ChunkResult:
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    columns = ("page_id", "url", "site", "html")
    for page_id, url, site, html in zip(*(chunk.column(c).to_pylist() for c in columns), strict=True):
        try:
            row = read_page(html, url, site, ctx.config)
        except PageRejected as err:
            excluded.append({"reason": err.reason, "detail": err.detail, "page_id": page_id, "url": url})
            continue
        kept.append({"page_id": page_id, "url": url, "site": site, **row})
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


SPEC: StageSpec[ExtractConfig] = StageSpec(
    name="extract",
    version=2,  # 2: links' context (issue 27)
    config_type=ExtractConfig,
    upstream=("ingest",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("page_id",),
    inputs=inputs,
    source=upstream_source("ingest"),
    process=process,
    resources=CPU,
    description="Headline, date, language, main text (trafilatura), outbound links and DOIs/PMIDs/PMCIDs.",
)
