"""Hybrid first-stage retrieval: BM25 and dual-encoder scores combined per query (paper 004 §3.3.4, Algorithm 1).

Paper 004 eq. (3) (§3.3.4; Algorithm 1, line 20): ``sim = λ·⟨q_bm25, a_bm25⟩ + ⟨q_de, a_de⟩``
with λ = 0.5 — BM25 weighted by λ plus the *unweighted* dense cosine, not a convex
combination. Methods, each over every corpus document's two scores for a query:

- ``bm25``, ``dense``: one retriever alone (the baselines of paper 004 §4.5);
- ``weighted``: eq. (3) on the raw scores;
- ``minmax``: eq. (3) on each score min-max scaled to [0, 1] over the corpus for the query
  (a constant score vector scales to 0);
- ``zscore``: eq. (3) on each score standardised over the corpus for the query (mean 0,
  population standard deviation 1; a constant vector gives 0);
- ``rrf``: :func:`tasks.common.search.fusion.rrf` (k = 60) of BM25's ranked matches and the
  dense ranking, each cut at ``rrf_depth``.

BM25 scores are rank_bm25's (:class:`tasks.common.search.bm25_rank.RankBm25`, exact) over
the :class:`tasks.spanish_sr.analysis.Analyzer` terms of the abstracts; a document holding no
query term scores the variant's constant (0 for Okapi). Dense scores are cosines of the
encoder's unit vectors (queries ``kind="query"``, abstracts ``kind="passage"``). Rankings:
score descending, then record id ascending; the top ``top_n`` per query are returned.

At scale (``bench/bench_spanish_sr_retrieval.py``: 175,000 abstracts, 1,000 queries) the
top ``top_n`` is a partial selection equal to the full sort, ties at the cut included, and
BM25 over every document is summed straight from the postings, bit for bit the exact
search's numbers (both: ``tests/spanish_sr/test_fusion_scores.py``). :func:`prepare` and
:func:`run_first_stage` are :func:`first_stage`'s two halves, for timing them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from tasks.common.embed.port import Encoder
from tasks.common.search.bm25_rank import Params, RankBm25, Variant, encode_queries
from tasks.common.search.fusion import DEFAULT_K, rrf
from tasks.common.search.port import Hit
from tasks.spanish_sr.analysis import Analyzer

Method = Literal["bm25", "dense", "weighted", "minmax", "zscore", "rrf"]
METHODS: tuple[Method, ...] = ("bm25", "dense", "weighted", "minmax", "zscore", "rrf")
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]


@dataclass(frozen=True)
class Bm25Params:
    """What the ``bm25`` stage's ``params`` table chose."""

    k1: float
    b: float
    variant: Variant = "okapi"
    language: str = "es"
    fold_accents: bool = False


@dataclass(frozen=True)
class Fusion:
    """How scores are combined: λ (``bm25_weight``), the methods, RRF's k and list depth, top N."""

    methods: tuple[Method, ...] = METHODS
    bm25_weight: float = 0.5
    top_n: int = 100
    rrf_k: int = DEFAULT_K
    rrf_depth: int = 1000
    query_batch: int = 64


def minmax(scores: F64) -> F64:
    """Scores scaled to [0, 1] per row (a constant row becomes 0)."""
    low, high = scores.min(axis=1, keepdims=True), scores.max(axis=1, keepdims=True)
    span = np.where(high > low, high - low, 1.0)
    out: F64 = (scores - low) / span
    return out


def zscore(scores: F64) -> F64:
    """Scores standardised per row (population standard deviation; a constant row becomes 0)."""
    mean, std = scores.mean(axis=1, keepdims=True), scores.std(axis=1, keepdims=True)
    out: F64 = (scores - mean) / np.where(std > 0, std, 1.0)
    return out


def _top(scores: F64, order_ids: I64, n: int) -> I64:
    """Rows of the ``n`` best scores: score descending, then id rank ascending.

    Equal to ``np.lexsort((order_ids, -scores))[:n]``, sorting only the rows that can be in
    it: those scoring above the ``n``-th best score, and of the rows tying with it, the ``n``
    minus that many with the smallest ``order_ids``."""
    key = -scores
    if n < 1:
        return np.zeros(0, dtype=np.int64)
    cut = np.partition(key, n - 1)[n - 1] if n * 8 < len(key) else np.nan
    if np.isnan(cut):  # a short list (the full sort is as quick), or fewer than n numbers
        full: I64 = np.lexsort((order_ids, key))[:n]
        return full
    better, tied = np.flatnonzero(key < cut), np.flatnonzero(key == cut)
    need = n - len(better)
    if len(tied) > need:
        ranks = order_ids[tied]
        tied = tied[ranks <= np.partition(ranks, need - 1)[need - 1]]
    chosen = np.concatenate([better, tied])
    out: I64 = chosen[np.lexsort((order_ids[chosen], key[chosen]))][:n]
    return out


def _fused(method: Method, bm25: F64, dense: F64, fusion: Fusion) -> F64:
    if method == "bm25":
        return bm25
    if method == "dense":
        return dense
    if method == "weighted":
        return fusion.bm25_weight * bm25 + dense
    scale = minmax if method == "minmax" else zscore
    out: F64 = fusion.bm25_weight * scale(bm25[None, :])[0] + scale(dense[None, :])[0]
    return out


def _rrf_rows(
    prepared: Prepared, bm25: F64, matches: int, dense: F64, fusion: Fusion
) -> list[tuple[int, float]]:
    lists: dict[str, list[Hit]] = {}
    ids = prepared.ids
    for name, scores, depth in (
        ("bm25", bm25, min(matches, fusion.rrf_depth)),
        ("dense", dense, fusion.rrf_depth),
    ):
        rows = _top(scores, prepared.id_rank, depth)
        lists[name] = [Hit(rank, ids[r], float(scores[r])) for rank, r in enumerate(rows, start=1)]
    position = prepared.position
    return [(position[h.passage_id], h.score) for h in rrf(lists, k=fusion.rrf_k, top=fusion.top_n)]


@dataclass(frozen=True)
class Prepared:
    """A corpus ready to rank: ids, their tie-break ranks and rows, the analyser, the BM25
    index and the passages' unit vectors (float64)."""

    ids: list[str]
    id_rank: I64
    position: dict[str, int]
    analyzer: Analyzer
    vocabulary: dict[str, int]
    index: RankBm25
    vectors: F64


def encode_corpus(
    analyzer: Analyzer, texts: Sequence[str], chunk: int = 10_000
) -> tuple[dict[str, int], I32, I64]:
    """:func:`~tasks.common.search.bm25_rank.encode_documents` of the analysed ``texts``, the
    same ids (first seen, first numbered), analysed ``chunk`` texts at a time: only a chunk's
    terms are ever held as strings (at 175,000 abstracts, all of them take ~2 GB)."""
    vocabulary: dict[str, int] = {}
    parts, lengths = [], []
    for at in range(0, len(texts), chunk):
        local, tokens, starts = analyzer.encode_documents(texts[at : at + chunk])
        ids = np.array([vocabulary.setdefault(term, len(vocabulary)) for term in local], dtype=np.int32)
        parts.append(ids[tokens])
        lengths.append(np.diff(starts))
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    sizes = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    return vocabulary, flat, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def bm25_index(
    ids: Sequence[str], encoded: tuple[dict[str, int], I32, I64], bm25_params: Bm25Params
) -> tuple[I64, RankBm25]:
    """(each row's id rank, the index) of documents with these ``ids``, analysed and encoded
    by :func:`~tasks.common.search.bm25_rank.encode_documents`."""
    id_rank = np.argsort(np.argsort(np.array(ids, dtype=object), kind="stable"), kind="stable").astype(
        np.int64
    )
    vocabulary, tokens, starts = encoded
    params = Params(variant=bm25_params.variant, k1=bm25_params.k1, b=bm25_params.b)
    return id_rank, RankBm25.build(tokens, starts, len(vocabulary), params, id_rank=id_rank)


def prepare(corpus: Sequence[tuple[str, str]], bm25_params: Bm25Params, encoder: Encoder) -> Prepared:
    """Analyse, index and encode ``(record_id, abstract)`` pairs (at least one)."""
    ids, texts = [rid for rid, _ in corpus], [text for _, text in corpus]
    analyzer = Analyzer(bm25_params.language, bm25_params.fold_accents)
    encoded = encode_corpus(analyzer, texts)
    id_rank, index = bm25_index(ids, encoded, bm25_params)
    vocabulary = encoded[0]
    del encoded
    vectors = encoder.encode(texts, kind="passage").astype(np.float64)
    position = {pid: i for i, pid in enumerate(ids)}
    return Prepared(ids, id_rank, position, analyzer, vocabulary, index, vectors)


def run_first_stage(
    prepared: Prepared, queries: Sequence[tuple[str, str]], encoder: Encoder, fusion: Fusion
) -> list[dict[str, Any]]:
    """:func:`first_stage`'s rows over a prepared corpus (``encoder``: the one that encoded it)."""
    rows: list[dict[str, Any]] = []
    ids, analyzer = prepared.ids, prepared.analyzer
    for at in range(0, len(queries), fusion.query_batch):
        batch = queries[at : at + fusion.query_batch]
        q_terms, q_starts = encode_queries(analyzer.queries([text for _, text in batch]), prepared.vocabulary)
        bm25, matches = prepared.index.all_scores(q_terms, q_starts)
        dense = (
            encoder.encode([text for _, text in batch], kind="query").astype(np.float64) @ prepared.vectors.T
        )
        for q, (query_id, _) in enumerate(batch):
            for method in fusion.methods:
                if method == "rrf":
                    ranked = _rrf_rows(prepared, bm25[q], matches[q], dense[q], fusion)
                else:
                    scores = _fused(method, bm25[q], dense[q], fusion)
                    ranked = [
                        (int(r), float(scores[r])) for r in _top(scores, prepared.id_rank, fusion.top_n)
                    ]
                rows += [
                    {
                        "query_id": query_id,
                        "method": method,
                        "rank": rank,
                        "record_id": ids[r],
                        "score": score,
                    }
                    | {"bm25_score": float(bm25[q, r]), "dense_score": float(dense[q, r])}
                    for rank, (r, score) in enumerate(ranked, start=1)
                ]
    return rows


def first_stage(
    queries: Sequence[tuple[str, str]],
    corpus: Sequence[tuple[str, str]],
    bm25_params: Bm25Params,
    encoder: Encoder,
    fusion: Fusion,
) -> list[dict[str, Any]]:
    """Ranked rows ``{query_id, method, rank, record_id, score, bm25_score, dense_score}``:
    the top ``fusion.top_n`` of each ``(query_id, text)`` over ``(record_id, abstract)`` per method."""
    if not corpus:
        return []
    return run_first_stage(prepare(corpus, bm25_params, encoder), queries, encoder, fusion)
