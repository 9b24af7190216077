"""Stage ``harvest``: JATS review articles → evidence summaries (EvidenceBench §3, App. H.1).

Input: folders (searched recursively) or glob patterns of JATS reviews, relative to the
config file. Every matching file's content digest enters the fingerprint, so adding,
removing or editing a review makes this stage (and everything after it) stale.

The accounting unit is one body sentence of a review (``unit_id`` =
``<review_id>:<paragraph>:<sentence>``, see :func:`tasks.evidencebench.summaries.harvest_review`),
or a whole review that yields no sentences because it cannot be read. ``review_id`` is the
review's PMCID, else ``doi:<doi>``, else ``file:<digest prefix>`` (as the CURE ``ingest``
stage names articles). The reviews are harvested while the input rows are built (the
sentences are the units, so they must be known first); harvesting is fast, so the work is
not split further.

Output columns (one row per evidence summary): every field of
:class:`~tasks.evidencebench.summaries.EvidenceSummary` (``citation_spans`` as ``start`` / ``end``
structs) and ``source_path``, the review file relative to the config's folder.

Excluded (``reason``): per sentence ``no_citation``, ``multiple_citations``,
``unresolved_reference``, ``cited_twice_in_section`` (with ``cited_ref_ids``); per review
(``unit_id`` = the review id) ``unreadable`` and the other refusals of
:mod:`tasks.common.text.discovery` (``outside_source_root``, ...), ``too_large``, ``malformed_xml``, ``not_jats``
and ``duplicate_review`` (same review id as an earlier file, which is the one harvested).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.parallel import Resources
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.text.discovery import discover, read_input, refusal
from tasks.common.text.document import InputRejected
from tasks.common.text.jats import parse_jats
from tasks.evidencebench.summaries import EvidenceSummary, ExcludedUnit, SectionScope, harvest_review


class HarvestConfig(StrictModel):
    reviews: tuple[str, ...] = Field(
        min_length=1,
        description="Folders (searched recursively) or glob patterns of JATS reviews, relative to the config file.",
    )
    extensions: tuple[str, ...] = Field(
        (".xml", ".nxml"), description="File name endings taken from folders (not from globs)."
    )
    context_paragraphs: int = Field(
        1, ge=0, description="Paragraphs of the same section kept as context before and after a summary."
    )
    scope: SectionScope = Field(
        "innermost",
        description="Section in which a reference cited twice is excluded: innermost <sec> or top-level.",
    )
    language: str = Field("en", description="pysbd language for sentence boundaries.")
    max_bytes: int = Field(50_000_000, ge=1, description="Larger files are excluded as too_large.")


_SPAN = pa.struct(
    [pa.field("start", pa.int32(), nullable=False), pa.field("end", pa.int32(), nullable=False)]
)
SCHEMA = pa.schema(
    [
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("review_id", pa.string(), nullable=False),
        pa.field("source_path", pa.string(), nullable=False),
        pa.field("section_path", pa.list_(pa.string()), nullable=False),
        pa.field("paragraph_index", pa.int32(), nullable=False),
        pa.field("sentence_index", pa.int32(), nullable=False),
        pa.field("sentence", pa.string(), nullable=False),
        pa.field("sentence_start", pa.int32(), nullable=False),
        pa.field("sentence_end", pa.int32(), nullable=False),
        pa.field("citation_spans", pa.list_(_SPAN), nullable=False),
        pa.field("cited_ref_id", pa.string(), nullable=False),
        pa.field("cited_label", pa.string()),
        pa.field("cited_pmid", pa.string()),
        pa.field("cited_pmcid", pa.string()),
        pa.field("cited_doi", pa.string()),
        pa.field("cited_title", pa.string()),
        pa.field("paragraph", pa.string(), nullable=False),
        pa.field("context_before", pa.list_(pa.string()), nullable=False),
        pa.field("context_after", pa.list_(pa.string()), nullable=False),
        pa.field("review_pmid", pa.string()),
        pa.field("review_pmcid", pa.string()),
        pa.field("review_doi", pa.string()),
        pa.field("review_license", pa.string()),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("source_path", pa.string(), nullable=False),
    pa.field("unit_id", pa.string(), nullable=False),
    pa.field("review_id", pa.string(), nullable=False),
    pa.field("section_path", pa.list_(pa.string())),
    pa.field("paragraph_index", pa.int32()),
    pa.field("sentence_index", pa.int32()),
    pa.field("sentence", pa.string()),
    pa.field("cited_ref_ids", pa.list_(pa.string())),
)
# The input rows: a kept summary or an excluded unit, told apart by ``reason``.
_SOURCE_SCHEMA = pa.schema(
    [f.with_nullable(True) for f in SCHEMA]
    + [f.with_nullable(True) for f in EXCLUDED_SCHEMA if f.name not in SCHEMA.names]
)


def inputs(ctx: StageContext[HarvestConfig]) -> dict[str, Any]:
    config = ctx.config
    return {"files": discover(config.reviews, config.extensions, ctx.base_dir, "stages.harvest.reviews")}


def source(ctx: StageContext[HarvestConfig], material: dict[str, Any]) -> TableSource:
    """Every review harvested: one row per sentence (kept or not), one per unreadable review."""
    harvested: dict[str, str] = {}  # review id -> the file it was harvested from
    rows: list[dict[str, Any]] = []
    for path, digest in sorted(material["files"].items()):
        rows.extend(_harvest_file(path, digest, ctx, harvested))
    return TableSource(rows_to_table(rows, _SOURCE_SCHEMA))


def _harvest_file(
    path: str, digest: str, ctx: StageContext[HarvestConfig], harvested: dict[str, str]
) -> Iterator[dict[str, Any]]:
    config = ctx.config
    # Until the file names itself, the review is known by its path or digest.
    review_id = f"file:{path}" if refusal(digest) else f"file:{digest[:16]}"
    try:
        data = read_input(ctx.base_dir / path, digest, config.max_bytes)
        review_id = parse_jats(data).meta.article_id(digest)
        first = harvested.setdefault(review_id, path)
        if first != path:
            raise InputRejected("duplicate_review", f"review {review_id} is already harvested from {first}")
        harvest = harvest_review(
            data,
            review_id,
            context_paragraphs=config.context_paragraphs,
            scope=config.scope,
            language=config.language,
        )
    except InputRejected as err:
        yield {
            "reason": err.reason,
            "detail": err.detail,
            "source_path": path,
            "unit_id": review_id,
            "review_id": review_id,
        }
        return
    for summary in harvest.kept:
        yield _summary_row(summary, path)
    for unit in harvest.excluded:
        yield _excluded_row(unit, path)


def _summary_row(summary: EvidenceSummary, path: str) -> dict[str, Any]:
    row = asdict(summary)
    row["source_path"] = path
    row["citation_spans"] = [{"start": start, "end": end} for start, end in summary.citation_spans]
    return row


def _excluded_row(unit: ExcludedUnit, path: str) -> dict[str, Any]:
    row = asdict(unit)
    row["source_path"] = path
    return row


def process(chunk: pa.Table, _ctx: StageContext[HarvestConfig]) -> ChunkResult:
    """Summaries to the kept rows, the rest to the excluded ones."""
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for row in chunk.to_pylist():
        if row["reason"] is None:
            kept.append({name: row[name] for name in SCHEMA.names})
        else:
            excluded.append({name: row[name] for name in EXCLUDED_SCHEMA.names})
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


SPEC: StageSpec[HarvestConfig] = StageSpec(
    name="harvest",
    version=1,
    config_type=HarvestConfig,
    upstream=(),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("source_path", "unit_id"),
    inputs=inputs,
    source=source,
    process=process,
    # The reviews are harvested in ``source``; a chunk only sorts its rows into kept and excluded,
    # cheaper here than sent to a worker and back.
    resources=Resources(parallel=False),
    description="Review sentences citing exactly one resolvable paper → evidence summaries with context.",
)
