"""Stage ``resolve``: each page's cited references → PMIDs → PubMed records (contract §5).

Paper 003 §2 collects the cited abstracts through PubMed. Each reference single_study kept
(``cited``: DOI, PMID, PMCID or PII) is mapped to a PMID by the shared PubMed source
(``PubmedSource.pmids_for``: local MEDLINE files, or NCBI's ID converter / E-utilities with
a reply cache, :mod:`tasks.common.pubmed.config`); a PMID reference is taken as written.
Then each PMID's record is read (``records``) and must carry an abstract.

A page is kept only when every cited reference ends in a record with an abstract: the
query's relevant set must be complete, or a cited study missing from the qrels would count
as a wrong answer. ``allow_partial`` keeps a page with at least one good PMID instead and
lists what was dropped in the added column ``dropped``. Exclusion reasons, in this order
of precedence: ``unresolved_link`` (no PMID for a reference; detail: the references),
``not_in_pubmed`` (E-utilities: PubMed has no record for a PMID) or, with local MEDLINE files,
``not_in_local_medline`` (the files hold no record for it: PubMed may still have one),
``no_abstract`` (detail: the PMIDs).

Side table ``records``: one row per PMID of the chunk's kept pages, sorted by PMID (a PMID
cited from pages in two chunks has a row in each: readers keep one per PMID). A
:class:`~tasks.common.pubmed.port.PubmedError` (a server that keeps failing) fails the
stage; finished chunks and the reply cache make the rerun resume without re-asking.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.parallel import CPU, Resources
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    Source,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.common.pubmed.config import PubmedConfig, describe_pubmed, pubmed_source
from tasks.common.pubmed.port import ArticleId, PubmedRecord
from tasks.common.text.identifiers import normalise_doi, normalise_pmcid
from tasks.crossgenre.corpus import RECORDS_SCHEMA, STRINGS, record_fields_row, required


class ResolveConfig(StrictModel):
    pubmed: PubmedConfig = Field(PubmedConfig(), description="Where PMIDs and records come from.")
    allow_partial: bool = Field(
        False, description="Keep a page whose references partly fail (the good PMIDs only)."
    )


PAGE_FIELDS = (
    required("page_id"),
    required("url"),
    required("site"),
    required("headline"),
    pa.field("published", pa.string()),
)
SCHEMA = pa.schema([*PAGE_FIELDS, required("pmids", STRINGS), required("dropped", STRINGS)])
REFERENCE_TYPE = pa.struct([required("id_kind"), required("id_value"), pa.field("url", pa.string())])
# What resolve reads of single_study's rows (contract §4).
INPUT_SCHEMA = pa.schema([*PAGE_FIELDS, required("cited", pa.list_(REFERENCE_TYPE))])
EXCLUDED_SCHEMA = exclusion_schema(
    required("page_id"),
    required("url"),
    pa.field("pmid", pa.string()),
)
REASONS = ("unresolved_link", "not_in_pubmed", "no_abstract")
LOCAL_ABSENT = "not_in_local_medline"  # not_in_pubmed's name when the records are local files


def article_id(kind: str | None, value: str | None) -> ArticleId | None:
    """The normalised identifier of one reference; None when it names no usable identifier."""
    value = (value or "").strip()
    if kind == "pmid" and value.isdigit():
        return ArticleId("pmid", value.lstrip("0") or "0")
    if kind == "doi" and normalise_doi(value).startswith("10."):
        return ArticleId("doi", normalise_doi(value))
    if kind == "pmcid" and (pmcid := normalise_pmcid(value)):
        return ArticleId("pmcid", pmcid)
    if kind == "pii" and value:
        return ArticleId("pii", value)
    return None


def describe_reference(ref: dict[str, Any]) -> str:
    """``kind value (url)``: what an ``unresolved_link`` detail names."""
    where = f" ({ref['url']})" if ref.get("url") and ref["url"] != ref.get("id_value") else ""
    return f"{ref.get('id_kind') or '?'} {ref.get('id_value') or '?'}{where}"


@dataclass
class _Page:
    good: list[str] = field(default_factory=list)
    problems: dict[str, list[str]] = field(default_factory=lambda: {r: [] for r in REASONS})
    first_pmid: dict[str, str] = field(default_factory=dict)

    def problem(self, reason: str, what: str, pmid: str | None = None) -> None:
        self.problems[reason].append(what)
        if pmid is not None:
            self.first_pmid.setdefault(reason, pmid)


def _pmids_of(
    pages: list[dict[str, Any]], ctx: StageContext[ResolveConfig]
) -> tuple[list[list[tuple[dict[str, Any], str | None]]], dict[str, PubmedRecord]]:
    """Per page, each reference with its PMID (None: unresolved); and the records of all PMIDs."""
    ids = [[article_id(r.get("id_kind"), r.get("id_value")) for r in p["cited"] or []] for p in pages]
    to_convert = sorted({i for page in ids for i in page if i is not None and i.kind != "pmid"})
    with contextlib.closing(pubmed_source(ctx.config.pubmed, ctx.base_dir, ctx.cache_dir)) as source:
        converted = dict(source.pmids_for(to_convert)) if to_convert else {}
        resolved = [
            [
                (ref, None if i is None else i.value if i.kind == "pmid" else converted.get(i))
                for ref, i in zip(p["cited"] or [], page, strict=True)
            ]
            for p, page in zip(pages, ids, strict=True)
        ]
        wanted = sorted({pmid for page in resolved for _, pmid in page if pmid is not None})
        records = dict(source.records(wanted)) if wanted else {}
    return resolved, records


def _judge(refs: list[tuple[dict[str, Any], str | None]], records: dict[str, PubmedRecord]) -> _Page:
    page = _Page()
    for ref, pmid in refs:
        if pmid is None:
            page.problem("unresolved_link", describe_reference(ref))
        elif pmid not in records:
            page.problem("not_in_pubmed", pmid, pmid)
        elif not records[pmid].abstract.strip():
            page.problem("no_abstract", pmid, pmid)
        elif pmid not in page.good:
            page.good.append(pmid)
    if not refs:
        page.problem("unresolved_link", "no cited reference")
    return page


def _named(reason: str, local: bool) -> str:
    return LOCAL_ABSENT if local and reason == "not_in_pubmed" else reason


def _detail(reason: str, local: bool, what: list[str]) -> str:
    listed = "; ".join(sorted(set(what)))
    if local and reason == "not_in_pubmed":
        return f"{listed}: no record in the local MEDLINE files (PubMed may have one: engine eutils asks it)"
    if local and reason == "unresolved_link":
        return f"{listed}: no PMID for it in the local MEDLINE files"
    if reason == "not_in_pubmed":
        return f"{listed}: PubMed has no such record"
    return listed


def process(chunk: pa.Table, ctx: StageContext[ResolveConfig]) -> ChunkResult:
    pages = chunk.to_pylist()
    local = ctx.config.pubmed.engine == "local"
    resolved, records = _pmids_of(pages, ctx)
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    used: set[str] = set()
    for p, refs in zip(pages, resolved, strict=True):
        page = _judge(refs, records)
        failing = [r for r in REASONS if page.problems[r]]
        if failing and not (ctx.config.allow_partial and page.good):
            reason = failing[0]
            excluded.append(
                {
                    "reason": _named(reason, local),
                    "detail": _detail(reason, local, page.problems[reason]),
                    "page_id": p["page_id"],
                    "url": p["url"],
                    "pmid": page.first_pmid.get(reason),
                }
            )
            continue
        used.update(page.good)
        kept.append(
            {
                **{k: p[k] for k in ("page_id", "url", "site", "headline", "published")},
                "pmids": sorted(page.good),
                "dropped": [
                    f"{_named(r, local)}: {what}" for r in failing for what in sorted(set(page.problems[r]))
                ],
            }
        )
    rows = [record_fields_row(records[pmid]) for pmid in sorted(used)]
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        {"records": rows_to_table(rows, RECORDS_SCHEMA)},
    )


def resources(config: ResolveConfig) -> Resources:
    """E-utilities' pace (3 or 10 requests/s) is kept per process (tasks/common/pubmed/ncbi.py): its
    chunks stay in one; local MEDLINE files are read by each worker."""
    return Resources(parallel=False) if config.pubmed.engine == "eutils" else CPU


def _source(ctx: StageContext[ResolveConfig], _inputs: dict[str, Any]) -> Source:
    return ArtifactSource(ctx.upstream["single_study"], columns=INPUT_SCHEMA.names)


SPEC: StageSpec[ResolveConfig] = StageSpec(
    name="resolve",
    version=2,  # 2: not_in_local_medline told apart from not_in_pubmed (issue 27)
    config_type=ResolveConfig,
    upstream=("single_study",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("page_id",),
    source=_source,
    process=process,
    resources=resources,
    tables={"records": RECORDS_SCHEMA},
    inputs=lambda ctx: {"pubmed": describe_pubmed(ctx.config.pubmed, ctx.base_dir)},
    description="Cited references → PMIDs → PubMed records with abstracts (local MEDLINE or E-utilities).",
)
