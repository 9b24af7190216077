"""Variant pairs among distinct normalised texts: pivotal prefix join, then exact verification.

The method, and why it never loses a pair, is in docs/decisions/variant-dedup.md.
"""

from __future__ import annotations

import math

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from tasks.common.text import variant_grams as vg
from tasks.common.text import variant_kernels as kernels
from tasks.common.text.variant_grams import Codes, Found, Pivots, stat
from tasks.common.text.variant_kernels import B1, I64


def similar_unique(texts: list[str], t: float, ell: int = vg.ELL) -> Found:
    """Pairs (u < v) of distinct normalised texts with similarity ≥ t, and their similarity."""
    vg.stats_reset()
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    # Every pair qualifies (t ≤ 0), or so few pairs pass the length filter that scoring
    # them all beats the filter's setup (and its one-off kernel compile after an install).
    if t <= 0.0 or band_pair_count(lens, t) <= vg.SMALL_PAIRS:
        stat("brute_force_texts", n)
        return band_verify(texts, lens, np.ones(n, dtype=np.bool_), t)
    maxlen = int(lens.max())
    # Partner lengths allowed by the length filter: L - K(L) ≤ len (L the longer one).
    cap = math.floor((maxlen + 1) / t) + 2
    ktab = vg.edit_budget(np.arange(cap + 1), t)
    lmax = np.minimum(np.floor((lens + vg.SLACK) / t * (1 + 1e-12)).astype(np.int64) + 1, cap)
    kup = ktab[lmax]
    q = vg.choose_q((1.0 - t) / t)
    c = vg.codes(texts, q)
    stat("grams_s")
    pv = vg.pivots(c, kup, ell)
    stat("pivots_s")
    stat("pivots", len(pv.pos))

    found: list[Found] = []
    brute = ~pv.filterable
    if len(pv.pos):
        cand = pivot_join(c, pv, ktab, t)
        if cand is None:  # the filter would cost more than comparing the length band: do that
            brute = np.ones(n, dtype=np.bool_)
        else:
            a, b = vg.unique_pairs(np.minimum(*cand), np.maximum(*cand))
            stat("candidates", len(a))
            stat("count_s")
            found.append(verify_similar(texts, a, b, t))
            stat("verify_s")
    if brute.any():
        stat("brute_force_texts", int(brute.sum()))
        found.append(band_verify(texts, lens, brute, t))
        stat("brute_force_s")
    return vg.concat(found)


def verify_similar(texts: list[str], a: I64, b: I64, t: float) -> Found:
    sims = vg.pairwise(Levenshtein.normalized_similarity, texts, a, b, np.float64, score_cutoff=t)
    keep = sims >= t
    return a[keep], b[keep], sims[keep]


def band_verify(texts: list[str], lens: I64, who: B1, t: float) -> Found:
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
    out: list[Found] = []
    step = max(1, vg.BLOCK_CELLS // max(1, int((hi - lo).max(initial=1))))
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
        out.append((np.minimum(x, y), np.maximum(x, y), sc))
    return vg.concat(out)


def pivot_join(c: Codes, pv: Pivots, ktab: I64, t: float) -> tuple[I64, I64] | None:
    """Candidate pairs among filterable texts (the pivotal prefix join).

    None when the join would scan more index entries than ``FALLBACK`` times the number
    of pairs the length filter lets through (low thresholds): brute force is cheaper then;
    and for inputs its packed index entries cannot address (``JOIN_MAX_CHARS``,
    ``JOIN_MAX_TEXTS``), which brute force still answers exactly.
    """
    n = len(c.lens)
    if n >= vg.JOIN_MAX_TEXTS or int(c.lens.max()) >= vg.JOIN_MAX_CHARS:
        return None
    # Direction: x joins its pivots against y's prefix when (last, index) of x is smaller.
    order = np.lexsort((np.arange(n), pv.last))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    # Partner lengths the length filter allows: shorter ones down to len - K(len), longer
    # ones up to the largest L with L - K(L) ≤ len.
    reach = np.arange(len(ktab)) - ktab
    lengths = np.stack([c.lens - ktab[c.lens], np.searchsorted(reach, c.lens, "right") - 1], 1)
    max_raw = int(min(vg.FALLBACK * band_pair_count(c.lens, t), np.iinfo(np.int64).max // 2))
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
        int(min(24, max(10, vg.bits(len(pv.pos)) - 1))),  # hash buckets: about two pivots each
        pv.prefix_bound,
        max_raw,
    )
    stat("prefix", entries)
    stat("raw", raw)
    stat("join_s")
    return (a, b) if complete else None


def band_pair_count(lens: I64, t: float) -> int:
    """How many pairs the length filter lets through (what brute force would score)."""
    sl = np.sort(lens)
    hi = np.searchsorted(sl, np.floor((sl + 1) / t * (1 + 1e-12)).astype(np.int64) + 1, side="right")
    return int((hi - np.arange(len(sl)) - 1).clip(min=0).sum())
