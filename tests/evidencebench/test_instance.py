"""Released-schema instances (tasks.evidencebench.instance) and the release folder (tasks.evidencebench.release).

The 37 released dev instances are rebuilt from their own alignments and compared field by
field with what the authors released; small hand-made cases pin the edge rules; the release
writer is read back from JSON, Parquet and the card.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from tasks.evidencebench.instance import (
    RELEASED_FIELDS,
    build_instance,
    covered_fraction,
    enough_coverage,
    low_coverage,
)
from tasks.evidencebench.release import (
    CARD_FILE,
    JSON_FILE,
    PARQUET_FILE,
    ReleaseInfo,
    ReleaseRow,
    write_release,
)
from tasks.evidencebench.selection import coverage
from tests.conftest import SAMPLES

DEV = SAMPLES / "evidencebench" / "evidencebench_dev_set.json"
needs_dev = pytest.mark.skipif(
    not DEV.is_file(),
    reason=f"the released EvidenceBench dev set is not at {DEV} (it lives beside the checkout)",
)
EVALUATIONS = (
    "evidence_retrieval_at_optimal_evaluation",
    "evidence_retrieval_at_10_evaluation",
    "results_evidence_retrieval_at_optimal_evaluation",
    "results_evidence_retrieval_at_5_evaluation",
)


@cache
def dev_set() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DEV.read_text())
    return data


def dev_ids() -> list[str]:
    return sorted(dev_set(), key=lambda k: int(k.rsplit("_", 1)[1])) if DEV.is_file() else []


def rebuild(name: str, released: dict[str, Any]) -> dict[str, Any]:
    """``build_instance`` on the released instance's own alignment.

    Released aspect ids keep the aspect's position in the full aspect list: 13 of the 37
    instances skip numbers (aspects dropped as uncovered). The gaps are given back as
    uncovered aspects, as the select stage would pass them.
    """
    a2s = released["aspect2sentence_indices"]
    results_ids = set(released["results_aspect_list_ids"] or [])
    last = max(int(a.rsplit("_", 1)[1]) for a in released["aspect_list_ids"])
    ids = [f"{name}_aspect_{j}" for j in range(last + 1)]
    return build_instance(
        name,
        hypothesis=released["hypothesis"],
        pool=released["paper_as_candidate_pool"],
        pool_types=released["sentence_types_in_candidate_pool"],
        paper_id=released["paper_id"],
        aspect_sentences=[a2s.get(a, []) for a in ids],
        results=[a in results_ids for a in ids],
    )


@needs_dev
def test_released_aspect_ids_keep_their_numbers_with_gaps() -> None:
    """Why :func:`rebuild` passes the gaps: the release does not renumber kept aspects."""
    assert len(dev_ids()) == 37
    gapped = [
        name
        for name, inst in dev_set().items()
        if [a.rsplit("_", 1)[1] for a in inst["aspect_list_ids"]]
        != [str(j) for j in range(len(inst["aspect_list_ids"]))]
    ]
    assert len(gapped) == 13
    assert all(a.startswith(f"{n}_aspect_") for n in dev_ids() for a in dev_set()[n]["aspect_list_ids"])


# ---- the 37 released dev instances


@needs_dev
@pytest.mark.parametrize("name", dev_ids())
def test_rebuilt_dev_instance_matches_the_release(name: str) -> None:
    released = dev_set()[name]
    built = rebuild(name, released)
    assert list(built) == list(released) == list(RELEASED_FIELDS)
    for key in ("hypothesis", "paper_as_candidate_pool", "sentence_types_in_candidate_pool", "paper_id"):
        assert built[key] == released[key]
    assert built["aspect_list_ids"] == released["aspect_list_ids"]
    if released["results_aspect_list_ids"] is None:
        assert built["results_aspect_list_ids"] is None
    else:
        # Same ids; 6 released instances list them out of aspect order (e.g. dev_id_35:
        # 8, 5, 6, 7), an order no input carries: ours follow aspect_list_ids.
        assert sorted(built["results_aspect_list_ids"]) == sorted(released["results_aspect_list_ids"])
        order = built["aspect_list_ids"]
        assert built["results_aspect_list_ids"] == sorted(built["results_aspect_list_ids"], key=order.index)
    assert built["sentence_index2aspects"] == released["sentence_index2aspects"]
    assert {a: sorted(s) for a, s in built["aspect2sentence_indices"].items()} == {
        a: sorted(s) for a, s in released["aspect2sentence_indices"].items()
    }
    for key in (
        "evidence_retrieval_at_optimal_evaluation",
        "results_evidence_retrieval_at_optimal_evaluation",
    ):
        if released[key] is None:
            assert built[key] is None
        else:
            assert built[key]["optimal"] == released[key]["optimal"]
    for key in EVALUATIONS:
        if released[key] is None:
            assert built[key] is None, key
        else:
            assert set(built[key]["covered_aspects"]) == set(released[key]["covered_aspects"]), key


@needs_dev
@pytest.mark.parametrize("name", dev_ids())
def test_rebuilt_at_k_selections_are_full_and_as_good(name: str) -> None:
    released = dev_set()[name]
    built = rebuild(name, released)
    n = len(built["paper_as_candidate_pool"])
    for key, group, k in (
        ("evidence_retrieval_at_10_evaluation", "all", 10),
        ("results_evidence_retrieval_at_5_evaluation", "results", 5),
    ):
        if released[key] is None:
            assert built[key] is None
            continue
        cov = coverage(built, group, name)  # type: ignore[arg-type]
        chosen = built[key]["one_selection_of_sentences"]
        assert len(chosen) == len(set(chosen)) == min(k, n), key
        assert all(0 <= s < n for s in chosen)
        ours = cov.covered_by(chosen)
        theirs = cov.covered_by(released[key]["one_selection_of_sentences"])
        assert len(ours) == len(theirs), key
        assert set(ours) == set(built[key]["covered_aspects"]), key


# ---- hand-made cases


def small(
    aspect_sentences: list[list[int]], results: list[bool], n: int = 4, name: str = "inst"
) -> dict[str, Any]:
    return build_instance(
        name,
        hypothesis="A hypothesis.",
        pool=[f"sentence {i}" for i in range(n)],
        pool_types=["abstract"] * n,
        paper_id="PMC1",
        aspect_sentences=aspect_sentences,
        results=results,
    )


def test_uncovered_aspects_are_dropped_and_the_rest_keep_their_numbers() -> None:
    # As released (see test_released_aspect_ids_keep_their_numbers_with_gaps): ids 1 and 3, not 0 and 1.
    built = small([[], [2, 0, 2], [], [3]], [True, False, True, True])
    assert built["aspect_list_ids"] == ["inst_aspect_1", "inst_aspect_3"]
    assert built["aspect2sentence_indices"] == {"inst_aspect_1": [0, 2], "inst_aspect_3": [3]}
    assert built["results_aspect_list_ids"] == ["inst_aspect_3"]
    assert built["sentence_index2aspects"] == {
        "0": ["inst_aspect_1"],
        "1": [],
        "2": ["inst_aspect_1"],
        "3": ["inst_aspect_3"],
    }
    assert built["evidence_retrieval_at_optimal_evaluation"]["optimal"] == 2
    assert built["results_evidence_retrieval_at_optimal_evaluation"] == {
        "optimal": 1,
        "one_selection_of_sentences": [3],
        "covered_aspects": ["inst_aspect_3"],
    }


def test_no_results_aspect_makes_the_results_fields_null() -> None:
    built = small([[0], [1]], [False, False])
    assert built["results_aspect_list_ids"] is None
    assert built["results_evidence_retrieval_at_optimal_evaluation"] is None
    assert built["results_evidence_retrieval_at_5_evaluation"] is None
    # A results aspect that no sentence covers is dropped too: still null.
    built = small([[0], []], [False, True])
    assert built["results_aspect_list_ids"] is None
    assert built["results_evidence_retrieval_at_5_evaluation"] is None


def test_padding_takes_the_lowest_unused_indices_and_keeps_the_coverage() -> None:
    # Sentence 5 covers both aspects: one sentence reaches the maximum coverage.
    built = small([[5], [5, 7]], [True, False], n=12)
    at_10 = built["evidence_retrieval_at_10_evaluation"]
    assert at_10["one_selection_of_sentences"] == [5, 0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert at_10["covered_aspects"] == ["inst_aspect_0", "inst_aspect_1"]
    at_5 = built["results_evidence_retrieval_at_5_evaluation"]
    assert at_5["one_selection_of_sentences"] == [5, 0, 1, 2, 3]
    assert at_5["covered_aspects"] == ["inst_aspect_0"]
    cov = coverage(built, "all", "inst")
    assert cov.covered_by(at_10["one_selection_of_sentences"]) == tuple(at_10["covered_aspects"])
    # A pool smaller than K: every sentence, once.
    tiny = small([[1]], [True], n=3)
    assert sorted(tiny["evidence_retrieval_at_10_evaluation"]["one_selection_of_sentences"]) == [0, 1, 2]
    assert tiny["evidence_retrieval_at_10_evaluation"]["one_selection_of_sentences"][0] == 1
    assert sorted(tiny["results_evidence_retrieval_at_5_evaluation"]["one_selection_of_sentences"]) == [
        0,
        1,
        2,
    ]


@pytest.mark.parametrize("bad", [4, -1])
def test_a_sentence_index_outside_the_pool_is_an_error_naming_the_instance(bad: int) -> None:
    with pytest.raises(
        ValueError, match=rf"my_instance: aspect 2 points at sentence {bad}, outside the pool"
    ):
        small([[0], [], [bad]], [False, False, False], name="my_instance")


def test_mismatched_lengths_are_errors() -> None:
    with pytest.raises(ValueError, match=r"inst: 2 aspects but 1 result flags"):
        small([[0], [1]], [True])
    with pytest.raises(ValueError, match=r"inst: 2 pool sentences but 3 types"):
        build_instance(
            "inst",
            hypothesis="h",
            pool=["a", "b"],
            pool_types=["t", "t", "t"],
            paper_id="p",
            aspect_sentences=[[0]],
            results=[False],
        )


def test_the_70_percent_rule_is_inclusive() -> None:
    seven_of_ten = [[0]] * 7 + [[]] * 3
    assert covered_fraction(seven_of_ten) == pytest.approx(0.7)
    assert enough_coverage(seven_of_ten)
    two_of_three = [[0], [1], []]
    assert covered_fraction(two_of_three) == pytest.approx(2 / 3)
    assert not enough_coverage(two_of_three)
    assert covered_fraction([]) == 0.0 and not enough_coverage([])
    assert enough_coverage([[0], [1]])
    assert low_coverage(seven_of_ten) is None
    assert low_coverage(two_of_three) == "2 of 3 aspects have a sentence (67% < 70%)"


# ---- the release folder


def release_row(instance_id: str, aspect_sentences: list[list[int]], results: list[bool]) -> ReleaseRow:
    instance = small(aspect_sentences, results, n=12, name=instance_id)
    n_aspects = len(instance["aspect_list_ids"])
    return ReleaseRow(
        instance_id=instance_id,
        instance=instance,
        aspect_texts=[f"aspect text {j}" for j in range(n_aspects)],
        aspect_labels=["results" if results[j] else "methods" for j in range(n_aspects)],
        evidence_summary=f"Summary of {instance_id}.",
        review_id=f"review-{instance_id}",
        review_license="CC BY 4.0",
    )


ROWS = (
    ("inst_b", [[3, 1], [7], [0, 3]], [False, True, True]),
    ("inst_a", [[2], [5, 4]], [False, False]),
    ("inst_c", [[9]], [True]),
)
INFO = ReleaseInfo(name="EvidenceBench test release", license="cc-by-4.0", models={"align": "gemma"})


@pytest.fixture
def rows() -> list[ReleaseRow]:
    return [release_row(*spec) for spec in ROWS]


def no_temp_files(folder: Path) -> None:
    assert [p for p in folder.rglob(".*.tmp")] == []


def test_json_round_trips_by_id_in_sorted_order(tmp_path: Path, rows: list[ReleaseRow]) -> None:
    written = write_release(tmp_path, rows, INFO)
    assert [w.path for w in written] == [JSON_FILE, PARQUET_FILE, CARD_FILE]
    data = json.loads((tmp_path / JSON_FILE).read_text())
    assert list(data) == ["inst_a", "inst_b", "inst_c"]
    by_id = {r.instance_id: r.instance for r in rows}
    for instance_id, instance in data.items():
        assert instance == by_id[instance_id]
        assert list(instance) == list(RELEASED_FIELDS)
    no_temp_files(tmp_path)


def test_parquet_has_one_row_per_instance_aligned_with_the_aspect_ids(
    tmp_path: Path, rows: list[ReleaseRow]
) -> None:
    write_release(tmp_path, rows, INFO)
    table = pq.read_table(tmp_path / PARQUET_FILE).to_pylist()
    assert [r["instance_id"] for r in table] == ["inst_a", "inst_b", "inst_c"]
    by_id = {r.instance_id: r for r in rows}
    for row in table:
        source = by_id[row["instance_id"]]
        inst = source.instance
        assert row["aspect_list_ids"] == inst["aspect_list_ids"]
        assert row["aspect2sentence_indices"] == [
            sorted(inst["aspect2sentence_indices"][a]) for a in inst["aspect_list_ids"]
        ]
        assert row["aspect_texts"] == list(source.aspect_texts)
        assert row["results_aspect_list_ids"] == inst["results_aspect_list_ids"]
        assert row["optimal"] == inst["evidence_retrieval_at_optimal_evaluation"]["optimal"]
        assert (
            row["at_10_selection"]
            == inst["evidence_retrieval_at_10_evaluation"]["one_selection_of_sentences"]
        )
        results_at_5 = inst["results_evidence_retrieval_at_5_evaluation"]
        assert row["results_at_5_selection"] == (
            None if results_at_5 is None else results_at_5["one_selection_of_sentences"]
        )
    assert table[0]["results_optimal"] is None  # inst_a has no results aspect
    no_temp_files(tmp_path)


def front_matter(card: str) -> dict[str, Any]:
    assert card.startswith("---\n")
    head = card.split("\n---\n", 1)[0].removeprefix("---\n")
    parsed: dict[str, Any] = yaml.safe_load(head)
    return parsed


def test_card_front_matter_parses_and_names_the_parquet(tmp_path: Path, rows: list[ReleaseRow]) -> None:
    write_release(tmp_path, rows, INFO)
    card = (tmp_path / CARD_FILE).read_text()
    front = front_matter(card)
    assert front["license"] == "cc-by-4.0"
    assert front["pretty_name"] == INFO.name
    assert front["configs"] == [
        {"config_name": "default", "data_files": [{"split": "test", "path": "data/test.parquet"}]}
    ]
    assert "Demo build" not in card
    assert "| 3 |" in card  # the statistics table counts the instances
    no_temp_files(tmp_path)


def test_a_demo_build_says_so(tmp_path: Path, rows: list[ReleaseRow]) -> None:
    demo = ReleaseInfo(name="demo", license="cc-by-4.0", demo_models=True)
    write_release(tmp_path, rows, demo)
    card = (tmp_path / CARD_FILE).read_text()
    assert front_matter(card)["pretty_name"] == "demo"
    assert "**Demo build.**" in card and "tiny embedded model" in card
    no_temp_files(tmp_path)


def test_duplicate_ids_are_refused(tmp_path: Path, rows: list[ReleaseRow]) -> None:
    with pytest.raises(ValueError, match=r"'inst_b' is given twice"):
        write_release(tmp_path, [*rows, rows[0]], INFO)
    assert list(tmp_path.iterdir()) == []  # nothing was written
