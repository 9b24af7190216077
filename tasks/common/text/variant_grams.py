"""What the variant and containment joins share: q-gram codes, pivots, tuning knobs, array helpers.

The method is described in docs/decisions/variant-dedup.md; the compiled loops are in
:mod:`tasks.common.text.variant_kernels`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from rapidfuzz import process

from tasks.common.text import variant_kernels as kernels
from tasks.common.text.variant_kernels import B1, I64, U64

F64 = npt.NDArray[np.float64]
Found = tuple[I64, I64, F64]  # (first text, second text, score) of each pair found

UINT = np.uint64
ALL_ONES = UINT(0xFFFFFFFFFFFFFFFF)
SLACK = 1e-6  # absolute slack on every edit budget: rounding never loses a pair
# Tuning knobs: they change speed and memory, never the result (read at call time, so a
# test or benchmark may set them on this module).
ELL = 3  # variants: pivots beyond kup (more pivots: stronger count filter, bigger join; 2-4 measured best)
LEVELS = 12.0  # rarity levels per doubling of a gram's estimated count
CONTAIN_ELL = 8  # containments: pivots beyond E (each candidate needs this many on a diagonal band)
BATCH = 10_000_000  # raw matches handled per batch (bounds memory)
BLOCK_CELLS = 4_000_000  # brute force: pairs scored per cdist call
PAIR_CHUNK = 100_000  # candidate pairs scored per cpdist call
SMALL_PAIRS = 100_000  # at most this many length-eligible pairs: score them all, no filter
FALLBACK = 200.0  # the join gives up past this many index entries scanned per length-band pair
# What the join's packed 8-byte index entries can address; larger inputs go to brute force, still exact.
JOIN_MAX_CHARS = 1 << kernels.JOIN_POSITION_BITS
JOIN_MAX_TEXTS = 1 << kernels.JOIN_TEXT_BITS

#: Counts and timings of the last fast-path call (diagnostics for benchmarks; not thread-safe).
STATS: dict[str, float] = {}
_clock = [0.0]


def stat(name: str, value: float | None = None) -> None:
    """Record ``value`` under ``name``, or (no value) the seconds since the previous mark."""
    now = time.perf_counter()
    STATS[name] = (now - _clock[0]) if value is None else value
    if value is None:
        _clock[0] = now


def stats_reset() -> None:
    STATS.clear()
    _clock[0] = time.perf_counter()


def nothing_found() -> Found:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)


def concat(parts: list[Found]) -> Found:
    """The pairs of every part, in order."""
    if not parts:
        return nothing_found()
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )


def edit_budget(lengths: npt.ArrayLike, t: float) -> I64:
    """``K(L)``: the largest edit distance that can still give similarity ≥ t (with slack)."""
    L = np.asarray(lengths, dtype=np.float64)
    return np.floor((1.0 - t) * L * (1.0 + 1e-12) + SLACK).astype(np.int64)


def choose_q(density: float) -> int:
    """Gram length for pivots needed at ``density`` per character (0.11 at t = 0.9)."""
    if density <= 0:
        return 12
    return int(min(12, max(2, math.floor(0.7 / density))))


@dataclass
class Codes:
    """Many texts laid end to end as code points, with the rarity level of every gram bucket."""

    q: int
    lens: I64
    offs: I64  # text i occupies positions offs[i] .. offs[i + 1] - 1
    code: npt.NDArray[np.uint32]
    level: npt.NDArray[np.uint8]


def codes(texts: Sequence[str], q: int) -> Codes:
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    code = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return Codes(q, lens, offs, code, kernels.gram_levels(code, offs, q, LEVELS))


@dataclass
class Grams:
    """Hashed q-grams of many texts laid end to end: one entry per character position."""

    q: int
    lens: I64
    offs: I64  # text i occupies positions offs[i] .. offs[i + 1] - 1
    h: U64  # hash bits of the gram starting at each position
    key: U64  # global order: rarity level (8 bits), then 56 hash bits; all ones where no gram fits

    def text_of(self, index: I64) -> I64:
        """Text of each global position (fast when ``index`` is sorted)."""
        return np.searchsorted(self.offs, index, side="right").astype(np.int64) - 1


def grams(c: Codes) -> Grams:
    key = kernels.gram_keys(c.code, c.offs, c.q, c.level)
    return Grams(c.q, c.lens, c.offs, key << UINT(8), key)


@dataclass
class Pivots:
    """Pivots of every text (see :func:`variant_kernels.choose_pivots`)."""

    pos: I64  # global positions, sorted (so grouped by text)
    key: U64  # the pivots' gram keys
    first: I64  # text i's pivots are pos[first[i]:first[i + 1]]
    want: I64  # pivots per text
    last: U64  # largest pivot key per text
    filterable: B1  # the text has more disjoint grams than its edit budget
    prefix_bound: int  # grams of filterable texts with a key ≤ their text's last: bounds the join's index


def pivots(c: Codes, budget: I64, ell: int) -> Pivots:
    return Pivots(*kernels.choose_pivots(c.code, c.offs, c.q, c.level, budget, ell))


def bits(x: int) -> int:
    return max(1, int(x).bit_length())


def runs(sorted_keys: U64) -> tuple[I64, I64]:
    """Start index and length of each run of equal values in a sorted array."""
    if len(sorted_keys) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]]))
    lengths = np.diff(np.append(starts, len(sorted_keys)))
    return starts.astype(np.int64), lengths.astype(np.int64)


def expand(starts: I64, counts: I64) -> tuple[I64, I64]:
    """For ranges ``[starts[i], starts[i] + counts[i])``: (owner i, index) of every element."""
    counts = np.maximum(counts, 0)
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    shift = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return owner, np.arange(len(owner), dtype=np.int64) + shift


def unique_pairs(a: I64, b: I64) -> tuple[I64, I64]:
    """Distinct (a, b) pairs, sorted, of texts numbered below 2**32."""
    packed = np.unique((a.astype(np.uint64) << UINT(32)) | b.astype(np.uint64))
    return (packed >> UINT(32)).astype(np.int64), (packed & UINT(0xFFFFFFFF)).astype(np.int64)


def pairwise(scorer: Any, texts: list[str], a: I64, b: I64, dtype: Any, **kwargs: Any) -> npt.NDArray[Any]:
    """``process.cpdist`` over pairs (texts[a[k]], texts[b[k]]), in chunks (rapidfuzz copies the strings)."""
    out = np.zeros(len(a), dtype=dtype)
    for k in range(0, len(a), PAIR_CHUNK):
        out[k : k + PAIR_CHUNK] = process.cpdist(
            [texts[i] for i in a[k : k + PAIR_CHUNK].tolist()],
            [texts[j] for j in b[k : k + PAIR_CHUNK].tolist()],
            scorer=scorer,
            dtype=dtype,
            **kwargs,
        )
    return out
