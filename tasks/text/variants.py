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

1. **Grams and a global order.** Every text's q-grams (q chosen from t, 6 at t = 0.9)
   are hashed; grams are ordered by an estimate of how often they occur in the input
   (rare first), ties by hash. Any fixed order of gram values is correct; rare-first only
   makes the filter cheap.
2. **Pivots.** The grid chunks of x (the grams starting at 0, q, 2q, ...) are pairwise
   disjoint, so one edit (substitution, insertion or deletion of one character) destroys
   at most one of them. The ``P(x) = kup(x) + ℓ`` rarest chunks are x's *pivots*;
   ``last(x)`` is the largest of their keys and the *prefix* ``pre(x)`` is every gram of x
   (at any position) whose key is ``≤ last(x)``.
3. **Pivotal lemma** (Deng, Li, Feng, ICDE 2014, extended to a count): if
   ``ed(x, y) ≤ K`` then at least ``P(x) - K`` pivots of x survive unedited into y, at a
   position shifted by at most ``K``. Each survivor has key ``≤ last(x)``; if
   ``last(x) ≤ last(y)`` every copy of it in y is in ``pre(y)``. Otherwise swap x and y.
   So every qualifying pair is found by joining the pivots of the text with the smaller
   ``last`` against the prefix of the other on equal grams, keeping matches with
   ``|pos_x - pos_y| ≤ K`` and ``|len_x - len_y| ≤ K``, and counting at least
   ``P(x) - K`` matches. The join groups entries by (gram, length cell, position cell);
   a pivot is entered into every cell its admissible partners can lie in, so the cells
   only save work and never lose a match. Hash collisions only merge groups (more
   candidates, never fewer).
4. **Verification.** Candidates are scored with ``Levenshtein.normalized_similarity``
   and ``score_cutoff=t``, exactly as the oracle does.

Texts too short to have ``kup + 1`` chunks (very short texts, low thresholds) are
compared with every text their length allows (still exact, quadratic only in them).
Texts identical after normalisation are grouped first (similarity 1.0).

Containments: diagonal q-gram counting
--------------------------------------
If ``partial_ratio(I, O) ≥ 100·t`` rapidfuzz found a window W of O, ``|W| ≤ m = len(I)``,
with ``D + J ≤ (1 - t)(m + |W|) ≤ E = ⌊2m(1 - t)⌋`` where D inner characters are deleted
and J window characters inserted. Disjoint chunks of I are destroyed only by a deleted
character or an insertion inside them, so at most E are destroyed: of I's
``P = E + ℓ`` rarest grid chunks at least ``P - E`` occur in O, and on the alignment the
diagonal ``pos_O - pos_I`` of the survivors varies by at most ``max(D, J) ≤ E``, so they
fall into two adjacent diagonal buckets of width ``E + 1``. Candidates are pairs with
``≥ P - E`` chunk matches in two adjacent buckets (and the length ratio); each is scored
with ``fuzz.partial_ratio`` and ``score_cutoff``, exactly as the oracle does. Inner texts
with fewer than ``E + 1`` chunks are compared with every eligible outer text.
"""

from __future__ import annotations

import math
import time
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from rapidfuzz import fuzz, process
from rapidfuzz.distance import Levenshtein

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
_LEN_CELL = 1.0  # length cell width, in units of log(1/t) (speed only, never correctness)
_POS_CELL = 1.0  # position cell size, in units of the edit budget (speed only)
_REFINE = True

#: Counts and timings of the last fast-path call (diagnostics for benchmarks; not thread-safe).
STATS: dict[str, float] = {}
_clock = [0.0]


def _stat(name: str, value: float | None = None) -> None:
    """Record ``value`` under ``name``, or (no value) the seconds since the previous mark."""
    now = time.perf_counter()
    STATS[name] = (now - _clock[0]) if value is None else value
    if value is None:
        _clock[0] = now


# ----------------------------------------------------------------------------- public API


def normalise(text: str) -> str:
    """The form variants are compared in: NFKC, case-folded, whitespace collapsed and stripped."""
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
    if t < 1.0 and len(uniq) > 1:
        ua, ub, sim = _similar_unique(uniq, t)
        for u, v, s in zip(ua.tolist(), ub.tolist(), sim.tolist(), strict=True):
            out.extend(SimilarPair(min(a, b), max(a, b), s) for a in members[u] for b in members[v])
    out.sort(key=lambda p: (p.a, p.b))
    return out


def similar_pairs_exhaustive(texts: Sequence[str], threshold: float, *, workers: int = 1) -> list[SimilarPair]:
    """The oracle: every pair scored by rapidfuzz ``process.cdist`` (same scorer and cutoff)."""
    t = _check_threshold(threshold)
    norm = [normalise(x) for x in texts]
    if t > 1.0 or len(norm) < 2:
        return []
    scores = process.cdist(
        norm, norm, scorer=Levenshtein.normalized_similarity, score_cutoff=t, dtype=np.float64, workers=workers
    )
    a, b = np.nonzero(np.triu(scores >= t, k=1))
    return [SimilarPair(int(i), int(j), float(scores[i, j])) for i, j in zip(a.tolist(), b.tolist(), strict=True)]


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
        out.extend(Containment(o, i, float(s) / 100.0) for o, s in zip(outers, scores.tolist(), strict=True) if s >= cutoff)
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
    """Hashed q-grams of many texts laid end to end (one entry per character position)."""

    q: int
    lens: I64
    offs: I64
    h: U64  # gram hash starting at each position (garbage where ``valid`` is False)
    text: I64  # text id of each position
    pos: I64  # position inside its text
    valid: B1  # the gram lies inside its text
    key: U64  # global rarity order: estimated count << 24 | 24 hash bits


def _grams(texts: Sequence[str], q: int) -> _Grams:
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    total = int(offs[-1])
    code = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
    code = np.concatenate([code, np.zeros(q, dtype=np.uint64)])
    h = np.zeros(total, dtype=np.uint64)
    for j in range(q):  # polynomial hash of code points, wrapping mod 2**64
        h *= _U(0x100000001B3)
        h += code[j : j + total]
    h = _mix(h)
    text = np.repeat(np.arange(n, dtype=np.int64), lens)
    pos = np.arange(total, dtype=np.int64) - offs[text]
    valid = pos <= lens[text] - q
    # Rarity: occurrences of the gram's hash bucket, estimated on the whole input.
    bucket = (h >> _U(42)).astype(np.int64)  # 22 bits
    counts = np.bincount(bucket[valid], minlength=1 << 22)
    est = np.minimum(counts[bucket], (1 << 24) - 1).astype(np.uint64)
    key = (est << _U(24)) | (h & _U((1 << 24) - 1))
    key[~valid] = _ALL
    return _Grams(q, lens, offs, h, text, pos, valid, key)


def _mix(z: U64) -> U64:
    z = z ^ (z >> _U(33))
    z = z * _U(0xFF51AFD7ED558CCD)
    z = z ^ (z >> _U(33))
    z = z * _U(0xC4CEB9FE1A85EC53)
    return z ^ (z >> _U(33))


def _bits(x: int) -> int:
    return max(1, int(x).bit_length())


def _pivots(g: _Grams, budget: I64, ell: int) -> tuple[I64, I64, U64, B1]:
    """For every text: its ``budget + ell`` rarest grid chunks (fewer if it has fewer).

    Returns (pivot gram indexes, pivots per text, largest pivot key per text, filterable
    per text). A text is filterable when it has at least ``budget + 1`` chunks. Which
    chunks are taken only affects speed: ``last`` is the largest key actually taken.
    """
    n = len(g.lens)
    nchunks = np.where(g.lens >= g.q, g.lens // g.q, 0)
    want = np.minimum(nchunks, budget + ell)
    filterable = nchunks >= budget + 1
    last = np.zeros(n, dtype=np.uint64)
    idx = np.flatnonzero(g.valid & (g.pos % g.q == 0) & filterable[g.text])
    if len(idx) == 0:
        return idx, want, last, filterable
    # One sort by (text, coarse key, chunk number), all packed into 64 bits.
    tb, cb = _bits(n - 1), _bits(int(nchunks.max()))
    kb = 64 - tb - cb
    coarse = g.key[idx] >> _U(max(0, 48 - kb))
    packed = np.sort(
        (g.text[idx].astype(np.uint64) << _U(kb + cb)) | (coarse << _U(cb)) | (g.pos[idx] // g.q).astype(np.uint64)
    )
    text = (packed >> _U(kb + cb)).astype(np.int64)
    idx = g.offs[text] + (packed & _U((1 << cb) - 1)).astype(np.int64) * g.q
    start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.where(filterable, nchunks, 0), out=start[1:])
    take = np.arange(len(idx), dtype=np.int64) - start[text] < want[text]
    piv = idx[take]
    f = np.flatnonzero(filterable)
    first = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.where(filterable, want, 0), out=first[1:])
    last[f] = np.maximum.reduceat(g.key[piv], first[f])
    return piv, want, last, filterable


def _refine_pivots(g: _Grams, piv: I64, want: I64, last: U64, filterable: B1) -> tuple[I64, U64]:
    """Rarer pivots: pairwise disjoint grams at any position, taken rarest first.

    Among a text's grams with key ≤ its grid ``last`` (the grid chunks prove that ``want``
    disjoint grams exist there), grams are taken in key order when they overlap no gram
    taken before, until ``want`` are taken. Texts for which this falls short keep their
    grid pivots. Runs in lock step over all texts (one numpy step per rank).
    """
    n, q = len(g.lens), g.q
    maxlen = int(g.lens.max())
    if n * (maxlen + q) > 200_000_000:  # the occupancy table would be too big: keep the grid
        return piv, last
    cand = np.flatnonzero(g.valid & filterable[g.text] & (g.key <= last[g.text]))
    tb, pb = _bits(n - 1), _bits(maxlen)
    kb = 64 - tb - pb
    packed = np.sort(
        (g.text[cand].astype(np.uint64) << _U(kb + pb))
        | ((g.key[cand] >> _U(max(0, 48 - kb))) << _U(pb))
        | g.pos[cand].astype(np.uint64)
    )
    text = (packed >> _U(kb + pb)).astype(np.int64)
    pos = (packed & _U((1 << pb) - 1)).astype(np.int64)
    del packed, cand
    count = np.bincount(text, minlength=n)
    start = np.zeros(n, dtype=np.int64)
    start[1:] = np.cumsum(count)[:-1]
    occupied = np.zeros((n, maxlen + q), dtype=np.bool_)
    taken = np.zeros(n, dtype=np.int64)
    picks: list[I64] = []
    active = np.flatnonzero(filterable & (count > 0))
    j = 0
    while len(active):
        row = start[active] + j
        p = pos[row]
        free = ~(occupied[active, p] | occupied[active, p + q - 1])
        who, p = active[free], p[free]
        for d in range(q):
            occupied[who, p + d] = True
        taken[who] += 1
        picks.append(row[free])
        j += 1
        active = active[(taken[active] < want[active]) & (j < count[active])]
    rows = np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)
    done = filterable & (taken >= want)
    rows = rows[done[text[rows]]]
    new_piv = g.offs[text[rows]] + pos[rows]
    new_last = last.copy()
    new_last[done] = 0
    np.maximum.at(new_last, text[rows], g.key[new_piv])
    keep_grid = ~done[g.text[piv]]
    return np.concatenate([new_piv, piv[keep_grid]]), new_last


def _runs(sorted_keys: U64) -> tuple[I64, I64]:
    """Start index and length of each run of equal values in a sorted array."""
    if len(sorted_keys) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.concatenate([[0], np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1]).astype(np.int64)
    lengths = np.diff(np.concatenate([starts, [len(sorted_keys)]])).astype(np.int64)
    return starts, lengths


def _expand(starts: I64, counts: I64) -> tuple[I64, I64]:
    """For ranges ``[starts[i], starts[i] + counts[i])``: (owner i, index) of every element."""
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    index = np.arange(total, dtype=np.int64) - first[owner] + starts[owner]
    return owner, index


# ----------------------------------------------------------------------------- variants


def _similar_unique(texts: list[str], t: float, ell: int = 1) -> tuple[I64, I64, F64]:
    """Pairs (u < v) of distinct normalised texts with similarity ≥ t, and their similarity."""
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    if t <= 0.0:
        return _verify_similar(texts, *np.triu_indices(n, k=1), t)
    maxlen = int(lens.max())
    # Partner lengths allowed by the length filter: L - K(L) ≤ len (L the longer one).
    cap = int(math.floor((maxlen + 1) / t)) + 2
    ktab = _edit_budget(np.arange(cap + 1), t)
    lmax = np.minimum(np.floor((lens + _SLACK) / t * (1 + 1e-12)).astype(np.int64) + 1, cap)
    kup = ktab[lmax]
    q = _choose_q((1.0 - t) / t)
    _stat("start")
    g = _grams(texts, q)
    _stat("grams_s")
    piv, want, last, filterable = _pivots(g, kup, ell)
    if _REFINE:
        piv, last = _refine_pivots(g, piv, want, last, filterable)
    _stat("pivots_s")
    _stat("pivots", len(piv))

    pairs: list[tuple[I64, I64]] = []
    if len(piv):
        pairs.append(_pivot_join(g, piv, want, last, filterable, kup, lmax, ktab, t))
    if not filterable.all():
        pairs.append(_band_pairs(lens, ~filterable, ktab, t))
    if not pairs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    a = np.concatenate([p[0] for p in pairs])
    b = np.concatenate([p[1] for p in pairs])
    packed = np.unique((np.minimum(a, b).astype(np.uint64) << _U(32)) | np.maximum(a, b).astype(np.uint64))
    _stat("candidates", len(packed))
    _stat("count_s")
    out = _verify_similar(texts, (packed >> _U(32)).astype(np.int64), (packed & _U(0xFFFFFFFF)).astype(np.int64), t)
    _stat("verify_s")
    return out


def _verify_similar(texts: list[str], a: I64, b: I64, t: float) -> tuple[I64, I64, F64]:
    if len(a) == 0:
        return a, b, np.zeros(0, dtype=np.float64)
    sims = process.cpdist(
        [texts[i] for i in a.tolist()],
        [texts[j] for j in b.tolist()],
        scorer=Levenshtein.normalized_similarity,
        score_cutoff=t,
        dtype=np.float64,
    )
    keep = sims >= t
    return a[keep], b[keep], sims[keep]


def _band_pairs(lens: I64, who: B1, ktab: I64, t: float) -> tuple[I64, I64]:
    """Every pair with at least one text in ``who`` that passes the length filter."""
    order = np.argsort(lens, kind="stable")
    sl = lens[order]
    u = np.flatnonzero(who)
    lo = np.searchsorted(sl, np.floor(lens[u] * t * (1 - 1e-12) - 1).astype(np.int64), side="left")
    hi = np.searchsorted(sl, np.floor((lens[u] + 1) / t * (1 + 1e-12)).astype(np.int64) + 1, side="right")
    owner, index = _expand(lo.astype(np.int64), (hi - lo).astype(np.int64))
    a = u[owner]
    b = order[index]
    longer = np.maximum(lens[a], lens[b])
    keep = (a != b) & (np.abs(lens[a] - lens[b]) <= ktab[np.minimum(longer, len(ktab) - 1)])
    return a[keep], b[keep]


def _pivot_join(
    g: _Grams, piv: I64, want: I64, last: U64, filterable: B1, kup: I64, lmax: I64, ktab: I64, t: float
) -> tuple[I64, I64]:
    """Candidate pairs among filterable texts (see the module docstring, steps 2-3)."""
    n = len(g.lens)
    lens = g.lens
    maxlen = int(lens.max())
    pre = np.flatnonzero(g.valid & filterable[g.text] & (g.key <= last[g.text]))

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

    def join_key(gram: U64, lc: I64, pc: I64) -> U64:
        return (gram + lc.astype(np.uint64) * _U(0x9E3779B97F4A7C15) + pc.astype(np.uint64) * _U(0xC2B2AE3D27D4EB4F)) >> _U(low)

    def payload(who: I64, where: I64, role: int) -> U64:
        return (
            (lastq[who] << _U(1 + tb + pb))
            | _U(role << (tb + pb))
            | (who.astype(np.uint64) << _U(pb))
            | (where >> pshift).astype(np.uint64)
        )

    rt = g.text[pre]
    rl = lcell[rt]
    pre_jk = join_key(g.h[pre], rl, g.pos[pre] // bsize[rl])
    st, sp = g.text[piv], g.pos[piv]
    sh = g.h[piv]
    k = kup[st]
    c_lo = np.floor(np.log(np.maximum(lens[st] - k, 1)) / width).astype(np.int64)
    c_hi = np.floor(np.log(np.maximum(lmax[st], 1)) / width).astype(np.int64)
    rep_jk: list[U64] = []
    rep_of: list[I64] = []
    for dc in range(int((c_hi - c_lo).max()) + 1):
        c = np.minimum(c_lo + dc, ncell)
        ok_c = c_lo + dc <= c_hi
        b = bsize[c]
        p_lo = np.maximum(sp - k, 0) // b
        p_hi = (sp + k) // b
        for dp in range(int((p_hi - p_lo)[ok_c].max(initial=0)) + 1):
            sel = np.flatnonzero(ok_c & (p_lo + dp <= p_hi))
            rep_jk.append(join_key(sh[sel], c[sel], p_lo[sel] + dp))
            rep_of.append(sel)
    piv_jk = np.concatenate(rep_jk)
    piv_of = np.concatenate(rep_of)
    del rep_jk, rep_of
    _stat("prefix_all", len(pre))
    _stat("pivot_entries_all", len(piv_jk))
    _stat("replicas_s")
    # Drop entries whose join key the other side never has (a bitmap on the key's top bits).
    tbits = min(jb, 26)
    seen = np.zeros(1 << tbits, dtype=np.bool_)
    seen[(piv_jk >> _U(jb - tbits)).astype(np.int64)] = True
    keep = seen[(pre_jk >> _U(jb - tbits)).astype(np.int64)]
    pre, pre_jk, rt = pre[keep], pre_jk[keep], rt[keep]
    seen[:] = False
    seen[(pre_jk >> _U(jb - tbits)).astype(np.int64)] = True
    keep = seen[(piv_jk >> _U(jb - tbits)).astype(np.int64)]
    piv_jk, piv_of = piv_jk[keep], piv_of[keep]
    del seen, keep
    _stat("prefix", len(pre))
    _stat("pivot_entries", len(piv_jk))
    _stat("entries_s")
    packed = np.concatenate(
        [
            (pre_jk << _U(low)) | payload(rt, g.pos[pre], 1),
            (piv_jk << _U(low)) | payload(st[piv_of], sp[piv_of], 0),
        ]
    )
    del pre_jk, piv_jk
    packed.sort()
    _stat("sort_s")

    # For each pivot entry: the prefix entries after it in its join-key group (same gram and
    # cells, last rank at least its own) are its partners.
    pv = np.flatnonzero((packed & _U(1 << (tb + pb))) == 0)
    group_end = np.searchsorted(packed, ((packed[pv] >> _U(low)) + _U(1)) << _U(low), side="left")
    group_end[(packed[pv] >> _U(low)) == (_ALL >> _U(low))] = len(packed)  # the top key cannot be incremented
    lo = pv - np.arange(len(pv), dtype=np.int64)  # prefix entries before each pivot entry
    cnt = group_end - np.searchsorted(pv, group_end) - lo
    keep = cnt > 0
    pv, lo, cnt = pv[keep], lo[keep], cnt[keep]
    mask = _U((1 << (tb + pb)) - 1)
    pre_payload = packed[(packed & _U(1 << (tb + pb))) != 0] & mask
    spay = packed[pv] & mask
    del packed
    _stat("raw", int(cnt.sum()))
    _stat("groups_s")
    owner, index = _expand(lo, cnt)
    spay = spay[owner]
    rpay = pre_payload[index]
    del owner, index, pre_payload
    s = (spay >> _U(pb)).astype(np.int64)
    r = (rpay >> _U(pb)).astype(np.int64)
    gap = np.abs((spay & _U((1 << pb) - 1)).astype(np.int64) - (rpay & _U((1 << pb) - 1)).astype(np.int64))
    del spay, rpay
    ls, lr = lens[s], lens[r]
    kk = ktab[np.maximum(ls, lr)]
    ok = (np.abs(ls - lr) <= kk) & (gap <= (kk >> pshift) + (1 if pshift else 0)) & (s != r)
    ok &= last[s] <= last[r]
    s, r = s[ok], r[ok]
    _stat("kept", len(s))
    _stat("raw_s")
    # Count surviving pivots per (pivot text, prefix text): at least want - K.
    pk = np.sort((s.astype(np.uint64) << _U(32)) | r.astype(np.uint64))
    st2, cnt2 = _runs(pk)
    up = pk[st2]
    s = (up >> _U(32)).astype(np.int64)
    r = (up & _U(0xFFFFFFFF)).astype(np.int64)
    need = want[s] - ktab[np.maximum(lens[s], lens[r])]
    ok = cnt2 >= need
    return s[ok], r[ok]


# ----------------------------------------------------------------------------- containments


def _contained_unique(texts: list[str], t: float, ratio: float, min_inner: int) -> tuple[I64, I64, F64]:
    """(outer, inner, score) over distinct normalised texts."""
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    longest = int(lens.max())
    inner_ok = (lens >= min_inner) & (lens <= ratio * longest)
    if not inner_ok.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    events = np.floor(2.0 * lens * (1.0 - t) * (1.0 + 1e-12) + _SLACK).astype(np.int64)
    cands: list[tuple[I64, I64]] = []
    if t > 0.0:
        q = _choose_q(2.0 * (1.0 - t))
        g = _grams(texts, q)
        budget = np.where(inner_ok, events, np.iinfo(np.int64).max // 4)
        piv, want, _last, filterable = _pivots(g, budget, 1)
        filterable &= inner_ok
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
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    o = np.concatenate([c[0] for c in cands])
    i = np.concatenate([c[1] for c in cands])
    packed = np.unique((o.astype(np.uint64) << _U(32)) | i.astype(np.uint64))
    o = (packed >> _U(32)).astype(np.int64)
    i = (packed & _U(0xFFFFFFFF)).astype(np.int64)
    cutoff = 100.0 * t
    scores = np.array(
        [fuzz.partial_ratio(texts[b], texts[a], score_cutoff=cutoff) for a, b in zip(o.tolist(), i.tolist(), strict=True)],
        dtype=np.float64,
    )
    keep = scores >= cutoff
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
    """(outer, inner) candidates: enough pivots of the inner on two adjacent diagonals of the outer."""
    n = len(g.lens)
    lens = g.lens
    maxlen = int(lens.max())
    it, ip = g.text[piv], g.pos[piv]
    min_outer = np.floor(lens[it] / ratio * (1 - 1e-12)).astype(np.int64) - 1
    # Outer side: every gram of a text long enough to hold some inner, whose hash is a pivot's.
    table_bits = 24
    seen = np.zeros(1 << table_bits, dtype=np.bool_)
    seen[(g.h[piv] >> _U(64 - table_bits)).astype(np.int64)] = True
    long_enough = lens >= int(min_outer.min())
    out = np.flatnonzero(g.valid & long_enough[g.text] & seen[(g.h >> _U(64 - table_bits)).astype(np.int64)])

    tb, lb = _bits(n - 1), _bits(maxlen)
    pb = _bits(maxlen)
    jb = 64 - lb - 1 - tb - pb
    if jb < 20:
        raise ValueError("too many texts for one containment join")  # pragma: no cover

    def entry(gram: U64, length: I64, who: I64, where: I64, role: int) -> U64:
        jk = _mix(gram) >> _U(64 - jb)
        return (
            (jk << _U(64 - jb))
            | (np.clip(length, 0, (1 << lb) - 1).astype(np.uint64) << _U(1 + tb + pb))
            | _U(role << (tb + pb))
            | (who.astype(np.uint64) << _U(pb))
            | where.astype(np.uint64)
        )

    ot, op = g.text[out], g.pos[out]
    packed = np.concatenate([entry(g.h[out], lens[ot], ot, op, 1), entry(g.h[piv], min_outer, it, ip, 0)])
    packed.sort()
    is_out = ((packed >> _U(tb + pb)) & _U(1)).astype(np.int64)
    before = np.zeros(len(packed) + 1, dtype=np.int64)
    np.cumsum(is_out, out=before[1:])
    starts, runlen = _runs(packed >> _U(64 - jb))
    group_end = np.repeat(starts + runlen, runlen)
    pv = np.flatnonzero(is_out == 0)
    lo = before[pv]
    cnt = before[group_end[pv]] - lo
    keep = cnt > 0
    pv, lo, cnt = pv[keep], lo[keep], cnt[keep]
    payload_mask = _U((1 << (tb + pb)) - 1)
    out_payload = packed[is_out.astype(bool)] & payload_mask
    owner, index = _expand(lo, cnt)
    ipay = (packed[pv] & payload_mask)[owner]
    i = (ipay >> _U(pb)).astype(np.int64)
    pi = (ipay & _U((1 << pb) - 1)).astype(np.int64)
    opay = out_payload[index]
    o = (opay >> _U(pb)).astype(np.int64)
    po = (opay & _U((1 << pb) - 1)).astype(np.int64)
    del owner, index, ipay, opay
    ok = (o != i) & (lens[i] <= ratio * lens[o])
    i, o, diag = i[ok], o[ok], (po - pi + maxlen)[ok]
    bucket = diag // (events[i] + 1)
    db = _bits(2 * maxlen + 1)
    if 2 * tb + db > 64:
        raise ValueError("too many texts for one containment join")  # pragma: no cover
    pk = np.sort((i.astype(np.uint64) << _U(tb + db)) | (o.astype(np.uint64) << _U(db)) | bucket.astype(np.uint64))
    st, cnt2 = _runs(pk)
    key = pk[st]
    pair = key >> _U(db)
    b = (key & _U((1 << db) - 1)).astype(np.int64)
    nxt_same = np.zeros(len(key), dtype=np.bool_)
    nxt_same[:-1] = (pair[1:] == pair[:-1]) & (b[1:] == b[:-1] + 1)
    both = cnt2 + np.where(nxt_same, np.concatenate([cnt2[1:], [0]]), 0)
    i = (pair >> _U(tb)).astype(np.int64)
    o = (pair & _U((1 << tb) - 1)).astype(np.int64)
    ok = both >= want[i] - events[i]
    del n
    return o[ok], i[ok]

