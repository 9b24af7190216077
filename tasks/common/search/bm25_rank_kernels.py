"""The numba kernels of :mod:`tasks.common.search.bm25_rank`: exact float64 scores, exact top k.

* :data:`posting_weights`: each posting's term score, rank_bm25's formula for the variant
  (``get_scores`` in https://github.com/dorianbrown/rank_bm25/blob/master/rank_bm25.py) in
  float64, computed once at index time (the eager-index idea of bm25s,
  https://github.com/xhluca/bm25s, ``scoring.py``, in float64 instead of float32).
* :data:`top_k`: a slice of queries. Per query, term at a time over its distinct known terms
  in ascending id order (a repeated token: its weight times its count), ``acc[d] += count *
  weight`` into a dense float64 accumulator per thread. So a document's score is the same
  sum in the same order whatever the batch (and the bits the former MaxScore + rescoring
  search gave). The rows of the first :data:`SAMPLE` are summed first, whole: a histogram of
  their scores guesses the ``k``-th score (the score about ``1.5 k x sample / n`` of them
  reach), a scan keeps those at or above it (:data:`LANES` rows counted at a time); the
  other rows' postings are then added checking each new sum, a row kept when it reaches the
  guess (on its final sum: weights below 0 can take it back under), the accumulator cleared
  by one fill. If fewer than ``k`` reach the guess, the query is summed again and every row
  above 0 kept. A row holding no query term scores 0 (one holding only non-positive-idf
  terms at most 0) and is never kept. Last, a histogram of the
  kept rows' scores finds the ``k``-th's bucket, and only the rows from it up are sorted by
  (score descending, id rank ascending). Every posting of the query is read: the MaxScore
  pruning this replaced read ~40 % of them in full at ``k`` = 500, but its bookkeeping cost more
  (``bench/bench_crossgenre_bm25.py``); so did a list of the rows touched, and summing in
  L2-sized row blocks did not pay; checking each new sum beat a scan of every row after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt

from tasks.common.jit import compiled

__all__ = ["OKAPI", "PLUS", "L", "maxima", "posting_weights", "top_k"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

OKAPI: Final = 0  # variant codes
PLUS: Final = 1
L: Final = 2
BUCKETS: Final = 4096  # the score histogram that finds the k-th score's neighbourhood
LANES: Final = 32  # rows a count of the scan
ABOVE_0: Final = 5e-324  # the least positive float64: ``v >= ABOVE_0`` is ``v > 0``
SAMPLE: Final = 8192  # rows (at least) whose scores guess the k-th score before the scan


def _term_weight_py(variant: int, idf: float, tf: float, norm: float, k1: float, delta: float) -> float:
    """rank_bm25's score of one query term in one document holding it ``tf`` times; ``norm`` is
    ``1 - b + b * dl / avgdl``. BM25+'s ``idf * delta`` (every document's, held or not) is not in it."""
    if variant == OKAPI:
        return idf * (tf * (k1 + 1.0) / (tf + k1 * norm))
    if variant == PLUS:
        return idf * ((tf * (k1 + 1.0)) / (k1 * norm + tf))
    ctd = tf / norm
    return idf * tf * (k1 + 1.0) * (ctd + delta) / (k1 + ctd + delta)


def _maxima_py(indptr: I64, weights: F64) -> F64:
    """Each term's largest posting score, at least 0 (the histogram's scale, :func:`_top_k_py`)."""
    out = np.zeros(indptr.shape[0] - 1, dtype=np.float64)
    for t in range(out.shape[0]):
        for p in range(indptr[t], indptr[t + 1]):
            out[t] = max(out[t], weights[p])
    return out


def _posting_weights_py(
    indptr: I64, docs: I32, tf: I32, idf: F64, norms: F64, k1: float, delta: float, variant: int
) -> F64:
    """:func:`_term_weight_py` of every posting (term ``t``'s are ``indptr[t]:indptr[t + 1]``)."""
    out = np.empty(docs.shape[0], dtype=np.float64)
    for t in range(indptr.shape[0] - 1):
        for p in range(indptr[t], indptr[t + 1]):
            out[p] = _term_weight(variant, idf[t], float(tf[p]), norms[docs[p]], k1, delta)
    return out


def _query_terms_py(query: I32, idf: F64) -> tuple[I64, F64]:
    """(distinct term ids ascending, how many times each); -1, an unknown term, and a term of
    idf 0 (its weights are +0.0: adding them changes no bit) dropped."""
    raw = np.sort(query)
    raw = raw[np.searchsorted(raw, 0) :]
    m = 0
    terms = np.empty(raw.shape[0], dtype=np.int64)
    mult = np.empty(raw.shape[0], dtype=np.float64)
    for i in range(raw.shape[0]):
        if idf[raw[i]] == 0.0:
            continue
        if m > 0 and terms[m - 1] == raw[i]:
            mult[m - 1] += 1.0
        else:
            terms[m] = raw[i]
            mult[m] = 1.0
            m += 1
    return terms[:m], mult[:m]


def _accumulate_py(
    indptr: I64, docs: I32, weights: F64, terms: I64, mult: F64, cursor: I64, hi: int, acc: F64
) -> None:
    """Add ``mult[i] x`` the postings of each of ``terms`` (ascending) of rows below ``hi`` into
    ``acc``: term ``i``'s from ``cursor[i]`` on, moved past them."""
    for i in range(terms.shape[0]):
        t = terms[i]
        c = mult[i]
        start = cursor[i]
        stop = start + np.searchsorted(docs[start : indptr[t + 1]], hi)
        cursor[i] = stop
        for p in range(start, stop):
            acc[docs[p]] += c * weights[p]


def _crossing_py(
    indptr: I64, docs: I32, weights: F64, terms: I64, mult: F64, cursor: I64, floor: float,
    acc: F64, rows: I32, nc: int,
) -> int:  # fmt: skip
    """Add the postings left (term ``i``'s from ``cursor[i]``) into ``acc`` like
    :func:`_accumulate_py`, appending to ``rows`` from ``nc`` each row whose sum reaches
    ``floor`` (again if it fell back below first: weights below 0); the new count (more
    than ``rows`` holds: some were not written)."""
    cap = rows.shape[0]
    for i in range(terms.shape[0]):
        t = terms[i]
        c = mult[i]
        for p in range(cursor[i], indptr[t + 1]):
            d = docs[p]
            v = acc[d]
            w = v + c * weights[p]
            acc[d] = w
            if w >= floor and v < floor:  # rare: the branch predicts well
                if nc < cap:
                    rows[nc] = d
                nc += 1
    return nc


def _reached_py(acc: F64, floor: float, rows: I32, scores: F64, lo: int, hi: int) -> int:
    """Keep, in place from ``lo``, the rows of ``rows[lo:hi]`` still at or above ``floor``, each
    once (its ``acc`` reset when kept), with their ``scores``; the new count."""
    kept = lo
    for j in range(lo, hi):
        d = rows[j]
        v = acc[d]
        if v >= floor:
            rows[kept] = d
            scores[kept] = v
            kept += 1
            acc[d] = 0.0
    return kept


def _guess_py(acc: F64, sample: int, scale: float, hist: I64, want: int) -> float:
    """A score that about ``want`` of the first ``sample`` rows reach (the lower edge of a bucket
    of ``hist``, ``scale`` buckets a unit of score); 0 when fewer rows than that score above 0."""
    last = hist.shape[0] - 1
    hist[:] = 0
    for d in range(sample):
        v = acc[d]
        hist[min(last, int(max(v, 0.0) * scale))] += v > 0.0
    b = last
    total = hist[b]
    while total < want and b > 0:
        b -= 1
        total += hist[b]
    return b / scale if total >= want and scale > 0.0 else 0.0


def _scan_py(acc: F64, floor: float, rows: I32, scores: F64) -> int:
    """Rows scoring at least ``floor`` (> 0) into ``rows``/``scores``, how many; ``acc`` reset to 0.
    Rows are counted :data:`LANES` at a time (a fixed-length loop the compiler vectorises); the
    few groups holding one are read again."""
    n = acc.shape[0]
    whole = n - n % LANES
    nc = 0
    for base in range(0, whole, LANES):
        hits = 0
        for d in range(base, base + LANES):
            hits += acc[d] >= floor
        if hits:
            nc = _take(acc, base, base + LANES, floor, rows, scores, nc)
        for d in range(base, base + LANES):  # while the group is in L1 (a fill afterwards: one more pass)
            acc[d] = 0.0
    nc = _take(acc, whole, n, floor, rows, scores, nc)
    acc[whole:] = 0.0
    return nc


def _take_py(acc: F64, lo: int, hi: int, floor: float, rows: I32, scores: F64, nc: int) -> int:
    """Append rows ``lo:hi`` scoring at least ``floor`` to ``rows``/``scores`` from ``nc``; the new count."""
    for d in range(lo, hi):
        if acc[d] >= floor:
            rows[nc] = d
            scores[nc] = acc[d]
            nc += 1
    return nc


def _near_top_py(rows: I32, scores: F64, nc: int, k: int, hist: I64) -> int:
    """Keep (in place, first) the rows of ``rows[:nc]`` whose score bucket is at or above the
    ``k``-th score's: every row of the top ``k`` and its ties, few more. Returns how many
    (``nc`` if ``nc <= k``)."""
    if nc <= k:
        return nc
    last = hist.shape[0] - 1
    top = 0.0
    for j in range(nc):
        top = max(top, scores[j])
    scale = hist.shape[0] / top
    hist[:] = 0
    for j in range(nc):
        hist[min(last, int(scores[j] * scale))] += 1
    b = last
    total = hist[b]
    while total < k:
        b -= 1
        total += hist[b]
    m = 0
    for j in range(nc):
        rows[m] = rows[j]
        scores[m] = scores[j]
        m += min(last, int(scores[j] * scale)) >= b
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
    max_weight: F64,
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
    rows = np.empty(n, dtype=np.int32)
    scores = np.empty(n, dtype=np.float64)
    hist = np.zeros(BUCKETS, dtype=np.int64)
    sample = min(n, max(SAMPLE, n // 32))
    want = (3 * k * sample + 2 * n - 1) // (2 * n) + 8  # ~1.5 k rows expected at or above the guess
    for q in range(lo, hi):
        terms, mult = _query_terms(q_terms[q_starts[q] : q_starts[q + 1]], idf)
        cursor = np.empty(terms.shape[0], dtype=np.int64)
        bound = 0.0
        for i in range(terms.shape[0]):
            cursor[i] = indptr[terms[i]]
            bound += mult[i] * max_weight[terms[i]]
        _accumulate(indptr, docs, weights, terms, mult, cursor, sample, acc)  # the sample's rows, whole
        floor = max(ABOVE_0, _guess(acc, sample, BUCKETS / bound if bound > 0.0 else 0.0, hist, want))
        nc = _scan(acc[:sample], floor, rows, scores)
        crossed = _crossing(indptr, docs, weights, terms, mult, cursor, floor, acc, rows, nc)
        if crossed <= n:
            nc = _reached(acc, floor, rows, scores, nc, crossed)
        acc[sample:] = 0.0
        if crossed > n or (nc < k and floor > ABOVE_0):  # the guess may have been too high: again,
            for i in range(terms.shape[0]):  # every row above 0
                cursor[i] = indptr[terms[i]]
            _accumulate(indptr, docs, weights, terms, mult, cursor, n, acc)
            nc = _scan(acc, ABOVE_0, rows, scores)
        m = _near_top(rows, scores, nc, k, hist)
        out_counts[q] = _ranked(rows, scores, m, k, id_rank, out_rows[q], out_scores[q])


_term_weight = compiled(_term_weight_py)
_query_terms = compiled(_query_terms_py)
_accumulate = compiled(_accumulate_py)
_guess = compiled(_guess_py)
_take: Callable[..., int] = compiled(_take_py)
_crossing = compiled(_crossing_py)
_reached = compiled(_reached_py)
_scan = compiled(_scan_py)
_near_top = compiled(_near_top_py)
_ranked = compiled(_ranked_py)
posting_weights: Callable[..., F64] = compiled(_posting_weights_py)
"""``posting_weights(indptr, docs, tf, idf, norms, k1, delta, variant)``; see :func:`_posting_weights_py`."""
maxima: Callable[..., F64] = compiled(_maxima_py)
"""``maxima(indptr, weights)``; see :func:`_maxima_py`."""
top_k: Callable[..., None] = compiled(_top_k_py)
"""The kernel: ``top_k(indptr, docs, weights, max_weight, idf, id_rank, q_terms, q_starts, lo, hi, k, out_rows,
out_scores, out_counts)``; see :func:`_top_k_py`."""
