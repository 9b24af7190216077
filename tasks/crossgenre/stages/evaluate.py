"""Stage ``evaluate``: recall@1/3/5/20 and MRR per split and system (paper 003 §3.2, Table 3).

Systems, each a run over the queries of a split, scored against claims' qrels with
ir-measures (:mod:`tasks.common.evaluate.metrics`: pytrec_eval, mean over the queries
with qrels, ties by doc id):

- ``bm25_<variant>``: the candidates of ``variant`` (BM25+† by default) in their rank order;
- ``rerank:<model>``: the shared cross-encoder (:mod:`tasks.common.rerank.config`, CUDA when
  present) scores headline–abstract pairs of the top ``rerank_k`` candidates and orders them
  by its logit (then doc id); the candidates below ``rerank_k`` follow in BM25 order, so
  MRR counts a cited abstract the reranker never saw. Zero-shot: the paper fine-tunes it
  on the ``pairs`` stage's rows first.
- ``dense:<model>:<view>`` (optional): the shared encoder (:mod:`tasks.common.embed.config`)
  retrieves the top ``depth`` of the whole corpus (claims' cited abstracts ∪ distractors) by
  inner product (:func:`tasks.common.evaluate.baselines.dense_run`); ``view`` is the part of
  the abstract encoded, without the title, as the paper encodes abstracts
  (:mod:`tasks.crossgenre.abstract_views`, paper 003 §3.1). Each distinct text is encoded once.

A cited abstract missed by the candidates counts as not retrieved for BM25 and the
reranker (the paper's test setting: nothing is added back). Metric names: ``R@1``,
``R@3``, ``R@5``, ``R@20``, ``MRR`` (ir-measures' ``RR``, averaged).

Units: (system, split). Excluded: ``no_queries`` (the split has no query). Side table
``per_query``: every query's value of every metric.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pydantic import Field, model_validator

from irforge.config import StrictModel
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.embed.config import EncoderConfig, encoder_for, resolved
from tasks.common.embed.config import describe as describe_encoder
from tasks.common.embed.port import F32, Encoder, Kind, ProgressFn
from tasks.common.evaluate.baselines import dense_run
from tasks.common.evaluate.metrics import evaluate_per_query
from tasks.common.rerank.config import RerankerConfig, describe_reranker, reranker_for
from tasks.crossgenre.abstract_views import View, abstract_view
from tasks.crossgenre.documents import headlines, qrels, read_documents

Run = dict[str, dict[str, float]]
"""Query id → doc id → score (higher first)."""
METRICS: dict[str, str] = {"R@1": "R@1", "R@3": "R@3", "R@5": "R@5", "R@20": "R@20", "MRR": "RR"}
"""Our metric name → its ir-measures name."""
SPLITS = ("train", "dev", "test")


class DenseSystem(StrictModel):
    encoder: EncoderConfig = EncoderConfig()
    views: tuple[View, ...] = Field(("full",), min_length=1, description="Parts of the abstract encoded.")
    depth: int = Field(100, ge=20, description="Documents retrieved per query.")


class EvaluateConfig(StrictModel):
    variant: str = Field("plus_pre", description="The candidates variant evaluated and reranked (BM25+†).")
    splits: tuple[str, ...] = Field(SPLITS, min_length=1)
    reranker: RerankerConfig | None = Field(
        RerankerConfig(), description="The cross-encoder reranking the candidates; null: none."
    )
    rerank_k: int = Field(500, ge=20, description="Candidates reranked per query (paper: all 500).")
    rerank_splits: tuple[str, ...] | None = Field(
        None, description="Splits the reranker is evaluated on (null: every split of `splits`)."
    )
    dense: tuple[DenseSystem, ...] = Field((), description="Optional dense first stages.")

    @model_validator(mode="after")
    def _rerank_splits_are_splits(self) -> EvaluateConfig:
        extra = sorted(set(self.rerank_splits or ()) - set(self.splits))
        if extra:
            raise ValueError(f"rerank_splits {extra} are not in splits {list(self.splits)}")
        return self


SCHEMA = pa.schema(
    [
        pa.field("system", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("queries", pa.int32(), nullable=False),
    ]
)
PER_QUERY_SCHEMA = pa.schema(
    [
        pa.field("system", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("system", pa.string(), nullable=False), pa.field("split", pa.string(), nullable=False)
)
_UNITS = pa.schema([pa.field("system", pa.string()), pa.field("split", pa.string())])


def bm25_system(config: EvaluateConfig) -> str:
    return f"bm25_{config.variant}"


def rerank_system(config: RerankerConfig) -> str:
    return f"rerank:{config.model}"


def dense_system(system: DenseSystem, view: View) -> str:
    return f"dense:{system.encoder.model}:{view}"


def _units(ctx: StageContext[EvaluateConfig], _inputs: dict[str, Any]) -> TableSource:
    c = ctx.config
    rows = [{"system": bm25_system(c), "split": s} for s in c.splits]
    if c.reranker is not None:
        rows += [{"system": rerank_system(c.reranker), "split": s} for s in c.rerank_splits or c.splits]
    rows += [{"system": dense_system(d, v), "split": s} for d in c.dense for v in d.views for s in c.splits]
    return TableSource(pa.Table.from_pylist(rows, _UNITS))


def inputs(ctx: StageContext[EvaluateConfig]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if ctx.config.reranker is not None:
        out["reranker"] = describe_reranker(ctx.config.reranker, ctx.base_dir)
    if ctx.config.dense:
        out["dense"] = [describe_encoder(d.encoder, ctx.base_dir) for d in ctx.config.dense]
    return out


def _candidates(ctx: StageContext[EvaluateConfig]) -> dict[str, list[str]]:
    """Query id → its candidate doc ids of ``variant``, by rank."""
    table = ctx.upstream["candidates"].read(
        columns=["query_id", "doc_id", "rank"], filters=[("variant", "=", ctx.config.variant)]
    )
    table = table.sort_by([("query_id", "ascending"), ("rank", "ascending")])
    out: dict[str, list[str]] = {}
    for q, d in zip(table.column("query_id").to_pylist(), table.column("doc_id").to_pylist(), strict=True):
        out.setdefault(q, []).append(d)
    return out


def _ordered(docs: list[str]) -> dict[str, float]:
    """A ranked list as strictly decreasing scores (what the metrics rank back into this order)."""
    return {d: float(len(docs) - i) for i, d in enumerate(docs)}


def rerank_run(
    ctx: StageContext[EvaluateConfig],
    queries: list[str],
    ranked: Mapping[str, list[str]],
    heads: Mapping[str, str],
) -> Run:
    """The top ``rerank_k`` of each query reordered by the cross-encoder, the rest after them."""
    assert ctx.config.reranker is not None
    k = ctx.config.rerank_k
    pairs = [(q, d) for q in queries for d in ranked.get(q, [])[:k]]
    docs = read_documents(ctx.upstream["claims"], ctx.upstream["distractors"], ["title", "abstract"],
                          (d for _q, d in pairs))  # fmt: skip
    text = {r["doc_id"]: r["abstract"] or r["title"] for r in docs.to_pylist()}
    reranker = reranker_for(ctx.config.reranker, ctx.base_dir)
    scores = reranker.score([heads[q] for q, _d in pairs], [text[d] for _q, d in pairs]).logit.tolist()
    logits: dict[str, dict[str, float]] = {}
    for (q, d), s in zip(pairs, scores, strict=True):
        logits.setdefault(q, {})[d] = s
    run: Run = {}
    for q in queries:
        top = sorted(logits.get(q, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        run[q] = _ordered([d for d, _s in top] + ranked.get(q, [])[k:])
    return run


class _Remembering:
    """An encoder that encodes each distinct (kind, text) once: the views share most texts
    (an unlabelled abstract is whole in two of them, a labelled one the same in two)."""

    def __init__(self, encoder: Encoder) -> None:
        self.inner = encoder
        self.name, self.model_id, self.revision = encoder.name, encoder.model_id, encoder.revision
        self.dims = encoder.dims
        self.seen: dict[tuple[str, str], npt.NDArray[np.float32]] = {}

    def encode(self, texts: Sequence[str], *, kind: Kind, on_batch: ProgressFn | None = None) -> F32:
        todo = list(dict.fromkeys(t for t in texts if (kind, t) not in self.seen))
        for text, vector in zip(todo, self.inner.encode(todo, kind=kind, on_batch=on_batch), strict=True):
            self.seen[kind, text] = vector
        rows = [self.seen[kind, t] for t in texts]
        return np.ascontiguousarray(np.stack(rows) if rows else np.zeros((0, self.dims), np.float32))

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def dense_runs(
    ctx: StageContext[EvaluateConfig], queries: list[str], heads: Mapping[str, str]
) -> dict[str, Run]:
    """System name → run over every query given, one per (encoder, view)."""
    if not ctx.config.dense:
        return {}
    corpus = read_documents(
        ctx.upstream["claims"], ctx.upstream["distractors"], ["title", "abstract", "sections", "labelled"]
    ).to_pylist()
    table = pa.table({"_id": queries, "text": [heads[q] for q in queries]})
    runs: dict[str, Run] = {}
    for system in ctx.config.dense:
        encoder = _Remembering(encoder_for(resolved(system.encoder, ctx.base_dir)))
        for view in system.views:
            texts = [abstract_view(r, view) or r["title"] for r in corpus]
            documents = pa.table(
                {"_id": [r["doc_id"] for r in corpus], "title": [""] * len(corpus), "text": texts}
            )
            runs[dense_system(system, view)] = dense_run(documents, table, encoder, k=system.depth)
    return runs


def _score(
    system: str, split: str, judged: dict[str, dict[str, int]], run: Run
) -> tuple[list[Any], list[Any]]:
    per_query = evaluate_per_query(judged, run, list(METRICS.values()))
    rows, detail = [], []
    for metric, measure in METRICS.items():
        values = [v[measure] for v in per_query.values()]
        rows.append({"system": system, "split": split, "metric": metric,
                     "value": math.fsum(values) / len(values), "queries": len(values)})  # fmt: skip
        detail += [
            {"system": system, "split": split, "query_id": q, "metric": metric, "value": v[measure]}
            for q, v in per_query.items()
        ]
    return rows, detail


def process(chunk: pa.Table, ctx: StageContext[EvaluateConfig]) -> ChunkResult:
    units = chunk.to_pylist()
    splits = ctx.upstream["splits"].read(columns=["query_id", "split"]).to_pylist()
    relevant = qrels(ctx.upstream["claims"])
    members: dict[str, list[str]] = {}
    for r in splits:
        if r["query_id"] in relevant:
            members.setdefault(r["split"], []).append(r["query_id"])
    evaluated = sorted({u["split"] for u in units if members.get(u["split"])})
    queries = sorted(q for s in evaluated for q in members[s])
    heads = headlines(ctx.upstream["claims"], queries)
    ranked = _candidates(ctx)
    runs: dict[str, Run] = {bm25_system(ctx.config): {q: _ordered(ranked.get(q, [])) for q in queries}}
    runs.update(dense_runs(ctx, queries, heads))
    if ctx.config.reranker is not None:
        allowed = set(ctx.config.rerank_splits or ctx.config.splits)
        rerank_queries = sorted(q for s in evaluated if s in allowed for q in members[s])
        runs[rerank_system(ctx.config.reranker)] = rerank_run(ctx, rerank_queries, ranked, heads)
    kept: list[dict[str, Any]] = []
    detail: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for unit in units:
        split = unit["split"]
        if split not in evaluated:
            excluded.append({**unit, "reason": "no_queries", "detail": f"split {split!r} has no query"})
            continue
        judged = {q: dict.fromkeys(relevant[q], 1) for q in members[split]}
        rows, per_query = _score(unit["system"], split, judged, runs[unit["system"]])
        kept += rows
        detail += per_query
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={"per_query": rows_to_table(detail, PER_QUERY_SCHEMA)},
    )


SPEC: StageSpec[EvaluateConfig] = StageSpec(
    name="evaluate",
    version=1,
    config_type=EvaluateConfig,
    upstream=("claims", "distractors", "candidates", "splits"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("system", "split"),
    source=_units,
    inputs=inputs,
    process=process,
    tables={"per_query": PER_QUERY_SCHEMA},
    whole_input=True,
    description="Recall@1/3/5/20 and MRR of BM25+†, a zero-shot cross-encoder and dense retrievers per split.",
)
