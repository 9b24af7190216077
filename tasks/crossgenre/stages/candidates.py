"""Stage ``candidates``: BM25 top k per headline over the cited and distractor abstracts.

Paper 003 §3.1 and Table 2: rank_bm25's Okapi BM25 and BM25+ on plain tokens, and BM25+
with the preprocessing (†: lower-case, stop words, Porter stems, abbreviations of the
headlines expanded), top 500 per headline, recall@1/5/20/100/500.

- Queries: the ``claims`` rows (headline; relevant = its ``pmids``). Corpus: ``claims``'
  ``corpus`` side table ∪ the ``distractors`` rows (a ``doc_id`` in both is taken once),
  the ``abstract`` (or title + abstract: ``document``), analysed by
  :mod:`tasks.crossgenre.preprocess` (``plain`` for ``okapi``/``plus``, ``pre`` for
  ``plus_pre``).
- ``backend: embedded``: :class:`tasks.common.search.bm25_rank.RankBm25`, rank_bm25's scores
  exactly (k1, b, delta, epsilon), ties by doc id. ``backend: elasticsearch``: each
  analysis's terms, space-joined, indexed with the ``whitespace`` analyzer on the server of
  ``ES_URL`` (the shared adapter, :mod:`tasks.common.search.elastic`) and searched with a
  ``match`` query: Lucene's BM25 (k1 1.2, b 0.75), so ``okapi`` and ``plus`` give the same
  list there; the index is dropped after the search. (The port wants a vector per passage:
  a constant one-dimensional one, ``flat``, which no query reads; ``flat`` needs ES 8.13+.)
- Rows: one per (query, variant, rank), in that order; ``relevant`` = the doc is one the
  headline cites. A headline no variant finds any document for is excluded ``no_candidates``.
  Only documents holding a query term are candidates (a list can be shorter than ``top_k``).
- Chunks: headlines, on the flow's workers. The analysed corpus, the expansion plan (over all
  headlines) and the indexes are built once per host and memory-mapped by every chunk
  (:mod:`tasks.crossgenre.candidate_index`). On Elasticsearch the headlines are one chunk.
- Side tables, over all headlines (``finalize``): ``recall`` (per variant and k: the mean over
  all input headlines of the share of their cited PMIDs in the top k, the paper's Table 2)
  and ``expansions`` (the abbreviations expanded in ``plus_pre``'s queries, with their
  counts and long forms).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator, model_validator

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport, digest_file
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    Source,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.common.search.bm25_rank import Ranking, encode_queries
from tasks.common.search.elastic.dsl import MAX_RESULT_WINDOW
from tasks.common.search.elastic.options import ElasticsearchOptions
from tasks.common.search.port import PASSAGE_SCHEMA, Hit, SearchBackend, SearchError
from tasks.crossgenre.candidate_index import VARIANTS, Shared, abbreviations_path, plan_of, shared
from tasks.crossgenre.preprocess import Analysis, Expansion, Tokenised, analyse_queries, expansion_words

VariantName = Literal["okapi", "plus", "plus_pre"]
ALL_VARIANTS: tuple[VariantName, ...] = ("okapi", "plus", "plus_pre")
I64 = npt.NDArray[np.int64]


class CandidatesConfig(StrictModel):
    variants: list[VariantName] = Field(
        default_factory=lambda: list(ALL_VARIANTS), min_length=1, description="In this order."
    )
    k1: float = Field(1.5, gt=0, description="rank_bm25's default.")
    b: float = Field(0.75, ge=0, le=1)
    delta: float = Field(1.0, ge=0, description="BM25+'s lower bound of a held term's tf part.")
    epsilon: float = Field(0.25, ge=0, description="Okapi: a negative idf becomes epsilon x the mean idf.")
    top_k: int = Field(500, ge=1, le=10_000)
    recall_at: list[int] = Field(default_factory=lambda: [1, 5, 20, 100, 500], min_length=1)
    document: Literal["abstract", "title_abstract"] = Field("abstract", description="What is indexed.")
    abbreviations: str | None = Field(
        None, description="CSV abr,long_form (relative to the config); None: the bundled Wikipedia list."
    )
    abbreviation_min_count: int = Field(3, ge=1, description="Paper: 'more than twice' in the headlines.")
    abbreviation_min_documents: int = Field(
        1,
        ge=0,
        description="Expand only into a long form this many documents write (0: always, as the paper).",
    )
    backend: Literal["embedded", "elasticsearch"] = "embedded"
    elasticsearch_index: str = Field("irforge-crossgenre", description="Index name prefix (ES_URL's server).")
    threads: Transport[int | None] = Field(None, ge=1, description="Search threads (default: CPUs).")

    @field_validator("variants")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("variants must be distinct")
        return value

    @model_validator(mode="after")
    def _recall_within_top_k(self) -> CandidatesConfig:
        if any(not 1 <= k <= self.top_k for k in self.recall_at):
            raise ValueError(f"recall_at values must be between 1 and top_k ({self.top_k})")
        return self


def _required(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, kind, nullable=False) for name, kind in fields])


SCHEMA = _required(
    ("query_id", pa.string()),
    ("variant", pa.string()),
    ("doc_id", pa.string()),
    ("rank", pa.int32()),  # from 1
    ("score", pa.float64()),  # rank_bm25's (embedded) or the server's
    ("relevant", pa.bool_()),  # the headline cites it
)
RECALL_SCHEMA = _required(
    ("variant", pa.string()), ("k", pa.int32()), ("recall", pa.float64()), ("queries", pa.int32())
)
EXPANSIONS_SCHEMA = _required(
    ("abbreviation", pa.string()),
    ("count", pa.int32()),  # times written across the headlines
    ("long_form", pa.string()),  # the one chosen
    ("long_forms", pa.list_(pa.string())),  # every one of the dictionary, in its order
    ("documents", pa.int32()),  # corpus documents holding the chosen one as a phrase
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("query_id", pa.string(), nullable=False))


def _inputs(ctx: StageContext[CandidatesConfig]) -> dict[str, Any]:
    if "plus_pre" not in ctx.config.variants:
        return {}
    path = abbreviations_path(ctx.base_dir, ctx.config.abbreviations)
    if not path.is_file():
        raise ConfigError(f"{path}: abbreviation dictionary not found (stages.candidates.abbreviations)")
    return {"abbreviations": digest_file(path)}


def process(chunk: pa.Table, ctx: StageContext[CandidatesConfig]) -> ChunkResult:
    """This chunk's headlines searched in the shared corpus and indexes (:func:`shared`); rows
    by query, then variant, then rank, so the artifact does not depend on the chunking."""
    config = ctx.config
    query_ids = chunk.column("query_id").combine_chunks()
    headlines = chunk.column("headline").to_pylist()
    cited = [set(p) for p in chunk.column("pmids").to_pylist()]
    built = shared(ctx)
    doc_ids = built.doc_ids
    queries = {a: analyse_queries(headlines, a, expansion_words(built.plan)) for a in built.corpora}
    rank = _embedded(config, built) if config.backend == "embedded" else _port(config, ctx, doc_ids)
    if not len(doc_ids):  # nothing to search: every headline is excluded below
        rank = _nothing(config.top_k)
    rankings = {v: rank(v, built.corpora[VARIANTS[v][1]], queries[VARIANTS[v][1]]) for v in config.variants}
    relevant = _relevance(doc_ids, cited)
    placed: dict[str, _Placed] = {v: _Placed.of(r, len(doc_ids), relevant) for v, r in rankings.items()}
    found = np.zeros(len(headlines), dtype=np.bool_)
    for ranking in rankings.values():
        found |= ranking.counts > 0
    excluded = [
        {"reason": "no_candidates", "detail": _no_candidates(queries, i), "query_id": query_ids[i].as_py()}
        for i in np.flatnonzero(~found).tolist()
    ]
    return ChunkResult(_rows(placed, query_ids, doc_ids), rows_to_table(excluded, EXCLUDED_SCHEMA))


def finalize(kept: pa.Table, ctx: StageContext[CandidatesConfig]) -> ChunkResult:
    """Every row kept; the figures over all headlines: ``recall`` and ``expansions``."""
    claims = ctx.upstream["claims"].read(columns=["query_id", "pmids"])
    tables = {
        "recall": _recall(kept, claims, ctx.config.variants, ctx.config.recall_at),
        "expansions": _expansions(plan_of(ctx)),
    }
    return ChunkResult(kept, EXCLUDED_SCHEMA.empty_table(), tables)


def _no_candidates(queries: dict[Analysis, list[list[str]]], i: int) -> str:
    seen = "; ".join(f"{a}: {' '.join(q[i]) or '(no terms)'}" for a, q in sorted(queries.items()))
    return f"no document holds a term of the headline ({seen})"


Ranker = Callable[[str, Tokenised, list[list[str]]], Ranking]


def _embedded(config: CandidatesConfig, built: Shared) -> Ranker:
    """rank_bm25's variant on our engine, on the shared index (doc rows in doc id order)."""

    def rank(variant: str, corpus: Tokenised, queries: list[list[str]]) -> Ranking:
        q_terms, q_starts = encode_queries(queries, corpus.index)
        return built.indexes[variant].search(q_terms, q_starts, config.top_k, config.threads)

    return rank


def _nothing(k: int) -> Ranker:
    def rank(_variant: str, _corpus: Tokenised, queries: list[list[str]]) -> Ranking:
        return _empty(len(queries), k)

    return rank


def _empty(queries: int, k: int) -> Ranking:
    return Ranking(np.zeros((queries, k), np.int32), np.zeros((queries, k)), np.zeros(queries, np.int32))


def _port(config: CandidatesConfig, ctx: StageContext[CandidatesConfig], doc_ids: pa.Array) -> Ranker:
    """Lucene's BM25 on Elasticsearch, one index per analysis (variants sharing one share its list)."""
    done: dict[str, Ranking] = {}

    def rank(variant: str, corpus: Tokenised, queries: list[list[str]]) -> Ranking:
        from tasks.common.search.elastic.backend import ElasticsearchBackend  # noqa: PLC0415 -- the client

        analysis = VARIANTS[variant][1]
        if analysis not in done:
            name = f"{config.elasticsearch_index}-{analysis}"
            backend = ElasticsearchBackend.from_env(
                name,
                1,
                fingerprint=ctx.fingerprint,
                options=ElasticsearchOptions(analyzer="whitespace", index_type="flat"),
            )
            try:
                done[analysis] = port_candidates(backend, doc_ids, corpus, queries, config.top_k)
            finally:
                backend.drop()
                backend.close()
        return done[analysis]

    return rank


def port_candidates(
    backend: SearchBackend, doc_ids: pa.Array, corpus: Tokenised, queries: Sequence[Sequence[str]], k: int
) -> Ranking:
    """Index ``corpus`` (terms joined by spaces, one passage per doc id) in ``backend`` and take
    its BM25 top ``k`` of each query's terms; rows of ``doc_ids``, the port's scores and ties."""
    texts = document_texts(corpus)
    vector = pa.array([[1.0]] * len(doc_ids), PASSAGE_SCHEMA.field("vector").type)
    for at in range(0, len(doc_ids), 5000):
        part = slice(at, at + 5000)
        batch = pa.RecordBatch.from_arrays(
            [doc_ids[part], doc_ids[part], texts[part].cast(pa.string()), vector[part]], schema=PASSAGE_SCHEMA
        )
        report = backend.add([batch])
        if report.failed:
            raise SearchError(
                f"{backend.name}: {len(report.failed)} documents refused, e.g. {report.failed[0]}"
            )
    backend.finish()
    hits = top_with_ties(backend, [" ".join(q) for q in queries], k)
    row_of = {d: r for r, d in enumerate(doc_ids.to_pylist())}
    out = _empty(len(queries), k)
    for i, found in enumerate(hits):
        out.counts[i] = len(found)
        out.rows[i, : len(found)] = [row_of[h.passage_id] for h in found]
        out.scores[i, : len(found)] = [h.score for h in found]
    return out


def top_with_ties(backend: SearchBackend, texts: Sequence[str], k: int) -> list[list[Hit]]:
    """The port's top ``k`` (score desc, then id) with the cut exact: a server breaks ties at the
    cut its own way, so ask for more until the last hit scores below the ``k``-th (or the
    list ends, or the server's result window, 10,000, is reached). An empty text has no hits."""
    out: list[list[Hit]] = [[] for _ in texts]
    pending, size = [i for i, t in enumerate(texts) if t], min(k + 1, MAX_RESULT_WINDOW)
    while pending:
        again = []
        for i, found in zip(pending, backend.bm25([texts[i] for i in pending], size), strict=True):
            out[i] = found[:k]
            if len(found) == size > k and found[-1].score == found[k - 1].score and size < MAX_RESULT_WINDOW:
                again.append(i)
        pending, size = again, min(size * 4, MAX_RESULT_WINDOW)
    return out


def document_texts(corpus: Tokenised) -> pa.Array:
    """Each document's terms joined by single spaces (what a whitespace analyzer splits back)."""
    words = pa.array(corpus.terms, pa.large_string()).take(pa.array(corpus.tokens))
    lists = pa.LargeListArray.from_arrays(pa.array(corpus.starts, pa.int64()), words)
    return pc.binary_join(lists, pa.scalar(" ", pa.large_string()))


def _relevance(doc_ids: pa.Array, cited: list[set[str]]) -> I64:
    """The (query, doc row) pairs of the qrels, as sorted ``query * documents + row`` keys."""
    row_of = {d: r for r, d in enumerate(doc_ids.to_pylist())}
    n = len(doc_ids)
    keys = [q * n + row_of[p] for q, pmids in enumerate(cited) for p in pmids if p in row_of]
    return np.unique(np.array(keys, dtype=np.int64))


@dataclass(frozen=True)
class _Placed:
    """A ranking's entries in row-major order: query index, rank from 1, doc row, score, relevant."""

    query: I64
    rank: I64
    row: I64
    score: npt.NDArray[np.float64]
    hit: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, ranking: Ranking, documents: int, relevant: I64) -> _Placed:
        counts = ranking.counts.astype(np.int64)
        query = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        first = np.cumsum(counts) - counts
        rank = np.arange(len(query), dtype=np.int64) - np.repeat(first, counts) + 1
        mask = np.arange(ranking.rows.shape[1])[None, :] < counts[:, None]
        row = ranking.rows[mask].astype(np.int64)
        return cls(query, rank, row, ranking.scores[mask], np.isin(query * documents + row, relevant))


def _rows(placed: dict[str, _Placed], query_ids: pa.Array, doc_ids: pa.Array) -> pa.Table:
    """Every variant's entries, ordered by query, then variant (config order), then rank."""
    parts = list(placed.values())
    variant = np.concatenate([np.full(len(p.query), i, dtype=np.int64) for i, p in enumerate(parts)])
    query, rank, row = (np.concatenate([getattr(p, f) for p in parts]) for f in ("query", "rank", "row"))
    order = np.lexsort((rank, variant, query))
    columns = [
        query_ids.take(pa.array(query[order])),
        pa.array(list(placed), pa.string()).take(pa.array(variant[order])),
        doc_ids.take(pa.array(row[order])),
        pa.array(rank[order].astype(np.int32)),
        pa.array(np.concatenate([p.score for p in parts])[order], pa.float64()),
        pa.array(np.concatenate([p.hit for p in parts])[order], pa.bool_()),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def _recall(kept: pa.Table, claims: pa.Table, variants: list[VariantName], ks: list[int]) -> pa.Table:
    """Paper 003 Table 2: per variant and k, the mean over all headlines (the ``claims`` rows,
    found or not) of cited-in-top-k / cited."""
    n = claims.num_rows
    size = np.array([max(1, len(set(p))) for p in claims.column("pmids").to_pylist()], dtype=np.float64)
    query = pc.index_in(kept.column("query_id"), value_set=claims.column("query_id").combine_chunks())
    query_at = query.to_numpy(zero_copy_only=False).astype(np.int64)
    rank = kept.column("rank").to_numpy()
    hit = kept.column("relevant").to_numpy(zero_copy_only=False)
    out: list[dict[str, Any]] = []
    for variant in variants:
        mine = pc.equal(kept.column("variant"), variant).to_numpy(zero_copy_only=False) & hit
        for k in sorted(set(ks)):
            per_query = np.bincount(query_at[mine & (rank <= k)], minlength=n) / size
            recall = float(per_query.mean()) if n else 0.0
            out.append({"variant": variant, "k": k, "recall": recall, "queries": n})
    return rows_to_table(out, RECALL_SCHEMA)


def _expansions(plan: list[Expansion]) -> pa.Table:
    rows = [
        {"abbreviation": e.abbreviation, "count": e.count, "long_form": e.long_form,
         "long_forms": list(e.long_forms), "documents": e.documents}
        for e in plan
    ]  # fmt: skip
    return rows_to_table(rows, EXPANSIONS_SCHEMA)


def _source(ctx: StageContext[CandidatesConfig], _inputs: dict[str, Any]) -> Source:
    """The headlines; on Elasticsearch in one chunk (the corpus indexed on the server once)."""
    headlines = ArtifactSource(ctx.upstream["claims"])
    return headlines if ctx.config.backend == "embedded" else _OneChunk(headlines)


@dataclass(frozen=True)
class _OneChunk:
    source: ArtifactSource

    def num_rows(self) -> int:
        return self.source.num_rows()

    def batches(self, rows: int) -> Iterator[pa.Table]:
        return self.source.batches(max(rows, self.num_rows()))


SPEC: StageSpec[CandidatesConfig] = StageSpec(
    name="candidates",
    version=2,
    description="BM25 top k per headline (rank_bm25's Okapi / BM25+ / BM25+ with preprocessing) and recall@k.",
    config_type=CandidatesConfig,
    upstream=("claims", "distractors"),
    inputs=_inputs,
    source=_source,
    key=("query_id",),
    process=process,
    finalize=finalize,
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    tables={"recall": RECALL_SCHEMA, "expansions": EXPANSIONS_SCHEMA},
)
