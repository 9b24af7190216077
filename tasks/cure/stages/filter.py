"""Stage ``filter``: drop low-quality passages with the Gopher heuristics (arXiv 2112.11446, App. A).

CURE applied "a selection" of Gopher's quality heuristics to passages. Every quality and
repetition rule of Gopher is here, switchable and thresholded in config (``null`` turns a
rule off); see :mod:`tasks.common.text.gopher` for the rules and their order. The
defaults are the *scientific-passage profile*: Gopher's thresholds were set for web
documents, and on labelled article passages (``data/passage_gold``, ``irforge quality
cure``) they dropped real science — number-dense Results, short abstract sections,
methods that repeat a phrase. Each threshold below changed with the figure that
justified it in docs/decisions/passage-quality.md; ``GopherRules()`` keeps the paper's.

Output: the passages kept, with the ``segment`` stage's columns unchanged.

Excluded (one row per passage): ``reason`` is the first rule that failed (e.g.
``stop_words``, ``dup_line_frac``), ``value`` what was measured, ``threshold`` the
configured bound, plus ``passage_id``, ``article_id``, ``section_path`` and ``text`` so a
person can see what was dropped.
"""

from __future__ import annotations

import pyarrow as pa
from pydantic import Field

from irforge.parallel import CPU
from irforge.stage import ChunkResult, StageContext, StageSpec, exclusion_schema, upstream_source
from tasks.common.text.gopher import SCIENCE_STOP_WORDS, Count, GopherRules, Limit, check_many
from tasks.cure.stages import segment


def _top() -> dict[int, float | None]:
    return {2: 0.40, 3: 0.36, 4: 0.32}


def _dup() -> dict[int, float | None]:
    return {5: 0.30, 6: 0.28, 7: 0.26, 8: 0.24, 9: 0.22, 10: 0.20}


class FilterConfig(GopherRules):
    """The Gopher rules, flat under ``stages.filter`` in the flow config, with the
    scientific-passage profile as defaults (each: the paper's value → ours)."""

    # 3 (paper) → 2.5: "62 (12 %) had 3.4 ± 1.2 mg/dl" averages under 3 characters a word.
    min_mean_word_length: Limit = Field(
        2.5, description="Drop if the mean word length (characters) is below this."
    )
    # 10 (paper) → 12: a sentence with a URL or a chemical name averages over 10 characters.
    max_mean_word_length: Limit = Field(
        12, description="Drop if the mean word length (characters) is above this."
    )
    # 0.8 → 0.4: numbers, percentages and ± values are words of science ("Age (22.9 ± 8.8
    # vs 24.1 ± 9.2 years)" is 0.56); rows of a table of numbers stay far below 0.4.
    min_alpha_word_ratio: Limit = Field(
        0.4, description="Drop if under this share of words contain a letter."
    )
    # 2 of Gopher's 8 → 3 of SCIENCE_STOP_WORDS (Gopher's 8 plus 23 function words).
    min_stop_words: Count = Field(
        3, description="Drop if fewer stop words than this are found (see stop_word_mode)."
    )
    stop_words: tuple[str, ...] = Field(
        SCIENCE_STOP_WORDS, description="The stop words (SCIENCE_STOP_WORDS)."
    )
    # The n-gram rules at twice the paper's fractions: a 40-word passage that says "the
    # fully adjusted models" twice is not repetitive text.
    top_ngram_char_frac: dict[int, float | None] = Field(
        default_factory=_top,
        description="n (2-4) → drop if the most frequent n-gram covers over this fraction.",
    )
    dup_ngram_char_frac: dict[int, float | None] = Field(
        default_factory=_dup, description="n (5-10) → drop if repeated n-grams cover over this fraction."
    )


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
    version=2,
    config_type=FilterConfig,
    upstream=("segment",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("passage_id",),
    source=upstream_source("segment"),
    process=process,
    resources=CPU,
    description="Gopher quality + repetition rules on passages; each drop records its first failing rule.",
)
