"""Stage ``papers``: the research papers the evidence summaries cite → their candidate pools.

Input: the ``harvest`` summaries and folders (or globs) of JATS research papers, relative
to the config file; every paper file's content digest enters the fingerprint. The files
are indexed by the identifiers in their own front matter (PMID, PMCID, DOI, title), not
by their names, and each summary's reference is looked up by the identifiers in
``match_by``, in that order (titles compared case- and punctuation-insensitively). When
two files claim the same identifier, the first path (sorted) holds it.

The accounting unit is one cited paper (``paper_id``: the paper's PMCID, else
``pmid:<pmid>``, else ``doi:<doi>``, else ``title:<title>``; for a found paper, from the
file's own front matter), however many summaries cite it. A paper file that cannot be
indexed is a unit too (``paper_id`` = ``file:<path>``), so a broken file is reported
rather than skipped: it may be the paper a summary looks for.

Output columns (one row per (paper, pool element), see
:func:`tasks.evidencebench.paper_pool.paper_pool`): ``paper_id``, ``source_path``, ``digest``,
``pmid``, ``pmcid``, ``doi``, ``title`` (of the file), ``element_index``, ``element_type``
(``section_name`` | ``abstract`` | ``normal_paragraph``), ``text``, ``section_path``,
``paragraph`` (source block, null for titles).

Side table ``citations`` (one row per summary whose paper is in the output): ``unit_id``
(the summary), ``paper_id``, ``matched_by`` (the identifier that found the file).

Excluded (``reason``): ``paper_not_found`` (no file has any of the reference's identifiers;
``summary_ids`` lists the summaries citing it); ``no_body`` (the file has no full text);
for files that cannot be indexed ``unreadable``, ``too_large``, ``malformed_xml``,
``not_jats``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.parallel import CPU
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.text.discovery import discover, read_input
from tasks.common.text.document import ArticleMeta, InputRejected
from tasks.common.text.jats import parse_jats
from tasks.evidencebench.paper_pool import paper_pool

Identifier = Literal["pmid", "pmcid", "doi", "title"]


class PapersConfig(StrictModel):
    papers: tuple[str, ...] = Field(
        min_length=1,
        description="Folders (searched recursively) or glob patterns of JATS research papers, "
        "relative to the config file.",
    )
    extensions: tuple[str, ...] = Field(
        (".xml", ".nxml"), description="File name endings taken from folders (not from globs)."
    )
    match_by: tuple[Identifier, ...] = Field(
        ("pmid", "pmcid", "doi", "title"),
        min_length=1,
        description="Identifiers a cited reference is looked up by, in this order.",
    )
    include_title: bool = Field(False, description="Make the article title the pool's first element.")
    language: str = Field("en", description="pysbd language for sentence boundaries.")
    max_bytes: int = Field(50_000_000, ge=1, description="Larger files are excluded as too_large.")


SCHEMA = pa.schema(
    [
        pa.field("paper_id", pa.string(), nullable=False),
        pa.field("source_path", pa.string(), nullable=False),
        pa.field("digest", pa.string(), nullable=False),
        pa.field("pmid", pa.string()),
        pa.field("pmcid", pa.string()),
        pa.field("doi", pa.string()),
        pa.field("title", pa.string()),
        pa.field("element_index", pa.int32(), nullable=False),
        pa.field("element_type", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("section_path", pa.list_(pa.string()), nullable=False),
        pa.field("paragraph", pa.int32()),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("paper_id", pa.string(), nullable=False),
    pa.field("source_path", pa.string()),
    pa.field("pmid", pa.string()),
    pa.field("pmcid", pa.string()),
    pa.field("doi", pa.string()),
    pa.field("title", pa.string()),
    pa.field("summary_ids", pa.list_(pa.string()), nullable=False),
)
CITATIONS_SCHEMA = pa.schema(
    [
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("paper_id", pa.string(), nullable=False),
        pa.field("matched_by", pa.string(), nullable=False),
    ]
)
_CITATION = pa.struct([pa.field("unit_id", pa.string()), pa.field("matched_by", pa.string())])
# The input rows: one per cited paper (found or not) and one per paper file that cannot be indexed.
_SOURCE_SCHEMA = pa.schema(
    [
        pa.field("paper_id", pa.string()),
        pa.field("source_path", pa.string()),
        pa.field("digest", pa.string()),
        pa.field("pmid", pa.string()),
        pa.field("pmcid", pa.string()),
        pa.field("doi", pa.string()),
        pa.field("title", pa.string()),
        pa.field("citations", pa.list_(_CITATION)),
        pa.field("reason", pa.string()),
        pa.field("detail", pa.string()),
    ]
)
_NOT_ALPHANUMERIC = re.compile(r"[\W_]+")


@dataclass(frozen=True)
class _PaperFile:
    path: str
    digest: str
    meta: ArticleMeta


def inputs(ctx: StageContext[PapersConfig]) -> dict[str, Any]:
    config = ctx.config
    return {"files": discover(config.papers, config.extensions, ctx.base_dir, "stages.papers.papers")}


def normalise_title(title: str) -> str:
    """Titles compare equal whatever their case, punctuation and spacing."""
    return _NOT_ALPHANUMERIC.sub(" ", title.casefold()).strip()


def paper_id(pmid: str | None, pmcid: str | None, doi: str | None, title: str | None) -> str | None:
    if pmcid:
        return pmcid
    if pmid:
        return f"pmid:{pmid}"
    if doi:
        return f"doi:{doi}"
    return f"title:{normalise_title(title)}" if title else None


def _identifiers(pmid: str | None, pmcid: str | None, doi: str | None, title: str | None) -> dict[str, str]:
    values = {"pmid": pmid, "pmcid": pmcid, "doi": doi, "title": normalise_title(title) if title else None}
    return {kind: value for kind, value in values.items() if value}


def _index(
    files: dict[str, str], ctx: StageContext[PapersConfig]
) -> tuple[dict[tuple[str, str], _PaperFile], list[dict[str, Any]]]:
    """(identifier kind, value) → the paper file; and the rows of files that cannot be indexed."""
    index: dict[tuple[str, str], _PaperFile] = {}
    broken: list[dict[str, Any]] = []
    for path, digest in sorted(files.items()):
        try:
            meta = parse_jats(read_input(ctx.base_dir / path, digest, ctx.config.max_bytes)).meta
        except InputRejected as err:
            broken.append(
                {"paper_id": f"file:{path}", "source_path": path, "reason": err.reason, "detail": err.detail}
            )
            continue
        paper = _PaperFile(path, digest, meta)
        for kind, value in _identifiers(meta.pmid, meta.pmcid, meta.doi, meta.title).items():
            index.setdefault((kind, value), paper)
    return index, broken


def _resolve(
    summary: dict[str, Any], index: dict[tuple[str, str], _PaperFile], match_by: Iterable[str]
) -> tuple[_PaperFile, str] | None:
    ids = _identifiers(
        summary["cited_pmid"], summary["cited_pmcid"], summary["cited_doi"], summary["cited_title"]
    )
    for kind in match_by:
        found = index.get((kind, ids[kind])) if kind in ids else None
        if found is not None:
            return found, kind
    return None


def _file_fields(file: _PaperFile) -> dict[str, Any]:
    meta = file.meta
    return {
        "source_path": file.path,
        "digest": file.digest,
        "pmid": meta.pmid,
        "pmcid": meta.pmcid,
        "doi": meta.doi,
        "title": meta.title,
    }


def source(ctx: StageContext[PapersConfig], material: dict[str, Any]) -> TableSource:
    """The cited papers, each with the summaries citing it and the file found for it (if any)."""
    index, rows = _index(material["files"], ctx)
    papers: dict[str, dict[str, Any]] = {}
    harvest = ctx.upstream["harvest"].read(
        ["unit_id", "cited_pmid", "cited_pmcid", "cited_doi", "cited_title"]
    )
    for summary in harvest.to_pylist():
        resolved = _resolve(summary, index, ctx.config.match_by)
        if resolved is None:
            cited = (
                summary["cited_pmid"],
                summary["cited_pmcid"],
                summary["cited_doi"],
                summary["cited_title"],
            )
            key = paper_id(*cited)
            if key is None:  # harvest keeps only references with an identifier
                raise ValueError(f"summary {summary['unit_id']} cites a reference without any identifier")
            row = papers.setdefault(key, dict(zip(("pmid", "pmcid", "doi", "title"), cited, strict=True)))
            row.setdefault("citations", []).append({"unit_id": summary["unit_id"], "matched_by": None})
            continue
        file, kind = resolved
        meta = file.meta
        key = paper_id(meta.pmid, meta.pmcid, meta.doi, meta.title) or f"file:{file.path}"
        row = papers.setdefault(key, {})
        # A found file wins over identifiers taken from a reference to the same paper id.
        row.update(_file_fields(file))
        row.setdefault("citations", []).append({"unit_id": summary["unit_id"], "matched_by": kind})
    for key, row in sorted(papers.items()):
        if row.get("source_path") is not None:
            # Cited by identifiers match_by leaves out, but the same paper id as a found file.
            row["citations"] = [{**c, "matched_by": c["matched_by"] or "paper_id"} for c in row["citations"]]
        rows.append({"paper_id": key, **row})
    return TableSource(rows_to_table(rows, _SOURCE_SCHEMA))


def process(chunk: pa.Table, ctx: StageContext[PapersConfig]) -> ChunkResult:
    config = ctx.config
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    citations: list[dict[str, Any]] = []
    for row in chunk.to_pylist():
        try:
            if row["reason"] is not None:
                raise InputRejected(row["reason"], row["detail"])  # found while indexing the files
            if row["source_path"] is None:
                raise InputRejected("paper_not_found", _not_found(row, config))
            data = read_input(ctx.base_dir / row["source_path"], row["digest"], config.max_bytes)
            pool = paper_pool(
                data, row["source_path"], include_title=config.include_title, language=config.language
            )
        except InputRejected as err:
            excluded.append(_excluded(row, err))
            continue
        ids = {
            name: row[name] for name in ("paper_id", "source_path", "digest", "pmid", "pmcid", "doi", "title")
        }
        for element in pool:
            kept.append(
                {
                    **ids,
                    "element_index": element.index,
                    "element_type": element.type,
                    "text": element.text,
                    "section_path": list(element.section_path),
                    "paragraph": element.paragraph,
                }
            )
        citations.extend({"paper_id": row["paper_id"], **c} for c in row["citations"] or [])
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={"citations": rows_to_table(citations, CITATIONS_SCHEMA)},
    )


def _not_found(row: dict[str, Any], config: PapersConfig) -> str:
    wanted = _identifiers(row["pmid"], row["pmcid"], row["doi"], row["title"])
    looked = ", ".join(f"{kind} {wanted[kind]!r}" for kind in config.match_by if kind in wanted)
    return f"no paper file in stages.papers.papers has {looked or 'any identifier in match_by'}"


def _excluded(row: dict[str, Any], err: InputRejected) -> dict[str, Any]:
    return {
        "reason": err.reason,
        "detail": err.detail,
        "paper_id": row["paper_id"],
        "source_path": row["source_path"],
        "pmid": row["pmid"],
        "pmcid": row["pmcid"],
        "doi": row["doi"],
        "title": row["title"],
        "summary_ids": [c["unit_id"] for c in row["citations"] or []],
    }


SPEC: StageSpec[PapersConfig] = StageSpec(
    name="papers",
    version=1,
    config_type=PapersConfig,
    upstream=("harvest",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("paper_id",),
    tables={"citations": CITATIONS_SCHEMA},
    inputs=inputs,
    source=source,
    process=process,
    resources=CPU,
    description="Cited research papers found by pmid / pmcid / doi / title → indexed, typed text elements.",
)
