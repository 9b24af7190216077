"""Variant and containment detection for hand-typed passages (CURE §2.1), exact and sub-quadratic.

CURE's annotators typed relevant passages by hand, so one passage turns up in several
slightly different forms (typos, spacing, case, a truncated end), and a passage relevant
to one query may sit inside a longer passage relevant to another. This module finds

* **variants**: pairs whose :func:`normalise`\\ d texts have normalised Levenshtein
  similarity ``1 - d / max(len)`` (rapidfuzz ``Levenshtein.normalized_similarity``) at
  least ``threshold`` (:func:`similar_pairs`); :func:`clusters` links them transitively and
  :func:`representative` picks the longest member, which CURE substitutes for the others;
* **containments**: an inner text found inside a longer outer text
  (:func:`containments`): rapidfuzz ``fuzz.partial_ratio(inner, outer) / 100`` — the
  Indel similarity ``1 - indel / (len(inner) + len(window))`` of the inner text against
  the window of the outer text rapidfuzz aligns it with (windows are never longer than
  the inner text) — at least ``threshold``, for inner texts of at least
  ``min_inner_chars`` characters and at most ``max_length_ratio`` of the outer's length
  (a longer one is a variant, not a containment).

Both answers are *exactly* those of the exhaustive comparison (:func:`similar_pairs_exhaustive`,
:func:`containments_exhaustive`: rapidfuzz ``process.cdist`` over all pairs), which the
tests use as oracle; only the work differs. The fast paths generate candidate pairs with
filters that provably never drop a qualifying pair, then let rapidfuzz decide each
candidate with the same scorer and ``score_cutoff`` as the oracle.

Variants: pivotal prefix filtering on q-grams
---------------------------------------------
Let ``t`` be the threshold and ``K(L) = ⌊(1 - t)·L⌋`` (plus a rounding slack) the largest
edit distance a pair whose longer text has ``L`` characters may have. A pair x, y can only
qualify if ``|len x - len y| ≤ K`` (length filter). For each text x, ``kup(x)`` is the
largest ``K`` over every partner length that the length filter allows.

1. **Grams and a global order.** Every text's q-grams (q from t: 6 at t = 0.9, 12 at
   0.95) are hashed; grams are ordered by a rarity level (an estimate of how often the
   gram occurs in the input, rare first), then by hash. Any order that depends only on
   the gram is correct; rare-first only makes the filter cheap.
2. **Pivots.** x's pivots are ``P(x) = kup(x) + ℓ`` pairwise *disjoint* grams of x, so
   one edit (substitution, insertion or deletion of one character) destroys at most one
   of them. They are picked to be rare: for each text, the lowest rarity level at which a
   left-to-right greedy scan still finds ``P(x)`` disjoint grams (binary search, all texts
   in lock step), else the rarest grid chunks (grams at 0, q, 2q, ...). ``last(x)`` is the
   largest pivot key and the *prefix* ``pre(x)`` is every gram of x, at any position,
   with key ``≤ last(x)``.
3. **Pivotal lemma** (Deng, Li, Feng, ICDE 2014, extended to a count): if
   ``ed(x, y) ≤ K`` then at least ``P(x) - K`` pivots of x survive unedited into y,
   shifted by at most ``K`` positions. Each survivor has key ``≤ last(x)``; if
   ``last(x) ≤ last(y)`` every copy of it in y is in ``pre(y)``; otherwise the same holds
   with x and y swapped. So every qualifying pair is found by joining the pivots of the
   text with the smaller ``last`` against the prefix of the other on equal grams, keeping
   matches with ``|pos_x - pos_y| ≤ kup(x)``, and requiring ``≥ P(x) - K`` matches plus
   the length filter. The join groups entries by (gram, length cell, position cell) in one
   sort; a pivot is entered into every cell its admissible partners can lie in, so cells
   only save work and never lose a match. Hash collisions only merge groups (more
   candidates, never fewer).
4. **Verification.** Candidates are scored with ``Levenshtein.normalized_similarity``
   and ``score_cutoff=t``, exactly as the oracle does.

Texts with fewer than ``kup + 1`` disjoint grams (very short texts, low thresholds) are
compared by brute force (rapidfuzz ``cdist`` in blocks) with every text their length
allows, and so is everything when the join would produce more raw matches than
``_FALLBACK`` times the pairs the length filter lets through (low thresholds, where
q-grams are too short to be selective). Raw matches are processed in bounded batches.
Texts identical after normalisation are grouped first (similarity 1.0).

Containments: diagonal q-gram counting
--------------------------------------
If ``partial_ratio(I, O) ≥ 100·t``, rapidfuzz found a window W of O, ``|W| ≤ m = len(I)``,
with ``D + J ≤ (1 - t)(m + |W|) ≤ E = ⌊2m(1 - t)⌋`` where D characters of I are deleted
and J characters of W inserted. A disjoint gram of I is destroyed only by a deleted
character or an insertion inside it, so of I's ``P = E + ℓ`` pivots at least ``P - E``
occur in O, and along the alignment the diagonal ``pos_O - pos_I`` of the survivors varies
by at most ``max(D, J) ≤ E``: they fall into two adjacent diagonal buckets of width
``E + 1``. Candidates are pairs with ``≥ P - E`` pivot matches in two adjacent buckets
(and the length rule). Each candidate then meets a cheap exact bound: the score is
``2·LCS(I, W) / (m + |W|) ≤ 2L / (m + L)`` with ``L = LCS(I, O)`` (rapidfuzz ``LCSseq``,
microseconds), and survivors are scored with ``fuzz.partial_ratio`` and ``score_cutoff``
(milliseconds), exactly as the oracle does. Inner texts with fewer than ``E + 1``
disjoint grams are compared with every eligible outer text; when ``max_length_ratio``
is 1, equal-length pairs (which rapidfuzz aligns either way round) are always compared.
"""

from __future__ import annotations

import math
import time
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from rapidfuzz import fuzz, process
from rapidfuzz.distance import LCSseq, Levenshtein

__all__ = [
    "Containment",
    "SimilarPair",
    "clusters",
    "containments",
    "containments_exhaustive",
    "normalise",
    "representative",
    "similar_pairs",
    "similar_pairs_exhaustive",
]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
B1 = npt.NDArray[np.bool_]

_U = np.uint64
_ALL = _U(0xFFFFFFFFFFFFFFFF)
_SLACK = 1e-6  # absolute slack on every edit budget: rounding never loses a pair
# Tuning knobs: they change speed and memory, never the result.
_LEN_CELL = 1.0  # join length cells, in units of log(1/t)
_POS_CELL = 2.0  # join position cells, in units of the edit budget
_REFINE = True  # bottleneck pivots (else grid chunks only)
_ELL = 1  # variants: pivots beyond kup (more pivots: stronger count filter, bigger join)
_SEEN_BITS = 26  # bitmap that drops join entries the other side never has
_LEVELS = 12.0  # rarity levels per doubling of a gram's estimated count
_CONTAIN_ELL = 8  # containments: pivots beyond E (each candidate needs this many on a diagonal band)
_BATCH = 10_000_000  # raw matches handled per batch (bounds memory)
_BLOCK_CELLS = 4_000_000  # brute force: pairs scored per cdist call
_PAIR_CHUNK = 100_000  # candidate pairs scored per cpdist call
_FALLBACK = 20.0  # the join gives up when its raw matches exceed this many per length-band pair

#: Counts and timings of the last fast-path call (diagnostics for benchmarks; not thread-safe).
STATS: dict[str, float] = {}
_clock = [0.0]


def _stat(name: str, value: float | None = None) -> None:
    """Record ``value`` under ``name``, or (no value) the seconds since the previous mark."""
    now = time.perf_counter()
    STATS[name] = (now - _clock[0]) if value is None else value
    if value is None:
        _clock[0] = now


def _stats_reset() -> None:
    STATS.clear()
    _clock[0] = time.perf_counter()


# ----------------------------------------------------------------------------- public API


def normalise(text: str) -> str:
    """The form variants are compared in: NFKC, case-folded, whitespace collapsed and stripped."""
    if text.isascii():  # NFKC leaves ASCII alone and casefold is lower
        return " ".join(text.lower().split())
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(folded.split())


@dataclass(frozen=True)
class SimilarPair:
    """Texts ``a < b`` (indexes into the input) with normalised similarity ``similarity``."""

    a: int
    b: int
    similarity: float


@dataclass(frozen=True)
class Containment:
    """Text ``inner`` found inside the longer text ``outer`` with alignment score ``score`` (0..1)."""

    outer: int
    inner: int
    score: float


def similar_pairs(texts: Sequence[str], threshold: float) -> list[SimilarPair]:
    """Every pair whose normalised texts have normalised Levenshtein similarity ≥ ``threshold``.

    Exact (the same pairs and similarities as :func:`similar_pairs_exhaustive`), with
    sub-quadratic candidate generation (see the module docstring). Sorted by ``(a, b)``.
    """
    t = _check_threshold(threshold)
    norm = [normalise(x) for x in texts]
    if t > 1.0 or len(norm) < 2:
        return []
    uniq, members = _unique(norm)
    out: list[SimilarPair] = []
    for group in members:  # identical after normalisation: similarity 1.0
        out.extend(SimilarPair(a, b, 1.0) for i, a in enumerate(group) for b in group[i + 1 :])
    # Distinct texts differ by at least one edit, so they can reach t only if the longer one
    # allows an edit: (1 - t) * L >= 1. Near t = 1 nothing can, and the join's cells would
    # degenerate (their width is log(1/t)).
    if t < 1.0 and len(uniq) > 1 and (1.0 - t) * max(map(len, uniq)) >= 1.0 - 1e-9:
        ua, ub, sim = _similar_unique(uniq, t)
        for u, v, s in zip(ua.tolist(), ub.tolist(), sim.tolist(), strict=True):
            out.extend(SimilarPair(min(a, b), max(a, b), s) for a in members[u] for b in members[v])
    out.sort(key=lambda p: (p.a, p.b))
    return out


def similar_pairs_exhaustive(
    texts: Sequence[str], threshold: float, *, workers: int = 1
) -> list[SimilarPair]:
    """The oracle: every pair scored by rapidfuzz ``process.cdist`` (same scorer and cutoff)."""
    t = _check_threshold(threshold)
    norm = [normalise(x) for x in texts]
    if t > 1.0 or len(norm) < 2:
        return []
    scores = process.cdist(
        norm,
        norm,
        scorer=Levenshtein.normalized_similarity,
        score_cutoff=t,
        dtype=np.float64,
        workers=workers,
    )
    a, b = np.nonzero(np.triu(scores >= t, k=1))
    return [
        SimilarPair(int(i), int(j), float(scores[i, j])) for i, j in zip(a.tolist(), b.tolist(), strict=True)
    ]


def containments(
    texts: Sequence[str], threshold: float, *, max_length_ratio: float = 0.9, min_inner_chars: int = 20
) -> list[Containment]:
    """Pairs where the normalised ``inner`` text occurs (near-)exactly inside the longer ``outer``.

    Score: ``fuzz.partial_ratio(inner, outer) / 100`` on normalised texts, reported when
    ``≥ threshold``, ``len(inner) ≥ min_inner_chars`` and
    ``len(inner) ≤ max_length_ratio · len(outer)``. Exact (the same result as
    :func:`containments_exhaustive`), sub-quadratic candidate generation. Sorted by
    ``(outer, inner)``.
    """
    t = _check_threshold(threshold)
    ratio = _check_ratio(max_length_ratio)
    norm = [normalise(x) for x in texts]
    if t > 1.0 or len(norm) < 2:
        return []
    uniq, members = _unique(norm)
    out: list[Containment] = []
    for u, group in enumerate(members):  # identical texts contain each other only if equal lengths may
        m = len(uniq[u])
        if len(group) > 1 and m >= min_inner_chars and _length_ok(m, m, ratio):
            out.extend(Containment(o, i, 1.0) for o in group for i in group if o != i)
    if len(uniq) > 1:
        uo, ui, sc = _contained_unique(uniq, t, ratio, min_inner_chars)
        for o, i, s in zip(uo.tolist(), ui.tolist(), sc.tolist(), strict=True):
            out.extend(Containment(a, b, s) for a in members[o] for b in members[i])
    out.sort(key=lambda c: (c.outer, c.inner))
    return out


def containments_exhaustive(
    texts: Sequence[str],
    threshold: float,
    *,
    max_length_ratio: float = 0.9,
    min_inner_chars: int = 20,
    workers: int = 1,
) -> list[Containment]:
    """The oracle: ``fuzz.partial_ratio`` (rapidfuzz ``process.cdist``) on every length-eligible pair."""
    t = _check_threshold(threshold)
    ratio = _check_ratio(max_length_ratio)
    norm = [normalise(x) for x in texts]
    if t > 1.0 or len(norm) < 2:
        return []
    lens = [len(x) for x in norm]
    out: list[Containment] = []
    cutoff = 100.0 * t
    for i, m in enumerate(lens):
        if m < min_inner_chars:
            continue
        outers = [o for o, n in enumerate(lens) if o != i and _length_ok(m, n, ratio)]
        if not outers:
            continue
        scores = process.cdist(
            [norm[i]],
            [norm[o] for o in outers],
            scorer=fuzz.partial_ratio,
            score_cutoff=cutoff,
            dtype=np.float64,
            workers=workers,
        )[0]
        out.extend(
            Containment(o, i, float(s) / 100.0)
            for o, s in zip(outers, scores.tolist(), strict=True)
            if s >= cutoff
        )
    out.sort(key=lambda c: (c.outer, c.inner))
    return out


def clusters(n: int, pairs: Iterable[SimilarPair]) -> list[int]:
    """Union-find over ``n`` items: each item's cluster label is the smallest index in its cluster."""
    parent = list(range(n))

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    for p in pairs:
        ra, rb = find(p.a), find(p.b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)  # the root is always the smallest member
    return [find(i) for i in range(n)]


def representative(cluster_members: Sequence[int], texts: Sequence[str]) -> int:
    """The member whose text is longest (ties: the smallest index); CURE keeps it for the cluster."""
    if not cluster_members:
        raise ValueError("an empty cluster has no representative")
    return min(cluster_members, key=lambda i: (-len(texts[i]), i))


# ----------------------------------------------------------------------------- helpers


def _check_threshold(threshold: float) -> float:
    t = float(threshold)
    if math.isnan(t):
        raise ValueError("threshold is NaN")
    return t


def _check_ratio(ratio: float) -> float:
    r = float(ratio)
    if not 0.0 < r <= 1.0:
        raise ValueError(f"max_length_ratio must be in (0, 1], got {ratio!r}")
    return r


def _length_ok(inner: int, outer: int, ratio: float) -> bool:
    """The containment length rule, one expression shared by the oracle and the fast path."""
    return inner <= ratio * outer


def _unique(norm: Sequence[str]) -> tuple[list[str], list[list[int]]]:
    """Distinct texts in first-seen order, and the input indexes holding each."""
    index: dict[str, int] = {}
    members: list[list[int]] = []
    for i, x in enumerate(norm):
        u = index.setdefault(x, len(index))
        if u == len(members):
            members.append([])
        members[u].append(i)
    return list(index), members


def _edit_budget(lengths: npt.ArrayLike, t: float) -> I64:
    """``K(L)``: the largest edit distance that can still give similarity ≥ t (with slack)."""
    L = np.asarray(lengths, dtype=np.float64)
    return np.floor((1.0 - t) * L * (1.0 + 1e-12) + _SLACK).astype(np.int64)


def _choose_q(density: float) -> int:
    """Gram length for pivots needed at ``density`` per character (0.11 at t = 0.9)."""
    if density <= 0:
        return 12
    return int(min(12, max(2, math.floor(0.7 / density))))


@dataclass
class _Grams:
    """Hashed q-grams of many texts laid end to end: one entry per character position."""

    q: int
    lens: I64
    offs: I64  # text i occupies positions offs[i] .. offs[i + 1] - 1
    h: U64  # hash of the gram starting at each position
    key: U64  # global rarity order: level of the estimated count (8 bits), then hash bits; all ones where no gram fits

    def text_of(self, index: I64) -> I64:
        """Text of each global position (fast when ``index`` is sorted)."""
        return np.searchsorted(self.offs, index, side="right").astype(np.int64) - 1


def _grams(texts: Sequence[str], q: int) -> _Grams:
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    total = int(offs[-1])
    code = np.zeros(total + q, dtype=np.uint64)
    code[:total] = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    h = code[:total] * _U(0x9E3779B97F4A7C15)
    for j in range(1, q):  # polynomial hash of code points, wrapping mod 2**64
        h *= _U(0x100000001B3)
        h += code[j : j + total]
    h ^= h >> _U(29)
    h *= _U(0xBF58476D1CE4E5B9)
    h ^= h >> _U(32)
    # Rarity: occurrences of the gram's hash bucket among every fourth position.
    bucket = (h >> _U(42)).astype(np.int64)  # 22 bits
    counts = np.bincount(bucket[::4], minlength=1 << 22)
    levels = np.minimum(np.floor(_LEVELS * np.log2(counts + 1.0)), 254).astype(np.uint64)
    key = (levels[bucket] << _U(56)) | (h >> _U(8))
    # No gram starts in the last q - 1 characters of a text.
    ends = np.maximum(offs[1:] - (q - 1), offs[:-1])
    _, index = _expand(ends, offs[1:] - ends)
    key[index] = _ALL
    return _Grams(q, lens, offs, h, key)


def _bits(x: int) -> int:
    return max(1, int(x).bit_length())


def _runs(sorted_keys: U64) -> tuple[I64, I64]:
    """Start index and length of each run of equal values in a sorted array."""
    if len(sorted_keys) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]]))
    lengths = np.diff(np.append(starts, len(sorted_keys)))
    return starts.astype(np.int64), lengths.astype(np.int64)


def _expand(starts: I64, counts: I64) -> tuple[I64, I64]:
    """For ranges ``[starts[i], starts[i] + counts[i])``: (owner i, index) of every element."""
    counts = np.maximum(counts, 0)
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    shift = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return owner, np.arange(len(owner), dtype=np.int64) + shift


def _pivots(g: _Grams, budget: I64, ell: int) -> tuple[I64, I64, U64, B1]:
    """For every text: its ``budget + ell`` rarest grid chunks (fewer if it has fewer).

    Returns (pivot positions, pivots per text, largest pivot key per text, filterable per
    text). A text is filterable when it has at least ``budget + 1`` chunks. Which chunks
    are taken only affects speed: ``last`` is the largest key actually taken.
    """
    n, q = len(g.lens), g.q
    nchunks = np.where(g.lens >= q, g.lens // q, 0)
    want = np.minimum(nchunks, budget + ell)
    filterable = nchunks >= budget + 1
    last = np.zeros(n, dtype=np.uint64)
    counts = np.where(filterable, nchunks, 0)
    text, index = _expand(np.zeros(n, dtype=np.int64), counts)  # index = chunk number
    if len(text) == 0:
        return text, want, last, filterable
    # One sort by (text, coarse key, chunk number), all packed into 64 bits.
    tb, cb = _bits(n - 1), _bits(int(nchunks.max()))
    kb = 64 - tb - cb
    pos = g.offs[text] + index * q
    packed = np.sort(
        (text.astype(np.uint64) << _U(kb + cb))
        | ((g.key[pos] >> _U(64 - kb)) << _U(cb))
        | index.astype(np.uint64)
    )
    text = (packed >> _U(kb + cb)).astype(np.int64)
    pos = g.offs[text] + (packed & _U((1 << cb) - 1)).astype(np.int64) * q
    start = np.cumsum(counts) - counts
    take = np.arange(len(pos), dtype=np.int64) - start[text] < want[text]
    piv = pos[take]
    f = np.flatnonzero(filterable)
    first = np.cumsum(want[f]) - want[f]
    last[f] = np.maximum.reduceat(g.key[piv], first)
    return np.sort(piv), want, last, filterable


def _bottleneck_pivots(g: _Grams, piv: I64, want: I64, last: U64, filterable: B1) -> tuple[I64, U64]:
    """Rarer pivots: ``want`` pairwise disjoint grams whose rarest-level bound is smallest.

    Grams are binned into rarity levels (``_LEVELS`` per doubling of the estimated count).
    For each text a binary search finds the lowest level at which the greedy left-to-right
    scan (take a gram if it starts at least q after the last one taken: this maximises the
    number of disjoint grams) still takes ``want`` grams; those are the pivots. All texts
    are scanned in lock step, one numpy step per character position. Texts that do not
    improve on their grid pivots keep them.
    """
    n, q = len(g.lens), g.q
    maxlen = int(g.lens.max())
    level = (g.key >> _U(56)).astype(np.uint8)  # 255 where no gram fits
    grid_level = np.where(filterable, (last >> _U(56)).astype(np.int64), 254)
    # Texts by decreasing length: at position p only the first ``alive[p]`` rows matter.
    order = np.argsort(-g.lens, kind="stable")
    lens_sorted = g.lens[order]
    alive = np.searchsorted(-lens_sorted, -np.arange(maxlen), side="left")  # texts longer than p
    table = np.full((n, maxlen), 255, dtype=np.uint8)
    table[np.arange(maxlen) < g.lens[:, None]] = level
    table = np.ascontiguousarray(table[order].T)  # row p: level of the gram at position p of every text
    need = np.where(filterable, want, 1 << 30)[order].astype(np.int32)

    def scan(bound: I64, record: bool) -> tuple[npt.NDArray[np.int32], list[I64]]:
        b8 = np.minimum(np.maximum(bound, -1) + 1, 255).astype(np.uint8)[order]  # take level < b8
        taken = np.zeros(n, dtype=np.int32)
        free_at = np.zeros(n, dtype=np.int32)
        take = np.zeros(n, dtype=np.bool_)
        tmp = np.zeros(n, dtype=np.bool_)
        picks: list[I64] = []
        for p in range(maxlen):
            m = int(alive[p])
            t_, x_ = take[:m], tmp[:m]
            np.less(table[p, :m], b8[:m], out=t_)
            np.less_equal(free_at[:m], p, out=x_)
            t_ &= x_
            if record:  # the search only needs to know whether ``need`` is reached
                np.less(taken[:m], need[:m], out=x_)
                t_ &= x_
                picks.append(order[np.flatnonzero(t_)])
            taken[:m] += t_
            np.copyto(free_at[:m], p + q, where=t_)
        out = np.empty(n, dtype=np.int32)
        out[order] = taken
        return out, picks

    lo = np.zeros(n, dtype=np.int64)
    hi = grid_level.copy()
    while True:
        open_ = lo < hi
        if not open_.any():
            break
        mid = np.where(open_, (lo + hi) // 2, -1)
        taken, _ = scan(mid, record=False)
        ok = taken >= want
        hi = np.where(open_ & ok, mid, hi)
        lo = np.where(open_ & ~ok, mid + 1, lo)
    better = filterable & (hi < grid_level)
    taken, picks = scan(np.where(better, hi, -1), record=True)
    done = better & (taken >= want)
    rows = [np.full(len(x), p, dtype=np.int64) for p, x in enumerate(picks)]
    texts = np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)
    pos = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    keep = done[texts]
    new_piv = g.offs[texts[keep]] + pos[keep]
    new_last = last.copy()
    new_last[done] = 0
    np.maximum.at(new_last, texts[keep], g.key[new_piv])
    keep_grid = ~done[g.text_of(piv)]
    return np.sort(np.concatenate([new_piv, piv[keep_grid]])), new_last


# ----------------------------------------------------------------------------- variants


def _similar_unique(texts: list[str], t: float, ell: int = _ELL) -> tuple[I64, I64, F64]:
    """Pairs (u < v) of distinct normalised texts with similarity ≥ t, and their similarity."""
    _stats_reset()
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    if t <= 0.0:  # every pair qualifies
        return _band_verify(texts, lens, np.ones(n, dtype=np.bool_), t)
    maxlen = int(lens.max())
    # Partner lengths allowed by the length filter: L - K(L) ≤ len (L the longer one).
    cap = math.floor((maxlen + 1) / t) + 2
    ktab = _edit_budget(np.arange(cap + 1), t)
    lmax = np.minimum(np.floor((lens + _SLACK) / t * (1 + 1e-12)).astype(np.int64) + 1, cap)
    kup = ktab[lmax]
    q = _choose_q((1.0 - t) / t)
    g = _grams(texts, q)
    _stat("grams_s")
    piv, want, last, filterable = _pivots(g, kup, ell)
    if _REFINE and len(piv) and n * maxlen <= 200_000_000 and q < 12:
        piv, last = _bottleneck_pivots(g, piv, want, last, filterable)
    _stat("pivots_s")
    _stat("pivots", len(piv))

    found: list[tuple[I64, I64, F64]] = []
    brute = ~filterable
    if len(piv):
        cand = _pivot_join(g, piv, want, last, filterable, kup, lmax, ktab, t)
        del g
        if cand is None:  # the filter would cost more than comparing the length band: do that
            brute = np.ones(n, dtype=np.bool_)
        else:
            a, b = cand
            packed = np.unique(
                (np.minimum(a, b).astype(np.uint64) << _U(32)) | np.maximum(a, b).astype(np.uint64)
            )
            _stat("candidates", len(packed))
            _stat("count_s")
            found.append(
                _verify_similar(
                    texts, (packed >> _U(32)).astype(np.int64), (packed & _U(0xFFFFFFFF)).astype(np.int64), t
                )
            )
            _stat("verify_s")
    if brute.any():
        _stat("brute_force_texts", int(brute.sum()))
        found.append(_band_verify(texts, lens, brute, t))
        _stat("brute_force_s")
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    return (
        np.concatenate([f[0] for f in found]),
        np.concatenate([f[1] for f in found]),
        np.concatenate([f[2] for f in found]),
    )


def _pairwise(scorer: Any, texts: list[str], a: I64, b: I64, dtype: Any, **kwargs: Any) -> npt.NDArray[Any]:
    """``process.cpdist`` over pairs (texts[a[k]], texts[b[k]]), in chunks (rapidfuzz copies the strings)."""
    out = np.zeros(len(a), dtype=dtype)
    for k in range(0, len(a), _PAIR_CHUNK):
        out[k : k + _PAIR_CHUNK] = process.cpdist(
            [texts[i] for i in a[k : k + _PAIR_CHUNK].tolist()],
            [texts[j] for j in b[k : k + _PAIR_CHUNK].tolist()],
            scorer=scorer,
            dtype=dtype,
            **kwargs,
        )
    return out


def _verify_similar(texts: list[str], a: I64, b: I64, t: float) -> tuple[I64, I64, F64]:
    sims = _pairwise(Levenshtein.normalized_similarity, texts, a, b, np.float64, score_cutoff=t)
    keep = sims >= t
    return a[keep], b[keep], sims[keep]


def _band_verify(texts: list[str], lens: I64, who: B1, t: float) -> tuple[I64, I64, F64]:
    """Brute force: every pair with a text in ``who`` that passes the length filter, by cdist blocks.

    Texts are sorted by length; each block of rows is compared with the contiguous range of
    texts its length filter allows. Each pair is reported once (a < b).
    """
    n = len(texts)
    order = np.argsort(lens, kind="stable")
    sl = lens[order]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    rows = np.sort(rank[np.flatnonzero(who)])  # ranks of the texts in ``who``
    if t > 0:
        lo = np.searchsorted(sl, np.floor(sl[rows] * t * (1 - 1e-12) - 1).astype(np.int64), side="left")
        hi = np.searchsorted(
            sl, np.floor((sl[rows] + 1) / t * (1 + 1e-12)).astype(np.int64) + 1, side="right"
        )
    else:
        lo, hi = np.zeros(len(rows), dtype=np.int64), np.full(len(rows), n, dtype=np.int64)
    in_who = np.zeros(n, dtype=np.bool_)
    in_who[rows] = True
    out_a: list[I64] = []
    out_b: list[I64] = []
    out_s: list[F64] = []
    step = max(1, _BLOCK_CELLS // max(1, int((hi - lo).max(initial=1))))
    for k in range(0, len(rows), step):
        r = rows[k : k + step]
        c0, c1 = int(lo[k : k + step].min()), int(hi[k : k + step].max())
        scores = process.cdist(
            [texts[i] for i in order[r].tolist()],
            [texts[j] for j in order[c0:c1].tolist()],
            scorer=Levenshtein.normalized_similarity,
            score_cutoff=t,
            dtype=np.float64,
        )
        ri, cj = np.nonzero(scores >= t)
        x, y = r[ri], cj + c0
        keep = (x != y) & (~in_who[y] | (x < y))  # a pair of two rows is kept once
        x, y, sc = order[x[keep]], order[y[keep]], scores[ri[keep], cj[keep]]
        out_a.append(np.minimum(x, y))
        out_b.append(np.maximum(x, y))
        out_s.append(sc)
    if not out_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    return np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s)


def _pivot_join(
    g: _Grams, piv: I64, want: I64, last: U64, filterable: B1, kup: I64, lmax: I64, ktab: I64, t: float
) -> tuple[I64, I64] | None:
    """Candidate pairs among filterable texts (see the module docstring, steps 2-3).

    None when the join would produce more raw matches than ``_FALLBACK`` times the number
    of pairs the length filter lets through (low thresholds): brute force is cheaper then.
    """
    n = len(g.lens)
    lens = g.lens
    maxlen = int(lens.max())
    pre = np.flatnonzero(g.key <= np.repeat(np.where(filterable, last, 0), lens))
    rt = g.text_of(pre)
    rp = pre - g.offs[rt]

    # Cells: log-length cells and position cells; a pivot enters every cell a partner can be in.
    width = _LEN_CELL * math.log(1.0 / t)
    lcell = np.floor(np.log(np.maximum(lens, 1)) / width).astype(np.int64)
    ncell = int(np.floor(math.log(max(int(lmax.max()), 2)) / width)) + 2
    cell_len = np.exp((np.arange(ncell + 1) + 1.0) * width)
    bsize = np.maximum(1, np.floor(_POS_CELL * (1.0 - t) * cell_len).astype(np.int64))

    # Bit layout of a sort entry: join key | last rank | role | text | position.
    tb, lq = _bits(n - 1), 8
    pshift = max(0, _bits(maxlen) - max(1, 64 - 28 - lq - 1 - tb))
    pb = _bits(maxlen >> pshift)
    jb = 64 - lq - 1 - tb - pb
    if jb < 20:
        raise ValueError("too many texts for one similarity join")  # pragma: no cover
    last_rank = np.searchsorted(np.unique(last), last).astype(np.int64)
    lastq = (last_rank * (1 << lq) // max(1, int(last_rank.max()) + 1)).astype(np.uint64)
    low = 64 - jb
    c1, c2 = _U(0x9E3779B97F4A7C15), _U(0xC2B2AE3D27D4EB4F)

    rl = lcell[rt]
    pre_jk = (g.h[pre] + rl.astype(np.uint64) * c1 + (rp // bsize[rl]).astype(np.uint64) * c2) >> _U(low)
    # Pivot replicas: one per (length cell, position cell) a partner's copy can fall in.
    st = g.text_of(piv)
    sp = piv - g.offs[st]
    k = kup[st]
    c_lo = np.floor(np.log(np.maximum(lens[st] - k, 1)) / width).astype(np.int64)
    c_hi = np.floor(np.log(np.maximum(lmax[st], 1)) / width).astype(np.int64)
    pc_of, c = _expand(c_lo, c_hi - c_lo + 1)  # (pivot, length cell)
    b = bsize[c]
    p_lo = np.maximum(sp[pc_of] - k[pc_of], 0) // b
    p_hi = (sp[pc_of] + k[pc_of]) // b
    rep, cell = _expand(p_lo, p_hi - p_lo + 1)  # (pivot x length cell, position cell)
    piv_of = pc_of[rep]
    piv_jk = (g.h[piv[piv_of]] + c[rep].astype(np.uint64) * c1 + cell.astype(np.uint64) * c2) >> _U(low)
    del pc_of, c, b, p_lo, p_hi, rep, cell
    _stat("prefix_all", len(pre))
    _stat("pivot_entries_all", len(piv_jk))
    _stat("replicas_s")
    # Drop entries whose join key the other side never has (a bitmap on the key's top bits).
    tbits = min(jb, _SEEN_BITS)
    seen = np.zeros(1 << tbits, dtype=np.bool_)
    seen[(piv_jk >> _U(jb - tbits)).astype(np.int64)] = True
    keep = seen[(pre_jk >> _U(jb - tbits)).astype(np.int64)]
    rt, rp, pre_jk = rt[keep], rp[keep], pre_jk[keep]
    seen[:] = False
    seen[(pre_jk >> _U(jb - tbits)).astype(np.int64)] = True
    keep = seen[(piv_jk >> _U(jb - tbits)).astype(np.int64)]
    piv_jk, piv_of = piv_jk[keep], piv_of[keep]
    del seen, keep
    _stat("prefix", len(rt))
    _stat("pivot_entries", len(piv_jk))
    _stat("entries_s")
    role = _U(1 << (tb + pb))
    packed = np.concatenate(
        [
            (pre_jk << _U(low))
            | (lastq[rt] << _U(1 + tb + pb))
            | role
            | (rt.astype(np.uint64) << _U(pb))
            | (rp >> pshift).astype(np.uint64),
            (piv_jk << _U(low))
            | (lastq[st[piv_of]] << _U(1 + tb + pb))
            | (st[piv_of].astype(np.uint64) << _U(pb))
            | (sp[piv_of] >> pshift).astype(np.uint64),
        ]
    )
    del pre_jk, piv_jk, rt, rp
    packed.sort()
    _stat("sort_s")

    # For each pivot entry: the prefix entries after it in its join-key group (same gram and
    # cells, last rank at least its own) are its partners.
    is_pre = (packed & role) != 0
    pv = np.flatnonzero(~is_pre)
    jk = packed[pv] >> _U(low)
    top = jk == (_ALL >> _U(low))  # the largest key cannot be incremented
    group_end = np.searchsorted(packed, (jk + _U(1)) << _U(low), side="left")
    group_end[top] = len(packed)
    lo = pv - np.arange(len(pv), dtype=np.int64)  # prefix entries before each pivot entry
    cnt = group_end - np.searchsorted(pv, group_end) - lo
    keep2 = cnt > 0
    lo, cnt = lo[keep2], cnt[keep2]
    mask = _U((1 << (tb + pb)) - 1)
    spay = packed[pv[keep2]] & mask
    rpay = packed[is_pre] & mask
    del packed, is_pre, pv, jk, group_end
    raw = int(cnt.sum())
    _stat("raw", raw)
    _stat("groups_s")
    if raw == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    batches = np.searchsorted(np.cumsum(cnt), np.arange(1, raw // _BATCH + 1) * _BATCH)
    edges = np.unique(np.concatenate([[0], batches, [len(cnt)]]))
    if raw > _FALLBACK * _band_pair_count(lens, ktab, t):
        return None
    if len(edges) > 2 and (
        n >= 1 << 24 or int(want.max()) >= 0xFFFF
    ):  # the merge packs 24-bit ids, 16-bit counts
        return None
    # Count surviving pivots per (pivot text, prefix text), batch by batch (bounded memory):
    # each batch's pairs are reduced to (pair, count) words, merged when they pile up.
    multi = len(edges) > 2
    counted: list[U64] = []
    pending = merged_size = 0
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        owner, index = _expand(lo[a:b], cnt[a:b])
        sp_ = spay[a:b][owner]
        rp_ = rpay[index]
        del owner, index
        s = (sp_ >> _U(pb)).astype(np.int64)
        # Exact position filter (the pivot text's kup bounds every partner's K).
        gap = np.abs((sp_ & _U((1 << pb) - 1)).astype(np.int64) - (rp_ & _U((1 << pb) - 1)).astype(np.int64))
        ok = gap <= (kup[s] >> pshift) + (1 if pshift else 0)
        pk: U64 = np.sort((s[ok].astype(np.uint64) << _U(32)) | (rp_[ok] >> _U(pb)))
        del sp_, rp_, s, gap, ok
        st2, cnt2 = _runs(pk)
        up = pk[st2]
        del pk
        s, r = (up >> _U(32)).astype(np.int64), (up & _U(0xFFFFFFFF)).astype(np.int64)
        ls, lr = lens[s], lens[r]
        ok = (s != r) & (np.abs(ls - lr) <= ktab[np.maximum(ls, lr)]) & (last[s] <= last[r])
        if not multi:
            s, r, counts = s[ok], r[ok], cnt2[ok]
            break
        # pair (24 + 24 bits) and a 16-bit count in one word
        word: U64 = np.bitwise_or((s[ok].astype(np.uint64) << _U(40)), (r[ok].astype(np.uint64) << _U(16)))
        counted.append(np.bitwise_or(word, np.minimum(cnt2[ok], 0xFFFF).astype(np.uint64)))
        pending += int(ok.sum())
        if pending > max(2 * _BATCH, 2 * merged_size):  # geometric: each word is merged O(log) times
            counted = [_merge_counts(counted)]
            pending = merged_size = len(counted[0])
    if multi:
        merged = _merge_counts(counted)
        s = (merged >> _U(40)).astype(np.int64)
        r = ((merged >> _U(16)) & _U((1 << 24) - 1)).astype(np.int64)
        counts = (merged & _U(0xFFFF)).astype(np.int64)
    _stat("kept_pairs", len(s))
    _stat("raw_s")
    ok = counts >= want[s] - ktab[np.maximum(lens[s], lens[r])]
    return s[ok], r[ok]


def _merge_counts(parts: list[U64]) -> U64:
    """Words ``pair << 16 | count``: one word per pair, counts added (capped at 65535)."""
    words = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)
    starts, _ = _runs(words >> _U(16))
    if len(starts) == 0:
        return words
    total = np.minimum(np.add.reduceat((words & _U(0xFFFF)).astype(np.int64), starts), 0xFFFF)
    out: U64 = np.bitwise_or((words[starts] >> _U(16)) << _U(16), total.astype(np.uint64))
    return out


def _band_pair_count(lens: I64, ktab: I64, t: float) -> int:
    """How many pairs the length filter lets through (what brute force would score)."""
    sl = np.sort(lens)
    hi = np.searchsorted(sl, np.floor((sl + 1) / t * (1 + 1e-12)).astype(np.int64) + 1, side="right")
    return int((hi - np.arange(len(sl)) - 1).clip(min=0).sum())


# ----------------------------------------------------------------------------- containments


def _contained_unique(texts: list[str], t: float, ratio: float, min_inner: int) -> tuple[I64, I64, F64]:
    """(outer, inner, score) over distinct normalised texts."""
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    longest = int(lens.max())
    inner_ok = (lens >= min_inner) & (lens <= ratio * longest)
    none = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    if not inner_ok.any():
        return none
    events = np.floor(2.0 * lens * (1.0 - t) * (1.0 + 1e-12) + _SLACK).astype(np.int64)
    cands: list[tuple[I64, I64]] = []
    _stats_reset()
    if t > 0.0:
        q = _choose_q(2.0 * (1.0 - t))
        g = _grams(texts, q)
        budget = np.where(inner_ok, events, np.iinfo(np.int64).max // 4)
        piv, want, last, filterable = _pivots(g, budget, _CONTAIN_ELL)
        if _REFINE and len(piv) and n * longest <= 200_000_000:
            piv, last = _bottleneck_pivots(g, piv, want, last, filterable)
        _stat("pivots", len(piv))
        _stat("pivots_s")
        if len(piv):
            cands.append(_diagonal_join(g, piv, want, events, ratio))
        brute = inner_ok & ~filterable
    else:
        brute = inner_ok
    if brute.any():
        cands.append(_ratio_pairs(lens, brute, ratio))
    if ratio >= 1.0:  # equal lengths: partial_ratio may align either text inside the other
        cands.append(_equal_length_pairs(lens, inner_ok))
    if not cands:
        return none
    o = np.concatenate([c[0] for c in cands])
    i = np.concatenate([c[1] for c in cands])
    packed = np.unique((o.astype(np.uint64) << _U(32)) | i.astype(np.uint64))
    o = (packed >> _U(32)).astype(np.int64)
    i = (packed & _U(0xFFFFFFFF)).astype(np.int64)
    _stat("candidates", len(o))
    _stat("join_s")
    if len(o) == 0:
        return none
    if t > 0.0:
        # partial_ratio / 100 = 2·LCS(I, W) / (m + |W|) for a window W of O, which is at most
        # 2·L / (m + L) with L = LCS(I, O): a cheap exact upper bound.
        lcs = _pairwise(LCSseq.similarity, texts, i, o, np.int64)
        m = lens[i]
        ok = 2.0 * lcs >= (t - 1e-9) * (m + lcs)
        o, i = o[ok], i[ok]
    _stat("lcs_survivors", len(o))
    _stat("lcs_s")
    cutoff = 100.0 * t
    scores = np.array(
        [
            fuzz.partial_ratio(texts[b], texts[a], score_cutoff=cutoff)
            for a, b in zip(o.tolist(), i.tolist(), strict=True)
        ],
        dtype=np.float64,
    )
    keep = scores >= cutoff
    _stat("verify_s")
    return o[keep], i[keep], scores[keep] / 100.0


def _ratio_pairs(lens: I64, who: B1, ratio: float) -> tuple[I64, I64]:
    """(outer, inner) for every inner in ``who`` and every outer its length rule allows."""
    order = np.argsort(lens, kind="stable")
    sl = lens[order]
    u = np.flatnonzero(who)
    lo = np.searchsorted(sl, np.floor(lens[u] / ratio * (1 - 1e-12)).astype(np.int64) - 1, side="left")
    owner, index = _expand(lo.astype(np.int64), (len(sl) - lo).astype(np.int64))
    inner = u[owner]
    outer = order[index]
    keep = (inner != outer) & (lens[inner] <= ratio * lens[outer])
    return outer[keep], inner[keep]


def _equal_length_pairs(lens: I64, who: B1) -> tuple[I64, I64]:
    """(outer, inner) for every inner in ``who`` and every other text of the same length."""
    order = np.argsort(lens, kind="stable")
    sl = lens[order]
    u = np.flatnonzero(who)
    lo = np.searchsorted(sl, lens[u], side="left")
    hi = np.searchsorted(sl, lens[u], side="right")
    owner, index = _expand(lo.astype(np.int64), (hi - lo).astype(np.int64))
    inner, outer = u[owner], order[index]
    keep = inner != outer
    return outer[keep], inner[keep]


def _diagonal_join(g: _Grams, piv: I64, want: I64, events: I64, ratio: float) -> tuple[I64, I64]:
    """(outer, inner) candidates: enough pivots of the inner on two adjacent diagonals of the outer.

    The outer side (every gram of a long enough text whose hash some pivot has) is sorted
    once by (gram, text length); each pivot's partners are then the range of that gram
    with length at least the inner's minimum outer length. Inner texts are processed in
    batches so that memory stays bounded.
    """
    n = len(g.lens)
    lens = g.lens
    maxlen = int(lens.max())
    it = g.text_of(piv)
    ip = piv - g.offs[it]
    min_outer = np.maximum(np.floor(lens[it] / ratio * (1 - 1e-12)).astype(np.int64) - 1, 0)
    table_bits = 24
    seen = np.zeros(1 << table_bits, dtype=np.bool_)
    seen[(g.h[piv] >> _U(64 - table_bits)).astype(np.int64)] = True
    long_enough = np.repeat(lens >= int(min_outer.min()), lens)
    out = np.flatnonzero((g.key != _ALL) & long_enough & seen[(g.h >> _U(64 - table_bits)).astype(np.int64)])
    del seen, long_enough
    tb, lb, pb = _bits(n - 1), _bits(maxlen), _bits(maxlen)
    jb = 64 - lb - tb - pb
    if jb < 16:
        raise ValueError("too many texts for one containment join")  # pragma: no cover
    low = 64 - jb
    ot = g.text_of(out)
    okeys = np.sort(
        ((g.h[out] >> _U(low)) << _U(low))
        | (lens[ot].astype(np.uint64) << _U(tb + pb))
        | (ot.astype(np.uint64) << _U(pb))
        | (out - g.offs[ot]).astype(np.uint64)
    )
    del out, ot
    pjk = g.h[piv] >> _U(low)
    qlo = (pjk << _U(low)) | (np.minimum(min_outer, (1 << lb) - 1).astype(np.uint64) << _U(tb + pb))
    order = np.argsort(qlo, kind="stable")
    lo = np.empty(len(piv), dtype=np.int64)
    hi = np.empty(len(piv), dtype=np.int64)
    lo[order] = np.searchsorted(okeys, qlo[order], side="left")
    top = pjk == (_ALL >> _U(low))
    nxt = np.where(top, _U(0), (pjk + _U(1)) << _U(low))
    order = np.argsort(nxt, kind="stable")
    hi[order] = np.searchsorted(okeys, nxt[order], side="left")
    hi[top] = len(okeys)
    cnt = np.maximum(hi - lo, 0)
    _stat("outer_entries", len(okeys))
    _stat("raw", int(cnt.sum()))
    _stat("index_s")
    # Batches of whole inner texts (pivots are sorted by position, so by text).
    per_text = np.bincount(it, weights=cnt, minlength=n)
    bounds = np.searchsorted(np.cumsum(per_text), np.arange(1, int(per_text.sum() // _BATCH) + 2) * _BATCH)
    text_edges = np.unique(np.concatenate([[0], np.minimum(bounds + 1, n), [n]]))
    piv_edges = np.searchsorted(it, text_edges, side="left")
    db = _bits(2 * maxlen + 1)
    if 2 * tb + db > 64:
        raise ValueError("too many texts for one containment join")  # pragma: no cover
    pmask = _U((1 << pb) - 1)
    found_o: list[I64] = []
    found_i: list[I64] = []
    for a, b in zip(piv_edges[:-1].tolist(), piv_edges[1:].tolist(), strict=True):
        if a == b:
            continue
        owner, index = _expand(lo[a:b], cnt[a:b])
        owner += a
        opay = okeys[index]
        del index
        o = ((opay >> _U(pb)) & _U((1 << tb) - 1)).astype(np.int64)
        i = it[owner]
        ok = (o != i) & (lens[i] <= ratio * lens[o])
        diag = (opay & pmask).astype(np.int64)[ok] - ip[owner[ok]] + maxlen
        i, o = i[ok], o[ok]
        del owner, opay, ok
        bucket = diag // (events[i] + 1)
        pk = np.sort(
            (i.astype(np.uint64) << _U(tb + db)) | (o.astype(np.uint64) << _U(db)) | bucket.astype(np.uint64)
        )
        del i, o, diag, bucket
        st, c = _runs(pk)
        key = pk[st]
        pair = key >> _U(db)
        bk = (key & _U((1 << db) - 1)).astype(np.int64)
        adjacent = np.zeros(len(key), dtype=np.bool_)
        adjacent[:-1] = (pair[1:] == pair[:-1]) & (bk[1:] == bk[:-1] + 1)
        both = c + np.where(adjacent, np.append(c[1:], 0), 0)
        i = (pair >> _U(tb)).astype(np.int64)
        o = (pair & _U((1 << tb) - 1)).astype(np.int64)
        ok = both >= want[i] - events[i]
        found_o.append(o[ok])
        found_i.append(i[ok])
    if not found_o:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(found_o), np.concatenate(found_i)
