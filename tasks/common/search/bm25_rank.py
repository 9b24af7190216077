"""rank_bm25's BM25 variants, exact, over pre-tokenised documents, on numba kernels.

rank_bm25 (https://github.com/dorianbrown/rank_bm25, ``rank_bm25.py``; the tool of paper 003
§3.1) scores every document in Python for every query. :class:`RankBm25` gives the same
scores (float64; measured within 1e-12 of ``get_scores``, tested to 1e-6) and the same
ranking, fast (``bench/bench_crossgenre_bm25.py``, 222,000 abstracts x 5,034 headlines, top
500: ~2,400x rank_bm25; bm25s' seconds / ours 1.75x on 1 thread, 2.1x on 2, interleaved):

* **Formulas** (``k1``, ``b``, ``norm = 1 - b + b * dl / avgdl``, ``dl`` = tokens of the
  document, ``avgdl`` their mean; a repeated query token counts again; a token the corpus
  lacks adds nothing):
  ``okapi`` (BM25Okapi): ``idf = ln(N - df + 0.5) - ln(df + 0.5)``, a negative idf replaced
  by ``epsilon`` x the mean idf of the vocabulary; ``idf * tf (k1 + 1) / (tf + k1 norm)``.
  ``plus`` (BM25Plus): ``idf = ln((N + 1) / df)``; ``idf * (delta + tf (k1 + 1) / (k1 norm + tf))``
  for *every* document, holding the term or not. ``l`` (BM25L, as rank_bm25 writes it, with
  its ``tf`` factor): ``idf = ln(N + 1) - ln(df + 0.5)``, ``ctd = tf / norm``,
  ``idf tf (k1 + 1) (ctd + delta) / (k1 + ctd + delta)``.
* **Search** (:data:`~tasks.common.search.bm25_rank_kernels.top_k`): each posting holds its
  term's score there (float64, computed once by the build); a query sums its terms'
  postings into a dense accumulator per thread, in ascending term id order, and keeps the
  exact top ``k`` by (score descending, then id rank ascending). Queries run in slices, one
  kernel call per thread at a time (numba frees the GIL). bm25s sums precomputed float32
  scores the same way, then offers every row to a heap; this tests the rows, 32 at a time,
  against a floor guessed from a sample (:mod:`tasks.common.search.bm25_rank_kernels`).
* BM25+'s per-term ``idf * delta`` is the same for every document of a query: it is added
  to the reported scores (so they equal rank_bm25's), not to the kernel's weights. So in
  rank_bm25, ``delta`` never changes the order (bm25s adds it only for held terms).
* **Candidates**: only documents holding at least one query term with a positive idf, and
  scoring above what a document holding none scores (0, or BM25+'s constant). rank_bm25's
  ``get_top_n`` would pad a short list with such documents in arbitrary order; this does not.

Memory: 12 bytes a posting (row, float64 score), 16 bytes a document (norm, id rank), and
per search thread 20 bytes a document (accumulator, kept rows and their scores).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from tasks.common.search import bm25_rank_kernels as rk
from tasks.common.search.bm25_kernels import term_postings

__all__ = ["Params", "RankBm25", "Ranking", "Variant", "encode_documents", "encode_queries"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

Variant = Literal["okapi", "plus", "l"]
_CODES: Mapping[str, int] = {"okapi": rk.OKAPI, "plus": rk.PLUS, "l": rk.L}
_DELTA: Mapping[str, float] = {"okapi": 0.0, "plus": 1.0, "l": 0.5}  # rank_bm25's defaults
SLICE = 128  # queries a kernel call: small enough to balance the threads, large enough to pay its setup


@dataclass(frozen=True)
class Params:
    """A rank_bm25 variant and its parameters (defaults: rank_bm25's)."""

    variant: Variant = "plus"
    k1: float = 1.5
    b: float = 0.75
    delta: float | None = None  # None: rank_bm25's default for the variant (plus 1, l 0.5)
    epsilon: float = 0.25  # okapi: the floor of a negative idf, times the mean idf

    @property
    def delta_value(self) -> float:
        return _DELTA[self.variant] if self.delta is None else self.delta


@dataclass(frozen=True)
class Ranking:
    """Each query's ranked rows: ``rows[q, :counts[q]]`` with their ``scores`` (rank_bm25's)."""

    rows: I32  # [queries, k]
    scores: F64  # [queries, k]
    counts: I32  # [queries]


@dataclass(frozen=True)
class RankBm25:
    """An index of term-id documents scored with one rank_bm25 variant; see the module docstring."""

    params: Params
    indptr: I64  # [terms + 1]: term t's postings are indptr[t]:indptr[t + 1]
    docs: I32  # the row of each posting, ascending within a term
    weights: F64  # the term's score in that row (rank_bm25's, without BM25+'s idf * delta)
    max_weight: F64  # [terms]: the largest of each term's weights, at least 0
    idf: F64  # [terms]: rank_bm25's idf (okapi: floored); 0 for a term no document holds
    norms: F64  # [documents]: 1 - b + b * dl / avgdl
    id_rank: I64  # [documents]: the tie-break rank of each row

    @classmethod
    def build(
        cls, tokens: I32, starts: I64, terms: int, params: Params, id_rank: I64 | None = None
    ) -> RankBm25:
        """Index documents ``tokens[starts[r]:starts[r + 1]]`` (term ids below ``terms``); ties
        rank by ``id_rank`` ascending (default: the row)."""
        n = len(starts) - 1
        if n < 1:
            raise ValueError("rank_bm25 needs at least one document")
        indptr, docs, tf = term_postings(
            np.ascontiguousarray(tokens, dtype=np.int32), starts.astype(np.int64), np.ones(terms, np.bool_)
        )
        df = np.diff(indptr)
        lengths = np.diff(starts).astype(np.float64)
        average = float(lengths.sum()) / n or 1.0  # no tokens at all: no document is ever scored
        norms = 1.0 - params.b + params.b * lengths / average
        idf = _idf(params, df, n)
        weights = rk.posting_weights(
            indptr, docs, tf, idf, norms, params.k1, params.delta_value, _CODES[params.variant]
        )
        ranks = np.arange(n, dtype=np.int64) if id_rank is None else np.asarray(id_rank, dtype=np.int64)
        return cls(params, indptr, docs, weights, rk.maxima(indptr, weights), idf, norms, ranks)

    @property
    def documents(self) -> int:
        return len(self.norms)

    def constant(self, q_terms: I32, q_starts: I64) -> F64:
        """Per query, what every document scores for it (BM25+'s ``idf * delta`` summed; else 0).

        Each query's tokens are summed on their own, in order, so a query scores the same bits
        in any batch of queries (a running sum over the batch would not)."""
        per_token = np.zeros(len(q_terms), dtype=np.float64)
        if self.params.variant == "plus":
            known = q_terms >= 0
            per_token[known] = self.idf[q_terms[known]] * self.params.delta_value
        queries = len(q_starts) - 1
        owner = np.repeat(np.arange(queries), np.diff(q_starts))
        out: F64 = np.bincount(owner, weights=per_token, minlength=queries).astype(np.float64)
        return out

    def all_scores(self, q_terms: I32, q_starts: I64) -> tuple[F64, list[int]]:
        """Every document's exact score per query (``[query, document]``) and how many documents
        match each query: the numbers of ``search(q_terms, q_starts, self.documents)``, computed
        straight from the postings with the exact rescoring's per-term formula (the distinct
        known terms in ascending id order, each times its multiplicity, summed from 0), without
        ranking. A document matches when it holds a positive-idf query term and scores above 0;
        the others score :meth:`constant`, which a match's score includes too."""
        n = self.documents
        constant = self.constant(q_terms, q_starts)
        full = np.repeat(constant[:, None], n, axis=1)
        indptr, docs, weights = self.indptr, self.docs, self.weights
        matches = []
        for q in range(len(q_starts) - 1):
            query = q_terms[q_starts[q] : q_starts[q + 1]]
            terms, counts = np.unique(query[query >= 0], return_counts=True)
            acc = np.zeros(n, dtype=np.float64)
            held = np.zeros(n, dtype=np.bool_)
            for t, mult in zip(terms.tolist(), counts.astype(np.float64).tolist(), strict=True):
                rows = docs[indptr[t] : indptr[t + 1]]
                acc[rows] += mult * weights[indptr[t] : indptr[t + 1]]
                held[rows] |= bool(self.idf[t] > 0)
            keep = held & (acc > 0.0)
            full[q, keep] = acc[keep] + constant[q]
            matches.append(int(np.count_nonzero(keep)))
        return full, matches

    def search(self, q_terms: I32, q_starts: I64, k: int, threads: int | None = None) -> Ranking:
        """The exact top ``k`` of each query ``q_terms[q_starts[q]:q_starts[q + 1]]`` (-1: unknown)."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        q_terms = np.ascontiguousarray(q_terms, dtype=np.int32)
        q_starts = np.ascontiguousarray(q_starts, dtype=np.int64)
        if len(q_terms) and int(q_terms.max()) >= len(self.idf):
            raise ValueError("query term ids out of range")
        count, n, threads = len(q_starts) - 1, self.documents, threads or os.cpu_count() or 1
        k = min(k, n)
        out = Ranking(
            np.zeros((count, k), np.int32), np.zeros((count, k), np.float64), np.zeros(count, np.int32)
        )

        def run(lo: int, hi: int) -> None:
            rk.top_k(self.indptr, self.docs, self.weights, self.max_weight, self.idf, self.id_rank, q_terms, q_starts,
                     lo, hi, k, out.rows, out.scores, out.counts)  # fmt: skip

        _in_slices(count, threads, run)
        out.scores[:] += self.constant(q_terms, q_starts)[:, None]
        out.scores[np.arange(k)[None, :] >= out.counts[:, None]] = 0.0
        return out


def _idf(params: Params, df: I64, n: int) -> F64:
    """rank_bm25's idf of each term (``_calc_idf``); 0 for a term no document holds."""
    held = df > 0
    f = df[held].astype(np.float64)
    idf = np.zeros(len(df), dtype=np.float64)
    if params.variant == "okapi":
        raw = np.log(n - f + 0.5) - np.log(f + 0.5)
        floor = params.epsilon * (float(raw.sum()) / len(raw)) if len(raw) else 0.0
        idf[held] = np.where(raw < 0, floor, raw)
    elif params.variant == "plus":
        idf[held] = np.log((n + 1) / f)
    else:
        idf[held] = math.log(n + 1) - np.log(f + 0.5)
    return idf


def _in_slices(count: int, threads: int, run: Callable[[int, int], None]) -> None:
    """``run(lo, hi)`` over slices of ``range(count)`` of at most :data:`SLICE` queries, on
    ``threads`` threads taking the next slice when done (numba frees the GIL)."""
    cuts = [*range(0, count, SLICE), count]
    if threads == 1 or len(cuts) <= 2:
        run(0, count)
        return
    with ThreadPoolExecutor(min(threads, len(cuts) - 1)) as pool:
        list(pool.map(run, cuts[:-1], cuts[1:]))


def encode_documents(documents: Sequence[Sequence[str]]) -> tuple[dict[str, int], I32, I64]:
    """Token lists as (term -> id, token ids back to back, starts), ids in first-seen order."""
    vocabulary: dict[str, int] = {}
    flat = [vocabulary.setdefault(t, len(vocabulary)) for doc in documents for t in doc]
    starts = np.concatenate([[0], np.cumsum([len(d) for d in documents])]).astype(np.int64)
    return vocabulary, np.array(flat, dtype=np.int32), starts


def encode_queries(queries: Sequence[Sequence[str]], vocabulary: Mapping[str, int]) -> tuple[I32, I64]:
    """Query token lists as term ids of ``vocabulary`` (-1: a token no document has), and starts."""
    flat = [vocabulary.get(t, -1) for q in queries for t in q]
    starts = np.concatenate([[0], np.cumsum([len(q) for q in queries])]).astype(np.int64)
    return np.array(flat, dtype=np.int32), starts
