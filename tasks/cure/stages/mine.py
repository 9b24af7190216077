"""Stage ``mine``: four retrievers per query, fused by Reciprocal Rank Fusion (CURE §2.3).

For every validated query and one of its relevant passages:

- ``query_lexical``: the query's English text, ``match_phrase`` with ``slop`` 2 (the
  paper's "match query with a slop of 2"; ``query_retriever: match`` uses plain BM25
  ``match`` instead);
- ``passage_fuzzy``: the relevant passage, ``match`` with ``fuzziness: AUTO``;
- ``query_knn`` / ``passage_knn``: kNN with the query's and the passage's embedding
  (``k`` 50, ``num_candidates`` 250 per shard);

each returning ``k`` hits, fused client side by RRF (``rrf_k`` 60; works on every
Elasticsearch licence). The top ``top`` (50) fused passages are kept: their source
articles are in-domain for the query's domain (the ``corpus`` stage). Every row keeps
each retriever's rank and score (null when that retriever did not return the passage)
and the fused score and rank; fused ties are broken by the best single rank, then by
passage id.

The query text is the English one from ``translate`` (an annotator's own English, or
DeepL's); a query with no English text is mined with its original text and says so in
``query_language``. The relevant passage is the query's dedup representative with the
smallest record key. The encoder is the ``embed`` stage's, read from its ``encoder`` side
table, so queries and passages are always embedded by the same model.

Units: queries. Excluded: ``no_relevant_passage``, ``no_candidates`` (an empty index).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, model_validator

from irforge.artifacts import Artifact
from irforge.config import StrictModel
from irforge.fingerprint import Transport
from irforge.parallel import CPU
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.search.config import open_index
from tasks.common.search.fusion import rrf
from tasks.common.search.port import Hit, SearchBackend
from tasks.cure.queries import english_queries
from tasks.cure.stages.embed import query_encoder

RETRIEVERS = ("query_lexical", "passage_fuzzy", "query_knn", "passage_knn")


class MineConfig(StrictModel):
    k: int = Field(50, ge=1, description="Hits per retriever.")
    num_candidates: int = Field(250, ge=1, le=10_000, description="kNN candidates per shard.")
    rrf_k: int = Field(60, ge=1, description="RRF rank constant.")
    top: int = Field(50, ge=1, description="Fused passages kept per query (their articles are in-domain).")
    query_retriever: Literal["phrase", "match"] = Field(
        "phrase", description="phrase: match_phrase with slop; match: plain BM25 match."
    )
    slop: int = Field(2, ge=0)
    batch_queries: Transport[int] = Field(
        64, ge=1, description="Queries sent to the engine per request batch."
    )

    @model_validator(mode="after")
    def _candidates_cover_k(self) -> MineConfig:
        if self.num_candidates < self.k:
            raise ValueError(f"num_candidates ({self.num_candidates}) must be at least k ({self.k})")
        return self


_RETRIEVER_FIELDS = [
    f
    for name in RETRIEVERS
    for f in (pa.field(f"{name}_rank", pa.int32()), pa.field(f"{name}_score", pa.float64()))
]
SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("query_language", pa.string(), nullable=False),
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("fused_rank", pa.int32(), nullable=False),
        pa.field("fused_score", pa.float64(), nullable=False),
        *_RETRIEVER_FIELDS,
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("query_id", pa.string(), nullable=False))


def _queries(ctx: StageContext[MineConfig], _inputs: dict[str, Any]) -> TableSource:
    passage: dict[str, str] = {}
    dedup = ctx.upstream["dedup"].read(columns=["record_key", "query_id", "canonical_passage"]).to_pylist()
    for row in sorted(dedup, key=lambda r: r["record_key"]):
        passage.setdefault(row["query_id"], row["canonical_passage"])
    queries = english_queries(ctx.upstream["annotations"], ctx.upstream["translate"])
    passages = pa.array([passage.get(q) for q in queries.column("query_id").to_pylist()], pa.string())
    return TableSource(queries.append_column(pa.field("passage", pa.string()), passages))


@functools.lru_cache(maxsize=2)
def _backend(path: Path) -> SearchBackend:
    return open_index(Artifact(path))


@functools.lru_cache(maxsize=2)
def _articles(path: Path) -> dict[str, str]:
    table = Artifact(path).read(columns=["passage_id", "article_id"])
    return dict(
        zip(table.column("passage_id").to_pylist(), table.column("article_id").to_pylist(), strict=True)
    )


def process(chunk: pa.Table, ctx: StageContext[MineConfig]) -> ChunkResult:
    config = ctx.config
    rows = chunk.to_pylist()
    missing = [r for r in rows if not r["passage"]]
    rows = [r for r in rows if r["passage"]]
    excluded = [
        {
            "reason": "no_relevant_passage",
            "detail": "the query has no validated relevant passage",
            "query_id": r["query_id"],
        }
        for r in missing
    ]
    kept: list[dict[str, Any]] = []
    if rows:
        index = ctx.upstream["index"]
        backend = _backend(index.path)
        articles = _articles(index.path)
        encoder = query_encoder(ctx.upstream["embed"], ctx.base_dir)
        queries = [r["query_text"] for r in rows]
        passages = [r["passage"] for r in rows]
        runs: dict[str, list[list[Hit]]] = defaultdict(list)
        for start in range(0, len(rows), config.batch_queries):
            q = queries[start : start + config.batch_queries]
            p = passages[start : start + config.batch_queries]
            qv = encoder.encode(q, kind="query")
            pv = encoder.encode(p, kind="passage")
            if config.query_retriever == "phrase":
                runs["query_lexical"] += backend.phrase(q, config.slop, config.k)
            else:
                runs["query_lexical"] += backend.bm25(q, config.k)
            runs["passage_fuzzy"] += backend.fuzzy(p, config.k)
            runs["query_knn"] += backend.knn(qv, config.k, config.num_candidates)
            runs["passage_knn"] += backend.knn(pv, config.k, config.num_candidates)
        for i, r in enumerate(rows):
            fused = rrf({name: runs[name][i] for name in RETRIEVERS}, k=config.rrf_k, top=config.top)
            if not fused:
                excluded.append(
                    {
                        "reason": "no_candidates",
                        "detail": "no retriever returned a passage",
                        "query_id": r["query_id"],
                    }
                )
                continue
            for hit in fused:
                row: dict[str, Any] = {
                    "query_id": r["query_id"],
                    "domain": r["domain"],
                    "query_language": r["query_language"],
                    "passage_id": hit.passage_id,
                    "article_id": articles[hit.passage_id],
                    "fused_rank": hit.rank,
                    "fused_score": hit.score,
                }
                for name in RETRIEVERS:
                    row[f"{name}_rank"] = hit.ranks.get(name)
                    row[f"{name}_score"] = hit.scores.get(name)
                kept.append(row)
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


SPEC: StageSpec[MineConfig] = StageSpec(
    name="mine",
    version=1,
    config_type=MineConfig,
    upstream=("index", "embed", "annotations", "dedup", "translate"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("query_id",),
    source=_queries,
    process=process,
    # Each worker opens the index and embed's encoder (a small query batch per chunk) once.
    resources=CPU,
    description="BM25 phrase + fuzzy and two kNN retrievers per query, fused by RRF (k = 60).",
)
