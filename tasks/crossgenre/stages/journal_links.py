"""Stage ``journal_links``: keep the news pages that cite research (paper 003 §2; contract §3).

The paper kept the articles that link to medical journal domains (24.6 % of what it
crawled). Here every outbound link of a page (extract's ``links``: main text, reference
blocks, metadata, credits) and every DOI/PMID/PMCID written in it (extract's
``identifiers``) is judged by :func:`tasks.crossgenre.study_links.classify_url` /
:func:`~tasks.crossgenre.study_links.identifier_link` against the domain list of
:mod:`tasks.crossgenre.domains` (metapub's publisher files + ``data/crossgenre/journal_domains.yaml``
+ the config's ``extra_domains`` / ``exclude_domains``).

Kept (key ``page_id``): extract's columns without ``links`` / ``identifiers``, plus
``study_links`` (each publication reference: url, kind, id_kind, id_value, the reason it
matched, and the anchor, block and paragraph it sits in), ``outbound_domains`` (hosts linked, other than the page's own site, in document
order) and ``skipped_links`` (research-looking links that are not publications — trial
registries, journal homepages, index searches — with the reason). Excluded:
``no_study_link``, the detail naming the outbound domains and the skipped links.

``landing_pages`` (off by default: the demo is offline) fetches the landing page of each
journal link without an identifier in its URL and takes the PMID / DOI / PMCID its meta tags
declare (:mod:`tasks.crossgenre.landing`), so single_study groups it with the other links to
that work and resolve finds its PMID; a page that cannot be read leaves the link as it was,
its ``reason`` saying why. The fetch day is a fingerprint input, as in ingest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.parallel import CPU, Resources
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.crossgenre.domains import (
    CURATED_FILE,
    METAPUB_DIR,
    DomainList,
    clean_domain,
    describe_domains,
    load_domains,
)
from tasks.crossgenre.landing import LandingConfig, LandingPages, fetch_day
from tasks.crossgenre.news_links import around
from tasks.crossgenre.stages.extract import SCHEMA as EXTRACT_SCHEMA
from tasks.crossgenre.study_links import Skipped, StudyLink, classify_url, identifier_link, tracked_title

_SHOWN_DOMAINS = 20


class JournalLinksConfig(StrictModel):
    metapub_dir: str | None = Field(
        None,
        description="Folder of metapub publisher YAML files (relative to the config); "
        "None: data/crossgenre/journal-domains/.",
    )
    curated_file: str | None = Field(
        None,
        description="Curated list (indexes, journals, trial registries, exclusions; relative to the "
        "config); None: data/crossgenre/journal_domains.yaml.",
    )
    extra_domains: list[str] = Field([], description="More journal/publisher domains (subdomains match).")
    exclude_domains: list[str] = Field([], description="Domains never taken for journals.")
    landing_pages: LandingConfig | None = Field(
        None,
        description="Fetch journal links without an identifier and read their citation_doi / "
        "citation_pmid / DC meta; None: off (offline).",
    )


_S = pa.string()
STUDY_LINK_TYPE = pa.struct(
    [
        pa.field("url", _S, nullable=False),
        pa.field("kind", _S, nullable=False),
        pa.field("id_kind", _S),
        pa.field("id_value", _S),
        pa.field("reason", _S, nullable=False),
        pa.field("anchor", _S),
        pa.field("block", _S),
        pa.field("context", _S),
    ]
)
SKIPPED_LINK_TYPE = pa.struct([pa.field("url", _S, nullable=False), pa.field("reason", _S, nullable=False)])
PAGE_FIELDS = tuple(f for f in EXTRACT_SCHEMA if f.name not in ("links", "identifiers"))
"""Extract's page columns that journal_links and single_study pass on."""
SCHEMA = pa.schema(
    [
        *PAGE_FIELDS,
        pa.field("study_links", pa.list_(STUDY_LINK_TYPE), nullable=False),
        pa.field("outbound_domains", pa.list_(_S), nullable=False),
        pa.field("skipped_links", pa.list_(SKIPPED_LINK_TYPE), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("page_id", _S, nullable=False), pa.field("url", _S))
_INPUT_COLUMNS = [f.name for f in PAGE_FIELDS] + ["links", "identifiers"]


def _paths(config: JournalLinksConfig, base_dir: Path) -> tuple[Path, Path]:
    metapub = base_dir / config.metapub_dir if config.metapub_dir else METAPUB_DIR
    curated = base_dir / config.curated_file if config.curated_file else CURATED_FILE
    return metapub, curated


def domains_for_config(config: JournalLinksConfig, base_dir: Path) -> DomainList:
    """The configured domain list (files + ``extra_domains`` − ``exclude_domains``)."""
    metapub, curated = _paths(config, base_dir)
    return load_domains(metapub, curated, config.extra_domains, config.exclude_domains)


def domains_for(ctx: StageContext[JournalLinksConfig]) -> DomainList:
    return domains_for_config(ctx.config, ctx.base_dir)


def inputs(ctx: StageContext[JournalLinksConfig]) -> dict[str, Any]:
    out: dict[str, Any] = {"domain_files": describe_domains(*_paths(ctx.config, ctx.base_dir))}
    if ctx.config.landing_pages is not None:  # landing pages change: a new fetch day, a new artifact
        out["landing_fetch_day"] = fetch_day(ctx.config.landing_pages)
    return out


def _source(ctx: StageContext[JournalLinksConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["extract"], columns=_INPUT_COLUMNS)


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


Where = dict[str, str]  # anchor, block and context of a study reference


def page_study_links(
    row: dict[str, Any], domains: DomainList
) -> tuple[list[tuple[StudyLink, Where]], list[Skipped], list[str]]:
    """A page's study references (each with where it sits), its skipped research-like links
    and its outbound domains."""
    own = clean_domain(row["site"] or "")
    found: dict[tuple[str, str, str | None, str | None], tuple[StudyLink, Where]] = {}
    skipped: dict[str, Skipped] = {}
    outbound: dict[str, None] = {}
    for link in row["links"] or []:
        url = link.get("url") or link.get("href") or ""
        host = _host(url)
        domain = clean_domain(host) if host else None
        if domain and domain != own and not (own and domain.endswith(f".{own}")):
            outbound[host or domain] = None
        judged = classify_url(url, domains)
        block = link.get("block") or "main"
        if judged is None:
            judged = tracked_title(url, link.get("anchor") or "")
        if isinstance(judged, StudyLink):
            if block != "main":
                judged = StudyLink(**{**judged.row(), "reason": f"{judged.reason}; in the {block} block"})
            where = {"anchor": link.get("anchor") or "", "block": block, "context": link.get("context") or ""}
            found.setdefault((judged.url, judged.kind, judged.id_kind, judged.id_value), (judged, where))
        elif isinstance(judged, Skipped):
            skipped.setdefault(judged.url, judged)
    for ident in row["identifiers"] or []:
        block = ident.get("where") or "main"
        written = identifier_link(ident["kind"], ident["value"], block)
        if written is not None:
            where = {
                "anchor": ident["value"],
                "block": block,
                "context": around(row["main_text"], ident["value"]),
            }
            found.setdefault((written.url, written.kind, written.id_kind, written.id_value), (written, where))
    return list(found.values()), list(skipped.values()), list(outbound)


def _no_link_detail(outbound: list[str], skipped: list[Skipped]) -> str:
    shown = ", ".join(outbound[:_SHOWN_DOMAINS]) or "none"
    if len(outbound) > _SHOWN_DOMAINS:
        shown += f" (+{len(outbound) - _SHOWN_DOMAINS} more)"
    detail = f"outbound domains: {shown}"
    if skipped:
        detail += "; skipped: " + "; ".join(f"{s.url} ({s.reason})" for s in skipped)
    return detail


def judge_page(
    row: dict[str, Any], domains: DomainList, pages: LandingPages | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """A page's kept row, or its excluded row (``pages``: landing pages looked up, or not)."""
    links, skipped, outbound = page_study_links(row, domains)
    if not links:
        detail = _no_link_detail(outbound, skipped)
        return None, {
            "reason": "no_study_link",
            "detail": detail,
            "page_id": row["page_id"],
            "url": row["url"],
        }
    filled = pages.fill([link for link, _ in links]) if pages is not None else [link for link, _ in links]
    kept = {
        **{f.name: row[f.name] for f in PAGE_FIELDS},
        "study_links": [{**link.row(), **where} for link, (_, where) in zip(filled, links, strict=True)],
        "outbound_domains": outbound,
        "skipped_links": [{"url": s.url, "reason": s.reason} for s in skipped],
    }
    return kept, None


def process(chunk: pa.Table, ctx: StageContext[JournalLinksConfig]) -> ChunkResult:
    domains = domains_for(ctx)
    landing = ctx.config.landing_pages
    pages = LandingPages(landing, ctx.cache_dir) if landing is not None else None
    try:
        judged = [judge_page(row, domains, pages) for row in chunk.to_pylist()]
    finally:
        if pages is not None:
            pages.close()
    kept = [row for row, _ in judged if row is not None]
    excluded = [row for _, row in judged if row is not None]
    cost = {"http_requests": float(pages.requests)} if pages is not None else {}
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA), cost=cost)


def resources(config: JournalLinksConfig) -> Resources:
    """Landing pages are fetched at a per-host pace kept per process (tasks/crossgenre/fetch.py):
    a pool of workers would each keep it, so with landing_pages the chunks stay in one process."""
    return Resources(parallel=False) if config.landing_pages is not None else CPU


SPEC: StageSpec[JournalLinksConfig] = StageSpec(
    name="journal_links",
    version=2,  # 2: each study link's anchor, block and context (issue 27)
    config_type=JournalLinksConfig,
    upstream=("extract",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("page_id",),
    inputs=inputs,
    source=_source,
    process=process,
    resources=resources,
    description="Pages citing research: links to doi.org, PubMed, PMC, Europe PMC or journal domains, DOIs in text.",
)
