"""Stage ``evaluate``: BM25, dense, hybrid and hybrid + reranker on the review query sets, per seed (issue 17 §8, paper 004 §4.4–§5).

Queries: the ``reviews`` stage's ``queries`` (each review's research question and expert
queries); relevant: the review's included records (its kept rows). Per seed, the first stage
is :func:`tasks.spanish_sr.fusion_scores.first_stage` with the ``bm25`` parameters, that
seed's ``train_dense`` model and the ``hybrid`` stage's fusion settings (its ``fusion``
table), ``depth`` records deep; ``rerank`` is that seed's ``train_rerank`` cross-encoder
reordering the top ``rerank_depth`` of ``rerank_from`` (:func:`tasks.spanish_sr.review_eval.reranked`).
Measures: ir-measures through :func:`tasks.common.evaluate.metrics.evaluate_per_query`
(trec_eval's definitions; ``AP`` averaged is MAP; ``nDCG`` over the whole run).

Units: the queries. Kept: one row per query, seed, system and measure (``query_id``,
``review_id``, ``query_kind``, ``seed``, ``system``, ``measure``, ``value``). Excluded:
``empty_query`` (no letter or digit). Side tables: ``summary``
(:func:`tasks.spanish_sr.review_eval.summary_rows`: mean ± std over seeds, per review and
overall), ``significance`` (question vs expert queries per review and measure, the systems paired, each averaged over the seeds; Table 5:
:mod:`tasks.spanish_sr.significance`), ``runs`` (every system's top ``runs_depth`` per
query and seed) and ``held_out`` (the same systems on each seed's held-out questions,
self-retrieval from the ``hybrid`` rows: ``RR``, ``R@1``, ``R@10``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.fingerprint import Transport
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.embed.local import SentenceTransformerEncoder
from tasks.common.evaluate.metrics import evaluate_per_query
from tasks.common.rerank.port import Reranker
from tasks.spanish_sr.fusion_scores import METHODS, Bm25Params, Fusion, Method, first_stage
from tasks.spanish_sr.review_eval import Ranked, as_run, reranked, significance_scores, summary_rows
from tasks.spanish_sr.significance import RESULT_SCHEMA, SignificanceConfig, compare_table
from tasks.spanish_sr.stages.hybrid import bm25_params, fusion_of

System = Literal["bm25", "dense", "weighted", "minmax", "zscore", "rrf", "rerank"]


class EvaluateConfig(StrictModel):
    systems: list[System] = Field([*METHODS, "rerank"], min_length=1, description="Systems evaluated.")
    rerank_from: Method = Field("weighted", description="The first-stage ranking the reranker reorders.")
    rerank_depth: int = Field(50, ge=1, description="Records of it the reranker scores per query.")
    depth: int = Field(1000, ge=1, description="Records ranked per query and system (the run's depth).")
    measures: list[str] = Field(["AP", "nDCG", "nDCG@10", "R@10", "R@100"], min_length=1)
    significance: SignificanceConfig = SignificanceConfig()
    significance_measures: list[str] = Field(["AP", "nDCG"], description="Tested question vs expert.")
    held_out_measures: list[str] = Field(["RR", "R@1", "R@10"], description="On the held-out questions.")
    runs_depth: int | None = Field(
        None,
        ge=1,
        description="Ranks per query kept in the runs table; None: depth, so the table reproduces "
        "every reported measure (a shallower table cannot: AP and nDCG read the whole run).",
    )
    batch_size: Transport[int] = Field(32, ge=1, description="Encoder and reranker batch size.")
    device: Transport[str | None] = Field(None, description="cuda, cpu…; default CUDA when present.")


_S, _F, _I = pa.string(), pa.float64(), pa.int32()
SEED = pa.field("seed", pa.int64(), nullable=False)
SCHEMA = pa.schema(
    [pa.field(n, _S, nullable=False) for n in ("query_id", "review_id", "query_kind")]
    + [SEED]
    + [pa.field(n, _S, nullable=False) for n in ("system", "measure")]
    + [pa.field("value", _F, nullable=False)]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("query_id", _S, nullable=False))
SUMMARY_SCHEMA = pa.schema(
    [pa.field(n, _S, nullable=False) for n in ("review_id", "query_kind", "system", "measure")]
    + [pa.field("mean", _F, nullable=False), pa.field("std", _F)]
    + [pa.field(n, _F, nullable=False) for n in ("min", "max")]
    + [pa.field(n, _I, nullable=False) for n in ("seeds", "queries")]
)
RUNS_SCHEMA = pa.schema(
    [SEED]
    + [pa.field(n, _S, nullable=False) for n in ("query_id", "system")]
    + [pa.field("rank", _I, nullable=False), pa.field("record_id", _S, nullable=False), pa.field("score", _F)]
)
HELD_OUT_SCHEMA = pa.schema(
    [SEED]
    + [pa.field(n, _S, nullable=False) for n in ("system", "measure")]
    + [pa.field("value", _F, nullable=False), pa.field("queries", _I, nullable=False)]
)
TABLES = {
    "summary": SUMMARY_SCHEMA,
    "significance": RESULT_SCHEMA,
    "runs": RUNS_SCHEMA,
    "held_out": HELD_OUT_SCHEMA,
}


def _queries(ctx: StageContext[EvaluateConfig], _inputs: dict[str, Any]) -> TableSource:
    table = ctx.upstream["reviews"].read(table="queries").sort_by("query_id")
    return TableSource(table.select(["query_id", "review_id", "kind", "text"]))


def _models(ctx: StageContext[EvaluateConfig]) -> dict[int, tuple[str, str | None, int]]:
    """seed → (dual encoder dir, reranker dir or None, reranker max length)."""
    dense = ctx.upstream["train_dense"]
    rerank = {r["seed"]: r for r in ctx.upstream["train_rerank"].read().to_pylist()}
    out: dict[int, tuple[str, str | None, int]] = {}
    for row in dense.read(columns=["seed", "model_dir"]).to_pylist():
        r = rerank.get(row["seed"])
        if r is None and "rerank" in ctx.config.systems:
            raise IrforgeError(
                f"train_rerank artifact {ctx.upstream['train_rerank'].path}: no model for seed {row['seed']}"
            )
        where = str(ctx.upstream["train_rerank"].files / r["model_dir"]) if r else None
        out[row["seed"]] = (str(dense.files / row["model_dir"]), where, r["max_length"] if r else 0)
    return out


@dataclass(frozen=True)
class _Inputs:
    """What every seed reads, read once: the corpus, the first stage's settings, the held-out
    questions' hybrid rows by seed and the question pairs' texts."""

    corpus: list[tuple[str, str]]
    params: Bm25Params
    fusion: Fusion
    held_out: dict[int, list[dict[str, Any]]]
    questions: dict[str, str]


def _inputs(ctx: StageContext[EvaluateConfig]) -> _Inputs:
    config = ctx.config
    corpus_table = ctx.upstream["clean"].read(columns=["record_id", "abstract"]).sort_by("record_id")
    corpus = [(r["record_id"], r["abstract"]) for r in corpus_table.to_pylist() if r["abstract"]]
    hybrid = fusion_of(ctx)
    methods = tuple(dict.fromkeys([m for m in config.systems if m != "rerank"] + [config.rerank_from]))
    fusion = Fusion(methods, hybrid.bm25_weight, config.depth, hybrid.rrf_k, hybrid.rrf_depth)
    rows = ctx.upstream["hybrid"].read(
        columns=["query_id", "seed", "part", "method", "rank", "record_id", "score"]
    )
    held_out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows.filter(pc.equal(rows["part"], "validation")).to_pylist():
        held_out[r["seed"]].append(r)
    pairs = ctx.upstream["questions"].read(columns=["record_id", "question"]).to_pylist()
    questions = {p["record_id"]: p["question"] for p in pairs}
    return _Inputs(corpus, bm25_params(ctx), fusion, held_out, questions)


def _reranker(config: EvaluateConfig, models: tuple[str, str | None, int]) -> Reranker | None:
    """The seed's reranker, loaded once for the review and the held-out queries (None: not evaluated)."""
    if "rerank" not in config.systems or models[1] is None:
        return None
    from tasks.common.rerank.local import CrossEncoderReranker  # noqa: PLC0415 -- torch: when it runs

    return CrossEncoderReranker(
        models[1], max_length=models[2], device=config.device, batch_size=config.batch_size
    )


def _rankings(
    config: EvaluateConfig,
    shared: _Inputs,
    queries: dict[str, str],
    encoder_dir: str,
    reranker: Reranker | None,
) -> dict[str, dict[str, Ranked]]:
    """system → query → ranking, for one seed."""
    encoder = SentenceTransformerEncoder(encoder_dir, device=config.device, batch_size=config.batch_size)
    out: dict[str, dict[str, Ranked]] = defaultdict(lambda: defaultdict(list))
    for r in first_stage(sorted(queries.items()), shared.corpus, shared.params, encoder, shared.fusion):
        out[r["method"]][r["query_id"]].append((r["record_id"], r["score"]))
    if reranker is not None:
        first = {q: [rid for rid, _ in ranking] for q, ranking in out[config.rerank_from].items()}
        out["rerank"] = reranked(first, queries, dict(shared.corpus), reranker, config.rerank_depth)
    return {s: out[s] for s in config.systems}


def _measured(
    rankings: dict[str, dict[str, Ranked]], qrels: dict[str, dict[str, int]], measures: list[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """system → query → measure → value."""
    return {
        system: evaluate_per_query(qrels, {q: as_run(r) for q, r in by_query.items()}, measures)
        for system, by_query in rankings.items()
    }


def _held_out(
    config: EvaluateConfig, seed: int, shared: _Inputs, reranker: Reranker | None
) -> list[dict[str, Any]]:
    rows = shared.held_out.get(seed, [])
    if not rows:
        return []
    rankings: dict[str, dict[str, Ranked]] = defaultdict(lambda: defaultdict(list))
    for r in sorted(rows, key=lambda r: (r["method"], r["query_id"], r["rank"])):
        rankings[r["method"]][r["query_id"]].append((r["record_id"], r["score"]))
    if reranker is not None and config.rerank_from in rankings:
        first = {q: [rid for rid, _ in r] for q, r in rankings[config.rerank_from].items()}
        # every corpus record may be retrieved, also those that got no question of their own
        rankings["rerank"] = reranked(
            first, shared.questions, dict(shared.corpus), reranker, config.rerank_depth
        )
    qrels = {qid: {qid: 1} for qid in {r["query_id"] for r in rows}}
    measured = _measured(
        {s: rankings[s] for s in config.systems if s in rankings}, qrels, config.held_out_measures
    )
    return [
        {"seed": seed, "system": system, "measure": m, "queries": len(values)}
        | {"value": sum(v[m] for v in values.values()) / len(values)}
        for system, values in measured.items()
        for m in config.held_out_measures
    ]


def process(chunk: pa.Table, ctx: StageContext[EvaluateConfig]) -> ChunkResult:
    config = ctx.config
    info, excluded = {}, []
    for r in chunk.to_pylist():
        if any(c.isalnum() for c in r["text"]):
            info[r["query_id"]] = r
        else:
            excluded.append(
                {
                    "query_id": r["query_id"],
                    "reason": "empty_query",
                    "detail": f"query {r['query_id']} reads {r['text']!r}",
                }
            )
    relevant: dict[str, dict[str, int]] = defaultdict(dict)
    for j in ctx.upstream["reviews"].read(columns=["review_id", "record_id", "relevance"]).to_pylist():
        relevant[j["review_id"]][j["record_id"]] = j["relevance"]
    qrels = {qid: relevant[r["review_id"]] for qid, r in info.items()}
    kept, runs, held_out = [], [], []
    shared = _inputs(ctx)
    for seed, models in sorted(_models(ctx).items()):
        reranker = _reranker(config, models)
        queries = {q: r["text"] for q, r in info.items()}
        rankings = _rankings(config, shared, queries, models[0], reranker) if info else {}
        for system, by_query in _measured(rankings, qrels, config.measures).items() if info else ():
            for qid, values in by_query.items():
                base = {"query_id": qid, "review_id": info[qid]["review_id"], "query_kind": info[qid]["kind"]}
                kept += [
                    base | {"seed": seed, "system": system, "measure": m, "value": v}
                    for m, v in values.items()
                ]
        runs += [
            {"seed": seed, "query_id": qid, "system": system, "rank": rank, "record_id": rid, "score": score}
            for system, by_query in rankings.items()
            for qid, ranking in sorted(by_query.items())
            for rank, (rid, score) in enumerate(ranking[: config.runs_depth or config.depth], start=1)
        ]
        held_out += _held_out(config, seed, shared, reranker)
    tables = {
        "summary": rows_to_table(summary_rows(kept), SUMMARY_SCHEMA),
        "significance": compare_table(
            significance_scores(kept, config.significance_measures), config.significance
        ),
        "runs": rows_to_table(runs, RUNS_SCHEMA),
        "held_out": rows_to_table(held_out, HELD_OUT_SCHEMA),
    }
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA), tables=tables)


SPEC: StageSpec[EvaluateConfig] = StageSpec(
    name="evaluate",
    version=3,  # 3: the runs table as deep as the scored runs by default (issue 28)
    config_type=EvaluateConfig,
    upstream=("reviews", "clean", "bm25", "train_dense", "hybrid", "train_rerank", "questions"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("query_id",),
    source=_queries,
    process=process,
    whole_input=True,
    tables=TABLES,
    description="MAP, nDCG and recall of BM25, dense, hybrid and hybrid + reranker on review queries, over seeds.",
)
