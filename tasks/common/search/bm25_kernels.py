"""tantivy's BM25, scored eagerly: a term -> passage matrix of precomputed weights, numba kernels.

:meth:`tasks.common.search.embedded.backend.EmbeddedBackend.bm25` promises tantivy's BM25 (a ``should``
of one term query per analysed token). tantivy scores it lazily, posting by posting, and
its union does not skip non-competitive passages; this module scores the same sum from a
matrix built once per index state (the bm25s idea), with dynamic pruning:

* :meth:`Bm25Matrix.build`: from the token store's forward index (term ids per passage,
  BM25 lengths), one posting per (term, passage): the passage (int32, ascending within a
  term) and the term's whole BM25 contribution there (float32), computed with tantivy's
  formula and float32 operations in tantivy's order: ``idf = ln(1 + (N - df + 0.5) / (df
  + 0.5))``, ``weight = idf * (1 + k1)``, ``norm = k1 * (1 - b + b * dl / avgdl)`` with
  ``dl`` the passage's length *quantised* to tantivy's one-byte field norm
  (:data:`FIELD_NORMS`) and ``avgdl`` the exact mean length, then ``weight * (tf / (tf +
  norm))``. So a posting's weight is tantivy's term score for that passage (at most an
  ulp or two apart, from ``ln``). Two O(tokens) passes in numba, then float32 numpy.
* :func:`search`: per query, its distinct terms (a repeated token counts again, as a
  repeated ``should`` clause does) by decreasing upper bound (count x the term's largest
  weight). Term at a time into a float64 accumulator per passage; once the upper bounds of
  the terms left sum to less than the current k-th best partial score, no passage not yet
  seen can enter the top k (MaxScore's rule), and the remaining terms only update the
  candidates still able to reach it, refiltered after each term. A remaining term is
  looked up per candidate in its dense row (terms in 1 / :data:`DENSE` of the passages or
  more also get one: one load a candidate), else read through when it has fewer than 8
  postings a candidate, else merged with the candidates by galloping. Every
  passage's terms are added in the same order, so passages with the same statistics tie
  exactly; the score reported is the float64 sum rounded to float32 (tantivy sums in
  float32: the two differ by a few ulps). The top k is taken by (float32 score
  descending, passage-id rank ascending): the port's tie rule, applied exactly. Pruning
  margins (a relative 1e-6, 16 float32 ulps) keep every passage whose float32 score could
  tie with the k-th.

Measured (``bench/bench_search.py``, 200,000 passages, 2,000 queries of 7.6 words, 2
CPUs): a query reads ~14,000 postings before the switch (its summed document frequencies
are ~386,000: stop words) and ~5,000 candidates remain; scoring every posting instead is
~5x slower. Limit: a weight is positive only while ``1 + idf``'s argument is above float32
rounding, i.e. for a term in every passage up to ~8 million passages; beyond, tantivy
scores such a term 0 and returns the passages it alone matches, which this kernel does not.
Memory: 8 bytes a posting plus 4 bytes a passage per dense term (~210 MB at 200,000
passages of 117 words).

Kernels are compiled by :func:`tasks.common.jit.compiled` (numba, cached, GIL released): the
matrix's here, the per-query ones in :mod:`tasks.common.search.bm25_maxscore`. :func:`search`
runs one kernel call per thread on contiguous slices of the batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from tasks.common.jit import compiled
from tasks.common.search.bm25_maxscore import maxscore

__all__ = ["FIELD_NORMS", "Bm25Matrix", "fieldnorm_ids", "search", "term_postings"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
B1 = npt.NDArray[np.bool_]

K1: Final = np.float32(1.2)  # tantivy's BM25 parameters, as float32 (tantivy's Score type)
B: Final = np.float32(0.75)
DENSE = 8  # terms in at least 1 / DENSE of the passages also get a dense row of weights


def _field_norm_table() -> npt.NDArray[np.uint32]:
    """tantivy's (and Lucene's) one-byte length code: the length each of the 256 codes stands for.

    Codes below 24 are exact; above, a 3-bit mantissa with an implicit leading bit and a
    5-bit exponent, offset by 24.
    """
    table = np.zeros(256, dtype=np.uint32)
    for code in range(256):
        if code < 24:
            table[code] = code
            continue
        rest = code - 24
        mantissa, shift = rest & 7, rest >> 3
        table[code] = 24 + (mantissa if shift == 0 else (mantissa | 8) << (shift - 1))
    return table


FIELD_NORMS: Final = _field_norm_table()


def fieldnorm_ids(lengths: npt.NDArray[np.integer[Any]]) -> U8:
    """Each length's field-norm code: the largest code whose length does not exceed it."""
    codes = np.searchsorted(FIELD_NORMS, np.asarray(lengths, dtype=np.int64), side="right") - 1
    return codes.astype(np.uint8)


# ----------------------------------------------------------------------------- kernels


def _postings_py(tokens: I32, starts: I64, indexed: B1) -> tuple[I64, I32, I32]:
    """CSR by term of the forward index: (indptr, passage of each posting, term frequency).

    Branch-free inner loops (whether a token is its term's first in the passage is
    unpredictable): a repeat rewrites its posting's passage and bumps its frequency."""
    n_terms = indexed.shape[0]
    n = starts.shape[0] - 1
    counts = np.zeros(n_terms + 1, dtype=np.int64)
    last = np.full(n_terms, -1, dtype=np.int64)
    for d in range(n):
        for p in range(starts[d], starts[d + 1]):
            t = tokens[p]
            counts[t + 1] += last[t] != d
            last[t] = d
    for t in range(n_terms):
        if not indexed[t]:
            counts[t + 1] = 0
    indptr = np.cumsum(counts)
    fill = indptr[:-1].copy()
    slot = np.zeros(n_terms, dtype=np.int64)
    docs = np.empty(indptr[-1] + 1, dtype=np.int32)  # one spare: where unindexed terms write
    tf = np.zeros(indptr[-1] + 1, dtype=np.int32)
    spare = indptr[-1]
    last[:] = -1
    for d in range(n):
        for p in range(starts[d], starts[d + 1]):
            t = tokens[p]
            first = last[t] != d
            s = fill[t] if first else slot[t]
            s = s if indexed[t] else spare
            fill[t] += first
            slot[t] = s
            docs[s] = d
            tf[s] += 1
            last[t] = d
    return indptr, docs[:-1], tf[:-1]


def _max_weights_py(indptr: I64, weights: F32) -> F64:
    out = np.zeros(indptr.shape[0] - 1, dtype=np.float64)
    for t in range(out.shape[0]):
        best = 0.0
        for p in range(indptr[t], indptr[t + 1]):
            best = max(best, weights[p])
        out[t] = best
    return out


_postings: Callable[[I32, I64, B1], tuple[I64, I32, I32]] = compiled(_postings_py)
term_postings = _postings
"""``term_postings(tokens, starts, indexed)``: (indptr, passage, term frequency) by term, from a forward index."""
_max_weights: Callable[[I64, F32], F64] = compiled(_max_weights_py)


# ----------------------------------------------------------------------------- the matrix


@dataclass(frozen=True)
class Bm25Matrix:
    """tantivy's BM25 term scores of an index state, by term: postings ``indptr[t]:indptr[t + 1]``."""

    indptr: I64  # [terms + 1]
    docs: I32  # passage row of each posting, ascending within a term
    weights: F32  # the term's BM25 score in that passage
    max_weight: F64  # [terms]: each term's largest weight (0 without postings)
    dense_slot: I32  # [terms]: row of ``dense`` holding the term's weights by passage, or -1
    dense: F32  # [frequent terms, passages]: weights of the terms in 1 / DENSE of the passages or more

    @classmethod
    def build(cls, tokens: I32, starts: I64, lengths: I32, indexed: B1) -> Bm25Matrix:
        """From the forward index: token ids per passage (``tokens[starts[r]:starts[r + 1]]``),
        BM25 lengths, and which term ids tantivy indexes (not the ones of 40+ bytes)."""
        n = len(lengths)
        indptr, docs, tf = _postings(np.ascontiguousarray(tokens), starts, indexed)
        df = np.diff(indptr)
        # tantivy's float32 arithmetic, in its order (tasks/common/search/bm25_kernels module docstring)
        total = np.float32(int(lengths.sum(dtype=np.int64)))
        average = total / np.float32(max(n, 1))
        with np.errstate(divide="ignore", invalid="ignore"):  # no tokens at all: no postings either
            norms = K1 * ((np.float32(1) - B) + (B * FIELD_NORMS.astype(np.float32)) / average)
        x = ((n - df).astype(np.float32) + np.float32(0.5)) / (df.astype(np.float32) + np.float32(0.5))
        weight = np.log(np.float32(1) + x) * (np.float32(1) + K1)
        freq = tf.astype(np.float32)
        norm = norms[fieldnorm_ids(lengths)][docs]
        weights: F32 = (np.repeat(weight.astype(np.float32), df) * (freq / (freq + norm))).astype(
            np.float32, copy=False
        )
        return cls.from_postings(indptr, docs, weights, n)

    @classmethod
    def from_postings(cls, indptr: I64, docs: I32, weights: F32, n: int) -> Bm25Matrix:
        """From postings of any positive per-term weights (``n`` passages): the upper bounds and
        dense rows :func:`search` prunes with."""
        df = np.diff(indptr)
        frequent = np.flatnonzero(df * DENSE >= max(n, 1))
        dense_slot = np.full(len(df), -1, dtype=np.int32)
        dense_slot[frequent] = np.arange(len(frequent), dtype=np.int32)
        dense = np.zeros((len(frequent), n), dtype=np.float32)
        for row, t in enumerate(frequent.tolist()):
            dense[row, docs[indptr[t] : indptr[t + 1]]] = weights[indptr[t] : indptr[t + 1]]
        return cls(indptr, docs, weights, _max_weights(indptr, weights), dense_slot, dense)

    @property
    def terms(self) -> int:
        return len(self.indptr) - 1


def search(
    matrix: Bm25Matrix, terms: I32, starts: I64, k: int, id_rank: I64, by_rank: I64, threads: int
) -> tuple[I32, F32, I32]:
    """Top ``k`` of each query: query ``q``'s term ids are ``terms[starts[q]:starts[q + 1]]``
    (a repeated id counts again; -1, an unknown term, is skipped).

    Returns (rows [q, min(k, n)], float32 scores, hits per query [q]), ranked by score
    descending, then ``id_rank`` ascending (``by_rank``: the row of each id rank).
    ``threads`` kernel calls at once, on contiguous slices of the queries.
    """
    count = len(starts) - 1
    n = len(id_rank)
    kk = max(1, min(k, n))
    out_rows = np.zeros((count, kk), dtype=np.int32)
    out_scores = np.zeros((count, kk), dtype=np.float32)
    out_counts = np.zeros(count, dtype=np.int32)
    if n == 0 or count == 0:
        return out_rows, out_scores, out_counts
    if len(terms) and int(terms.max()) >= matrix.terms:
        raise ValueError("query term ids out of range")

    def run(lo: int, hi: int) -> None:
        maxscore(
            matrix.indptr,
            matrix.docs,
            matrix.weights,
            matrix.max_weight,
            matrix.dense_slot,
            matrix.dense,
            id_rank,
            by_rank,
            terms,
            starts,
            lo,
            hi,
            kk,
            out_rows,
            out_scores,
            out_counts,
        )

    parts = max(1, min(threads, count // 8))
    if parts == 1:
        run(0, count)
    else:
        step = math.ceil(count / parts)
        bounds = list(range(0, count, step))
        with ThreadPoolExecutor(len(bounds)) as pool:
            list(pool.map(run, bounds, [min(count, a + step) for a in bounds]))
    return out_rows, out_scores, out_counts
