"""The numba kernels of :mod:`tasks.common.search.bm25_rank`: exact float64 rescoring of candidates.

One call of :data:`rescore` takes a slice of queries with the candidate rows the MaxScore
kernel (:func:`tasks.common.search.bm25_kernels.search`) returned for each, finds each
query term's frequency in each candidate (candidates in row order, a galloping search
forward through the term's postings, which are in row order too), scores it with
rank_bm25's formula for the variant (``get_scores`` in
https://github.com/dorianbrown/rank_bm25/blob/master/rank_bm25.py) in float64, and sorts
the candidates by (score descending, id rank ascending). It also says whether the top
``k`` is proven: see :func:`_rescore_py`. Query terms are taken apart by the MaxScore
kernel's own ``_query_terms`` (``tasks/common/search/bm25_maxscore.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt

from tasks.common.jit import compiled
from tasks.common.search.bm25_maxscore import _query_terms  # (distinct terms, multiplicities, ...)

__all__ = ["OKAPI", "PLUS", "L", "rescore"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
B1 = npt.NDArray[np.bool_]

OKAPI: Final = 0  # variant codes
PLUS: Final = 1
L: Final = 2
BOUND: Final = 1.0 + 1e-6  # float32 weights and a float32 sum are within 2 ulps (1.2e-7) of the exact


def _term_weight_py(variant: int, idf: float, tf: float, norm: float, k1: float, delta: float) -> float:
    """rank_bm25's score of one query term in one document holding it ``tf`` times; ``norm`` is
    ``1 - b + b * dl / avgdl``. BM25+'s ``idf * delta`` (every document's, held or not) is not in it."""
    if variant == OKAPI:
        return idf * (tf * (k1 + 1.0) / (tf + k1 * norm))
    if variant == PLUS:
        return idf * ((tf * (k1 + 1.0)) / (k1 * norm + tf))
    ctd = tf / norm
    return idf * tf * (k1 + 1.0) * (ctd + delta) / (k1 + ctd + delta)


def _seek_py(docs: I32, p: int, end: int, d: int) -> int:
    """The first posting at or after ``p`` (before ``end``) whose row is at least ``d``: steps of
    1, 2, 4, ... then a binary search (candidates come in row order, so ``p`` only moves on)."""
    if p >= end or docs[p] >= d:
        return p
    step = 1
    while p + step < end and docs[p + step] < d:
        p += step
        step <<= 1
    lo, hi = p + 1, min(p + step, end)
    while lo < hi:
        mid = (lo + hi) >> 1
        if docs[mid] < d:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _rescore_py(
    indptr: I64,
    docs: I32,
    tf: I32,
    idf: F64,
    norms: F64,
    id_rank: I64,
    max_weight: F64,
    k1: float,
    delta: float,
    variant: int,
    q_terms: I32,
    q_starts: I64,
    lo: int,
    hi: int,
    k: int,
    window: int,
    rows: I32,
    approx: F32,
    counts: I32,
    out_scores: F64,
    proven: B1,
) -> None:
    """Queries ``lo:hi``: rescore ``rows[q, :counts[q]]`` exactly, sort them, keep those scoring
    above 0 (a document holding no query term scores 0, plus BM25+'s constant), in place.

    ``proven[q]``: the first ``min(k, counts[q])`` are rank_bm25's top ``k``. True when the
    kernel returned fewer than ``window`` rows (every matching row), or when the ``k``-th
    exact score is above :data:`BOUND` times the kernel's last (float32) score: a row the
    kernel left out scores at most that (negative-idf terms, left out of the kernel, only
    lower a score)."""
    for q in range(lo, hi):
        terms, mult, by_bound, _rest = _query_terms(q_terms[q_starts[q] : q_starts[q + 1]], max_weight)
        c = counts[q]
        by_row = np.argsort(rows[q, :c])
        scores = np.zeros(c, dtype=np.float64)
        for i in range(by_bound.shape[0]):  # the first len(by_bound) entries are the distinct terms
            t = terms[i]
            p, end = indptr[t], indptr[t + 1]
            for j in range(c):
                d = rows[q, by_row[j]]
                p = _seek(docs, p, end, d)
                if p < end and docs[p] == d:
                    w = _term_weight(variant, idf[t], float(tf[p]), norms[d], k1, delta)
                    scores[by_row[j]] += mult[i] * w
        ranks = np.empty(c, dtype=np.int64)
        for j in range(c):
            ranks[j] = id_rank[rows[q, j]]
        order = np.argsort(ranks, kind="mergesort")
        order = order[np.argsort(-scores[order], kind="mergesort")]
        kept = 0
        picked = np.empty(c, dtype=np.int32)
        for j in range(c):
            if scores[order[j]] > 0.0:
                picked[kept] = rows[q, order[j]]
                out_scores[q, kept] = scores[order[j]]
                kept += 1
        last = float(approx[q, c - 1]) if c > 0 else 0.0
        rows[q, :kept] = picked[:kept]
        counts[q] = kept
        proven[q] = c < window or (kept >= k and out_scores[q, k - 1] > last * BOUND)


_term_weight = compiled(_term_weight_py)
_seek = compiled(_seek_py)
rescore: Callable[..., None] = compiled(_rescore_py)
"""The kernel: ``rescore(indptr, docs, tf, idf, norms, id_rank, max_weight, k1, delta, variant, q_terms, q_starts,
lo, hi, k, window, rows, approx, counts, out_scores, proven)``; see :func:`_rescore_py`."""
