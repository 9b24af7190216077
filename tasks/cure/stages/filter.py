"""Stage ``filter``: drop low-quality passages with the Gopher heuristics (arXiv 2112.11446, App. A).

CURE applied "a selection" of Gopher's quality heuristics to passages. The passage
profile keeps every quality and repetition rule of Gopher, switchable and thresholded in
config (``null`` turns a rule off), with a word floor suited to passages instead of the
document floor of 50. See :mod:`tasks.common.text.gopher` for the rules and their order.

Output: the passages kept, with the ``segment`` stage's columns unchanged.

Excluded (one row per passage): ``reason`` is the first rule that failed (e.g.
``stop_words``, ``dup_line_frac``), ``value`` what was measured, ``threshold`` the
configured bound, plus ``passage_id``, ``article_id``, ``section_path`` and ``text`` so a
person can see what was dropped.
"""

from __future__ import annotations

import pyarrow as pa

from irforge.stage import ChunkResult, StageContext, StageSpec, exclusion_schema, upstream_source
from tasks.common.text.gopher import GopherRules, check_many
from tasks.cure.stages import segment


class FilterConfig(GopherRules):
    """The Gopher rules, flat under ``stages.filter`` in the flow config."""


SCHEMA = segment.SCHEMA
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("value", pa.float64(), nullable=False),
    pa.field("threshold", pa.float64(), nullable=False),
    pa.field("passage_id", pa.string(), nullable=False),
    pa.field("article_id", pa.string(), nullable=False),
    pa.field("section_path", pa.list_(pa.string()), nullable=False),
    pa.field("text", pa.string(), nullable=False),
)


def process(chunk: pa.Table, ctx: StageContext[FilterConfig]) -> ChunkResult:
    failures = check_many(chunk.column("text").to_pylist(), ctx.config)
    keep = pa.array([f is None for f in failures], type=pa.bool_())
    dropped = [(i, f) for i, f in enumerate(failures) if f is not None]
    rows = chunk.take(pa.array([i for i, _ in dropped], pa.int64()))
    excluded = pa.table(
        {
            "reason": pa.array([f.rule for _, f in dropped], pa.string()),
            "detail": pa.array(
                [f"{f.rule}: {f.value:.4g} vs threshold {f.threshold:.4g}" for _, f in dropped], pa.string()
            ),
            "value": pa.array([f.value for _, f in dropped], pa.float64()),
            "threshold": pa.array([f.threshold for _, f in dropped], pa.float64()),
            "passage_id": rows.column("passage_id"),
            "article_id": rows.column("article_id"),
            "section_path": rows.column("section_path"),
            "text": rows.column("text"),
        }
    )
    return ChunkResult(chunk.filter(keep), excluded)


SPEC: StageSpec[FilterConfig] = StageSpec(
    name="filter",
    version=1,
    config_type=FilterConfig,
    upstream=("segment",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("passage_id",),
    source=upstream_source("segment"),
    process=process,
    description="Gopher quality + repetition rules on passages; each drop records its first failing rule.",
)
