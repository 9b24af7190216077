"""Stage ``reviews`` (tasks/spanish_sr/stages/reviews.py): review sets written here (YAML and JSONL,
as a folder and as a glob) checked against real CT-EBM-SP records, and the bundled demo set
(data/spanish_sr/reviews/ct-ebm-sp-demo.yaml) against the 300 real records. The file format
itself is tested in test_review_sets.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from irforge.artifacts import Artifact
from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.errors import ConfigError, IrforgeError
from tasks.spanish_sr.review_sets import load_review_set
from tasks.spanish_sr.stages.reviews import SPEC, ReviewsConfig
from tests.spanish_sr.conftest import CT_EBM_SP, DATA, artifact_of, run_one
from tests.spanish_sr.test_clean import clean
from tests.spanish_sr.test_ingest import ingest

DEMO = DATA / "spanish_sr" / "reviews" / "ct-ebm-sp-demo.yaml"
# Four real records (file stems of the shared corpus); NOPE-* are ids of no record.
A, B, C, D = (
    "S0120-99572013000200003",
    "S0212-71992001000700004",
    "S1130-01082007000200002",
    "S0325-00752012000400003",
)

YAML_SET = f"""\
corpus: a few CT-EBM-SP records
reviews:
  - id: r-known
    language: es
    title: Dos registros conocidos
    question: "¿Primera pregunta?"
    expert_queries: [helicobacter Y erradicacion]
    included: [{A}, {B}]
  - id: r-mixed
    language: es
    question: "¿Segunda pregunta?"
    expert_queries: [asma Y ninos, crisis asmatica]
    included: [{C}, NOPE-1]
"""
JSONL_REVIEWS = [
    {
        "id": "r-gone",
        "language": "es",
        "question": "¿Tercera pregunta?",
        "expert_queries": ["lidocaina", "dolor"],
        "included": ["NOPE-2", "NOPE-3"],
    },
    {"id": "r-one", "language": "en", "question": "Fourth?", "expert_queries": ["obesity"], "included": [D]},
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StageOutcome]:
    """The 300 real records through the real ``ingest`` and ``clean`` stages."""
    root = tmp_path_factory.mktemp("reviews")
    return root, clean(root, ingest(root, CT_EBM_SP.parent, "ct-ebm-sp"))


@pytest.fixture(scope="module")
def small_clean(corpus: tuple[Path, StageOutcome]) -> Artifact:
    """A ``clean`` artifact holding five real records: A to D and one no review includes."""
    root, cleaned = corpus
    table = cleaned.artifact.read().sort_by("record_id")
    keep = pa.array([A, B, C, D, "S0004-06142008000500003"])
    return artifact_of(root, "clean", table.filter(pc.is_in(table["record_id"], keep)))


def write_sets(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a.yaml").write_text(YAML_SET, encoding="utf-8")
    lines = [json.dumps(r, ensure_ascii=False) for r in JSONL_REVIEWS]
    (folder / "b.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "notes.txt").write_text("not a review set: ignored by suffix", encoding="utf-8")


def reviews(base: Path, upstream: Artifact, **config: Any) -> StageOutcome:
    cfg = validate_config(ReviewsConfig, config, "test")
    return run_one(base / "store", SPEC, cfg, {"clean": upstream}, base_dir=base)


@pytest.mark.parametrize("files", [["sets"], ["sets/*.yaml", "sets/*.jsonl"], ["sets/**/*.*l"]])
def test_known_judgements_kept_unknown_ids_excluded_with_file_and_review(
    tmp_path: Path, small_clean: Artifact, files: list[str]
) -> None:
    write_sets(tmp_path / "sets")
    outcome = reviews(tmp_path, small_clean, files=files)
    kept = outcome.artifact.read().to_pylist()
    assert sorted((r["review_id"], r["record_id"], r["relevance"], r["source"]) for r in kept) == [
        ("r-known", A, 1, "sets/a.yaml"),
        ("r-known", B, 1, "sets/a.yaml"),
        ("r-mixed", C, 1, "sets/a.yaml"),
        ("r-one", D, 1, "sets/b.jsonl"),
    ]
    excluded = sorted(outcome.artifact.excluded().to_pylist(), key=lambda r: r["record_id"])
    assert [(r["reason"], r["source"], r["review_id"], r["record_id"]) for r in excluded] == [
        ("unknown_record", "sets/a.yaml", "r-mixed", "NOPE-1"),
        ("unknown_record", "sets/b.jsonl", "r-gone", "NOPE-2"),
        ("unknown_record", "sets/b.jsonl", "r-gone", "NOPE-3"),
    ]
    for row in excluded:
        assert row["source"] in row["detail"] and repr(row["review_id"]) in row["detail"]
        assert row["record_id"] in row["detail"] and "\n" not in row["detail"]
    # a review with no known record left: said on each of its rows, and its queries dropped
    assert ["not evaluated" in r["detail"] for r in excluded] == [False, True, True]
    queries = outcome.artifact.read(table="queries").to_pylist()
    assert [q["query_id"] for q in queries] == [
        "r-known/question", "r-known/expert-1", "r-mixed/question", "r-mixed/expert-1",
        "r-mixed/expert-2", "r-one/question", "r-one/expert-1",
    ]  # fmt: skip
    assert queries[0]["text"] == "¿Primera pregunta?" and queries[4]["text"] == "crisis asmatica"
    assert {q["review_id"]: q["language"] for q in queries}["r-one"] == "en"
    table = outcome.artifact.read(table="reviews").to_pylist()
    assert [(r["review_id"], r["source"], r["included"], r["included_known"]) for r in table] == [
        ("r-known", "sets/a.yaml", 2, 2),
        ("r-mixed", "sets/a.yaml", 2, 1),
        ("r-gone", "sets/b.jsonl", 2, 0),
        ("r-one", "sets/b.jsonl", 1, 1),
    ]
    assert (table[0]["title"], table[1]["title"]) == ("Dos registros conocidos", None)
    counts = outcome.manifest["counts"]
    assert (counts["rows_in"], counts["rows_out"], counts["rows_excluded"]) == (7, 4, 3)
    assert counts["excluded_by_reason"] == {"unknown_record": 3}


def test_every_id_known_gives_no_exclusion_and_the_fingerprint_follows_the_files(
    tmp_path: Path, small_clean: Artifact
) -> None:
    folder = tmp_path / "sets"
    folder.mkdir()
    (folder / "a.yaml").write_text(YAML_SET.replace(", NOPE-1", ""), encoding="utf-8")
    first = reviews(tmp_path, small_clean, files=["sets/a.yaml"])
    assert first.artifact.excluded().num_rows == 0 and first.artifact.read().num_rows == 3
    (folder / "a.yaml").write_text(YAML_SET.replace(", NOPE-1", f", {D}"), encoding="utf-8")
    second = reviews(tmp_path, small_clean, files=["sets/a.yaml"])
    assert second.artifact.fingerprint != first.artifact.fingerprint
    assert (D, "r-mixed") in {(r["record_id"], r["review_id"]) for r in second.artifact.read().to_pylist()}


def test_unknown_id_is_a_one_line_error_when_asked(tmp_path: Path, small_clean: Artifact) -> None:
    write_sets(tmp_path / "sets")
    with pytest.raises(IrforgeError) as info:
        reviews(tmp_path, small_clean, files=["sets/a.yaml"], on_unknown_record="error")
    message = str(info.value)
    assert "\n" not in message and "sets/a.yaml" in message and "'r-mixed'" in message
    assert "NOPE-1" in message


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("bad.yaml", "reviews: [\n  - id: x\n", "not valid YAML"),
        ("bad.jsonl", '{"id": "x"\n', "line 1: not valid JSON"),
        ("bad.yaml", "reviews:\n  - id: x\n    language: es\n    question: ''\n", "review 'x'"),
    ],
)
def test_a_malformed_file_is_a_one_line_error_naming_it(
    tmp_path: Path, small_clean: Artifact, name: str, text: str, expected: str
) -> None:
    write_sets(tmp_path / "sets")
    (tmp_path / "sets" / name).write_text(text, encoding="utf-8")
    with pytest.raises(IrforgeError) as info:
        reviews(tmp_path, small_clean, files=["sets"])
    message = str(info.value)
    assert "\n" not in message and f"sets/{name}" in message and expected in message


def test_a_dangling_link_in_the_folder_is_a_one_line_error(tmp_path: Path, small_clean: Artifact) -> None:
    write_sets(tmp_path / "sets")
    (tmp_path / "sets" / "c.yaml").symlink_to(tmp_path / "missing.yaml")
    with pytest.raises(IrforgeError) as info:
        reviews(tmp_path, small_clean, files=["sets"])
    message = str(info.value)
    assert "\n" not in message and "sets/c.yaml" in message and "dangling_link" in message


@pytest.mark.parametrize("files", [["sets/none.yaml"], ["sets/*.yml"], ["empty"]])
def test_a_missing_file_or_glob_is_a_config_error_at_planning(
    tmp_path: Path, small_clean: Artifact, files: list[str]
) -> None:
    write_sets(tmp_path / "sets")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"stages\.reviews\.files\[0\]: no such folder, or no file matches"):
        reviews(tmp_path, small_clean, files=files)
    assert not (tmp_path / "store" / "spanish_sr" / "reviews").exists()
    with pytest.raises(ConfigError, match="files"):
        validate_config(ReviewsConfig, {"files": []}, "test")
    with pytest.raises(ConfigError, match="on_unknown_record"):
        validate_config(ReviewsConfig, {"files": ["sets"], "on_unknown_record": "drop"}, "test")


def test_bundled_demo_set_against_the_300_real_records(corpus: tuple[Path, StageOutcome]) -> None:
    root, cleaned = corpus
    assert cleaned.artifact.read().num_rows == 300
    outcome = run_one(
        root / "store",
        SPEC,
        validate_config(ReviewsConfig, {"files": ["reviews/ct-ebm-sp-demo.yaml"]}, "test"),
        {"clean": cleaned.artifact},
        base_dir=DEMO.parents[1],
    )
    expected = load_review_set(DEMO).reviews
    assert len(expected) == 4 and outcome.artifact.excluded().num_rows == 0
    kept = outcome.artifact.read().to_pylist()
    assert {r["source"] for r in kept} == {"reviews/ct-ebm-sp-demo.yaml"}
    assert sorted((r["review_id"], r["record_id"]) for r in kept) == sorted(
        (review.id, rid) for review in expected for rid in review.included
    )
    table = outcome.artifact.read(table="reviews").to_pylist()
    assert [(r["review_id"], r["included"], r["included_known"]) for r in table] == [
        (review.id, len(review.included), len(review.included)) for review in expected
    ]
    queries = outcome.artifact.read(table="queries").to_pylist()
    for review in expected:
        mine = [q for q in queries if q["review_id"] == review.id]
        assert [q["kind"] for q in mine] == ["question"] + ["expert"] * len(review.expert_queries)
        assert [q["text"] for q in mine] == [review.question, *review.expert_queries]
