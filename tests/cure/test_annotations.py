"""Annotation intake: every export format, an Argilla-style export, each invalid case, linking."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from irforge.engine import StageOutcome
from irforge.errors import ConfigError
from tasks.common.annotations.exports import get_path
from tasks.common.annotations.linking import link_passage
from tests.conftest import REPO, run_cure

DEMO = REPO / "data" / "demo"
ARTICLE = DEMO / "articles" / "demo2_dermatology_psoriasis_nbuvb.xml"
CONCLUSION = (
    "Combining topical calcipotriol with narrowband UVB phototherapy appears to shorten treatment courses for "
    "moderate plaque psoriasis without important safety concerns. A randomised trial with objective monitoring of "
    "adherence would help to confirm these results and to estimate the cost savings for phototherapy services."
)
GOOD = {
    "id": "r1",
    "query": "Does calcipotriol shorten UVB phototherapy for psoriasis?",
    "language": "en",
    "domains": "Dermatology",
    "expertise": "expert",
    "annotator": "a1",
    "status": "validated",
    "passage": CONCLUSION,
    "doi": "10.5555/irforge.demo.2",
}
# Each invalid record and the reason it must be excluded for.
INVALID: list[tuple[dict[str, Any], str]] = [
    ({**GOOD, "id": "r2", "query": "  "}, "missing_query"),
    ({**GOOD, "id": "r3", "passage": None}, "missing_passage"),
    ({**GOOD, "id": "r4", "language": "de"}, "unknown_language"),
    ({**GOOD, "id": "r5", "domains": None}, "missing_domain"),
    ({**GOOD, "id": "r6", "domains": "Dermatology; Cardiology"}, "unknown_domain"),
    ({**GOOD, "id": "r7", "expertise": "student"}, "unknown_expertise"),
    ({**GOOD, "id": "r8", "status": "rejected", "feedback": "not an answer"}, "rejected"),
    ({**GOOD, "id": "r9", "status": "pending"}, "not_validated"),
    ({**GOOD, "id": "r10"}, "duplicate_record"),
]


def _corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.xml").write_bytes(ARTICLE.read_bytes())
    return corpus


def _run(tmp_path: Path, export: Path, **annotations: Any) -> dict[str, StageOutcome]:
    _corpus(tmp_path)
    config = {"sources": [str(export.relative_to(tmp_path))], **annotations}
    return run_cure(tmp_path / "artifacts", ["corpus"], tmp_path, annotations=config)


def _records() -> list[dict[str, Any]]:
    return [GOOD, *(r for r, _ in INVALID)]


def _check(out: dict[str, StageOutcome], source_name: str) -> None:
    art = out["annotations"].artifact
    (kept,) = art.read().to_pylist()
    assert (kept["record_id"], kept["article_id"], kept["link"]) == ("r1", "PMC0000002", "exact")
    assert kept["corpus_passage_id"].startswith("PMC0000002:")
    excluded = {r["row"]: r for r in art.excluded().to_pylist()}
    expected = {i + 2: reason for i, (_, reason) in enumerate(INVALID)}
    if source_name.endswith(".csv"):  # the header is line 1: records start on line 2
        expected = {row + 1: reason for row, reason in expected.items()}
    assert {row: r["reason"] for row, r in excluded.items()} == expected
    for row, r in excluded.items():
        assert r["detail"].startswith(f"{source_name} row {row}: ")
    assert "not an answer" in next(r["detail"] for r in excluded.values() if r["reason"] == "rejected")
    m = out["annotations"].manifest["counts"]
    assert m["units_in"] == m["units_kept"] + m["units_excluded"] == len(INVALID) + 1
    (query,) = art.read(table="queries").to_pylist()
    assert (query["language"], query["domain"], query["n_relevant"]) == ("en", "dermatology", 1)


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv", "parquet"])
def test_every_format_validates_the_same_way(tmp_path: Path, fmt: str) -> None:
    records = _records()
    path = tmp_path / f"export.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(records))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif fmt == "csv":
        names = sorted({k for r in records for k in r})
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=names)
            writer.writeheader()
            writer.writerows(records)
    else:
        names = sorted({k for r in records for k in r})
        pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in names} for r in records]), path)
    _check(_run(tmp_path, path), path.name)


def test_malformed_jsonl_line_is_quarantined_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{not json\n[1, 2]\n")
    out = _run(tmp_path, path)
    excluded = out["annotations"].artifact.excluded().to_pylist()
    assert [(r["row"], r["reason"]) for r in excluded] == [(2, "malformed_record"), (3, "malformed_record")]
    assert excluded[0]["detail"].startswith("export.jsonl row 2: not valid JSON")
    assert out["annotations"].artifact.num_rows == 1


def test_demo_argilla_export_through_the_field_map(tmp_path: Path) -> None:
    demo = yaml.safe_load((REPO / "flows" / "configs" / "cure.yaml").read_text())
    annotations = demo["stages"]["annotations"]
    configs = REPO / "flows" / "configs"
    annotations["sources"] = [str((configs / s).resolve()) for s in annotations["sources"]]
    sources = [str((configs / s).resolve()) for s in demo["stages"]["ingest"]["sources"]]
    out = run_cure(tmp_path, sources, tmp_path, annotations=annotations)
    art = out["annotations"].artifact
    kept = {r["record_id"]: r for r in art.read().to_pylist()}
    reasons = {r["row"]: r["reason"] for r in art.excluded().to_pylist()}
    # Rows as written in data/demo/annotations/argilla_export.json (see the comments in its generator).
    assert reasons == {
        11: "rejected",
        12: "unknown_domain",
        13: "missing_query",
        14: "duplicate_record",
        15: "unknown_language",
        17: "not_validated",
    }
    assert kept["demo-002"]["link"] == "fuzzy" and kept["demo-002"]["corpus_passage_id"] == "PMC0000001:3"
    assert kept["demo-007"]["link"] == "contained"  # one sentence of a corpus passage
    assert kept["demo-016"]["link"] == "no_article" and kept["demo-016"]["article_id"] is None
    assert (
        kept["demo-008"]["article_id"] == "doi:10.5555/irforge.demo.5"
    )  # an HTML article, by DOI in the URL
    queries = {q["text"][:20]: q for q in art.read(table="queries").to_pylist()}
    pulmonary = next(q for q in queries.values() if "spirometry" in q["text"])
    assert pulmonary["domains"] == ["pulmonology", "genetics"] and pulmonary["domain"] == "pulmonology"
    spanish = next(q for q in queries.values() if q["text"].startswith("¿El calcipotriol"))
    assert spanish["language"] == "es"  # exported as "Español"


def test_missing_export_file_is_a_config_error(tmp_path: Path) -> None:
    _corpus(tmp_path)
    with pytest.raises(ConfigError, match=r"stages\.annotations\.sources\[0\]: no such file"):
        run_cure(tmp_path / "artifacts", ["corpus"], tmp_path, annotations={"sources": ["nope.json"]})


def test_dotted_paths_with_indexes() -> None:
    record = {"responses": {"language": [{"value": "fr"}]}, "fields": {"query": "q"}}
    assert get_path(record, "responses.language[0].value") == "fr"
    assert get_path(record, "responses.language[1].value") is None
    assert get_path(record, "fields.missing") is None


def test_linking_prefers_exact_then_contained_then_fuzzy() -> None:
    candidates = [
        ("a:0", "Alpha beta gamma delta."),
        ("a:1", "The quick brown fox jumps over the lazy dog today."),
    ]
    assert link_passage("alpha  BETA gamma delta.", candidates, 0.85).link == "exact"
    contained = link_passage("brown fox jumps over", candidates, 0.85)
    assert (contained.passage_id, contained.link) == ("a:1", "contained")
    fuzzy = link_passage("The quick brwn fox jumps over the lazy dog today.", candidates, 0.85)
    assert (fuzzy.passage_id, fuzzy.link) == ("a:1", "fuzzy") and 0.85 <= fuzzy.score < 1
    assert link_passage("Something else entirely, nothing alike.", candidates, 0.85).link == "unmatched"


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))  # NaN is written as NaN
    return path


def test_fields_of_the_wrong_type_are_excluded_never_turned_into_text(tmp_path: Path) -> None:
    records: list[dict[str, Any]] = [
        {**GOOD, "id": 1, "pmid": 12345},  # whole-number ids are fine
        {**GOOD, "id": "t1", "passage": {"t": 1}},
        {**GOOD, "id": "t2", "query": 42},
        {**GOOD, "id": "t3", "query": float("nan")},
        {**GOOD, "id": "t4", "domains": ["Dermatology", {"name": "x"}]},
        {**GOOD, "id": "t5", "language": ["en"]},
        {**GOOD, "id": "t6", "pmid": 1.5},
    ]
    out = _run(tmp_path, _jsonl(tmp_path / "export.jsonl", records))
    art = out["annotations"].artifact
    (kept,) = art.read().to_pylist()
    assert (kept["record_id"], kept["pmid"]) == ("1", "12345")
    excluded = {r["row"]: (r["reason"], r["detail"]) for r in art.excluded().to_pylist()}
    assert excluded == {
        2: ("wrong_type", "export.jsonl row 2: 'passage' is an object, not text"),
        3: ("wrong_type", "export.jsonl row 3: 'query' is a number, not text"),
        4: ("wrong_type", "export.jsonl row 4: 'query' is NaN, not text"),
        5: ("wrong_type", "export.jsonl row 5: 'domains' holds an object, not text"),
        6: ("wrong_type", "export.jsonl row 6: 'language' is a list, not text"),
        7: ("wrong_type", "export.jsonl row 7: 'pmid' is a number, not text"),
    }
    m = out["annotations"].manifest["counts"]
    assert m["units_in"] == m["units_kept"] + m["units_excluded"] == len(records)
    assert all("{'t': 1}" not in str(v) for r in art.excluded().to_pylist() for v in r.values())


def test_a_parquet_value_json_cannot_hold_is_a_wrong_type(tmp_path: Path) -> None:
    path = tmp_path / "export.parquet"
    rows = [GOOD, {**GOOD, "id": "b1"}]
    table = pa.Table.from_pylist(rows).set_column(
        list(GOOD).index("passage"), "passage", pa.array([CONCLUSION.encode(), b"bytes"], pa.binary())
    )
    pq.write_table(table, path)
    excluded = _run(tmp_path, path)["annotations"].artifact.excluded().to_pylist()
    assert [(r["row"], r["reason"], r["detail"]) for r in excluded] == [
        (1, "wrong_type", "export.parquet row 1: 'passage' is bytes, not text"),
        (2, "wrong_type", "export.parquet row 2: 'passage' is bytes, not text"),
    ]


def test_one_record_id_with_two_contents_excludes_both(tmp_path: Path) -> None:
    other = "Is narrowband UVB enough for plaque psoriasis?"
    records = [GOOD, {**GOOD, "query": other}, {**GOOD, "id": "r2"}, {**GOOD, "id": "r2"}]
    out = _run(tmp_path, _jsonl(tmp_path / "export.jsonl", records))
    art = out["annotations"].artifact
    assert art.num_rows == 1 and art.read().column("record_key").to_pylist() == ["export.jsonl:3"]
    excluded = {r["row"]: (r["reason"], r["detail"]) for r in art.excluded().to_pylist()}
    assert excluded == {
        1: (
            "conflicting_duplicate",
            "export.jsonl row 1: record id 'r1' is also at export.jsonl row 2, with a different query",
        ),
        2: (
            "conflicting_duplicate",
            "export.jsonl row 2: record id 'r1' is also at export.jsonl row 1, with a different query",
        ),
        4: ("duplicate_record", "export.jsonl row 4: same query and passage as export.jsonl:3"),
    }
    m = out["annotations"].manifest["counts"]
    assert m["units_in"] == m["units_kept"] + m["units_excluded"] == len(records)


def test_a_record_nested_too_deeply_is_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    nested = json.dumps({**GOOD, "id": "n1", "query": "Another question?", "meta": {"a": [[[[]]]]}})
    path.write_text(json.dumps(GOOD) + "\n" + deep + "\n" + nested + "\n")
    art = _run(tmp_path, path)["annotations"].artifact
    excluded = [(r["row"], r["reason"], r["detail"]) for r in art.excluded().to_pylist()]
    assert excluded == [(2, "malformed_record", "export.jsonl row 2: nested deeper than 64 levels")]
    assert art.num_rows == 2  # a few levels of nesting are fine


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("export.jsonl", b"", "export.jsonl: empty file (0 bytes): no annotation records"),
        ("export.csv", b"", "export.csv: empty file (0 bytes): no annotation records"),
        ("export.csv", b"id,query,passage\r\n", "export.csv: no annotation records in the file"),
        ("export.json", b"[]", "export.json: no annotation records in the file"),
        (
            "export.jsonl",
            json.dumps(GOOD).encode() + b'\n{"query": "caf\xe9"}\n',
            "export.jsonl line 2: not valid UTF-8 (byte 0xe9 at offset",
        ),
        ("export.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00", "export.jsonl: binary content (NUL byte at offset 8)"),
        ("export.json", b"[" * 100_000 + b"]" * 100_000, "export.json: JSON nested too deeply to read"),
        ("export.csv", b'id,query\n1,"' + b"x" * 200_000 + b'"\n', "export.csv line 2: not readable as CSV"),
        ("export.parquet", b"not parquet at all", "export.parquet: not readable as Parquet"),
    ],
)
def test_an_unreadable_export_is_one_line_naming_the_file(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ConfigError) as err:
        _run(tmp_path, tmp_path / name)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)
