"""Variant and containment detection for hand-typed passages (paper 001 §2.1), exact and sub-quadratic.

* **variants** (:func:`similar_pairs`): pairs whose :func:`normalise`\\ d texts have
  normalised Levenshtein similarity ``1 - d / max(len)`` of at least ``threshold``;
  :func:`clusters` links them transitively and :func:`representative` picks the longest
  member, which CURE substitutes for the others;
* **containments** (:func:`containments`): an inner text with ``fuzz.partial_ratio(inner,
  outer) / 100`` of at least ``threshold`` inside a longer outer text.

Both return exactly what the exhaustive comparison returns (``*_exhaustive``, rapidfuzz
``process.cdist`` over all pairs; the tests' oracle). How the fast paths find candidates
without losing a pair: docs/decisions/variant-dedup.md.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from rapidfuzz import fuzz, process
from rapidfuzz.distance import Levenshtein

from tasks.common.text.containment_join import contained_unique
from tasks.common.text.variant_join import similar_unique

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
    sub-quadratic candidate generation (docs/decisions/variant-dedup.md). Sorted by ``(a, b)``.
    """
    t, norm = _comparable(texts, threshold)
    if not norm:
        return []
    uniq, members = _unique(norm)
    out: list[SimilarPair] = []
    for group in members:  # identical after normalisation: similarity 1.0
        out.extend(SimilarPair(a, b, 1.0) for i, a in enumerate(group) for b in group[i + 1 :])
    # Distinct texts differ by at least one edit, so they can reach t only if the longer one
    # allows an edit: (1 - t) * L >= 1. Near t = 1 nothing can, and the join's cells would
    # degenerate (their width is log(1/t)).
    if t < 1.0 and len(uniq) > 1 and (1.0 - t) * max(map(len, uniq)) >= 1.0 - 1e-9:
        ua, ub, sim = similar_unique(uniq, t)
        for u, v, s in zip(ua.tolist(), ub.tolist(), sim.tolist(), strict=True):
            out.extend(SimilarPair(min(a, b), max(a, b), s) for a in members[u] for b in members[v])
    out.sort(key=lambda p: (p.a, p.b))
    return out


def similar_pairs_exhaustive(
    texts: Sequence[str], threshold: float, *, workers: int = 1
) -> list[SimilarPair]:
    """The oracle: every pair scored by rapidfuzz ``process.cdist`` (same scorer and cutoff)."""
    t, norm = _comparable(texts, threshold)
    if not norm:
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
    t, norm = _comparable(texts, threshold)
    ratio = _check_ratio(max_length_ratio)
    if not norm:
        return []
    uniq, members = _unique(norm)
    out: list[Containment] = []
    for u, group in enumerate(members):  # identical texts contain each other only if equal lengths may
        m = len(uniq[u])
        if len(group) > 1 and m >= min_inner_chars and _length_ok(m, m, ratio):
            out.extend(Containment(o, i, 1.0) for o in group for i in group if o != i)
    if len(uniq) > 1:
        uo, ui, sc = contained_unique(uniq, t, ratio, min_inner_chars)
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
    t, norm = _comparable(texts, threshold)
    ratio = _check_ratio(max_length_ratio)
    if not norm:
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


def _comparable(texts: Sequence[str], threshold: float) -> tuple[float, list[str]]:
    """The threshold, checked, and the normalised texts: none when no pair can qualify
    (threshold above 1, fewer than two texts)."""
    t = float(threshold)
    if math.isnan(t):
        raise ValueError("threshold is NaN")
    if t > 1.0 or len(texts) < 2:
        return t, []
    return t, [normalise(x) for x in texts]


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
