"""Review query sets (tasks/spanish_sr/review_sets.py; issue 17 "Evaluation sets")."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tasks.common.evaluate.metrics import evaluate_per_query
from tasks.spanish_sr.review_sets import (
    EXCLUDED_SCHEMA,
    ReviewSetError,
    check_records,
    load_review_set,
    load_review_sets,
    qrels,
    qrels_table,
    queries_table,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "spanish_sr"
DEMO = DATA / "reviews" / "ct-ebm-sp-demo.yaml"
SCREENING = DATA / "reviews" / "sr-screening.yaml"
SCREENING_CSV = DATA / "sr-screening" / "Antihistamines.csv"
CT_EBM_SP = DATA / "ct-ebm-sp"  # the 300 abstracts, copied from the shared corpus

REVIEW = """\
  - id: {id}
    language: es
    question: "¿Pregunta?"
    expert_queries: {queries}
    included: {included}
"""


def _write(tmp_path: Path, *reviews: str, name: str = "set.yaml") -> Path:
    path = tmp_path / name
    path.write_text("reviews:\n" + "".join(reviews), encoding="utf-8")
    return path


def _review(id: str = "r1", queries: str = "[depresion Y ninos]", included: str = "[a, b]") -> str:
    return REVIEW.format(id=id, queries=queries, included=included)


def _abstracts() -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(CT_EBM_SP.rglob("*.txt"))}


def test_demo_set_loads_and_every_id_is_an_abstract_of_the_corpus() -> None:
    review_set = load_review_set(DEMO)
    abstracts = _abstracts()
    assert len(review_set.reviews) >= 3
    for review in review_set.reviews:
        assert review.language == "es" and review.question.startswith("¿")
        assert len(review.expert_queries) >= 2 and len(review.included) >= 3
        for rid in review.included:
            assert rid in abstracts, (review.id, rid)
            assert not abstracts[rid].lstrip().startswith("EudraCT"), rid  # an abstract, not a trial
    check = check_records([review_set], set(abstracts))
    assert check.excluded.num_rows == 0 and check.sets[0] == review_set


@pytest.mark.parametrize(
    ("review", "term"),
    [("hp-erradicacion", "pylori"), ("asma-aguda-ninos", "asm"), ("lidocaina-iv-dolor-postoperatorio", "lidoca"),
     ("obesidad-perdida-peso", "peso")],
)  # fmt: skip
def test_demo_included_abstracts_are_on_topic(review: str, term: str) -> None:
    abstracts = _abstracts()
    chosen = next(r for r in load_review_set(DEMO).reviews if r.id == review)
    assert all(term in abstracts[rid].lower() for rid in chosen.included)


def test_screening_set_is_the_csv_inclusions() -> None:
    with SCREENING_CSV.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    ids = {r["pubmedID"] for r in rows}
    included = {r["pubmedID"] for r in rows if r["label_included"] == "1"}
    (review,) = load_review_set(SCREENING).reviews
    assert review.language == "en" and len(included) == 16
    assert set(review.included) == included
    assert check_records([load_review_set(SCREENING)], ids).excluded.num_rows == 0


def test_queries_and_qrels_of_both_files() -> None:
    sets = load_review_sets([DEMO, SCREENING])
    queries = queries_table(sets)
    reviews = [r for s in sets for r in s.reviews]
    assert queries.num_rows == sum(1 + len(r.expert_queries) for r in reviews)
    assert queries.column("query_id").to_pylist()[:2] == [
        "hp-erradicacion/question",
        "hp-erradicacion/expert-1",
    ]
    assert set(queries.column("kind").to_pylist()) == {"question", "expert"}
    table = qrels_table(sets)
    assert table.num_rows == sum((1 + len(r.expert_queries)) * len(r.included) for r in reviews)
    assert set(qrels(sets)["cohen2006-antihistamines/expert-2"]) == set(reviews[-1].included)


def test_unknown_ids_are_excluded_rows_or_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, _review("r1", included="[a, zz]"), _review("r2", included="[x, y]"))
    review_set = load_review_set(path)
    check = check_records([review_set], {"a", "b"})
    assert check.excluded.schema == EXCLUDED_SCHEMA
    rows = check.excluded.to_pylist()
    assert [(r["reason"], r["review_id"], r["record_id"]) for r in rows] == [
        ("unknown_record", "r1", "zz"),
        ("unknown_record", "r2", "x"),
        ("unknown_record", "r2", "y"),
        ("no_known_record", "r2", None),
    ]
    assert all(str(path) in r["detail"] for r in rows)
    assert [(r.id, r.included) for r in check.sets[0].reviews] == [("r1", ["a"])]
    with pytest.raises(ReviewSetError) as err:
        check_records([review_set], {"a", "b"}, on_unknown="error")
    assert str(err.value) == f"{path}: review 'r1': 1 included id(s) not in the corpus: 'zz'"


@pytest.mark.parametrize(
    ("reviews", "message"),
    [
        (
            (_review(queries="[]"),),
            r"reviews\[0\] \(review 'r1'\): expert_queries: List should have at least 1 item",
        ),
        ((_review(queries="['  ']"),), r"review 'r1'\): expert_queries: Value error, entry 0 is blank"),
        ((_review(included="[a, a]"),), r"included: Value error, entry 1 'a' is given twice"),
        (
            (_review("r1"), _review("r1")),
            r"reviews\[1\]: review id 'r1' is used twice \(first at reviews\[0\]\)",
        ),
        ((_review("bad id"),), r"review 'bad id'\): id: String should match pattern"),
    ],
)
def test_format_errors_are_one_line_naming_file_and_review(
    tmp_path: Path, reviews: tuple[str, ...], message: str
) -> None:
    path = _write(tmp_path, *reviews)
    with pytest.raises(ReviewSetError, match=message) as err:
        load_review_set(path)
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


def test_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("reviews:\n  - id: [unclosed\n", encoding="utf-8")
    with pytest.raises(ReviewSetError, match=r"bad.yaml: not valid YAML: ") as err:
        load_review_set(bad_yaml)
    assert "\n" not in str(err.value)
    listing = tmp_path / "list.yaml"
    listing.write_text("- id: r1\n", encoding="utf-8")
    with pytest.raises(ReviewSetError, match="top level must be a mapping"):
        load_review_set(listing)
    with pytest.raises(ReviewSetError, match=r"missing.yaml: cannot read review set"):
        load_review_set(tmp_path / "missing.yaml")
    with pytest.raises(ReviewSetError, match=r"x.csv: unknown review set format"):
        (tmp_path / "x.csv").write_text("a", encoding="utf-8")
        load_review_set(tmp_path / "x.csv")


def test_jsonl_format_and_duplicates_across_files(tmp_path: Path) -> None:
    review = {
        "id": "r1",
        "language": "en",
        "question": "Q?",
        "expert_queries": ["a AND b"],
        "included": ["1"],
    }
    jsonl = tmp_path / "set.jsonl"
    jsonl.write_text(json.dumps(review) + "\n\n{broken\n", encoding="utf-8")
    with pytest.raises(ReviewSetError, match=r"set.jsonl: line 3: not valid JSON"):
        load_review_set(jsonl)
    jsonl.write_text(json.dumps(review) + "\n", encoding="utf-8")
    assert load_review_set(jsonl).reviews[0].included == ["1"]
    yaml_path = _write(tmp_path, _review("r1"))
    with pytest.raises(ReviewSetError, match=r"set.yaml: review 'r1' is also defined in .*set.jsonl"):
        load_review_sets([jsonl, yaml_path])


def test_shared_metrics_score_review_qrels_by_hand(tmp_path: Path) -> None:
    """The evaluate stage reuses tasks/common/evaluate/metrics.py (AP, nDCG@10, R@k)."""
    sets = [load_review_set(_write(tmp_path, _review("r1", included="[a, b]")))]
    judged = {qid: docs for qid, docs in qrels(sets).items() if qid == "r1/question"}
    run = {"r1/question": {"x": 4.0, "a": 3.0, "y": 2.0, "b": 1.0}}  # relevant at ranks 2 and 4
    values = evaluate_per_query(judged, run, ["AP", "nDCG@10", "R@2"])["r1/question"]
    assert values["AP"] == pytest.approx((1 / 2 + 2 / 4) / 2)
    ideal = 1 + 1 / 1.5849625007211562
    assert values["nDCG@10"] == pytest.approx((1 / 1.5849625007211562 + 1 / 2.321928094887362) / ideal)
    assert values["R@2"] == pytest.approx(0.5)
