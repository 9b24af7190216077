"""Stage ``splits``: train / dev / test, whole groups of related queries at a time (contract §9).

Paper 003 §3.2 splits 5,034 headlines 3,000 / 1,000 / 1,034 and is silent on how. Here
queries are first grouped: two queries are in one group when they cite a common PMID or
belong to one syndication cluster (claims' ``cluster_id``), transitively — the connected
components of the query–PMID–cluster graph (scipy ``connected_components``). Whole groups
go to one split. Why: the relevant document of a query is its cited abstract; if another
headline citing the same abstract (or a syndicated copy of the same story) were in train,
a reranker could learn that abstract as "the answer" and test would measure memory of it,
not retrieval of an unseen study.

Assignment (seeded, deterministic): groups in a seeded random order, then largest first
(a stable sort, so the shuffle breaks ties between equal sizes); each group goes to the
split furthest below its target (ties: train, dev, test). Every split ends within one
largest-group size of its target. ``sizes`` (side table) records what was achieved.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator
from scipy.sparse import coo_matrix  # type: ignore[import-untyped]
from scipy.sparse.csgraph import connected_components  # type: ignore[import-untyped]

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.stage import (
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
    upstream_source,
)
from tasks.crossgenre.corpus import required

SPLITS = ("train", "dev", "test")


class SplitSizes(StrictModel):
    train: float | None = Field(3000, ge=0)
    dev: float | None = Field(1000, ge=0)
    test: float | None = Field(1034, ge=0)


class SplitsConfig(StrictModel):
    sizes: SplitSizes = Field(
        SplitSizes(),
        description="Proportions (any scale: the paper's 3000/1000/1034 of 5034), or counts when "
        "`counts` is true; with counts, one split may be null: it takes the remaining queries.",
    )
    counts: bool = Field(False, description="`sizes` are numbers of queries, not proportions.")
    seed: int = 42

    @model_validator(mode="after")
    def _check(self) -> SplitsConfig:
        values = [getattr(self.sizes, s) for s in SPLITS]
        nulls = sum(v is None for v in values)
        if nulls > (1 if self.counts else 0):
            raise ValueError("sizes: only with counts, and only one split, may be null (the remainder)")
        if not self.counts and sum(v or 0 for v in values) <= 0:
            raise ValueError("sizes: the proportions sum to 0")
        return self


SCHEMA = pa.schema(
    [
        required("query_id"),
        required("split"),
        required("group_id"),
    ]
)
SIZES_SCHEMA = pa.schema(
    [
        required("split"),
        required("queries", pa.int32()),
        required("groups", pa.int32()),
        required("target", pa.float64()),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(required("query_id"))


def query_groups(query_ids: list[str], pmids: list[list[str]], clusters: list[str]) -> list[str]:
    """Each query's group id (the smallest query id of its group): queries linked by a shared
    PMID or cluster id, transitively (connected components of a query–label graph)."""
    labels: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for q, (cited, cluster) in enumerate(zip(pmids, clusters, strict=True)):
        for label in [*(f"pmid:{p}" for p in cited), f"cluster:{cluster}"]:
            rows.append(q)
            cols.append(len(query_ids) + labels.setdefault(label, len(labels)))
    size = len(query_ids) + len(labels)
    graph = coo_matrix((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(size, size))
    _, component = connected_components(graph, directed=False)
    smallest: dict[int, str] = {}
    for q, query_id in enumerate(query_ids):
        c = int(component[q])
        smallest[c] = min(smallest.get(c, query_id), query_id)
    return [smallest[int(component[q])] for q in range(len(query_ids))]


def targets(config: SplitsConfig, total: int) -> dict[str, float]:
    """The target number of queries per split for ``total`` queries."""
    sizes = {s: getattr(config.sizes, s) for s in SPLITS}
    if not config.counts:
        scale = sum(sizes.values())
        return {s: total * float(v) / scale for s, v in sizes.items()}
    given = sum(v for v in sizes.values() if v is not None)
    rest = [s for s, v in sizes.items() if v is None]
    if given > total or (not rest and given != total):
        raise IrforgeError(
            f"splits: sizes count {given:g} queries but claims has {total}"
            + ("" if rest else " (set one split to null to take the remainder)")
        )
    return {s: float(total - given) if v is None else float(v) for s, v in sizes.items()}


def assign(group_sizes: dict[str, int], goal: dict[str, float], seed: int) -> dict[str, str]:
    """Split of each group: seeded order, largest first, to the split furthest below target."""
    names = sorted(group_sizes)
    order = np.random.default_rng(seed).permutation(len(names))
    shuffled = [names[i] for i in order]
    shuffled.sort(key=lambda g: -group_sizes[g])  # stable: the shuffle breaks size ties
    filled = dict.fromkeys(SPLITS, 0)
    out: dict[str, str] = {}
    for group in shuffled:
        split = max(SPLITS, key=lambda s: (goal[s] - filled[s], -SPLITS.index(s)))
        out[group] = split
        filled[split] += group_sizes[group]
    return out


def process(chunk: pa.Table, ctx: StageContext[SplitsConfig]) -> ChunkResult:
    query_ids = chunk.column("query_id").to_pylist()
    if not query_ids:
        return ChunkResult(SCHEMA.empty_table(), EXCLUDED_SCHEMA.empty_table())
    groups = query_groups(
        query_ids, chunk.column("pmids").to_pylist(), chunk.column("cluster_id").to_pylist()
    )
    group_sizes: dict[str, int] = {}
    for g in groups:
        group_sizes[g] = group_sizes.get(g, 0) + 1
    goal = targets(ctx.config, len(query_ids))
    split_of = assign(group_sizes, goal, ctx.config.seed)
    kept = [
        {"query_id": q, "split": split_of[g], "group_id": g}
        for q, g in sorted(zip(query_ids, groups, strict=True))
    ]
    sizes: list[dict[str, Any]] = [
        {
            "split": s,
            "queries": sum(n for g, n in group_sizes.items() if split_of[g] == s),
            "groups": sum(1 for g in group_sizes if split_of[g] == s),
            "target": goal[s],
        }
        for s in SPLITS
    ]
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        EXCLUDED_SCHEMA.empty_table(),
        {"sizes": rows_to_table(sizes, SIZES_SCHEMA)},
    )


SPEC: StageSpec[SplitsConfig] = StageSpec(
    name="splits",
    version=1,
    config_type=SplitsConfig,
    upstream=("claims",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("query_id",),
    source=upstream_source("claims"),
    process=process,
    tables={"sizes": SIZES_SCHEMA},
    whole_input=True,
    description="Train/dev/test by whole groups of queries sharing a cited PMID or a syndication cluster.",
)
