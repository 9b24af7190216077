"""Stage ``pool``: cross-encoder scores of every query against its domain's passages (CURE §2.3).

Every query's English text is scored against every passage of its domain split (the
``corpus`` stage) by a cross-encoder (:mod:`tasks.common.rerank`): sentence-transformers
``CrossEncoder`` (production default ``Alibaba-NLP/gte-multilingual-reranker-base``) or
vLLM's ``/score``. Each scored pair has its raw ``logit`` and ``probability`` (its
sigmoid): the paper's 0.42 does not say which (CrossEncoder and vLLM return the sigmoid by
default; the GTE model card prints raw logits).

Scores are stored, cut-offs are views: a pair is stored when its
probability is at least ``store_floor`` or it is among the ``store_top`` best of its
query; :func:`pool_view` applies a threshold (0.42 on the sigmoid by default, the scale
and value configurable) at read time, so changing the cut-off reruns the judge, never
the scoring. ``irforge calibrate`` picks a threshold from a labelled sample.

Pairs are batched across queries (at least ``batch_pairs`` pairs a call) and the
reranker sorts each batch by length, so padding is small; CUDA is used when present.
The reranker's config, and which key acts on which engine, are in
:mod:`tasks.common.rerank.config`.
Chunked and resumable per query; the manifest's cost has ``pairs_scored`` and
``scoring_s`` (pairs/s is their ratio; the run report shows it).

Units: queries. Excluded: ``empty_domain`` (the query's domain has no passage).
Side tables: ``score_histogram`` (every scored pair, stored or not: domain, bin, pairs),
``query_stats`` (pairs scored and stored, best probability, per query) and ``pool_info``
(``store_floor``, ``store_top`` and the scale the floor is on, one row per chunk: what
:func:`pool_view` checks a cut-off against).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from irforge.artifacts import Artifact
from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport
from irforge.parallel import CPU, Resources
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.rerank.config import RerankerConfig, describe_reranker, reranker_for
from tasks.common.rerank.cutoff import PoolCutoff, apply_cutoff
from tasks.cure.queries import english_queries
from tasks.cure.stages.embed import model_resources


class PoolConfig(StrictModel):
    reranker: RerankerConfig = RerankerConfig()
    store_floor: float = Field(
        0.05, ge=0, le=1, description="Pairs with a probability at least this are stored."
    )
    store_top: int = Field(
        100, ge=1, description="The best N pairs of each query are stored whatever their score."
    )
    batch_pairs: Transport[int] = Field(
        4096, ge=1, description="Pairs per reranker call (queries are grouped)."
    )
    histogram_bins: int = Field(20, ge=2, le=1000)


SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("logit", pa.float64(), nullable=False),
        pa.field("probability", pa.float64(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),  # among all the query's scored pairs, from 1
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("query_id", pa.string(), nullable=False))
HISTOGRAM_SCHEMA = pa.schema(
    [
        pa.field("domain", pa.string(), nullable=False),
        pa.field("bin_low", pa.float64(), nullable=False),
        pa.field("bin_high", pa.float64(), nullable=False),
        pa.field("pairs", pa.int64(), nullable=False),
    ]
)
QUERY_STATS_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("query_language", pa.string(), nullable=False),
        pa.field("pairs_scored", pa.int64(), nullable=False),
        pa.field("pairs_stored", pa.int64(), nullable=False),
        pa.field("max_probability", pa.float64(), nullable=False),
    ]
)
INFO_SCHEMA = pa.schema(
    [
        pa.field("store_floor", pa.float64(), nullable=False),
        pa.field("store_top", pa.int64(), nullable=False),
        pa.field("floor_scale", pa.string(), nullable=False),  # the scale store_floor is on
    ]
)


def inputs(ctx: StageContext[PoolConfig]) -> dict[str, Any]:
    return {"reranker": describe_reranker(ctx.config.reranker, ctx.base_dir)}


def _queries(ctx: StageContext[PoolConfig], _inputs: dict[str, Any]) -> TableSource:
    return TableSource(english_queries(ctx.upstream["annotations"], ctx.upstream["translate"]))


@dataclass(frozen=True)
class _Split:
    passage_ids: npt.NDArray[np.object_]  # an array once per split: every query's ranking indexes it
    article_ids: list[str]
    texts: list[str]


@functools.lru_cache(maxsize=2)
def _splits(corpus_path: Path) -> dict[str, _Split]:
    table = Artifact(corpus_path).read(columns=["domain", "passage_id", "article_id", "text"])
    out: dict[str, _Split] = {}
    for domain in sorted(set(table.column("domain").to_pylist())):
        rows = table.filter(pc.equal(table.column("domain"), domain))
        out[domain] = _Split(
            np.asarray(rows.column("passage_id").to_pylist(), dtype=object),
            rows.column("article_id").to_pylist(),
            rows.column("text").to_pylist(),
        )
    return out


def _groups(
    queries: list[dict[str, Any]], splits: dict[str, _Split], batch_pairs: int
) -> Iterator[list[int]]:
    """Consecutive query positions whose pairs add up to at least ``batch_pairs`` (one reranker call)."""
    group: list[int] = []
    pairs = 0
    for i, q in enumerate(queries):
        group.append(i)
        pairs += len(splits[q["domain"]].texts)
        if pairs >= batch_pairs:
            yield group
            group, pairs = [], 0
    if group:
        yield group


def process(chunk: pa.Table, ctx: StageContext[PoolConfig]) -> ChunkResult:
    config = ctx.config
    splits = _splits(ctx.upstream["corpus"].path)
    rows = chunk.to_pylist()
    excluded = [
        {"reason": "empty_domain", "detail": f"domain {q['domain']!r} has no passage in the corpus",
         "query_id": q["query_id"]}
        for q in rows
        if q["domain"] not in splits
    ]  # fmt: skip
    queries = [q for q in rows if q["domain"] in splits]
    edges = np.linspace(0.0, 1.0, config.histogram_bins + 1)
    histogram: dict[str, npt.NDArray[np.int64]] = {}
    kept: list[pa.Table] = []
    stats: list[dict[str, Any]] = []
    scored = 0
    scoring_s = 0.0
    reranker = reranker_for(config.reranker, ctx.base_dir) if queries else None
    for group in _groups(queries, splits, config.batch_pairs):
        assert reranker is not None
        q_texts: list[str] = []
        p_texts: list[str] = []
        for i in group:
            split = splits[queries[i]["domain"]]
            q_texts += [queries[i]["query_text"]] * len(split.texts)
            p_texts += split.texts
        started = time.perf_counter()
        scores = reranker.score(q_texts, p_texts)
        scoring_s += time.perf_counter() - started
        scored += len(q_texts)
        offset = 0
        for i in group:
            q = queries[i]
            split = splits[q["domain"]]
            n = len(split.texts)
            logit = scores.logit[offset : offset + n]
            prob = scores.probability[offset : offset + n]
            offset += n
            table, stored = _stored_pairs(q, split, logit, prob, config)
            kept.append(table)
            counts, _ = np.histogram(np.clip(prob, 0.0, 1.0), bins=edges)
            histogram[q["domain"]] = histogram.get(q["domain"], np.zeros(len(counts), np.int64)) + counts
            stats.append(
                {"query_id": q["query_id"], "domain": q["domain"], "query_language": q["query_language"],
                 "pairs_scored": n, "pairs_stored": stored, "max_probability": float(prob.max())}
            )  # fmt: skip
    histogram_rows = [
        {"domain": d, "bin_low": float(edges[b]), "bin_high": float(edges[b + 1]), "pairs": int(c[b])}
        for d, c in sorted(histogram.items())
        for b in range(len(c))
    ]
    return ChunkResult(
        pa.concat_tables([SCHEMA.empty_table(), *kept]),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={
            "score_histogram": rows_to_table(histogram_rows, HISTOGRAM_SCHEMA),
            "query_stats": rows_to_table(stats, QUERY_STATS_SCHEMA),
            "pool_info": pa.Table.from_pylist([_info(config)], schema=INFO_SCHEMA),
        },
        # Seconds add up over chunks where a rate would not: pairs/s = pairs_scored / scoring_s.
        cost={"pairs_scored": scored, "scoring_s": round(scoring_s, 3)},
    )


def _info(config: PoolConfig) -> dict[str, Any]:
    return {"store_floor": config.store_floor, "store_top": config.store_top, "floor_scale": "probability"}


def _stored_pairs(
    query: dict[str, Any],
    split: _Split,
    logit: npt.NDArray[np.float64],
    prob: npt.NDArray[np.float64],
    config: PoolConfig,
) -> tuple[pa.Table, int]:
    # Rank by probability, best first; equal scores by passage id so the cut is deterministic.
    ids = split.passage_ids
    order = np.lexsort((ids, -prob))
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(1, len(order) + 1, dtype=np.int32)
    keep = (prob >= config.store_floor) | (rank <= config.store_top)
    positions = order[keep[order]]
    table = pa.table(
        {
            "query_id": pa.array([query["query_id"]] * len(positions), pa.string()),
            "domain": pa.array([query["domain"]] * len(positions), pa.string()),
            "passage_id": pa.array(ids[positions].tolist(), pa.string()),
            "article_id": pa.array([split.article_ids[p] for p in positions], pa.string()),
            "logit": pa.array(logit[positions], pa.float64()),
            "probability": pa.array(prob[positions], pa.float64()),
            "rank": pa.array(rank[positions], pa.int32()),
        },
        schema=SCHEMA,
    )
    return table, len(positions)


def stored_floor(pool: Artifact, scale: Literal["probability", "logit"] = "probability") -> float | None:
    """The lowest score the pool stage stored every pair at, on ``scale`` (its ``pool_info``
    side table); None for a pool with no chunk (it stored no pair and has no info)."""
    info = pool.read(table="pool_info").to_pylist()
    if not info:
        return None
    floor = float(info[0]["store_floor"])  # on the probability scale (floor_scale)
    if scale == info[0]["floor_scale"]:
        return floor
    from scipy.special import logit  # type: ignore[import-untyped]  # noqa: PLC0415

    return float(logit(floor))


def pool_view(pool: Artifact, cutoff: PoolCutoff) -> pa.Table:
    """The candidate pools under ``cutoff``: stored pairs at or above the threshold, at most
    ``max_per_query`` per query (best ranks), sorted by query then rank.

    Refuses a threshold below what the pool stage stored (its ``pool_info`` side table),
    which would silently miss pairs. A pool with no chunk stored no pair and has no info.
    """
    floor = stored_floor(pool, cutoff.scale)
    if floor is not None and cutoff.threshold < floor:
        raise ConfigError(
            f"pool cut-off {cutoff.threshold} is below the pool stage's store_floor {floor}: pairs between "
            "them were not stored; lower pool.store_floor and rerun the pool stage"
        )
    return apply_cutoff(pool.read(), cutoff)


def resources(config: PoolConfig) -> Resources:
    """A local cross-encoder on its device; vLLM's /score (a server) on a CPU worker."""
    reranker = config.reranker
    return model_resources(reranker.device, 4096) if reranker.engine == "sentence-transformers" else CPU


SPEC: StageSpec[PoolConfig] = StageSpec(
    name="pool",
    version=2,  # 2: side table pool_info (what pool_view checks a cut-off against)
    config_type=PoolConfig,
    upstream=("corpus", "annotations", "translate"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("query_id",),
    kept_keys=lambda kept: {(q,) for q in kept.column("query_id").to_pylist()},
    inputs=inputs,
    source=_queries,
    process=process,
    tables={"score_histogram": HISTOGRAM_SCHEMA, "query_stats": QUERY_STATS_SCHEMA, "pool_info": INFO_SCHEMA},
    resources=resources,
    description="Cross-encoder scores of every query against its domain split (logit + sigmoid).",
)
