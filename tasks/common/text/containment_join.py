"""Containments among distinct normalised texts: diagonal q-gram counting, then exact verification.

The method, and why it never loses a pair, is in docs/decisions/variant-dedup.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rapidfuzz import fuzz
from rapidfuzz.distance import LCSseq

from tasks.common.text import variant_grams as vg
from tasks.common.text.variant_grams import ALL_ONES, UINT, Found, Grams, stat
from tasks.common.text.variant_kernels import B1, I64, U64

Pairs = tuple[I64, I64]  # (outer, inner)


def contained_unique(texts: list[str], t: float, ratio: float, min_inner: int) -> Found:
    """(outer, inner, score) over distinct normalised texts."""
    n = len(texts)
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=n)
    longest = int(lens.max())
    inner_ok = (lens >= min_inner) & (lens <= ratio * longest)
    if not inner_ok.any():
        return vg.nothing_found()
    vg.stats_reset()
    cands = _candidates(texts, lens, inner_ok, t, ratio)
    if not cands:
        return vg.nothing_found()
    o, i = vg.unique_pairs(np.concatenate([c[0] for c in cands]), np.concatenate([c[1] for c in cands]))
    stat("candidates", len(o))
    stat("join_s")
    if len(o) == 0:
        return vg.nothing_found()
    return _verify(texts, lens, o, i, t)


def _candidates(texts: list[str], lens: I64, inner_ok: B1, t: float, ratio: float) -> list[Pairs]:
    """Candidate (outer, inner) pairs, possibly repeated: a superset of the containments."""
    events = np.floor(2.0 * lens * (1.0 - t) * (1.0 + 1e-12) + vg.SLACK).astype(np.int64)
    cands: list[Pairs] = []
    if eligible_pairs(lens, inner_ok, ratio) <= vg.SMALL_PAIRS:  # few pairs: check them all
        brute = inner_ok
    elif t > 0.0:
        c = vg.codes(texts, vg.choose_q(2.0 * (1.0 - t)))
        g = vg.grams(c)
        budget = np.where(inner_ok, events, np.iinfo(np.int64).max // 4)
        pv = vg.pivots(c, budget, vg.CONTAIN_ELL)
        stat("pivots", len(pv.pos))
        stat("pivots_s")
        if len(pv.pos):
            cands.append(diagonal_join(g, pv.pos, pv.want, events, ratio))
        brute = inner_ok & ~pv.filterable
    else:
        brute = inner_ok
    if brute.any():
        cands.append(ratio_pairs(lens, brute, ratio))
    if ratio >= 1.0:  # equal lengths: partial_ratio may align either text inside the other
        cands.append(equal_length_pairs(lens, inner_ok))
    return cands


def _verify(texts: list[str], lens: I64, o: I64, i: I64, t: float) -> Found:
    """The candidates whose ``partial_ratio`` reaches ``t``, with their score."""
    if t > 0.0:
        # partial_ratio / 100 = 2·LCS(I, W) / (m + |W|) for a window W of O, which is at most
        # 2·L / (m + L) with L = LCS(I, O): a cheap exact upper bound.
        lcs = vg.pairwise(LCSseq.similarity, texts, i, o, np.int64)
        m = lens[i]
        ok = 2.0 * lcs >= (t - 1e-9) * (m + lcs)
        o, i = o[ok], i[ok]
    stat("lcs_survivors", len(o))
    stat("lcs_s")
    cutoff = 100.0 * t
    scores = np.array(
        [
            fuzz.partial_ratio(texts[b], texts[a], score_cutoff=cutoff)
            for a, b in zip(o.tolist(), i.tolist(), strict=True)
        ],
        dtype=np.float64,
    )
    keep = scores >= cutoff
    stat("verify_s")
    return o[keep], i[keep], scores[keep] / 100.0


def eligible_pairs(lens: I64, who: B1, ratio: float) -> int:
    """How many (outer, inner) pairs the length rule allows for the inner texts in ``who``."""
    sl = np.sort(lens)
    lo = np.searchsorted(sl, lens[who] / ratio * (1 - 1e-12), side="left")
    return int((len(sl) - lo).sum())


def ratio_pairs(lens: I64, who: B1, ratio: float) -> Pairs:
    """(outer, inner) for every inner in ``who`` and every outer its length rule allows."""
    order = np.argsort(lens, kind="stable")
    sl = lens[order]
    u = np.flatnonzero(who)
    lo = np.searchsorted(sl, np.floor(lens[u] / ratio * (1 - 1e-12)).astype(np.int64) - 1, side="left")
    owner, index = vg.expand(lo.astype(np.int64), (len(sl) - lo).astype(np.int64))
    inner = u[owner]
    outer = order[index]
    keep = (inner != outer) & (lens[inner] <= ratio * lens[outer])
    return outer[keep], inner[keep]


def equal_length_pairs(lens: I64, who: B1) -> Pairs:
    """(outer, inner) for every inner in ``who`` and every other text of the same length."""
    order = np.argsort(lens, kind="stable")
    sl = lens[order]
    u = np.flatnonzero(who)
    lo = np.searchsorted(sl, lens[u], side="left")
    hi = np.searchsorted(sl, lens[u], side="right")
    owner, index = vg.expand(lo.astype(np.int64), (hi - lo).astype(np.int64))
    inner, outer = u[owner], order[index]
    keep = inner != outer
    return outer[keep], inner[keep]


@dataclass(frozen=True)
class _Layout:
    """Bit fields of the diagonal join's packed keys.

    An outer entry is (top ``64 - low`` hash bits | text length | text | position); a
    match key is (inner text | outer text | diagonal bucket).
    """

    maxlen: int
    tb: int  # text bits
    lb: int  # length bits
    pb: int  # position bits
    db: int  # diagonal-bucket bits

    @property
    def low(self) -> int:
        return self.lb + self.tb + self.pb

    @classmethod
    def of(cls, n: int, maxlen: int) -> _Layout:
        tb, lb, pb, db = vg.bits(n - 1), vg.bits(maxlen), vg.bits(maxlen), vg.bits(2 * maxlen + 1)
        if 64 - lb - tb - pb < 16 or 2 * tb + db > 64:
            raise ValueError("too many texts for one containment join")  # pragma: no cover
        return cls(maxlen, tb, lb, pb, db)


def diagonal_join(g: Grams, piv: I64, want: I64, events: I64, ratio: float) -> Pairs:
    """(outer, inner) candidates: enough pivots of the inner on two adjacent diagonals of the outer.

    The outer side (every gram of a long enough text whose hash some pivot has) is sorted
    once by (gram, text length); each pivot's partners are then the range of that gram
    with length at least the inner's minimum outer length. Inner texts are processed in
    batches so that memory stays bounded.
    """
    n = len(g.lens)
    lay = _Layout.of(n, int(g.lens.max()))
    it = g.text_of(piv)
    ip = piv - g.offs[it]
    min_outer = np.maximum(np.floor(g.lens[it] / ratio * (1 - 1e-12)).astype(np.int64) - 1, 0)
    okeys = _outer_keys(g, piv, int(min_outer.min()), lay)
    lo, cnt = _pivot_ranges(g.h[piv] >> UINT(lay.low), min_outer, okeys, lay)
    stat("outer_entries", len(okeys))
    stat("raw", int(cnt.sum()))
    stat("index_s")
    # Batches of whole inner texts (pivots are sorted by position, so by text).
    per_text = np.bincount(it, weights=cnt, minlength=n)
    bounds = np.searchsorted(
        np.cumsum(per_text), np.arange(1, int(per_text.sum() // vg.BATCH) + 2) * vg.BATCH
    )
    text_edges = np.unique(np.concatenate([[0], np.minimum(bounds + 1, n), [n]]))
    piv_edges = np.searchsorted(it, text_edges, side="left")
    found_o: list[I64] = []
    found_i: list[I64] = []
    for a, b in zip(piv_edges[:-1].tolist(), piv_edges[1:].tolist(), strict=True):
        if a == b:
            continue
        o, i = _batch_candidates(okeys, lo[a:b], cnt[a:b], a, (it, ip), g.lens, want, events, ratio, lay)
        found_o.append(o)
        found_i.append(i)
    if not found_o:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(found_o), np.concatenate(found_i)


def _outer_keys(g: Grams, piv: I64, shortest_outer: int, lay: _Layout) -> U64:
    """Sorted packed entries of every gram, in a text at least ``shortest_outer`` long, whose
    hash (top 24 bits) some pivot has."""
    table_bits = 24
    seen = np.zeros(1 << table_bits, dtype=np.bool_)
    seen[(g.h[piv] >> UINT(64 - table_bits)).astype(np.int64)] = True
    long_enough = np.repeat(g.lens >= shortest_outer, g.lens)
    out = np.flatnonzero(
        (g.key != ALL_ONES) & long_enough & seen[(g.h >> UINT(64 - table_bits)).astype(np.int64)]
    )
    del seen, long_enough
    ot = g.text_of(out)
    return np.sort(
        ((g.h[out] >> UINT(lay.low)) << UINT(lay.low))
        | (g.lens[ot].astype(np.uint64) << UINT(lay.tb + lay.pb))
        | (ot.astype(np.uint64) << UINT(lay.pb))
        | (out - g.offs[ot]).astype(np.uint64)
    )


def _pivot_ranges(pjk: U64, min_outer: I64, okeys: U64, lay: _Layout) -> tuple[I64, I64]:
    """Per pivot (top hash bits ``pjk``): the first outer entry of its gram long enough, and
    how many entries of that gram follow."""
    low = UINT(lay.low)
    qlo = (pjk << low) | (np.minimum(min_outer, (1 << lay.lb) - 1).astype(np.uint64) << UINT(lay.tb + lay.pb))
    lo = np.empty(len(pjk), dtype=np.int64)
    hi = np.empty(len(pjk), dtype=np.int64)
    order = np.argsort(qlo, kind="stable")
    lo[order] = np.searchsorted(okeys, qlo[order], side="left")
    top = pjk == (ALL_ONES >> low)
    nxt = np.where(top, UINT(0), (pjk + UINT(1)) << low)
    order = np.argsort(nxt, kind="stable")
    hi[order] = np.searchsorted(okeys, nxt[order], side="left")
    hi[top] = len(okeys)
    return lo, np.maximum(hi - lo, 0)


def _batch_candidates(
    okeys: U64,
    lo: I64,
    cnt: I64,
    first: int,
    pivot_at: tuple[I64, I64],
    lens: I64,
    want: I64,
    events: I64,
    ratio: float,
    lay: _Layout,
) -> Pairs:
    """Pairs of the pivots ``first``, ``first + 1``, ... (their text and position in
    ``pivot_at``) with enough matches in ``okeys`` on two adjacent diagonal buckets."""
    tb, pb, db = lay.tb, lay.pb, lay.db
    owner, index = vg.expand(lo, cnt)
    owner += first
    opay = okeys[index]
    del index
    o = ((opay >> UINT(pb)) & UINT((1 << tb) - 1)).astype(np.int64)
    i = pivot_at[0][owner]
    ok = (o != i) & (lens[i] <= ratio * lens[o])
    diag = (opay & UINT((1 << pb) - 1)).astype(np.int64)[ok] - pivot_at[1][owner[ok]] + lay.maxlen
    i, o = i[ok], o[ok]
    del owner, opay, ok
    bucket = diag // (events[i] + 1)
    pk = np.sort(
        (i.astype(np.uint64) << UINT(tb + db)) | (o.astype(np.uint64) << UINT(db)) | bucket.astype(np.uint64)
    )
    del i, o, diag, bucket
    st, c = vg.runs(pk)
    key = pk[st]
    pair = key >> UINT(db)
    bk = (key & UINT((1 << db) - 1)).astype(np.int64)
    adjacent = np.zeros(len(key), dtype=np.bool_)
    adjacent[:-1] = (pair[1:] == pair[:-1]) & (bk[1:] == bk[:-1] + 1)
    both = c + np.where(adjacent, np.append(c[1:], 0), 0)
    inner = (pair >> UINT(tb)).astype(np.int64)
    outer = (pair & UINT((1 << tb) - 1)).astype(np.int64)
    keep = both >= want[inner] - events[inner]
    return outer[keep], inner[keep]
