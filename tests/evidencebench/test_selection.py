"""Exact evidence-set selection and ER@K aspect recall, on the 37 released dev instances and by hand."""

from __future__ import annotations

import json
from functools import cache
from itertools import combinations
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tasks.evidencebench.selection import (
    Coverage,
    Selection,
    aspect_recall,
    coverage,
    evaluations,
    max_coverage,
    min_cover,
    task_recall,
)
from tests.conftest import SAMPLES

DEV = SAMPLES / "evidencebench" / "evidencebench_dev_set.json"
needs_dev = pytest.mark.skipif(
    not DEV.is_file(),
    reason=f"the released EvidenceBench dev set is not at {DEV} (it lives beside the checkout)",
)
FIELDS = {
    "ER@optimal": "evidence_retrieval_at_optimal_evaluation",
    "ER@10": "evidence_retrieval_at_10_evaluation",
    "Result-ER@optimal": "results_evidence_retrieval_at_optimal_evaluation",
    "Result-ER@5": "results_evidence_retrieval_at_5_evaluation",
}


@cache
def dev_set() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DEV.read_text())
    return data


def dev_ids() -> list[str]:
    return sorted(dev_set(), key=lambda k: int(k.rsplit("_", 1)[1])) if DEV.is_file() else []


def instance(covers: list[set[int]], n_aspects: int, results: list[int] | None = None) -> dict[str, Any]:
    """A schema-shaped instance: sentence i covers the aspects ``covers[i]`` (``a0``, ``a1``, ...)."""
    ids = [f"a{j}" for j in range(n_aspects)]
    return {
        "paper_as_candidate_pool": [f"sentence {i}" for i in range(len(covers))],
        "aspect_list_ids": ids,
        "results_aspect_list_ids": None if results is None else [ids[j] for j in results],
        "aspect2sentence_indices": {
            a: [i for i, c in enumerate(covers) if j in c] for j, a in enumerate(ids)
        },
        "sentence_index2aspects": {str(i): [ids[j] for j in sorted(c)] for i, c in enumerate(covers)},
    }


def from_matrix(matrix: np.ndarray) -> Coverage:
    covers = [set(np.flatnonzero(row).tolist()) for row in matrix]
    return coverage(instance(covers, matrix.shape[1]), name="random")


# ---- the 37 released dev instances


def test_dev_set_is_all_there() -> None:
    if not DEV.is_file():
        pytest.skip(f"the released EvidenceBench dev set is not at {DEV}")
    assert len(dev_ids()) == 37


@needs_dev
@pytest.mark.parametrize("key", dev_ids())
def test_recomputed_evaluations_equal_the_released_ones(key: str) -> None:
    released = dev_set()[key]
    ours = evaluations(released, key)
    for field, mine in ours.items():
        theirs = released[field]
        if theirs is None:  # released null: the instance has no results aspects
            assert mine is None and not released["results_aspect_list_ids"], field
            continue
        assert mine is not None, field
        assert set(mine["covered_aspects"]) == set(theirs["covered_aspects"]), field
        if "optimal" in theirs:
            assert mine["optimal"] == theirs["optimal"] == len(theirs["one_selection_of_sentences"]), field
            assert len(mine["one_selection_of_sentences"]) == mine["optimal"]
        else:  # @K: the exact maximum equals what the released K sentences cover
            group = "results" if field.startswith("results_") else "all"
            cov = coverage(released, group, key)
            assert len(mine["covered_aspects"]) == len(cov.covered_by(theirs["one_selection_of_sentences"]))
        # our own selection covers what it claims
        group = "results" if field.startswith("results_") else "all"
        cov = coverage(released, group, key)
        assert cov.covered_by(mine["one_selection_of_sentences"]) == tuple(mine["covered_aspects"])


@needs_dev
@pytest.mark.parametrize("key", dev_ids())
def test_released_selections_score_full_recall(key: str) -> None:
    released = dev_set()[key]
    for task, field in FIELDS.items():
        if released[field] is None:
            with pytest.raises(ValueError, match="no sentence covers"):
                task_recall([0], released, task, key)  # type: ignore[arg-type]
            continue
        picked = released[field]["one_selection_of_sentences"]
        # every dev instance's optimum is at most 10 (all) / 5 (results): @K reaches 100 %
        assert task_recall(picked, released, task, key) == 1.0, task  # type: ignore[arg-type]


@needs_dev
def test_dev_set_figures() -> None:
    """Summary figures of the dev set, checked against the released fields and Table 1's ranges."""
    data = dev_set()
    optimal = [min_cover(coverage(x, "all", k)).sentences for k, x in data.items()]
    assert sum(map(len, optimal)) == sum(
        x["evidence_retrieval_at_optimal_evaluation"]["optimal"] for x in data.values()
    )
    assert max(map(len, optimal)) == 10  # dev_id_13: 30 aspects need 10 sentences
    assert sum(x["results_evidence_retrieval_at_optimal_evaluation"] is None for x in data.values()) == 2
    assert all(coverage(x, "all", k).covered_fraction == 1.0 for k, x in data.items())


@needs_dev
def test_a_system_selection_is_scored_like_the_paper() -> None:
    """dev_id_0: the first three sentences of the abstract cover nothing; sentence 5 covers 4/18."""
    x = dev_set()["evidencebench_dev_id_0"]
    assert aspect_recall([0, 1, 2], x) == 0.0
    assert aspect_recall([5], x) == pytest.approx(4 / 18)
    assert aspect_recall([5, 6], x) == pytest.approx(8 / 18)
    assert aspect_recall([9, 10], x, "results") == 1.0


# ---- hand-made cases


def test_ties_break_to_the_lexicographically_smallest_selection() -> None:
    # sentence: 0 {a0}, 1 {a0,a1}, 2 {a2}, 3 {a1,a2}, 4 {}
    # covers of size 2: {0,3}, {1,2}, {1,3} -> (0, 3) is the smallest tuple
    cov = coverage(instance([{0}, {0, 1}, {2}, {1, 2}, set()], 3))
    best = min_cover(cov)
    assert best.sentences == (0, 3)
    assert best.covered == ("a0", "a1", "a2")
    # one sentence covers at most two aspects: 1 and 3 tie, 1 wins
    assert max_coverage(cov, 1) == Selection((1,), ("a0", "a1"))
    # k larger than needed: the smallest selection reaching the maximum, not k sentences
    assert max_coverage(cov, 10).sentences == (0, 3)


def test_results_aspects_are_selected_on_their_own() -> None:
    x = instance([{0}, {0, 1}, {2}, {1, 2}, set()], 3, results=[2])
    cov = coverage(x, "results")
    assert cov.aspects == ("a2",)
    assert min_cover(cov).sentences == (2,)  # 2 and 3 both cover a2: lowest index
    assert aspect_recall([3], x, "results") == 1.0
    assert aspect_recall([3], x) == pytest.approx(2 / 3)


def test_greedy_would_pick_more_sentences() -> None:
    # greedy takes sentence 0 (4 aspects) and then needs 2 more; 1 and 2 cover everything
    covers = [{0, 1, 2, 3}, {0, 1, 4}, {2, 3, 5}]
    assert min_cover(coverage(instance(covers, 6))).sentences == (1, 2)
    assert max_coverage(coverage(instance(covers, 6)), 1).sentences == (0,)


def test_figure_1_recall_and_the_over_k_rule() -> None:
    # Figure 1: aspect 1 <- sentences 9, 69; aspect 2 <- 163; aspects 3, 4 <- 106
    covers: list[set[int]] = [set() for _ in range(216)]
    covers[9], covers[69], covers[106], covers[163] = {0}, {0}, {2, 3}, {1}
    x = instance(covers, 4)
    assert aspect_recall([9, 69, 106], x, k=3) == 0.75
    # four picks for K=3: the mean over the four 3-subsets (1/4 + 3/4 + 3/4 + 3/4 ... per aspect)
    picked = [9, 69, 106, 163]
    subsets = [aspect_recall(list(s), x) for s in combinations(picked, 3)]
    assert (
        aspect_recall(picked, x, k=3) == pytest.approx(sum(subsets) / len(subsets)) == pytest.approx(0.8125)
    )
    assert aspect_recall(picked, x) == 1.0  # no cap


def test_uncovered_aspects_are_left_out_of_the_denominator_and_counted_for_the_filter() -> None:
    x = instance([{0}, {1}, set()], 4)  # a2, a3: no source of information
    cov = coverage(x)
    assert cov.coverable == ("a0", "a1")
    assert cov.covered_fraction == 0.5
    assert aspect_recall([0], x) == 0.5
    assert min_cover(cov).covered == ("a0", "a1")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda x: x["aspect2sentence_indices"].update(a0=[7]), "outside the pool"),
        (lambda x: x["aspect2sentence_indices"].update(zz=[0]), "not in aspect_list_ids"),
        (lambda x: x["aspect2sentence_indices"].pop("a1"), "no entry in aspect2sentence_indices"),
        (lambda x: x["sentence_index2aspects"].update({"2": ["a0"]}), "disagree on sentence 2 and a0"),
        (lambda x: x["sentence_index2aspects"].update({"9": []}), "out of range"),
        (lambda x: x.update(results_aspect_list_ids=["b"]), "not in aspect_list_ids"),
        (lambda x: x.pop("aspect_list_ids"), "not an EvidenceBench instance"),
    ],
)
def test_malformed_instances_are_refused(change: Any, message: str) -> None:
    x = instance([{0}, {1}, set()], 2)
    change(x)
    with pytest.raises(ValueError, match=message):
        coverage(x, name="dev_x")


def test_bad_selections_are_refused() -> None:
    x = instance([{0}, {1}, set()], 2)
    with pytest.raises(ValueError, match=r"indices \[3\] outside the pool of 3"):
        aspect_recall([0, 3], x)
    with pytest.raises(ValueError, match="repeats a sentence index"):
        aspect_recall([1, 1], x)
    with pytest.raises(ValueError, match="K must be at least 1"):
        aspect_recall([1], x, k=0)
    with pytest.raises(ValueError, match="no sentence covers any of its 2 aspects"):
        aspect_recall([0], instance([set(), set()], 2))


# ---- exactness against brute force


def brute_min_cover(matrix: np.ndarray) -> tuple[int, ...]:
    target = matrix.any(axis=0)
    for size in range(matrix.shape[0] + 1):
        for combo in combinations(range(matrix.shape[0]), size):  # ascending: lexicographic order
            if np.array_equal(matrix[list(combo)].any(axis=0), target):
                return combo
    raise AssertionError("unreachable: all sentences cover every coverable aspect")


def brute_max_coverage(matrix: np.ndarray, k: int) -> tuple[int, ...]:
    def covered(combo: tuple[int, ...]) -> int:
        return int(matrix[list(combo)].any(axis=0).sum()) if combo else 0

    k = min(k, matrix.shape[0])
    best = max(covered(c) for size in range(k + 1) for c in combinations(range(matrix.shape[0]), size))
    return next(
        c for size in range(k + 1) for c in combinations(range(matrix.shape[0]), size) if covered(c) == best
    )


matrices = st.integers(1, 8).flatmap(
    lambda rows: st.integers(1, 6).flatmap(lambda cols: arrays(np.bool_, (rows, cols)))
)


@settings(max_examples=150, deadline=None)
@given(matrices)
def test_min_cover_equals_brute_force(matrix: np.ndarray) -> None:
    assert min_cover(from_matrix(matrix)).sentences == brute_min_cover(matrix)


@settings(max_examples=150, deadline=None)
@given(matrices, st.integers(1, 4))
def test_max_coverage_equals_brute_force(matrix: np.ndarray, k: int) -> None:
    ours = max_coverage(from_matrix(matrix), k)
    assert ours.sentences == brute_max_coverage(matrix, k)
    assert len(ours.sentences) <= k


@settings(max_examples=100, deadline=None)
@given(matrices, st.integers(1, 4), st.data())
def test_over_k_recall_is_the_mean_over_k_subsets(matrix: np.ndarray, k: int, data: st.DataObject) -> None:
    cov = from_matrix(matrix)
    if not cov.coverable:
        return
    picked = data.draw(st.lists(st.integers(0, matrix.shape[0] - 1), unique=True, min_size=1))
    subsets = [cov.recall(list(s)) for s in combinations(picked, min(k, len(picked)))]
    assert cov.recall(picked, k) == pytest.approx(sum(subsets) / len(subsets))
