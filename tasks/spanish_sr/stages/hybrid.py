"""Stage ``hybrid``: first-stage candidates per query, BM25 and the fine-tuned dual encoder side by side (issue 17 §6, paper 004 §3.3.4).

Inputs: the ``bm25`` stage's ``params`` table (k1, b, variant, language, accent folding), the
``clean`` records (the corpus: record id and abstract), ``train_dense`` (one model per seed
under its ``files/``; its ``split`` table) and ``questions``. Queries: each seed's held-out
questions of the ``parts`` of its split (default both: ``train_rerank`` learns from the
training questions' candidates and validates on the held-out ones), query id = the record id.
Scoring and fusion: :func:`tasks.spanish_sr.fusion_scores.first_stage` (callable on any
query table, e.g. review query sets), methods ``bm25``, ``dense``, ``weighted`` (paper 004
eq. 3: λ·BM25 + dense, λ = 0.5), ``minmax``, ``zscore`` and ``rrf`` (k = 60).

Units: ``(seed, query_id)``. Kept: one row per seed, query, method and rank up to ``top_n``:
``query_id``, ``seed``, ``part`` (``train`` / ``validation``: the question's side of the
seed's split), ``method``, ``rank``, ``record_id``, ``score`` (the method's),
``bm25_score``, ``dense_score``. Side table ``fusion``: the settings (methods, λ, top N, RRF k
and depth), one row, so that ``evaluate`` ranks review queries the same way. Excluded: ``empty_query`` (a question with no letter or digit).
Chunks: one seed's queries each (the corpus is indexed and encoded once per seed), on a GPU
worker where the encoder runs on one; ``finalize`` writes the ``fusion`` row.
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, field_validator

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.fingerprint import Transport
from irforge.parallel import CPU, Resources
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.embed.local import SentenceTransformerEncoder
from tasks.common.models.hub import on_gpu
from tasks.common.search.fusion import DEFAULT_K
from tasks.spanish_sr.fusion_scores import METHODS, Bm25Params, Fusion, Method, first_stage

Part = Literal["train", "validation"]


class HybridConfig(StrictModel):
    parts: list[Part] = Field(
        ["train", "validation"], min_length=1, description="Questions ranked: the split parts of each seed."
    )
    methods: list[Method] = Field(list(METHODS), min_length=1, description="Rankings written side by side.")
    bm25_weight: float = Field(0.5, ge=0, description="λ of paper 004 eq. 3: λ·BM25 + dense.")
    top_n: int = Field(100, ge=1, description="Candidates kept per query and method.")
    rrf_k: int = Field(DEFAULT_K, ge=1, description="RRF rank constant.")
    rrf_depth: int = Field(1000, ge=1, description="Ranks of each retriever that enter RRF.")
    max_seq_length: int | None = Field(None, ge=8, description="Tokens per text (None: as trained).")
    batch_size: Transport[int] = Field(64, ge=1, description="Encoder batch size.")
    device: Transport[str | None] = Field(None, description="cuda, cpu…; default CUDA when present.")

    @field_validator("methods")
    @classmethod
    def _distinct(cls, methods: list[Method]) -> list[Method]:
        if len(set(methods)) != len(methods):
            raise ValueError(f"methods repeat: {methods}")
        return methods

    def fusion(self) -> Fusion:
        return Fusion(tuple(self.methods), self.bm25_weight, self.top_n, self.rrf_k, self.rrf_depth)


_S = pa.string()
SEED = pa.field("seed", pa.int64(), nullable=False)
QUERY_ID = pa.field("query_id", _S, nullable=False)
PART = pa.field("part", _S, nullable=False)
QUERIES = pa.schema([SEED, QUERY_ID, PART, pa.field("query", _S, nullable=False)])
SCHEMA = pa.schema(
    [
        QUERY_ID,
        SEED,
        PART,
        pa.field("method", _S, nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("record_id", _S, nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("bm25_score", pa.float64(), nullable=False),
        pa.field("dense_score", pa.float64(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(SEED, QUERY_ID)
FUSION_SCHEMA = pa.schema(
    [
        pa.field("methods", pa.list_(_S), nullable=False),
        pa.field("bm25_weight", pa.float64(), nullable=False),
        pa.field("top_n", pa.int32(), nullable=False),
        pa.field("rrf_k", pa.int32(), nullable=False),
        pa.field("rrf_depth", pa.int32(), nullable=False),
    ]
)


def fusion_of(ctx: StageContext[Any]) -> Fusion:
    """The fusion settings of the upstream ``hybrid`` stage (its one ``fusion`` row)."""
    rows = ctx.upstream["hybrid"].read(table="fusion").to_pylist()
    if len(rows) != 1:
        raise IrforgeError(
            f"hybrid artifact {ctx.upstream['hybrid'].path}: fusion holds {len(rows)} rows, not 1"
        )
    r = rows[0]
    return Fusion(tuple(r["methods"]), r["bm25_weight"], r["top_n"], r["rrf_k"], r["rrf_depth"])


def bm25_params(ctx: StageContext[Any]) -> Bm25Params:
    """The chosen BM25 parameters of the upstream ``bm25`` stage (its one ``params`` row)."""
    rows = ctx.upstream["bm25"].read(table="params").to_pylist()
    if len(rows) != 1:
        raise IrforgeError(f"bm25 artifact {ctx.upstream['bm25'].path}: params holds {len(rows)} rows, not 1")
    row = rows[0]
    return Bm25Params(row["k1"], row["b"], row["variant"], row["language"], row["fold_accents"])


def _queries(ctx: StageContext[HybridConfig], _inputs: dict[str, Any]) -> TableSource:
    split = ctx.upstream["train_dense"].read(table="split").to_pylist()
    pairs = ctx.upstream["questions"].read(columns=["record_id", "question"]).to_pylist()
    question = {p["record_id"]: p["question"] for p in pairs}
    rows = [
        {"seed": r["seed"], "query_id": r["record_id"], "part": r["part"], "query": question[r["record_id"]]}
        for r in sorted(split, key=lambda r: (r["seed"], r["record_id"]))
        if r["part"] in ctx.config.parts and r["record_id"] in question
    ]
    return TableSource(rows_to_table(rows, QUERIES), group_by="seed")


def process(chunk: pa.Table, ctx: StageContext[HybridConfig]) -> ChunkResult:
    config, trained = ctx.config, ctx.upstream["train_dense"]
    corpus_table = ctx.upstream["clean"].read(columns=["record_id", "abstract"]).sort_by("record_id")
    corpus = [(r["record_id"], r["abstract"]) for r in corpus_table.to_pylist() if r["abstract"]]
    params = bm25_params(ctx)
    models = {r["seed"]: r["model_dir"] for r in trained.read(columns=["seed", "model_dir"]).to_pylist()}
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for seed in sorted(set(chunk.column("seed").to_pylist())):
        queries, part = [], {}
        for row in chunk.filter(pa.compute.equal(chunk.column("seed"), seed)).to_pylist():
            if any(c.isalnum() for c in row["query"]):
                queries.append((row["query_id"], row["query"]))
                part[row["query_id"]] = row["part"]
            else:
                detail = f"question of {row['query_id']} reads {row['query']!r}"
                excluded.append(
                    {"seed": seed, "query_id": row["query_id"], "reason": "empty_query", "detail": detail}
                )
        if seed not in models:
            raise IrforgeError(f"train_dense artifact {trained.path}: no model for seed {seed}")
        encoder = SentenceTransformerEncoder(
            str(trained.files / models[seed]), device=config.device, batch_size=config.batch_size,
            max_seq_length=config.max_seq_length,
        )  # fmt: skip
        kept += [
            {**r, "seed": seed, "part": part[r["query_id"]]}
            for r in first_stage(queries, corpus, params, encoder, config.fusion())
        ]
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


def finalize(kept: pa.Table, ctx: StageContext[HybridConfig]) -> ChunkResult:
    """Every row kept; the ``fusion`` settings, one row for the stage."""
    f = ctx.config.fusion()
    fusion = {"methods": list(f.methods), "bm25_weight": f.bm25_weight, "top_n": f.top_n}
    fusion |= {"rrf_k": f.rrf_k, "rrf_depth": f.rrf_depth}
    return ChunkResult(
        kept, EXCLUDED_SCHEMA.empty_table(), {"fusion": rows_to_table([fusion], FUSION_SCHEMA)}
    )


def resources(config: HybridConfig) -> Resources:
    """A GPU per seed where the encoder runs on one (:func:`~tasks.common.models.hub.on_gpu`)."""
    return Resources(num_gpus=1, memory_mb=4096) if on_gpu(config.device) else CPU


SPEC: StageSpec[HybridConfig] = StageSpec(
    name="hybrid",
    version=2,
    config_type=HybridConfig,
    upstream=("bm25", "clean", "train_dense", "questions"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("seed", "query_id"),
    source=_queries,
    process=process,
    finalize=finalize,
    resources=resources,
    chunk_rows=1,  # with the grouped source: one seed's queries a chunk
    tables={"fusion": FUSION_SCHEMA},
    description="BM25, dense and their fusions (paper 004 eq. 3, min-max, z-score, RRF): top-N per query.",
)
