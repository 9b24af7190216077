"""Reciprocal Rank Fusion against hand-computed examples (tasks.common.search.fusion)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tasks.common.search.fusion import FusedHit, rrf
from tasks.common.search.port import Hit


def hits(*ids: str) -> list[Hit]:
    """A ranked list; the score is arbitrary (RRF must only use ranks): 100 - rank."""
    return [Hit(rank, pid, 100.0 - rank) for rank, pid in enumerate(ids, start=1)]


# With k = 1 a rank r contributes 1 / (1 + r): rank 1 -> 1/2, rank 2 -> 1/3, rank 3 -> 1/4.
#
#   bm25:   a@1  b@2  c@3
#   phrase: b@1  a@2  d@3
#   knn:    e@1  c@2  d@3
#
#   a = 1/2 (bm25 1) + 1/3 (phrase 2) = 5/6    best rank 1
#   b = 1/3 (bm25 2) + 1/2 (phrase 1) = 5/6    best rank 1   -> ties with a; same best rank; "a" < "b"
#   c = 1/4 (bm25 3) + 1/3 (knn 2)    = 7/12   best rank 2
#   e = 1/2 (knn 1)                   = 1/2    best rank 1
#   d = 1/4 (phrase 3) + 1/4 (knn 3)  = 1/2    best rank 3   -> ties with e; e's best rank 1 < 3,
#                                                               so e first although "d" < "e"
#
#   fused order: a, b, c, e, d
LISTS = {"bm25": hits("a", "b", "c"), "phrase": hits("b", "a", "d"), "knn": hits("e", "c", "d")}
EXPECTED = [
    ("a", Fraction(5, 6)),
    ("b", Fraction(5, 6)),
    ("c", Fraction(7, 12)),
    ("e", Fraction(1, 2)),
    ("d", Fraction(1, 2)),
]


def test_hand_computed_example_with_ties() -> None:
    fused = rrf(LISTS, k=1)
    assert [(f.passage_id, f.rank) for f in fused] == [(pid, i) for i, (pid, _) in enumerate(EXPECTED, 1)]
    for f, (_, score) in zip(fused, EXPECTED, strict=True):
        assert f.score == pytest.approx(float(score), rel=1e-12)
    # the ties are exact, not merely close: the tie-break rule decides, not float noise
    assert fused[0].score == fused[1].score
    assert fused[3].score == fused[4].score


def test_per_retriever_ranks_and_scores_with_missing_passages() -> None:
    fused = {f.passage_id: f for f in rrf(LISTS, k=1)}
    assert fused["a"].ranks == {"bm25": 1, "phrase": 2, "knn": None}
    assert fused["a"].scores == {"bm25": 99.0, "phrase": 98.0, "knn": None}
    assert fused["e"].ranks == {"bm25": None, "phrase": None, "knn": 1}
    assert fused["e"].scores == {"bm25": None, "phrase": None, "knn": 99.0}
    assert fused["d"].ranks == {"bm25": None, "phrase": 3, "knn": 3}


def test_default_k_is_60() -> None:
    # k = 60: a = 1/61 + 1/62 = 123/3782; c = 1/63 + 1/62 = 125/3906; e = 1/61; d = 2/63.
    fused = {f.passage_id: f for f in rrf(LISTS)}
    assert fused["a"].score == pytest.approx(123 / 3782, rel=1e-12)
    assert fused["c"].score == pytest.approx(125 / 3906, rel=1e-12)
    assert fused["e"].score == pytest.approx(1 / 61, rel=1e-12)
    assert fused["d"].score == pytest.approx(2 / 63, rel=1e-12)
    # with k = 60 two lists beat one: d (3 and 3) = 0.0317 > e (1) = 0.0164, unlike with k = 1
    assert [f.passage_id for f in rrf(LISTS)] == ["a", "b", "c", "d", "e"]


def test_top_cuts_after_ordering() -> None:
    fused = rrf(LISTS, k=1, top=3)
    assert [f.passage_id for f in fused] == ["a", "b", "c"]
    assert [f.rank for f in fused] == [1, 2, 3]
    assert rrf(LISTS, k=1, top=0) == []
    assert len(rrf(LISTS, k=1, top=50)) == 5


def test_order_of_the_lists_does_not_matter() -> None:
    reordered = {name: LISTS[name] for name in ("knn", "bm25", "phrase")}
    key = [(f.passage_id, f.score, f.rank) for f in rrf(LISTS, k=1)]
    assert [(f.passage_id, f.score, f.rank) for f in rrf(reordered, k=1)] == key


def test_ties_on_score_and_best_rank_go_by_passage_id() -> None:
    # x and y: both at rank 1 in one list: 1/61 each, same best rank -> "x" < "y"
    fused = rrf({"one": hits("y"), "two": hits("x")})
    assert [f.passage_id for f in fused] == ["x", "y"]
    assert fused[0].score == fused[1].score == pytest.approx(1 / 61)


@pytest.mark.parametrize("k", [0, -1])
def test_k_must_be_positive(k: int) -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        rrf(LISTS, k=k)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="top"):
        rrf(LISTS, top=-1)
    with pytest.raises(ValueError, match="twice"):
        rrf({"bm25": [Hit(1, "a", 1.0), Hit(2, "a", 0.5)]})
    with pytest.raises(ValueError, match="from 1"):
        rrf({"bm25": [Hit(0, "a", 1.0)]})


def test_empty_input() -> None:
    assert rrf({}) == []
    assert rrf({"bm25": [], "knn": []}) == []


def test_fused_hit_is_a_plain_record() -> None:
    f = rrf({"bm25": hits("a")}, k=1)[0]
    assert f == FusedHit("a", 0.5, 1, {"bm25": 1}, {"bm25": 99.0})
