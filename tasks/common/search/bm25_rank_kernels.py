"""The numba kernels of :mod:`tasks.common.search.bm25_rank`: exact float64 scores, exact top k.

* :data:`posting_weights`: each posting's term score, rank_bm25's formula for the variant
  (``get_scores`` in https://github.com/dorianbrown/rank_bm25/blob/master/rank_bm25.py) in
  float64, computed once at index time (the eager-index idea of bm25s,
  https://github.com/xhluca/bm25s, ``scoring.py``, in float64 instead of float32).
* :data:`top_k`: a slice of queries. Per query, term at a time over its distinct known terms
  in ascending id order (a repeated token: its weight times its count), ``acc[d] += count *
  weight`` into a dense float64 accumulator per thread, the rows touched kept in a list
  (reset through it, not by clearing all rows). So a document's score is the same sum in
  the same order whatever the batch. Then the rows scoring above 0 (a row holding no query
  term scores 0; one holding only non-positive-idf terms at most 0), a histogram of their
  scores to find the bucket of the ``k``-th, and only the rows from that bucket up sorted by
  (score descending, id rank ascending). Every posting of the query is read: measured
  faster here than MaxScore pruning, whose bookkeeping cost more than the postings it
  skipped at ``k`` = 500 (``bench/bench_crossgenre_bm25.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt

from tasks.common.jit import compiled

__all__ = ["OKAPI", "PLUS", "L", "posting_weights", "top_k"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

OKAPI: Final = 0  # variant codes
PLUS: Final = 1
L: Final = 2
BUCKETS: Final = 4096  # the score histogram that finds the k-th score's neighbourhood


def _term_weight_py(variant: int, idf: float, tf: float, norm: float, k1: float, delta: float) -> float:
    """rank_bm25's score of one query term in one document holding it ``tf`` times; ``norm`` is
    ``1 - b + b * dl / avgdl``. BM25+'s ``idf * delta`` (every document's, held or not) is not in it."""
    if variant == OKAPI:
        return idf * (tf * (k1 + 1.0) / (tf + k1 * norm))
    if variant == PLUS:
        return idf * ((tf * (k1 + 1.0)) / (k1 * norm + tf))
    ctd = tf / norm
    return idf * tf * (k1 + 1.0) * (ctd + delta) / (k1 + ctd + delta)


def _posting_weights_py(
    indptr: I64, docs: I32, tf: I32, idf: F64, norms: F64, k1: float, delta: float, variant: int
) -> F64:
    """:func:`_term_weight_py` of every posting (term ``t``'s are ``indptr[t]:indptr[t + 1]``)."""
    out = np.empty(docs.shape[0], dtype=np.float64)
    for t in range(indptr.shape[0] - 1):
        for p in range(indptr[t], indptr[t + 1]):
            out[p] = _term_weight(variant, idf[t], float(tf[p]), norms[docs[p]], k1, delta)
    return out


def _query_terms_py(query: I32) -> tuple[I64, F64]:
    """(distinct term ids ascending, how many times each); -1, an unknown term, dropped."""
    raw = np.sort(query)
    raw = raw[np.searchsorted(raw, 0) :]
    m = 0
    terms = np.empty(raw.shape[0], dtype=np.int64)
    mult = np.empty(raw.shape[0], dtype=np.float64)
    for i in range(raw.shape[0]):
        if m > 0 and terms[m - 1] == raw[i]:
            mult[m - 1] += 1.0
        else:
            terms[m] = raw[i]
            mult[m] = 1.0
            m += 1
    return terms[:m], mult[:m]


def _accumulate_py(
    indptr: I64, docs: I32, weights: F64, idf: F64, terms: I64, mult: F64, acc: F64, touched: I32
) -> int:
    """Add the query's postings into ``acc``; ``touched[:returned]``: the rows first seen (a row
    whose sum came back to exactly 0 may be listed twice: ``touched`` holds every posting)."""
    nt = 0
    for i in range(terms.shape[0]):
        t = terms[i]
        if idf[t] == 0.0:  # its weights are +0.0: adding them changes no bit
            continue
        c = mult[i]
        for p in range(indptr[t], indptr[t + 1]):
            d = docs[p]
            v = acc[d]
            touched[nt] = d  # kept when first seen: branch-free (the branch mispredicts)
            nt += v == 0.0
            acc[d] = v + c * weights[p]
    return nt


def _collect_py(acc: F64, touched: I32, nt: int, rows: I32, scores: F64) -> tuple[int, float]:
    """Rows of ``touched[:nt]`` scoring above 0 into ``rows``/``scores`` (each once: ``acc`` is
    reset on the way), their count and the best score."""
    nc = 0
    top = 0.0
    for j in range(nt):
        d = touched[j]
        v = acc[d]
        rows[nc] = d
        scores[nc] = v
        nc += v > 0.0
        top = max(top, v)
        acc[d] = 0.0
    return nc, top


def _near_top_py(rows: I32, scores: F64, nc: int, top: float, k: int, hist: I64) -> int:
    """Keep (in place, first) the rows whose score bucket is at or above the ``k``-th score's:
    every row of the top ``k`` and its ties, few more. Returns how many (``nc`` if ``nc <= k``)."""
    if nc <= k:
        return nc
    nb = hist.shape[0]
    scale = nb / top
    hist[:] = 0
    for j in range(nc):
        hist[min(nb - 1, int(scores[j] * scale))] += 1
    b = nb - 1
    total = hist[b]
    while total < k:
        b -= 1
        total += hist[b]
    m = 0
    for j in range(nc):
        rows[m] = rows[j]
        scores[m] = scores[j]
        m += min(nb - 1, int(scores[j] * scale)) >= b
    return m


def _ranked_py(rows: I32, scores: F64, m: int, k: int, id_rank: I64, out_rows: I32, out_scores: F64) -> int:
    """The best ``min(k, m)`` of ``rows[:m]`` by (score descending, id rank ascending) into ``out_*``."""
    order = np.argsort(-scores[:m])
    kept = min(k, m)
    j = 0
    while j < kept:  # runs of equal scores: by id rank
        e = j + 1
        while e < m and scores[order[e]] == scores[order[j]]:
            e += 1
        if e - j > 1:
            run = order[j:e].copy()
            ranks = np.empty(e - j, dtype=np.int64)
            for u in range(e - j):
                ranks[u] = id_rank[rows[run[u]]]
            by_rank = np.argsort(ranks)
            for u in range(e - j):
                order[j + u] = run[by_rank[u]]
        j = e
    for j in range(kept):
        out_rows[j] = rows[order[j]]
        out_scores[j] = scores[order[j]]
    return kept


def _top_k_py(
    indptr: I64,
    docs: I32,
    weights: F64,
    idf: F64,
    id_rank: I64,
    q_terms: I32,
    q_starts: I64,
    lo: int,
    hi: int,
    k: int,
    out_rows: I32,
    out_scores: F64,
    out_counts: I32,
) -> None:
    """Queries ``lo:hi``: the exact top ``k`` (above 0) of each into ``out_*[q]`` (module docstring)."""
    n = id_rank.shape[0]
    acc = np.zeros(n, dtype=np.float64)
    touched = np.empty(n + 1, dtype=np.int32)  # one spare: written before the count says so
    rows = np.empty(n + 1, dtype=np.int32)
    scores = np.empty(n + 1, dtype=np.float64)
    hist = np.zeros(BUCKETS, dtype=np.int64)
    for q in range(lo, hi):
        terms, mult = _query_terms(q_terms[q_starts[q] : q_starts[q + 1]])
        postings = 0
        for i in range(terms.shape[0]):
            postings += indptr[terms[i] + 1] - indptr[terms[i]]
        if postings >= touched.shape[0]:  # rows listed twice (``_accumulate_py``) could overflow
            touched = np.empty(postings + 1, dtype=np.int32)
        nt = _accumulate(indptr, docs, weights, idf, terms, mult, acc, touched)
        nc, top = _collect(acc, touched, nt, rows, scores)
        m = _near_top(rows, scores, nc, top, k, hist)
        out_counts[q] = _ranked(rows, scores, m, k, id_rank, out_rows[q], out_scores[q])


_term_weight = compiled(_term_weight_py)
_query_terms = compiled(_query_terms_py)
_accumulate = compiled(_accumulate_py)
_collect = compiled(_collect_py)
_near_top = compiled(_near_top_py)
_ranked = compiled(_ranked_py)
posting_weights: Callable[..., F64] = compiled(_posting_weights_py)
"""``posting_weights(indptr, docs, tf, idf, norms, k1, delta, variant)``; see :func:`_posting_weights_py`."""
top_k: Callable[..., None] = compiled(_top_k_py)
"""The kernel: ``top_k(indptr, docs, weights, idf, id_rank, q_terms, q_starts, lo, hi, k, out_rows,
out_scores, out_counts)``; see :func:`_top_k_py`."""
