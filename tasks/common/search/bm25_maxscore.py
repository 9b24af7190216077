"""The per-query numba kernels of :func:`tasks.common.search.bm25_kernels.search`: MaxScore top k.

One call of :data:`maxscore` scores a slice of the queries against a
:class:`~tasks.common.search.bm25_kernels.Bm25Matrix`; per query (the rule is in the
docstring of ``tasks/common/search/bm25_kernels.py``):

1. :func:`_query_terms_py`: distinct terms, their multiplicities and upper bounds, in
   decreasing bound order;
2. :func:`_first_terms_py`: term at a time into the accumulator until MaxScore's rule says
   no unseen passage can reach the top ``k``;
3. :func:`_other_terms_py`: the remaining terms, on the candidates still able to reach it;
4. :func:`_best_k_py`: the top ``k`` by (float32 score descending, id rank ascending).

Every ``*_py`` function is plain Python over numpy arrays, compiled by
:func:`tasks.common.jit.compiled`; the kernels call each other compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt

from tasks.common.jit import compiled

__all__ = ["maxscore"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

_LOW: Final = np.int64(0xFFFFFFFF)  # low 32 bits of a ranking key: 2**32 - 1 - id rank
_SCAN = 8  # phase 2 reads a sparse term's postings through when under this many a candidate
_MARGIN: Final = 1e-6  # relative: prune only what is clearly below the k-th score (float32 ulp: 6e-8)


def _sift_down_py(heap: F64 | I64, size: int, i: int) -> None:
    """Restore the min-heap ``heap[:size]`` below ``i`` (numba compiles one per dtype)."""
    while True:
        left = 2 * i + 1
        if left >= size:
            return
        child = left
        if left + 1 < size and heap[left + 1] < heap[left]:
            child = left + 1
        if heap[child] < heap[i]:
            heap[i], heap[child] = heap[child], heap[i]
            i = child
        else:
            return


def _kth_py(acc: F64, rows: I32, count: int, k: int, heap: F64) -> float:
    """The k-th largest of ``acc[rows[:count]]`` (count >= k): a min-heap of the best k."""
    for i in range(k):
        heap[i] = acc[rows[i]]
    for i in range(k // 2 - 1, -1, -1):
        _sift_down(heap, k, i)
    for i in range(k, count):
        v = acc[rows[i]]
        if v > heap[0]:
            heap[0] = v
            _sift_down(heap, k, 0)
    return float(heap[0])


def _merge_add_py(
    acc: F64, cands: I32, lo: int, hi: int, docs: I32, weights: F32, a: int, b: int, c: float
) -> None:
    """Add ``c x`` the weight of each of ``cands[lo:hi]`` (ascending) found in postings ``docs[a:b]``.

    A galloping merge: from each candidate's place, steps of 1, 2, 4, ... then a binary search."""
    p = a
    for j in range(lo, hi):
        d = cands[j]
        if p >= b:
            return
        if docs[p] < d:
            step = 1
            while p + step < b and docs[p + step] < d:
                p += step
                step <<= 1
            upper = min(p + step, b)  # docs[p] < d <= docs[upper] (or upper == b)
            p += 1
            while p < upper:
                mid = (p + upper) >> 1
                if docs[mid] < d:
                    p = mid + 1
                else:
                    upper = mid
            if p >= b:
                return
        if docs[p] == d:
            acc[d] += c * weights[p]
            p += 1


def _keep_py(acc: F64, rows: I32, runs: I64, nr: int, out: I32, rest: float, floor: float) -> int:
    """Copy the rows of runs ``0:nr`` with ``acc + rest >= floor`` to ``out`` (may be ``rows``),
    run by run, updating ``runs``; returns how many."""
    kept = 0
    start = runs[0]
    for r in range(nr):
        end = runs[r + 1]
        for j in range(start, end):
            d = rows[j]
            out[kept] = d
            kept += acc[d] + rest >= floor
        start = end
        runs[r + 1] = kept
    return kept


def _query_terms_py(query: I32, max_weight: F64) -> tuple[I64, F64, I64, F64]:
    """(distinct term ids, multiplicities, their order by upper bound descending, ``rest``).

    ``rest[i]``: the summed upper bounds of the terms from ``order[i]`` on. A repeated id
    counts again; -1, an unknown term, is dropped."""
    raw = np.sort(query)
    raw = raw[np.searchsorted(raw, 0) :]  # -1: an unknown term
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
    bound = np.empty(m, dtype=np.float64)
    for i in range(m):
        bound[i] = mult[i] * max_weight[terms[i]]
    order = np.argsort(-bound, kind="mergesort")  # stable: ties by term id
    rest = np.zeros(m + 1, dtype=np.float64)  # rest[i]: bounds of the terms from i on
    for i in range(m - 1, -1, -1):
        rest[i] = rest[i + 1] + bound[order[i]]
    return terms, mult, order, rest


def _first_terms_py(
    indptr: I64,
    docs: I32,
    weights: F32,
    terms: I64,
    mult: F64,
    order: I64,
    rest: F64,
    k: int,
    acc: F64,
    touched: I32,
    runs: I64,
    heap: F64,
) -> tuple[int, int, float, bool]:
    """Phase 1: every posting of the terms by decreasing bound, until MaxScore's rule prunes.

    Returns (terms done, passages touched, the k-th score when pruned, pruned).
    ``touched[runs[r]:runs[r + 1]]``: the passages first seen by term ``r``."""
    m = order.shape[0]
    low = 1.0 - _MARGIN
    nt = 0
    top = 0.0
    theta = 0.0
    i = 0
    while i < m:
        t = terms[order[i]]
        c = mult[order[i]]
        for p in range(indptr[t], indptr[t + 1]):
            d = docs[p]
            v = acc[d]
            touched[nt] = d  # kept when first seen: branch-free (the branch mispredicts)
            nt += v == 0.0
            v += c * weights[p]
            acc[d] = v
            top = max(top, v)
        i += 1
        runs[i] = nt
        if i < m and nt >= k and rest[i] < top * low:
            theta = _kth(acc, touched, nt, k, heap)
            if rest[i] < theta * low:
                return i, nt, theta, True
    return i, nt, theta, False


def _other_terms_py(
    indptr: I64,
    docs: I32,
    weights: F32,
    dense_slot: I32,
    dense: F32,
    terms: I64,
    mult: F64,
    order: I64,
    rest: F64,
    i: int,
    theta: float,
    k: int,
    acc: F64,
    touched: I32,
    runs: I64,
    cands: I32,
    heap: F64,
) -> int:
    """Phase 2: terms ``i:`` on the candidates of ``touched`` still able to reach the top k.

    Each term's run of first-seen passages is ascending (postings are), and so stays each
    run of candidates. Returns how many candidates are left in ``cands``."""
    m = order.shape[0]
    low = 1.0 - _MARGIN
    nr = i
    nc: int = _keep(acc, touched, runs, nr, cands, rest[i], theta * low)
    while i < m:
        t = terms[order[i]]
        c = mult[order[i]]
        slot = dense_slot[t]
        if slot >= 0:  # a frequent term: its weights by passage, one load each
            row = dense[slot]
            for j in range(nc):
                d = cands[j]
                acc[d] += c * row[d]
        elif indptr[t + 1] - indptr[t] < _SCAN * nc:  # few postings a candidate: read them all
            for p in range(indptr[t], indptr[t + 1]):
                d = docs[p]
                v = acc[d]
                acc[d] = v + (v != 0.0) * (c * weights[p])  # passages never seen stay 0
        else:
            for r in range(nr):
                _merge_add(acc, cands, runs[r], runs[r + 1], docs, weights, indptr[t], indptr[t + 1], c)
        i += 1
        if nc > k:  # refilter: the bound of the terms left shrank, the k-th score grew
            theta = _kth(acc, cands, nc, k, heap)
            nc = _keep(acc, cands, runs, nr, cands, rest[i], theta * low)
    return nc


def _best_k_py(
    acc: F64,
    cands: I32,
    nc: int,
    k: int,
    id_rank: I64,
    by_rank: I64,
    keys: I64,
    out_rows: I32,
    out_scores: F32,
) -> int:
    """Top k by (float32 score desc, id rank asc) into ``out_*``: one int64 key, a min-heap."""
    bits = np.empty(1, dtype=np.float32)
    as_int = bits.view(np.int32)
    size = 0
    for j in range(nc):
        d = cands[j]
        bits[0] = acc[d]  # rounded to float32; positive, so its bits order like it
        key = (np.int64(as_int[0]) << 32) | (_LOW - id_rank[d])
        if size < k:
            keys[size] = key
            size += 1
            if size == k:
                for h in range(k // 2 - 1, -1, -1):
                    _sift_down(keys, k, h)
        elif key > keys[0]:
            keys[0] = key
            _sift_down(keys, k, 0)
    best = np.sort(keys[:size])[::-1]
    for r in range(size):
        as_int[0] = np.int32(best[r] >> 32)
        out_scores[r] = bits[0]
        out_rows[r] = by_rank[_LOW - (best[r] & _LOW)]
    return size


def _maxscore_py(
    indptr: I64,
    docs: I32,
    weights: F32,
    max_weight: F64,
    dense_slot: I32,
    dense: F32,
    id_rank: I64,
    by_rank: I64,
    q_terms: I32,
    q_starts: I64,
    lo: int,
    hi: int,
    k: int,
    out_rows: I32,
    out_scores: F32,
    out_counts: I32,
) -> None:
    """Top ``k`` of queries ``lo:hi`` into ``out_*[q]``."""
    n = id_rank.shape[0]
    acc = np.zeros(n, dtype=np.float64)
    touched = np.empty(n + 1, dtype=np.int32)  # one spare: written before the count says so
    alive = np.empty(n, dtype=np.int32)
    heap = np.empty(k, dtype=np.float64)
    keys = np.empty(k, dtype=np.int64)
    for q in range(lo, hi):
        terms, mult, order, rest = _query_terms(q_terms[q_starts[q] : q_starts[q + 1]], max_weight)
        runs = np.zeros(order.shape[0] + 1, dtype=np.int64)
        i, nt, theta, pruned = _first_terms(
            indptr, docs, weights, terms, mult, order, rest, k, acc, touched, runs, heap
        )
        cands = touched
        nc = nt
        if pruned:
            nc = _other_terms(
                indptr, docs, weights, dense_slot, dense, terms, mult, order, rest, i, theta, k,
                acc, touched, runs, alive, heap,
            )  # fmt: skip
            cands = alive
        out_counts[q] = _best_k(acc, cands, nc, k, id_rank, by_rank, keys, out_rows[q], out_scores[q])
        for j in range(nt):
            acc[touched[j]] = 0.0


_sift_down = compiled(_sift_down_py)
_kth = compiled(_kth_py)
_keep = compiled(_keep_py)
_merge_add = compiled(_merge_add_py)
_query_terms = compiled(_query_terms_py)
_first_terms = compiled(_first_terms_py)
_other_terms = compiled(_other_terms_py)
_best_k = compiled(_best_k_py)
maxscore: Callable[..., None] = compiled(_maxscore_py)
"""The kernel: ``maxscore(matrix arrays..., id_rank, by_rank, q_terms, q_starts, lo, hi, k, out_rows,
out_scores, out_counts)``; see :func:`tasks.common.search.bm25_kernels.search`."""
