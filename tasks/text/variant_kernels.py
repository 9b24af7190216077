"""Compiled inner loops of :mod:`tasks.text.variants`: gram keys, pivot choice, the pivot join.

Each kernel is a plain Python function compiled with ``numba.njit`` (cached on disk, so a
process pays the compile once per install). The loops are per text and per gram, which
numpy can only express through large intermediate arrays. Measured here, fresh memory
costs more than hashing (first-touch page faults run near 1 GB/s, a rolling hash of
every gram of 16 M characters takes 70 ms), so the variant kernels never materialise a
key per character position: each text's gram keys are recomputed into a small scratch
buffer whenever a pass needs them. With ``NUMBA_DISABLE_JIT=1`` the same functions run
as Python (slowly), for debugging.

A gram's *key* orders grams globally: its rarity level (8 bits) above 56 bits of its
hash. Any order that depends only on the gram is correct; rare-first keeps prefixes short.

Every constant and shift below is ``uint64`` on purpose: numba, like numpy, turns mixed
signed/unsigned integer arithmetic into float64, which would silently break the hashes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["NO_GRAM", "choose_pivots", "gram_keys", "gram_levels", "pivot_join"]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
U32 = npt.NDArray[np.uint32]
B1 = npt.NDArray[np.bool_]
U8 = npt.NDArray[np.uint8]

NO_GRAM = np.uint64(0xFFFFFFFFFFFFFFFF)  # key of a position where no whole gram starts
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0x100000001B3)
_M3 = np.uint64(0xBF58476D1CE4E5B9)
_S8 = np.uint64(8)
_S29 = np.uint64(29)
_S32 = np.uint64(32)
_S42 = np.uint64(42)
_S56 = np.uint64(56)
_TOP_LEVEL = 254  # rarity levels 0..254; 255 marks NO_GRAM


def _gram_levels(code: U32, offs: I64, q: int, levels_per_doubling: float) -> U8:
    """Rarity level of each 22-bit hash bucket: log-scaled count among every fourth gram."""
    counts = np.zeros(1 << 22, dtype=np.int32)
    top = np.uint64(1)  # _M2 ** (q - 1): weight of the character leaving the window
    for _ in range(q - 1):
        top *= _M2
    for i in range(offs.shape[0] - 1):
        a, b = offs[i], offs[i + 1]
        if b - a < q:
            continue
        x = np.uint64(0)
        for p in range(a, a + q):
            x = x * _M2 + np.uint64(code[p])
        for p in range(a, b - q + 1):
            if p > a:
                x = (x - np.uint64(code[p - 1]) * top) * _M2 + np.uint64(code[p + q - 1])
            if p % 4 == 0:
                counts[_mix(x) >> _S42] += 1
    level = np.empty(1 << 22, dtype=np.uint8)
    for bucket in range(1 << 22):
        level[bucket] = min(np.floor(levels_per_doubling * np.log2(counts[bucket] + 1.0)), _TOP_LEVEL)
    return level


def _mix_py(x: np.uint64) -> np.uint64:
    """Finaliser of the polynomial hash (xor-shift-multiply): spreads it over all 64 bits."""
    x *= _M1
    x ^= x >> _S29
    x *= _M3
    x ^= x >> _S32
    return x


def _text_keys_py(code: U32, a: int, b: int, q: int, level: U8, out: U64) -> int:
    """Keys of the grams of ``code[a:b]`` into ``out[:m]``; returns m, the number of grams."""
    if b - a < q:
        return 0
    top = np.uint64(1)
    for _ in range(q - 1):
        top *= _M2
    x = np.uint64(0)
    for p in range(a, a + q):
        x = x * _M2 + np.uint64(code[p])
    for p in range(a, b - q + 1):
        if p > a:
            x = (x - np.uint64(code[p - 1]) * top) * _M2 + np.uint64(code[p + q - 1])
        m = _mix(x)
        out[p - a] = (np.uint64(level[m >> _S42]) << _S56) | (m >> _S8)
    return b - a - q + 1


def _gram_keys(code: U32, offs: I64, q: int, level: U8) -> U64:
    """The key of the gram starting at every position (``NO_GRAM`` where none fits)."""
    key = np.full(code.shape[0], NO_GRAM, dtype=np.uint64)
    for i in range(offs.shape[0] - 1):
        _text_keys(code, offs[i], offs[i + 1], q, level, key[offs[i] :])
    return key


def _greedy_count_py(keys: U64, m: int, q: int, level: int, enough: int) -> int:
    """Disjoint grams the left-to-right greedy scan takes among those with level ≤ ``level``."""
    taken = 0
    free = 0
    lv = np.uint64(level)
    for p in range(m):
        if p >= free and (keys[p] >> _S56) <= lv:
            taken += 1
            free = p + q
            if taken >= enough:
                break
    return taken


def _choose_pivots(
    code: U32, offs: I64, q: int, level: U8, budget: I64, ell: int
) -> tuple[I64, U64, I64, I64, U64, B1]:
    """Per text, ``budget + ell`` pairwise disjoint grams whose largest rarity level is smallest.

    A text is *filterable* when it has at least ``budget + 1`` disjoint grams
    (``len // q``); it then gets ``min(len // q, budget + ell)`` pivots. The greedy scan
    (take a gram when it starts at least q after the last one taken) maximises the number
    of disjoint grams under a level bound, so a binary search over the bound finds the
    lowest level that still yields enough. Returns (pivot positions, global and sorted;
    pivot keys; first pivot of each text (n + 1 offsets); pivots per text; largest pivot
    key per text; filterable).
    """
    n = offs.shape[0] - 1
    want = np.zeros(n, dtype=np.int64)
    last = np.zeros(n, dtype=np.uint64)
    filterable = np.zeros(n, dtype=np.bool_)
    first = np.zeros(n + 1, dtype=np.int64)
    longest = 0
    for i in range(n):
        length = offs[i + 1] - offs[i]
        longest = max(longest, length)
        chunks = length // q
        if chunks >= budget[i] + 1:
            filterable[i] = True
            want[i] = min(chunks, budget[i] + ell)
        first[i + 1] = first[i] + want[i]
    pos = np.empty(first[n], dtype=np.int64)
    pkey = np.empty(first[n], dtype=np.uint64)
    keys = np.empty(longest + 1, dtype=np.uint64)
    for i in range(n):
        if not filterable[i]:
            continue
        m = _text_keys(code, offs[i], offs[i + 1], q, level, keys)
        lo, hi = 0, _TOP_LEVEL
        while lo < hi:
            mid = (lo + hi) // 2
            if _greedy_count(keys, m, q, mid, want[i]) >= want[i]:
                hi = mid
            else:
                lo = mid + 1
        bound = np.uint64(hi)
        k = first[i]
        free = 0
        largest = np.uint64(0)
        for p in range(m):
            if p >= free and (keys[p] >> _S56) <= bound:
                pos[k] = offs[i] + p
                pkey[k] = keys[p]
                largest = max(largest, keys[p])
                k += 1
                free = p + q
                if k == first[i + 1]:
                    break
        last[i] = largest
    return pos, pkey, first, want, last, filterable


def _pivot_join(
    code: U32,
    offs: I64,
    q: int,
    level: U8,
    ppos: I64,
    pkey: U64,
    first: I64,
    want: I64,
    last: U64,
    rank: I64,
    filterable: B1,
    ktab: I64,
    by_length: I64,
    partner_lengths: I64,
    bucket_bits: int,
    max_raw: int,
) -> tuple[I64, I64, int, int, int]:
    """Candidate pairs (x, y) among filterable texts, x the one of lower ``rank``.

    A sort-merge join, because random memory access, not arithmetic, is what costs here.
    Both sides are counting-sorted into the same hash buckets, each bucket in text-length
    order (texts are filled in ``by_length`` order): the *entries* are the prefix of
    every y (grams with key ≤ ``last[y]`` that some pivot also has, by a bitmap of pivot
    hashes), the *probes* are the pivots of every x. Buckets are then merged one by one,
    reading both sides sequentially: for each pivot the shortest partner length
    ``partner_lengths[x, 0]`` only grows along the bucket, so a cursor skips the entries
    too short, and the scan stops past the longest partner length. An entry of text y
    matches when it has the pivot's gram, rank(y) > rank(x) (so last(x) ≤ last(y)), the
    exact length filter holds and the positions differ by at most
    ``K = ktab[max(len x, len y)]``; a pivot matches a text at most once (a text's entries
    are contiguous in a bucket). Matches (x, y) are then grouped by x (a counting sort)
    and counted; pairs with at least ``want[x] - K`` matches are the candidates. Returns
    (x, y, index entries, entries scanned, 1 if completed else 0 — it stops once
    ``max_raw`` entries were scanned).
    """
    n = offs.shape[0] - 1
    lens = offs[1:] - offs[:-1]
    nb = 1 << bucket_bits
    hash_mask = np.uint64((1 << 56) - 1)
    shift = np.uint64(64 - bucket_bits)
    low32 = np.uint64(0xFFFFFFFF)
    seen_mask = np.uint64((1 << 23) - 1)
    seen = np.zeros(1 << 17, dtype=np.uint64)  # 2**23 bits (1 MB): which hashes some pivot has
    for j in range(pkey.shape[0]):
        bit = (pkey[j] >> np.uint64(32)) & seen_mask
        seen[bit >> np.uint64(6)] |= np.uint64(1) << (bit & np.uint64(63))
    keys = np.empty(lens.max() + 1, dtype=np.uint64)

    # Entries: one 16-byte row (low hash bits << 32 | position, text) per prefix gram.
    estart = np.zeros(nb + 1, dtype=np.int64)
    for y in range(n):
        if filterable[y]:
            m = _text_keys(code, offs[y], offs[y + 1], q, level, keys)
            for p in range(m):
                bit = (keys[p] >> np.uint64(32)) & seen_mask
                if keys[p] <= last[y] and seen[bit >> np.uint64(6)] & (np.uint64(1) << (bit & np.uint64(63))):
                    estart[((keys[p] & hash_mask) * _M1 >> shift) + np.uint64(1)] += 1
    for b in range(nb):
        estart[b + 1] += estart[b]
    total = estart[nb]
    fill = estart[:-1].copy()
    entry = np.empty((total, 2), dtype=np.int64)
    for y in by_length:
        if filterable[y]:
            m = _text_keys(code, offs[y], offs[y + 1], q, level, keys)
            for p in range(m):
                bit = (keys[p] >> np.uint64(32)) & seen_mask
                if keys[p] <= last[y] and seen[bit >> np.uint64(6)] & (np.uint64(1) << (bit & np.uint64(63))):
                    b = (keys[p] & hash_mask) * _M1 >> shift
                    entry[fill[b], 0] = np.int64((keys[p] & low32) << np.uint64(32)) | p
                    entry[fill[b], 1] = y
                    fill[b] += 1

    # Probes: pivot indexes by bucket, texts by length within a bucket.
    owner = np.empty(pkey.shape[0], dtype=np.int64)
    pstart = np.zeros(nb + 1, dtype=np.int64)
    for x in range(n):
        for j in range(first[x], first[x + 1]):
            owner[j] = x
            pstart[((pkey[j] & hash_mask) * _M1 >> shift) + np.uint64(1)] += 1
    for b in range(nb):
        pstart[b + 1] += pstart[b]
    pfill = pstart[:-1].copy()
    probe = np.empty(pkey.shape[0], dtype=np.int64)
    for x in by_length:
        for j in range(first[x], first[x + 1]):
            b = (pkey[j] & hash_mask) * _M1 >> shift
            probe[pfill[b]] = j
            pfill[b] += 1

    # Merge, bucket by bucket.
    pos_mask = np.int64(0xFFFFFFFF)
    match_x = np.empty(1 << 16, dtype=np.int32)
    match_y = np.empty(1 << 16, dtype=np.int32)
    matches = 0
    raw = 0
    for b in range(nb):
        lo, end = estart[b], estart[b + 1]
        if lo == end:
            continue
        for i in range(pstart[b], pstart[b + 1]):
            j = probe[i]
            x = owner[j]
            lx = lens[x]
            rx = rank[x]
            shortest, longest = partner_lengths[x, 0], partner_lengths[x, 1]
            hp = np.int64((pkey[j] & low32) << np.uint64(32))
            sp = ppos[j] - offs[x]
            while lo < end and lens[entry[lo, 1]] < shortest:
                lo += 1
            if matches + (end - lo) > match_x.shape[0]:  # room for every entry in reach
                grow = max(matches, end - lo)
                match_x = np.concatenate((match_x, np.empty(grow, dtype=np.int32)))
                match_y = np.concatenate((match_y, np.empty(grow, dtype=np.int32)))
            previous = -1
            e = lo
            # Branch-free test and append: the outcomes are unpredictable, mispredictions
            # cost more than always computing every condition.
            while e < end:
                y = entry[e, 1]
                ly = lens[y]
                if ly > longest:
                    break
                word = entry[e, 0]
                k = ktab[max(lx, ly)]
                ok = (
                    ((word & ~pos_mask) == hp)
                    & (y != previous)
                    & (rank[y] > rx)
                    & (abs(lx - ly) <= k)
                    & (abs(sp - (word & pos_mask)) <= k)
                )
                match_x[matches] = x
                match_y[matches] = y
                matches += ok
                previous = y if ok else previous
                e += 1
            raw += e - lo
        if raw > max_raw:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), total, raw, 0

    # Count matches per pair: group by x, then a dense counter over y.
    mstart = np.zeros(n + 1, dtype=np.int64)
    for m in range(matches):
        mstart[match_x[m] + 1] += 1
    for x in range(n):
        mstart[x + 1] += mstart[x]
    mfill = mstart[:-1].copy()
    grouped = np.empty(matches, dtype=np.int32)
    for m in range(matches):
        grouped[mfill[match_x[m]]] = match_y[m]
        mfill[match_x[m]] += 1
    count = np.zeros(n, dtype=np.int64)
    out_x = np.empty(1024, dtype=np.int64)
    out_y = np.empty(1024, dtype=np.int64)
    found = 0
    for x in range(n):
        for m in range(mstart[x], mstart[x + 1]):
            count[grouped[m]] += 1
        for m in range(mstart[x], mstart[x + 1]):
            y = grouped[m]
            if count[y] > 0:
                if count[y] >= want[x] - ktab[max(lens[x], lens[y])]:
                    if found == out_x.shape[0]:
                        out_x = np.concatenate((out_x, np.empty(found, dtype=np.int64)))
                        out_y = np.concatenate((out_y, np.empty(found, dtype=np.int64)))
                    out_x[found] = x
                    out_y[found] = y
                    found += 1
                count[y] = 0  # reported (or not) once
    return out_x[:found], out_y[:found], total, raw, 1


def _compile(function: Callable[..., Any]) -> Callable[..., Any]:
    compiled: Callable[..., Any] = numba.njit(cache=True, nogil=True)(function)
    return compiled


# Helpers first: a kernel resolves the compiled helpers it calls when it is compiled.
_mix = _compile(_mix_py)
_text_keys = _compile(_text_keys_py)
_greedy_count = _compile(_greedy_count_py)
gram_levels: Callable[[U32, I64, int, float], U8] = _compile(_gram_levels)
gram_keys: Callable[[U32, I64, int, U8], U64] = _compile(_gram_keys)
choose_pivots: Callable[[U32, I64, int, U8, I64, int], tuple[I64, U64, I64, I64, U64, B1]] = _compile(
    _choose_pivots
)
pivot_join: Callable[..., tuple[I64, I64, int, int, int]] = _compile(_pivot_join)
