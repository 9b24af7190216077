"""Stage ``bm25``: the BM25 parameters of the flow, chosen by a grid search (issue 17 §4, paper 004 §4).

Paper 004 tunes k1 ∈ {1.5, 1.6, 1.7, 1.9, 2.0} and b ∈ {0.5, 0.65, 0.75, 0.85, 0.95} on its
title-question pairs. Here every grid cell is scored the same checkable way: a seeded
``held_out`` fraction of the ``questions`` pairs (record ids sorted, then
``numpy.random.default_rng(seed).choice``) are queries, every pair's abstract is a document,
and a query's one relevant document is its own abstract: self-retrieval MRR, a rank beyond
``depth`` counting 0 (so does a query left with no term by the analysis).

Text analysis: :class:`tasks.spanish_sr.analysis.Analyzer` (stop words, Snowball stemming,
optional accent folding, Boolean operator words dropped from queries). Scores: rank_bm25's
variant ``variant`` (``okapi`` = BM25Okapi) through :class:`tasks.common.search.bm25_rank.RankBm25`,
exact and fast; ties rank by record id.

Units: the grid cells ``(k1, b)``. Kept: ``k1``, ``b``, ``mrr``, ``queries``, ``documents``,
``chosen`` (true for the one best cell: MRR descending, then k1, then b ascending). Side
tables: ``params`` (one row: the chosen k1, b, its MRR, the variant, ``fold_accents`` and
``language``, what later stages build their BM25 with) and ``per_query`` (each held-out
query under the chosen cell: record id, rank or null, reciprocal rank). Excluded: every cell
``no_pairs`` when the input has no pair. Whole input.
"""

from __future__ import annotations

import hashlib
import math
from importlib.metadata import version
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator

from irforge.config import StrictModel
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.search.bm25_rank import Params, RankBm25, Variant, encode_queries
from tasks.spanish_sr.analysis import Analyzer, stop_words
from tasks.spanish_sr.language import PROFILES, profile


class Bm25Config(StrictModel):
    language: str = Field("es", description="The language profile of the analysis.")
    fold_accents: bool | None = Field(None, description="Fold accents (None: the profile's default).")
    variant: Variant = Field("okapi", description="rank_bm25's variant: okapi (BM25Okapi), plus or l.")
    k1_grid: list[float] = Field([1.5, 1.6, 1.7, 1.9, 2.0], min_length=1, description="k1 values tried.")
    b_grid: list[float] = Field([0.5, 0.65, 0.75, 0.85, 0.95], min_length=1, description="b values tried.")
    held_out: float = Field(0.2, gt=0, le=1, description="Fraction of the pairs whose question is a query.")
    seed: int = Field(42, description="Seed of the held-out draw.")
    depth: int = Field(1000, ge=1, description="Ranks retrieved per query; a deeper own abstract counts 0.")

    @field_validator("language")
    @classmethod
    def _known(cls, code: str) -> str:
        if code not in PROFILES:
            raise ValueError(f"no language profile {code!r}; known: {', '.join(sorted(PROFILES))}")
        return code

    @field_validator("k1_grid", "b_grid")
    @classmethod
    def _distinct(cls, values: list[float]) -> list[float]:
        if len(set(values)) != len(values):
            raise ValueError(f"values repeat: {values}")
        if any(v < 0 or not math.isfinite(v) for v in values):
            raise ValueError(f"values must be finite and not negative: {values}")
        return values

    @field_validator("b_grid")
    @classmethod
    def _fraction(cls, values: list[float]) -> list[float]:
        if any(v > 1 for v in values):
            raise ValueError(f"b must lie in [0, 1]: {values}")
        return values

    def folds(self) -> bool:
        return profile(self.language).fold_accents if self.fold_accents is None else self.fold_accents


_F = pa.float64()
CELL = pa.schema([pa.field("k1", _F, nullable=False), pa.field("b", _F, nullable=False)])
SCHEMA = pa.schema(
    [
        *CELL,
        pa.field("mrr", _F, nullable=False),
        pa.field("queries", pa.int32(), nullable=False),
        pa.field("documents", pa.int32(), nullable=False),
        pa.field("chosen", pa.bool_(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(*CELL)
PARAMS_SCHEMA = pa.schema(
    [
        *CELL,
        pa.field("mrr", _F, nullable=False),
        pa.field("variant", pa.string(), nullable=False),
        pa.field("fold_accents", pa.bool_(), nullable=False),
        pa.field("language", pa.string(), nullable=False),
    ]
)
PER_QUERY_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("rank", pa.int32()),
        pa.field("rr", _F, nullable=False),
    ]
)


def held_out_rows(n: int, fraction: float, seed: int) -> list[int]:
    """The rows (of ``n`` pairs sorted by record id) whose question is a query, ascending."""
    if n == 0:
        return []
    count = min(n, max(1, round(fraction * n)))
    return sorted(int(i) for i in np.random.default_rng(seed).choice(n, size=count, replace=False))


def own_ranks(
    index: RankBm25, q_terms: Any, q_starts: Any, targets: list[int], depth: int
) -> list[int | None]:
    """Each query's 1-based rank of its own row ``targets[q]`` in the top ``depth`` (None: not there)."""
    ranking = index.search(q_terms, q_starts, min(depth, index.documents))
    ranks: list[int | None] = []
    for q, target in enumerate(targets):
        hit = np.flatnonzero(ranking.rows[q, : ranking.counts[q]] == target)
        ranks.append(int(hit[0]) + 1 if len(hit) else None)
    return ranks


def mean_rr(ranks: list[int | None]) -> float:
    return math.fsum(1.0 / r for r in ranks if r is not None) / len(ranks)


def _cells(ctx: StageContext[Bm25Config], _inputs: dict[str, Any]) -> TableSource:
    c = ctx.config
    cells = [{"k1": k1, "b": b} for k1 in c.k1_grid for b in c.b_grid]
    return TableSource(rows_to_table(cells, CELL))


def inputs(ctx: StageContext[Bm25Config]) -> dict[str, Any]:
    """The stop-word list's digest and PyStemmer's version: both change the terms."""
    words = "\n".join(sorted(stop_words(profile(ctx.config.language))))
    return {
        "stop_words_sha256": hashlib.sha256(words.encode()).hexdigest(),
        "pystemmer": version("PyStemmer"),
    }


def process(chunk: pa.Table, ctx: StageContext[Bm25Config]) -> ChunkResult:
    config = ctx.config
    cells = chunk.to_pylist()
    pairs = ctx.upstream["questions"].read(columns=["record_id", "question", "abstract"]).sort_by("record_id")
    if pairs.num_rows == 0:
        excluded = [
            {**c, "reason": "no_pairs", "detail": "the questions artifact has no pair"} for c in cells
        ]
        return ChunkResult(SCHEMA.empty_table(), rows_to_table(excluded, EXCLUDED_SCHEMA))
    analyzer = Analyzer(config.language, config.folds())
    vocabulary, tokens, starts = analyzer.encode_documents(pairs.column("abstract").to_pylist())
    targets = held_out_rows(pairs.num_rows, config.held_out, config.seed)
    questions = pairs.column("question").to_pylist()
    q_terms, q_starts = encode_queries(analyzer.queries([questions[t] for t in targets]), vocabulary)
    ranks: dict[tuple[float, float], list[int | None]] = {}
    for cell in cells:
        params = Params(variant=config.variant, k1=cell["k1"], b=cell["b"])
        index = RankBm25.build(tokens, starts, len(vocabulary), params)
        ranks[(cell["k1"], cell["b"])] = own_ranks(index, q_terms, q_starts, targets, config.depth)
    scores = {cell: mean_rr(r) for cell, r in ranks.items()}
    best = min(scores, key=lambda cell: (-scores[cell], cell[0], cell[1]))
    kept = [
        {**c, "mrr": scores[(c["k1"], c["b"])], "queries": len(targets), "documents": pairs.num_rows}
        | {"chosen": (c["k1"], c["b"]) == best}
        for c in cells
    ]
    chosen: dict[str, Any] = {"k1": best[0], "b": best[1], "mrr": scores[best], "variant": config.variant}
    chosen |= {"fold_accents": config.folds(), "language": config.language}
    ids = pairs.column("record_id").to_pylist()
    per_query = [
        {"record_id": ids[t], "rank": r, "rr": 0.0 if r is None else 1.0 / r}
        for t, r in zip(targets, ranks[best], strict=True)
    ]
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        EXCLUDED_SCHEMA.empty_table(),
        tables={
            "params": rows_to_table([chosen], PARAMS_SCHEMA),
            "per_query": rows_to_table(per_query, PER_QUERY_SCHEMA),
        },
    )


SPEC: StageSpec[Bm25Config] = StageSpec(
    name="bm25",
    version=1,
    config_type=Bm25Config,
    upstream=("questions",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("k1", "b"),
    inputs=inputs,
    source=_cells,
    process=process,
    tables={"params": PARAMS_SCHEMA, "per_query": PER_QUERY_SCHEMA},
    whole_input=True,
    description="k1 × b grid of rank_bm25's Okapi BM25 by self-retrieval MRR of held-out title questions.",
)
