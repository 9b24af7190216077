"""Compiled inner loops of the variant and containment joins (docs/decisions/variant-dedup.md).

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

import numpy as np
import numpy.typing as npt

from tasks.common.jit import compiled

__all__ = [
    "B1",
    "I64",
    "JOIN_POSITION_BITS",
    "JOIN_TEXT_BITS",
    "NO_GRAM",
    "U8",
    "U32",
    "U64",
    "choose_pivots",
    "gram_keys",
    "gram_levels",
    "pivot_join",
]

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
# A pivot-join index entry is one int64: check bits (15 low hash bits) << _CHECK_SHIFT |
# text << JOIN_POSITION_BITS | position.
JOIN_POSITION_BITS = 20
JOIN_TEXT_BITS = 28
_CHECK_SHIFT = JOIN_POSITION_BITS + JOIN_TEXT_BITS


@compiled
def _text_hashes(code: U32, a: int, b: int, q: int, out: U64) -> int:
    """Hashes of the q-grams of ``code[a:b]`` into ``out[:m]``; returns m, the number of grams.

    A polynomial of the code points mod 2**64, rolled along the text in O(1) a position,
    then mixed so that every bit depends on every character.
    """
    if b - a < q:
        return 0
    top = np.uint64(1)  # _M2 ** (q - 1): weight of the character leaving the window
    for _ in range(q - 1):
        top *= _M2
    x = np.uint64(0)
    for p in range(a, a + q):
        x = x * _M2 + np.uint64(code[p])
    for p in range(a, b - q + 1):
        if p > a:
            x = (x - np.uint64(code[p - 1]) * top) * _M2 + np.uint64(code[p + q - 1])
        out[p - a] = _mix(x)
    return b - a - q + 1


def _gram_levels(code: U32, offs: I64, q: int, levels_per_doubling: float) -> U8:
    """Rarity level of each 22-bit hash bucket: log-scaled count among every fourth gram."""
    counts = np.zeros(1 << 22, dtype=np.int32)
    hashes = np.empty(max(1, (offs[1:] - offs[:-1]).max()), dtype=np.uint64)
    for i in range(offs.shape[0] - 1):
        a = offs[i]
        for j in range(_text_hashes(code, a, offs[i + 1], q, hashes)):
            if (a + j) % 4 == 0:
                counts[hashes[j] >> _S42] += 1
    level = np.empty(1 << 22, dtype=np.uint8)
    for bucket in range(1 << 22):
        level[bucket] = min(np.floor(levels_per_doubling * np.log2(counts[bucket] + 1.0)), _TOP_LEVEL)
    return level


@compiled
def _mix(x: np.uint64) -> np.uint64:
    """Finaliser of the polynomial hash (xor-shift-multiply): spreads it over all 64 bits."""
    x *= _M1
    x ^= x >> _S29
    x *= _M3
    x ^= x >> _S32
    return x


@compiled
def _text_keys(code: U32, a: int, b: int, q: int, level: U8, out: U64) -> int:
    """Keys of the grams of ``code[a:b]`` into ``out[:m]`` (rarity level above 56 hash bits)."""
    m: int = _text_hashes(code, a, b, q, out)
    for j in range(m):
        out[j] = (np.uint64(level[out[j] >> _S42]) << _S56) | (out[j] >> _S8)
    return m


@compiled
def _in_prefix(key: np.uint64, last: np.uint64, seen: U64) -> bool:
    """A gram in a text's prefix (key ≤ ``last``) that some pivot has (bit set in ``seen``)."""
    bit = (key >> np.uint64(32)) & np.uint64((1 << 23) - 1)
    return bool(key <= last and (seen[bit >> np.uint64(6)] & (np.uint64(1) << (bit & np.uint64(63)))) != 0)


@compiled
def _bucket(key: np.uint64, bucket_mask: np.uint64) -> np.int64:
    """The join's hash bucket of a gram key: hash bits from 32 up (the low ones are its check bits)."""
    return np.int64(((key & np.uint64((1 << 56) - 1)) >> np.uint64(32)) & bucket_mask)


def _gram_keys(code: U32, offs: I64, q: int, level: U8) -> U64:
    """The key of the gram starting at every position (``NO_GRAM`` where none fits)."""
    key = np.full(code.shape[0], NO_GRAM, dtype=np.uint64)
    for i in range(offs.shape[0] - 1):
        _text_keys(code, offs[i], offs[i + 1], q, level, key[offs[i] :])
    return key


@compiled
def _greedy_count(keys: U64, m: int, q: int, level: int, enough: int) -> int:
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
) -> tuple[I64, U64, I64, I64, U64, B1, int]:
    """Per text, ``budget + ell`` pairwise disjoint grams whose largest rarity level is smallest.

    A text is *filterable* when it has at least ``budget + 1`` disjoint grams
    (``len // q``); it then gets ``min(len // q, budget + ell)`` pivots. The greedy scan
    (take a gram when it starts at least q after the last one taken) maximises the number
    of disjoint grams under a level bound, so a binary search over the bound finds the
    lowest level that still yields enough. Returns (pivot positions, global and sorted;
    pivot keys; first pivot of each text (n + 1 offsets); pivots per text; largest pivot
    key per text; filterable; how many grams of filterable texts have a key ≤ their
    text's largest pivot key, a bound on the size of the join's index).
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
    bound = 0
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
        cut = np.uint64(hi)
        k = first[i]
        free = 0
        largest = np.uint64(0)
        for p in range(m):
            if p >= free and (keys[p] >> _S56) <= cut:
                pos[k] = offs[i] + p
                pkey[k] = keys[p]
                largest = max(largest, keys[p])
                k += 1
                free = p + q
                if k == first[i + 1]:
                    break
        last[i] = largest
        for p in range(m):
            bound += keys[p] <= largest
    return pos, pkey, first, want, last, filterable, bound


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
    prefix_bound: int,
    max_raw: int,
) -> tuple[I64, I64, int, int, int]:
    """Candidate pairs (x, y) among filterable texts, x the one of lower ``rank``.

    The prefix of y (every gram with key ≤ ``last[y]`` that some pivot also has, by a
    bitmap of pivot hashes) goes into an inverted index by hash bucket, each bucket
    sorted by text length. The texts x are then taken by increasing length, so the
    shortest partner length ``partner_lengths[x, 0]`` only grows and a cursor per bucket
    skips the entries too short for every later x. Each pivot of x scans its bucket from
    the cursor up to the longest partner length; an entry of text y counts once per pivot
    when it has the pivot's gram, rank(y) > rank(x) (so last(x) ≤ last(y)), the exact
    length filter holds and the positions differ by at most ``K = ktab[max(len x, len y)]``.
    Pairs with at least ``want[x] - K`` pivots counted are candidates. Returns (x, y,
    index entries, entries scanned, 1 if completed else 0 — it stops once ``max_raw``
    were scanned). Texts must be shorter than 2**JOIN_POSITION_BITS characters and fewer
    than 2**JOIN_TEXT_BITS.

    Measured choices (the index is far larger than the caches): one hashing pass appends
    the prefix entries in length order (``prefix_bound`` sizes the buffer); a stable
    partition on the top 8 bucket bits, then a scatter within each partition (a window of
    the index that fits in cache), replaces a random scatter over the whole index; an
    entry is 8 bytes (15 hash bits, text, position); and the bucket heads of all of x's
    pivots are loaded before any is scanned, so their cache misses overlap.
    """
    n = offs.shape[0] - 1
    lens = (offs[1:] - offs[:-1]).astype(np.int32)  # small per-text tables stay in cache
    rank32 = rank.astype(np.int32)
    bucket_mask = np.uint64((1 << bucket_bits) - 1)
    check_mask = np.uint64(0x7FFF)  # low hash bits kept in an entry: tell a bucket's grams apart
    pos_mask = np.int64((1 << JOIN_POSITION_BITS) - 1)
    text_mask = np.int64((1 << JOIN_TEXT_BITS) - 1)
    seen = np.zeros(1 << 17, dtype=np.uint64)  # 2**23 bits (1 MB): which hashes some pivot has
    for j in range(pkey.shape[0]):
        bit = (pkey[j] >> np.uint64(32)) & np.uint64((1 << 23) - 1)
        seen[bit >> np.uint64(6)] |= np.uint64(1) << (bit & np.uint64(63))
    keys = np.empty(lens.max() + 1, dtype=np.uint64)

    # Prefix entries (see JOIN_POSITION_BITS) in length order, then
    # partitioned on the top bucket bits and each partition sorted into its buckets.
    shift = max(0, bucket_bits - 8)
    parts = 1 << (bucket_bits - shift)
    bucket_of = np.empty(prefix_bound, dtype=np.int32)
    packed = np.empty(prefix_bound, dtype=np.int64)
    fill = np.zeros(parts + 1, dtype=np.int64)
    total = 0
    for y in by_length:
        if filterable[y]:
            m = _text_keys(code, offs[y], offs[y + 1], q, level, keys)
            text_bits = np.int64(y) << JOIN_POSITION_BITS
            for p in range(m):
                if _in_prefix(keys[p], last[y], seen):
                    b = _bucket(keys[p], bucket_mask)
                    fill[(b >> shift) + 1] += 1
                    bucket_of[total] = b
                    packed[total] = (np.int64(keys[p] & check_mask) << _CHECK_SHIFT) | text_bits | p
                    total += 1
    for part in range(parts):
        fill[part + 1] += fill[part]
    part_start = fill[:parts].copy()
    part_bucket = np.empty(total, dtype=np.int32)
    part_packed = np.empty(total, dtype=np.int64)
    for i in range(total):  # stable, so every bucket stays in length order
        part = bucket_of[i] >> shift
        d = fill[part]
        fill[part] = d + 1
        part_bucket[d] = bucket_of[i]
        part_packed[d] = packed[i]
    head = np.zeros((1 << bucket_bits, 2), dtype=np.int64)  # (first unread entry, end)
    entry = np.empty(total, dtype=np.int64)
    for part in range(parts):
        lo, hi = part_start[part], fill[part]
        for i in range(lo, hi):
            head[part_bucket[i], 1] += 1
        start = lo
        for b in range(part << shift, (part + 1) << shift):
            c = head[b, 1]
            head[b, 0] = start
            head[b, 1] = start  # the fill pointer until the fill is done, then the end
            start += c
        for i in range(lo, hi):
            b = part_bucket[i]
            d = head[b, 1]
            head[b, 1] = d + 1
            entry[d] = part_packed[i]

    count = np.zeros(n, dtype=np.int64)
    stamp = np.full(n, -1, dtype=np.int64)
    touched = np.empty(n, dtype=np.int64)
    heads = np.empty((max(1, (first[1:] - first[:-1]).max()), 2), dtype=np.int64)
    out_x = np.empty(1024, dtype=np.int64)
    out_y = np.empty(1024, dtype=np.int64)
    found = 0
    raw = 0
    for x in by_length:
        if not filterable[x]:
            continue
        lx = lens[x]
        rx = rank32[x]
        shortest, longest = partner_lengths[x, 0], partner_lengths[x, 1]
        j0, j1 = first[x], first[x + 1]
        for j in range(j0, j1):  # independent loads, so their cache misses overlap
            b = _bucket(pkey[j], bucket_mask)
            heads[j - j0, 0] = head[b, 0]
            heads[j - j0, 1] = head[b, 1]
        nt = 0
        for j in range(j0, j1):
            check = np.int64(pkey[j] & check_mask)
            sp = ppos[j] - offs[x]
            b = _bucket(pkey[j], bucket_mask)
            e = max(heads[j - j0, 0], head[b, 0])  # another pivot of x may have moved the cursor
            end = heads[j - j0, 1]
            while e < end and lens[(entry[e] >> JOIN_POSITION_BITS) & text_mask] < shortest:
                e += 1
            head[b, 0] = e
            while e < end:
                word = entry[e]
                y = (word >> JOIN_POSITION_BITS) & text_mask
                ly = lens[y]
                if ly > longest:
                    break
                raw += 1
                k = ktab[max(lx, ly)]
                if (
                    (word >> _CHECK_SHIFT) == check
                    and abs(lx - ly) <= k
                    and abs(sp - (word & pos_mask)) <= k
                    and rank32[y] > rx  # last in that order, it needs a load
                    and stamp[y] != j
                ):
                    stamp[y] = j
                    if count[y] == 0:
                        touched[nt] = y
                        nt += 1
                    count[y] += 1
                e += 1
        for m in range(nt):
            y = touched[m]
            if count[y] >= want[x] - ktab[max(lx, lens[y])]:
                if found == out_x.shape[0]:
                    out_x = np.concatenate((out_x, np.empty(found, dtype=np.int64)))
                    out_y = np.concatenate((out_y, np.empty(found, dtype=np.int64)))
                out_x[found] = x
                out_y[found] = y
                found += 1
            count[y] = 0
        if raw > max_raw:
            return out_x[:found], out_y[:found], total, raw, 0
    return out_x[:found], out_y[:found], total, raw, 1


gram_levels: Callable[[U32, I64, int, float], U8] = compiled(_gram_levels)
gram_keys: Callable[[U32, I64, int, U8], U64] = compiled(_gram_keys)
choose_pivots: Callable[[U32, I64, int, U8, I64, int], tuple[I64, U64, I64, I64, U64, B1, int]] = compiled(
    _choose_pivots
)
pivot_join: Callable[..., tuple[I64, I64, int, int, int]] = compiled(_pivot_join)
