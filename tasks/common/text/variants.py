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
   left-to-right greedy scan still finds ``P(x)`` disjoint grams (a binary search).
   ``last(x)`` is the largest pivot key and the *prefix* ``pre(x)`` is every gram of x,
   at any position, with key ``≤ last(x)``.
3. **Pivotal lemma** (Deng, Li, Feng, ICDE 2014, extended to a count): if
   ``ed(x, y) ≤ K`` then at least ``P(x) - K`` pivots of x survive unedited into y,
   shifted by at most ``K`` positions. Each survivor has key ``≤ last(x)``; if
   ``last(x) ≤ last(y)`` every copy of it in y is in ``pre(y)``; otherwise the same holds
   with x and y swapped. So every qualifying pair is found by joining the pivots of the
   text with the smaller ``(last, index)`` against the prefix of the other on equal
   grams, keeping matches with ``|pos_x - pos_y| ≤ K`` and the length filter, and
   requiring ``≥ P(x) - K`` distinct pivots matched. The join is an inverted index of
   the prefixes over hash buckets, each bucket ordered by text length, probed by the
   pivots of texts taken by increasing length (:func:`variant_kernels.pivot_join`).
   Hash collisions only add candidates.
4. **Verification.** Candidates are scored with ``Levenshtein.normalized_similarity``
   and ``score_cutoff=t``, exactly as the oracle does.

Steps 1-3 run as compiled loops (:mod:`tasks.common.text.variant_kernels`, numba). Texts with
fewer than ``kup + 1`` disjoint grams (very short texts, low thresholds) are compared by
brute force (rapidfuzz ``cdist`` in blocks) with every text their length allows, and so
is everything when the join would scan more than ``_FALLBACK`` index entries per pair
the length filter lets through (low thresholds, where q-grams are too short to be
selective). Texts identical after normalisation are grouped first (similarity 1.0).

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

from tasks.common.text import variant_kernels as kernels

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
_ELL = 3  # variants: pivots beyond kup (more pivots: stronger count filter, bigger join; 2-4 measured best)
_LEVELS = 12.0  # rarity levels per doubling of a gram's estimated count
_CONTAIN_ELL = 8  # containments: pivots beyond E (each candidate needs this many on a diagonal band)
_BATCH = 10_000_000  # raw matches handled per batch (bounds memory)
_BLOCK_CELLS = 4_000_000  # brute force: pairs scored per cdist call
_PAIR_CHUNK = 100_000  # candidate pairs scored per cpdist call
_SMALL_PAIRS = 100_000  # at most this many length-eligible pairs: score them all, no filter
_FALLBACK = 200.0  # the join gives up past this many index entries scanned per length-band pair
# What the join's packed 8-byte index entries can address; larger inputs go to brute force, still exact.
_JOIN_MAX_CHARS = 1 << kernels.JOIN_POSITION_BITS
_JOIN_MAX_TEXTS = 1 << kernels.JOIN_TEXT_BITS

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
        text = text.lower()
    else:
        text = unicodedata.normalize("NFKC", text).casefold()
        if not unicodedata.is_normalized("NFKC", text):  # casefold can denormalise (rare)
            text = unicodedata.normalize("NFKC", text)
    # Already collapsed (no whitespace but single inner spaces; every other whitespace
    # character is non-printable): skip the split, the costliest step on long texts.
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.split())


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
class _Codes:
    """Many texts laid end to end as code points, with the rarity level of every gram bucket."""

    q: int
    lens: I64
    offs: I64  # text i occupies positions offs[i] .. offs[i + 1] - 1
    code: npt.NDArray[np.uint32]
    level: npt.NDArray[np.uint8]


def _codes(texts: Sequence[str], q: int) -> _Codes:
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    code = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return _Codes(q, lens, offs, code, kernels.gram_levels(code, offs, q, _LEVELS))


@dataclass
class _Grams:
    """Hashed q-grams of many texts laid end to end: one entry per character position."""

    q: int
    lens: I64
    offs: I64  # text i occupies positions offs[i] .. offs[i + 1] - 1
    h: U64  # hash bits of the gram starting at each position
    key: U64  # global order: rarity level (8 bits), then 56 hash bits; all ones where no gram fits

    def text_of(self, index: I64) -> I64:
        """Text of each global position (fast when ``index`` is sorted)."""
        return np.searchsorted(self.offs, index, side="right").astype(np.int64) - 1


def _grams(c: _Codes) -> _Grams:
    key = kernels.gram_keys(c.code, c.offs, c.q, c.level)
    return _Grams(c.q, c.lens, c.offs, key << _U(8), key)


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


@dataclass
class _Pivots:
    """Pivots of every text (see :func:`variant_kernels.choose_pivots`)."""

    pos: I64  # global positions, sorted (so grouped by text)
    key: U64  # the pivots' gram keys
    first: I64  # text i's pivots are pos[first[i]:first[i + 1]]
    want: I64  # pivots per text
    last: U64  # largest pivot key per text
    filterable: B1  # the text has more disjoint grams than its edit budget
    prefix_bound: int  # grams of filterable texts with a key ≤ their text's last: bounds the join's index


def _pivots(c: _Codes, budget: I64, ell: int) -> _Pivots:
    return _Pivots(*kernels.choose_pivots(c.code, c.offs, c.q, c.level, budget, ell))


# ----------------------------------------------------------------------------- variants


def _similar_unique(texts: list[str], t: float, ell: int = _ELL) -> tuple[I64, I64, F64]:
    """Pairs (u < v) of distinct normalised texts with similarity ≥ t, and their similarity."""
    _stats_reset()
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    # Every pair qualifies (t ≤ 0), or so few pairs pass the length filter that scoring
    # them all beats the filter's setup (and its one-off kernel compile after an install).
    if t <= 0.0 or _band_pair_count(lens, t) <= _SMALL_PAIRS:
        _stat("brute_force_texts", n)
        return _band_verify(texts, lens, np.ones(n, dtype=np.bool_), t)
    maxlen = int(lens.max())
    # Partner lengths allowed by the length filter: L - K(L) ≤ len (L the longer one).
    cap = math.floor((maxlen + 1) / t) + 2
    ktab = _edit_budget(np.arange(cap + 1), t)
    lmax = np.minimum(np.floor((lens + _SLACK) / t * (1 + 1e-12)).astype(np.int64) + 1, cap)
    kup = ktab[lmax]
    q = _choose_q((1.0 - t) / t)
    c = _codes(texts, q)
    _stat("grams_s")
    pv = _pivots(c, kup, ell)
    _stat("pivots_s")
    _stat("pivots", len(pv.pos))

    found: list[tuple[I64, I64, F64]] = []
    brute = ~pv.filterable
    if len(pv.pos):
        cand = _pivot_join(c, pv, ktab, t)
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


def _pivot_join(c: _Codes, pv: _Pivots, ktab: I64, t: float) -> tuple[I64, I64] | None:
    """Candidate pairs among filterable texts (see the module docstring, steps 2-3).

    None when the join would scan more index entries than ``_FALLBACK`` times the number
    of pairs the length filter lets through (low thresholds): brute force is cheaper then;
    and for inputs its packed index entries cannot address (``_JOIN_MAX_CHARS``,
    ``_JOIN_MAX_TEXTS``), which brute force still answers exactly.
    """
    n = len(c.lens)
    if n >= _JOIN_MAX_TEXTS or int(c.lens.max()) >= _JOIN_MAX_CHARS:
        return None
    # Direction: x joins its pivots against y's prefix when (last, index) of x is smaller.
    order = np.lexsort((np.arange(n), pv.last))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    # Partner lengths the length filter allows: shorter ones down to len - K(len), longer
    # ones up to the largest L with L - K(L) ≤ len.
    reach = np.arange(len(ktab)) - ktab
    lengths = np.stack([c.lens - ktab[c.lens], np.searchsorted(reach, c.lens, "right") - 1], 1)
    max_raw = int(min(_FALLBACK * _band_pair_count(c.lens, t), np.iinfo(np.int64).max // 2))
    a, b, entries, raw, complete = kernels.pivot_join(
        c.code,
        c.offs,
        c.q,
        c.level,
        pv.pos,
        pv.key,
        pv.first,
        pv.want,
        pv.last,
        rank,
        pv.filterable,
        ktab,
        np.argsort(c.lens, kind="stable"),
        np.ascontiguousarray(lengths),
        int(min(24, max(10, _bits(len(pv.pos)) - 1))),  # hash buckets: about two pivots each
        pv.prefix_bound,
        max_raw,
    )
    _stat("prefix", entries)
    _stat("raw", raw)
    _stat("join_s")
    return (a, b) if complete else None


def _band_pair_count(lens: I64, t: float) -> int:
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
    brute = np.zeros(n, dtype=np.bool_)
    if (
        _eligible_pairs(lens, inner_ok, ratio) <= _SMALL_PAIRS
    ):  # few pairs: check them all (see _similar_unique)
        brute = inner_ok
    elif t > 0.0:
        q = _choose_q(2.0 * (1.0 - t))
        c = _codes(texts, q)
        g = _grams(c)
        budget = np.where(inner_ok, events, np.iinfo(np.int64).max // 4)
        pv = _pivots(c, budget, _CONTAIN_ELL)
        _stat("pivots", len(pv.pos))
        _stat("pivots_s")
        if len(pv.pos):
            cands.append(_diagonal_join(g, pv.pos, pv.want, events, ratio))
        brute = inner_ok & ~pv.filterable
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


def _eligible_pairs(lens: I64, who: B1, ratio: float) -> int:
    """How many (outer, inner) pairs the length rule allows for the inner texts in ``who``."""
    sl = np.sort(lens)
    lo = np.searchsorted(sl, lens[who] / ratio * (1 - 1e-12), side="left")
    return int((len(sl) - lo).sum())


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
