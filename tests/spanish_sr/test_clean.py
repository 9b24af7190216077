"""Stage ``clean`` on the real CT-EBM-SP abstracts, with mojibake, placeholders, foreign
abstracts and duplicates injected into that real text."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import ftfy  # noqa: F401 (registers the "sloppy-windows-1252" codec used to inject mojibake)
import pytest

from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.errors import ConfigError
from tasks.spanish_sr.stages.clean import SPEC, CleanConfig
from tests.parallel_harness import artifact_bytes
from tests.spanish_sr.conftest import CT_EBM_SP, MEDLINE, run_one
from tests.spanish_sr.test_ingest import ingest

# Real mojibake of the corpus: cp1252 "™" / "‰" read as latin-1 (C1 controls U+0099, U+0089).
REAL_MOJIBAKE = {"S0370-41062008000400015": "Aerochamber™", "S1131-57682003000400010": "13,29‰"}
PORTUGUESE = (
    "Objetivo: avaliar a prevalência de obesidade em crianças escolares do município de São Paulo "
    "e os fatores associados. Métodos: estudo transversal com quinhentos escolares de sete a dez anos, "
    "com medidas de peso e altura e questionário aplicado aos pais sobre hábitos alimentares."
)
ENGLISH = (
    "Objective: to assess the prevalence of obesity among schoolchildren in Mexico City and the "
    "associated factors. Methods: a cross-sectional study of five hundred children aged seven to ten "
    "years, with weight and height measured and a questionnaire answered by their parents."
)


def clean(root: Path, outcome: StageOutcome, chunk_rows: int = 500, **config: Any) -> StageOutcome:
    return run_one(
        root / "store",
        SPEC,
        validate_config(CleanConfig, config, "test"),
        {"ingest": outcome.artifact},
        chunk_rows=chunk_rows,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], StageOutcome]:
    root = tmp_path_factory.mktemp("demo")
    ingested = ingest(root, CT_EBM_SP.parent, "ct-ebm-sp")
    return ingested.artifact.read().to_pylist(), clean(root, ingested)


def write_jsonl(folder: Path, name: str, records: list[dict[str, Any]]) -> None:
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_demo_is_kept_whole_and_only_the_real_mojibake_changes(
    demo: tuple[list[dict[str, Any]], StageOutcome],
) -> None:
    originals, outcome = demo
    kept = {r["record_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert outcome.artifact.excluded().num_rows == 0 and len(kept) == 300
    for before in originals:
        after = kept[before["record_id"]]
        assert after["title"] == before["title"], before["record_id"]
        assert after["detected_language"] == "es" and after["language_confidence"] > 0.99
        if before["record_id"] in REAL_MOJIBAKE:
            assert after["fixed"] == ["abstract"]
            assert REAL_MOJIBAKE[before["record_id"]] in after["abstract"]
            assert after["abstract"] == before["abstract"].replace("\x99", "™").replace("\x89", "‰")
        else:  # every clean record comes out exactly as it went in
            assert (after["abstract"], after["fixed"]) == (before["abstract"], []), before["record_id"]


def _injections(originals: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Each clean real abstract broken one way (round robin over four kinds) → (records, id → expected)."""
    clean_ones = [r for r in originals if r["record_id"] not in REAL_MOJIBAKE]
    records, expected = [], {}
    for n, row in enumerate(clean_ones):
        text, kind = row["abstract"], n % 4
        if kind == 0:
            try:
                broken = text.encode("utf-8").decode("cp1252")  # double-encoded UTF-8
            except UnicodeDecodeError:  # "Á", "Í" hit bytes cp1252 leaves undefined
                continue
        elif kind == 1:
            broken = text.replace("ñ", "Ã±").replace("ó", "Ã³")  # a few characters broken
            if broken == text:
                continue
        elif kind == 2:
            text = f"“{text}”"  # cp1252 smart quotes read as latin-1: C1 controls
            broken = text.encode("cp1252", "strict").decode("latin-1") if _cp1252(text) else ""
            if not broken:
                continue
        else:
            text = f"“{text}”"  # UTF-8 smart quotes read as cp1252 (0x9D kept as U+009D)
            broken = text.encode("utf-8").decode("sloppy-windows-1252")
        rid = f"inj{kind}-{row['record_id']}"
        records.append({"id": rid, "title": row["title"], "abstract": broken})
        expected[rid] = text
    return records, expected


def _cp1252(text: str) -> bool:
    try:
        text.encode("cp1252")
    except UnicodeEncodeError:
        return False
    return True


def test_injected_mojibake_is_repaired_exactly(
    tmp_path: Path, demo: tuple[list[dict[str, Any]], StageOutcome]
) -> None:
    records, expected = _injections(demo[0])
    assert len(records) >= 250  # measured: 276 of the 298 clean abstracts
    write_jsonl(tmp_path, "broken.jsonl", records)
    outcome = clean(tmp_path, ingest(tmp_path, tmp_path, "broken.jsonl"))
    kept = {r["record_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert outcome.artifact.excluded().num_rows == 0
    assert sorted(kept) == sorted(expected)
    for rid, text in expected.items():
        assert (kept[rid]["abstract"], kept[rid]["fixed"]) == (text, ["abstract"]), rid


def test_placeholders_short_wrong_language_and_undecodable(
    tmp_path: Path, demo: tuple[list[dict[str, Any]], StageOutcome]
) -> None:
    real = demo[0][0]
    records = [
        {"id": "p1", "title": "Uno", "abstract": "Sin resumen"},
        {"id": "p2", "title": "Dos", "abstract": "[No abstract available]"},
        {"id": "p3", "title": "Tres", "abstract": "Sem resumo."},
        {"id": "p4", "title": "Cuatro", "abstract": "  "},
        {"id": "t1", "title": real["abstract"]},  # the abstract exported in the title field
        {"id": "s1", "title": "Corto", "abstract": "Estudio descriptivo en cinco hospitales."},
        {"id": "l1", "title": "Obesidade", "abstract": PORTUGUESE},
        {"id": "l2", "title": "Obesity", "abstract": ENGLISH},
        {
            "id": "u1",
            "title": real["title"],
            "abstract": real["abstract"][:200] + "\ufffd" + real["abstract"][200:],
        },
        {"id": "ok", "title": real["title"], "abstract": real["abstract"]},
    ]
    write_jsonl(tmp_path, "mixed.jsonl", records)
    outcome = clean(tmp_path, ingest(tmp_path, tmp_path, "mixed.jsonl"))
    reasons = {r["record_id"]: r for r in outcome.artifact.excluded().to_pylist()}
    assert {k: v["reason"] for k, v in reasons.items()} == {
        **dict.fromkeys(["p1", "p2", "p3", "p4"], "no_abstract"),
        "t1": "title_is_abstract",
        "s1": "short_abstract",
        "l1": "wrong_language",
        "l2": "wrong_language",
        "u1": "undecodable",
    }
    assert reasons["l1"]["detail"].startswith("mixed.jsonl#7 (l1): pt (")
    assert reasons["l2"]["detail"].startswith("mixed.jsonl#8 (l2): en (")
    assert [r["record_id"] for r in outcome.artifact.read().to_pylist()] == ["ok"]


def test_injected_duplicates_are_found_with_full_recall_and_precision(
    tmp_path: Path, demo: tuple[list[dict[str, Any]], StageOutcome]
) -> None:
    originals = demo[0]
    records = [{"id": r["record_id"], "title": r["title"], "abstract": r["abstract"]} for r in originals]
    truth: dict[str, str] = {}
    for n, row in enumerate(originals[:40:2]):  # 20 originals: 10 re-exported verbatim, 10 edited
        words = row["abstract"].split(" ")
        if n % 2:  # a few edits: one word dropped, one changed, a typo
            words = [*words[:5], *words[6:]]
            words[10] = words[10].upper()
            words[-1] = words[-1].replace("a", "á", 1)
        copy = {"id": f"copy-{row['record_id']}", "title": row["title"], "abstract": " ".join(words)}
        records.append(copy)
        truth[copy["id"]] = row["record_id"]
    write_jsonl(tmp_path, "twice.jsonl", records)
    outcome = clean(tmp_path, ingest(tmp_path, tmp_path, "twice.jsonl"))
    found = {r["record_id"]: r["duplicate_of"] for r in outcome.artifact.excluded().to_pylist()}
    assert set(found.values()) <= {r["record_id"] for r in originals}
    true_positive = sum(found.get(c) == o for c, o in truth.items())
    recall, precision = true_positive / len(truth), true_positive / max(len(found), 1)
    assert (recall, precision) == (1.0, 1.0)
    assert outcome.artifact.count_rows() == 300
    # In chunks of 50 records the copies (rows 300-319) and their originals (rows 0-38) never
    # share a chunk: the duplicates are still found, the same bytes written.
    chunked = clean(tmp_path / "chunked", ingest(tmp_path, tmp_path, "twice.jsonl"), chunk_rows=50)
    assert chunked.artifact.manifest["chunks"]["total"] == 7
    assert artifact_bytes(chunked.artifact) == artifact_bytes(outcome.artifact)


def test_most_complete_copy_is_kept(tmp_path: Path, demo: tuple[list[dict[str, Any]], StageOutcome]) -> None:
    real = demo[0][5]
    records = [
        {"id": "bare", "title": real["title"], "abstract": real["abstract"]},
        {"id": "full", "title": real["title"], "abstract": real["abstract"], "year": 2004, "doi": "10.1/x"},
    ]
    write_jsonl(tmp_path, "pair.jsonl", records)
    outcome = clean(tmp_path, ingest(tmp_path, tmp_path, "pair.jsonl"))
    [dropped] = outcome.artifact.excluded().to_pylist()
    assert (dropped["record_id"], dropped["duplicate_of"]) == ("bare", "full")
    assert dropped["detail"] == "pair.jsonl#1 (bare): kept full, similarity 1.000"


def test_english_profile_on_medline(tmp_path: Path) -> None:
    outcome = clean(tmp_path, ingest(tmp_path, MEDLINE.parent, "medline"), language="en")
    kept = outcome.artifact.read().to_pylist()
    excluded = outcome.artifact.excluded().to_pylist()
    assert Counter(r["reason"] for r in excluded) == {
        "no_abstract": 125,
        "short_abstract": 20,
        "duplicate_of": 3,
    }
    assert len(kept) == 1062 and all(r["detected_language"] == "en" for r in kept)
    # Long titles of corrigenda, letters and case reports without an abstract are no abstracts.
    assert all(r["reason"] != "title_is_abstract" for r in excluded)
    # Three "Educational Case" records share their templated abstract: real near duplicates by text.
    assert {r["duplicate_of"] for r in excluded if r["reason"] == "duplicate_of"} == {"31840046"}


def test_a_language_without_profile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"language: Value error, no language profile 'xx'"):
        validate_config(CleanConfig, {"language": "xx"}, "test")


def test_no_survivor_gives_an_empty_artifact_every_exclusion_and_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = [
        {"id": "p1", "title": "Uno", "abstract": "Sin resumen"},
        {"id": "p2", "title": "Dos"},  # title only
        {"id": "p3", "title": "Tres", "abstract": "No disponible."},
    ]
    write_jsonl(tmp_path, "none.jsonl", records)
    with caplog.at_level("WARNING", logger="irforge"):
        outcome = clean(tmp_path, ingest(tmp_path, tmp_path, "none.jsonl"))
    assert outcome.artifact.read().num_rows == 0
    assert sorted(r["record_id"] for r in outcome.artifact.excluded().to_pylist()) == ["p1", "p2", "p3"]
    [line] = [r.getMessage() for r in caplog.records if "kept none" in r.getMessage()]
    assert line == "spanish_sr/clean kept none of its 3 units; excluded: no_abstract 3"


TRIAL = """EudraCT Nº:  2015-000290-12

Título público:  Ensayo clínico para comparar la transformación del endometrio con 25 mg/día de progesterona subcutánea versus 50 mg/día intramuscular.

Título científico:  Ensayo clínico randomizado comparando la transformación endometrial con progesterona subcutánea e intramuscular.

Indicación pública:  Infertilidad. Técnica de Reproducción Asistida.

Criterios de inclusión:
Edad de la mujer entre 18 años y 34 años (ambos inclusive)
Grosor endometrial mayor de 7 mm el día del inicio del tratamiento con progesterona
"""


def test_a_trial_announcement_takes_its_public_title_and_an_identifier_title_is_excluded(
    tmp_path: Path,
) -> None:
    (tmp_path / "brat").mkdir()
    (tmp_path / "brat" / "2015-000290-12.txt").write_text(TRIAL, encoding="utf-8")
    [row] = ingest(tmp_path, tmp_path, "brat").artifact.read().to_pylist()
    assert row["title"].startswith("Ensayo clínico para comparar la transformación del endometrio")
    assert "EudraCT" not in row["abstract"] and row["abstract"].startswith("Título científico:")
    records = [
        {"id": "i1", "title": "EudraCT Nº: 2015-000290-12", "abstract": row["abstract"]},
        {"id": "i2", "title": "NCT01234567", "abstract": row["abstract"]},
    ]
    write_jsonl(tmp_path, "ids.jsonl", records)
    outcome = clean(tmp_path / "ids", ingest(tmp_path / "ids", tmp_path, "ids.jsonl"))
    reasons = {r["record_id"]: (r["reason"], r["detail"]) for r in outcome.artifact.excluded().to_pylist()}
    assert reasons["i1"] == (
        "title_is_identifier",
        "ids.jsonl#1 (i1): the title is an identifier: 'EudraCT Nº: 2015-000290-12'",
    )
    assert reasons["i2"][0] == "title_is_identifier"


def test_a_long_title_of_several_sentences_is_no_abstract(tmp_path: Path) -> None:
    records = [
        {
            "id": "c1",
            "title": "Enfermedad de Castleman. Reporte de 14 casos y revisión de la literatura. "
            "Experiencia de un hospital general de la Ciudad de México durante diez años.",
        },
        {"id": "a1", "title": "Objetivo: medir la caries. Métodos: estudio transversal. Resultados: 12 %."},
    ]
    write_jsonl(tmp_path, "titles.jsonl", records)
    outcome = clean(tmp_path, ingest(tmp_path, tmp_path, "titles.jsonl"))
    reasons = {r["record_id"]: r["reason"] for r in outcome.artifact.excluded().to_pylist()}
    assert reasons == {"c1": "no_abstract", "a1": "title_is_abstract"}
