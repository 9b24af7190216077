"""Stage ``ingest`` on the real CT-EBM-SP abstracts and MEDLINE files, and on exports written here."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import bioc
import openpyxl
import pytest
from bioc import biocxml

from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.errors import ConfigError
from tasks.spanish_sr.stages.ingest import SPEC, IngestConfig
from tests.spanish_sr.conftest import CT_EBM_SP, MEDLINE, run_one

BVS_HEADER = [
    "ID",
    "Title",
    "Authors",
    "Database",
    "Language",
    "Publication year",
    "Descriptor(s)",
    "Abstract",
    "DOI",
]


def ingest(root: Path, base_dir: Path, *sources: Any) -> StageOutcome:
    config = validate_config(IngestConfig, {"sources": list(sources)}, "test")
    return run_one(root / "store", SPEC, config, {}, base_dir=base_dir)


def excluded(outcome: StageOutcome) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["source"], r["record"]): r for r in outcome.artifact.excluded().to_pylist()}


def demo_files() -> list[Path]:
    return sorted(CT_EBM_SP.glob("*.txt"))


def test_every_demo_abstract_is_one_record_with_its_title_line(tmp_path: Path) -> None:
    files = demo_files()
    assert len(files) == 300  # the 300 annotated SciELO abstracts of CT-EBM-SP's training split
    outcome = ingest(tmp_path, CT_EBM_SP.parent, "ct-ebm-sp")
    rows = {r["record_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert outcome.artifact.excluded().num_rows == 0
    assert sorted(rows) == [f.stem for f in files]
    for f in files:
        lines = [s for line in f.read_text(encoding="utf-8").splitlines() if (s := line.strip())]
        row = rows[f.stem]
        assert (row["title"], row["abstract"]) == (lines[0], "\n".join(lines[1:]))
        assert (row["source"], row["record"]) == (f"ct-ebm-sp/{f.name}", 1)
    files_table = outcome.artifact.read(table="files").to_pylist()
    assert {(f["format"], f["encoding"], f["records"]) for f in files_table} == {("brat", "utf-8", 1)}


def test_the_real_asreview_csv_reads_every_record_quotes_and_all(tmp_path: Path) -> None:
    """Cells holding escaped quotes (``""``) and commas, as exported; ``csv.Sniffer`` guesses
    doublequote=False on this file, which split 8 of its 310 rows."""
    import csv

    path = CT_EBM_SP.parent / "sr-screening" / "Antihistamines.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        expected = {r["pubmedID"]: r for r in csv.DictReader(handle)}
    source = {"path": "sr-screening/Antihistamines.csv", "field_map": {"id": "pubmedID"}}
    outcome = ingest(tmp_path, CT_EBM_SP.parent, source)
    assert outcome.artifact.excluded().num_rows == 0
    rows = {r["record_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert len(rows) == len(expected) == 310
    quoted = [pid for pid, r in expected.items() if '"' in r["title"] + r["abstract"] + r["authors"]]
    assert quoted, "the file holds escaped quotes"
    for pid, r in expected.items():
        assert rows[pid]["title"] == r["title"].strip()
        assert (rows[pid]["abstract"] or "") == r["abstract"].strip()


def test_latin1_bvs_csv_is_decoded_and_mapped(tmp_path: Path) -> None:
    rows = [
        BVS_HEADER,
        [
            "biblio-1",
            "Obesidad en niños",
            "Pérez, A",
            "LILACS",
            "es",
            "2019",
            "Obesidad; Niño",
            "Año de estudio…",
            "",
        ],
        ["biblio-2", "", "", "LILACS", "es", "2020", "", "", ""],
        [
            "biblio-3",
            "Salud bucal",
            "",
            "LILACS",
            "es",
            "s.f.",
            "",
            "Caries dental en escolares",
            "DOI:10.1/X",
        ],
    ]
    text = "\n".join(",".join(f'"{c}"' for c in row) for row in rows) + "\n"
    (tmp_path / "bvs.csv").write_bytes(text.replace("…", "...").encode("latin-1"))
    outcome = ingest(tmp_path, tmp_path, "bvs.csv")
    kept = {r["record_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert kept["biblio-1"]["title"] == "Obesidad en niños"
    assert kept["biblio-1"]["abstract"] == "Año de estudio..."
    assert kept["biblio-1"]["descriptors"] == ["Obesidad", "Niño"]
    assert (kept["biblio-1"]["year"], kept["biblio-1"]["record"]) == (2019, 2)
    assert (kept["biblio-3"]["year"], kept["biblio-3"]["doi"]) == (None, "10.1/x")
    assert excluded(outcome)[("bvs.csv", 3)]["reason"] == "missing_field"
    assert excluded(outcome)[("bvs.csv", 3)]["detail"] == "bvs.csv#3: neither title nor abstract"
    [entry] = outcome.artifact.read(table="files").to_pylist()
    assert entry["encoding"] == "cp1252"  # latin-1 bytes of Spanish text: cp1252 reads them alike


ABSTRACT_WITH_COMMAS = (
    "Objetivo: describir, en niños de 6 a 12 años, la prevalencia de caries, gingivitis y "
    "maloclusión. Métodos: estudio transversal, con 412 escolares, examen clínico y encuesta. "
) * 40  # real-sized (about 7,000 characters): csv.Sniffer gives up on a sample of such rows


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_unquoted_exports_with_commas_in_abstracts_split_on_their_own_delimiter(
    tmp_path: Path, delimiter: str
) -> None:
    lines = [
        delimiter.join(["ID", "Title", "Abstract", "Language", "Publication year"]),
        delimiter.join(["lil-1", "Caries en escolares", ABSTRACT_WITH_COMMAS, "es", "2019"]),
        delimiter.join(["lil-2", "Salud bucal, un estudio", ABSTRACT_WITH_COMMAS.upper(), "es", "2020"]),
    ]
    (tmp_path / "export.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    kept = ingest(tmp_path, tmp_path, "export.csv").artifact.read().to_pylist()
    assert [(r["record_id"], r["title"], r["year"]) for r in kept] == [
        ("lil-1", "Caries en escolares", 2019),
        ("lil-2", "Salud bucal, un estudio", 2020),
    ]
    assert kept[0]["abstract"] == ABSTRACT_WITH_COMMAS.strip()


def test_a_configured_delimiter_wins_and_a_wrong_one_names_the_header_it_read(tmp_path: Path) -> None:
    lines = ["ID;Title;Abstract", f"lil-1;Caries en escolares;{ABSTRACT_WITH_COMMAS}"]
    (tmp_path / "export.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    kept = ingest(tmp_path, tmp_path, {"path": "export.csv", "delimiter": ";"}).artifact.read().to_pylist()
    assert [r["record_id"] for r in kept] == ["lil-1"]
    with pytest.raises(ConfigError) as err:
        ingest(tmp_path / "wrong", tmp_path, {"path": "export.csv", "delimiter": "|"})
    assert "1 column(s): ID;Title;Abstract" in str(err.value) and "delimiter" in str(err.value)
    assert "\n" not in str(err.value)


def test_ris_record_without_er_is_malformed_and_its_neighbours_survive(tmp_path: Path) -> None:
    ris = (
        "TY  - JOUR\nID  - r1\nTI  - Primero\nAB  - Resumen uno\nKW  - Obesidad\nKW  - Niño\nPY  - 2004///\nER  - \n\n"
        "TY  - JOUR\nTI  - Sin fin\nAB  - Nunca termina\n\n"
        "TY  - JOUR\nID  - r3\nT1  - Tercero\nN2  - Resumen tres\nER  - \n"
    )
    (tmp_path / "export.ris").write_text(ris, encoding="utf-8")
    outcome = ingest(tmp_path, tmp_path, "export.ris")
    kept = {r["record_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert sorted(kept) == ["r1", "r3"]
    assert kept["r1"]["descriptors"] == ["Obesidad", "Niño"]
    assert kept["r1"]["year"] == 2004
    assert (kept["r3"]["title"], kept["r3"]["abstract"], kept["r3"]["record"]) == (
        "Tercero",
        "Resumen tres",
        3,
    )
    bad = excluded(outcome)[("export.ris", 2)]
    assert (bad["reason"], bad["detail"]) == ("malformed_record", "export.ris#2: lines 10-13: no ER line")


def test_json_and_jsonl_records_with_a_bad_line(tmp_path: Path) -> None:
    records = [{"id": "j1", "title": "Uno", "abstract": "Texto", "meta": {"doi": "10.5/ABC"}}, "no object"]
    (tmp_path / "a.json").write_text(json.dumps(records), encoding="utf-8")
    lines = [json.dumps({"title": "Dos", "abstract": "Texto dos", "descriptors": ["A", "B"]}), "{broken", ""]
    (tmp_path / "b.jsonl").write_text("\n".join(lines), encoding="utf-8")
    outcome = ingest(tmp_path, tmp_path, {"path": "a.json", "field_map": {"doi": "meta.doi"}}, "b.jsonl")
    kept = {r["record_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert kept["j1"]["doi"] == "10.5/abc"
    assert kept["b:1"]["descriptors"] == ["A", "B"]  # no own id: <file stem>:<line>
    out = excluded(outcome)
    assert out[("a.json", 2)]["detail"] == "a.json#2: record 2: a JSON str, not an object"
    assert out[("b.jsonl", 2)]["reason"] == "malformed_record"
    assert out[("b.jsonl", 2)]["detail"].startswith("b.jsonl#2: line 2: not JSON")


def test_xlsx_written_with_openpyxl_and_a_missing_mapped_column(tmp_path: Path) -> None:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(BVS_HEADER)
    sheet.append(
        [
            "biblio-9",
            "Depresión en adolescentes",
            "",
            "LILACS",
            "es",
            2021,
            "Depresión",
            "Estudio transversal",
            "",
        ]
    )
    sheet.append([None] * len(BVS_HEADER))  # a blank row is no record
    sheet.append(["biblio-10", "Ansiedad", "", "LILACS", "es", 2022, "", "Otro estudio", "10.9/z"])
    book.save(tmp_path / "lilacs.xlsx")
    outcome = ingest(tmp_path, tmp_path, "lilacs.xlsx")
    kept = {r["record_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert kept["biblio-9"]["year"] == 2021 and kept["biblio-9"]["record"] == 2
    assert kept["biblio-10"]["record"] == 4 and kept["biblio-10"]["doi"] == "10.9/z"
    with pytest.raises(ConfigError, match=r"^lilacs\.xlsx: field_map\.abstract column 'Resumen' is not in"):
        ingest(tmp_path, tmp_path, {"path": "lilacs.xlsx", "field_map": {"abstract": "Resumen"}})


SCIELO_BIOC = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE collection SYSTEM "BioC.dtd">
<collection><source>SciELO</source><date>2019</date><key>scielo.key</key>
<document><id>S0034-98872019000100001</id>
<passage><infon key="section">Title</infon><offset>0</offset>
<sentence><offset>0</offset><text>Caries dental en escolares de Santiago.</text></sentence></passage>
<passage><infon key="section">Abstract</infon><offset>40</offset>
<sentence><offset>40</offset><text>Objetivo: medir la prevalencia de caries.</text></sentence>
<sentence><offset>82</offset><text>Métodos: estudio transversal en 412 escolares.</text></sentence></passage>
</document></collection>
"""


def test_scielo_bioc_passages_by_section_infon_with_text_in_sentences(tmp_path: Path) -> None:
    (tmp_path / "scielo.xml").write_text(SCIELO_BIOC, encoding="utf-8")
    [row] = ingest(tmp_path, tmp_path, "scielo.xml").artifact.read().to_pylist()
    assert row["record_id"] == "S0034-98872019000100001"
    assert row["title"] == "Caries dental en escolares de Santiago."
    assert row["abstract"] == (
        "Objetivo: medir la prevalencia de caries. Métodos: estudio transversal en 412 escolares."
    )


def test_bioc_written_with_bioc_and_a_document_without_passages(tmp_path: Path) -> None:
    collection = bioc.BioCCollection()
    for doc_id, texts in (("d1", {"title": "Título", "abstract": "Resumen del documento"}), ("d2", {})):
        doc = bioc.BioCDocument()
        doc.id = doc_id
        doc.infons["year"] = "2018"
        for offset, (kind, text) in enumerate(texts.items()):
            passage = bioc.BioCPassage()
            passage.infons["type"], passage.text, passage.offset = kind, text, offset
            doc.add_passage(passage)
        collection.add_document(doc)
    (tmp_path / "docs.xml").write_text(biocxml.dumps(collection), encoding="utf-8")
    outcome = ingest(tmp_path, tmp_path, "docs.xml")
    [row] = outcome.artifact.read().to_pylist()
    assert (row["record_id"], row["title"], row["abstract"], row["year"]) == (
        "d1",
        "Título",
        "Resumen del documento",
        2018,
    )
    assert excluded(outcome)[("docs.xml", 2)]["detail"] == "docs.xml#2: document 'd2' has no passages"


def test_medline_xml_files_of_crossgenre(tmp_path: Path) -> None:
    outcome = ingest(tmp_path, MEDLINE.parent, "medline")
    rows = outcome.artifact.read().to_pylist()
    reasons = Counter(r["reason"] for r in outcome.artifact.excluded().to_pylist())
    # 1,254 records (data/crossgenre/SOURCES.md): the demo repeats PMIDs across baseline and update files.
    assert len(rows) + sum(reasons.values()) == 1254
    assert reasons == {"duplicate_id": 39, "missing_field": 5}
    assert all(r["record_id"].isdigit() for r in rows)
    assert sum(bool(r["descriptors"]) for r in rows) > 0
    assert {f["format"] for f in outcome.artifact.read(table="files").to_pylist()} == {"medline"}


def test_unreadable_and_unknown_files_are_excluded_per_file(tmp_path: Path) -> None:
    (tmp_path / "x.xlsx").write_bytes(b"not a zip")
    (tmp_path / "y.xml").write_text("<html><body/></html>", encoding="utf-8")
    (tmp_path / "z.json").write_text("{", encoding="utf-8")
    outcome = ingest(tmp_path, tmp_path, "x.xlsx", "y.xml", "z.json")
    out = excluded(outcome)
    assert {k: v["reason"] for k, v in out.items()} == {
        (n, 0): "unreadable" for n in ("x.xlsx", "y.xml", "z.json")
    }
    assert out[("y.xml", 0)]["detail"] == "y.xml: neither BioC nor MEDLINE/PubMed XML: root <html>"


def test_a_source_that_matches_nothing_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"stages\.ingest\.sources\[1\]"):
        ingest(tmp_path, CT_EBM_SP.parent, "ct-ebm-sp", "missing.csv")


def test_the_year_is_taken_from_scielo_pids_only_when_missing(tmp_path: Path) -> None:
    pattern = r"^S\d{4}-\d{3}[\dX]((?:19|20)\d{2})\d{9}$"
    outcome = ingest(tmp_path, CT_EBM_SP.parent, {"path": "ct-ebm-sp", "year_from_id": pattern})
    years = {r["record_id"]: r["year"] for r in outcome.artifact.read().to_pylist()}
    assert years["S1130-01082008000900002"] == 2008 and years["S0120-99572013000200003"] == 2013
    assert years["S0009-741115000195"] is None  # an Elsevier PII: 15000195 is no year
    assert years["0211-699501013259"] is None
    assert sum(y is not None for y in years.values()) == 253
    # a year the record gives is kept: a JSON record with year 1999 and a PID saying 2008
    (tmp_path / "r.json").write_text(
        json.dumps([{"id": "S1130-01082008000900002", "title": "t", "abstract": "a", "year": 1999}]),
        encoding="utf-8",
    )
    [row] = (
        ingest(tmp_path / "j", tmp_path, {"path": "r.json", "year_from_id": pattern})
        .artifact.read()
        .to_pylist()
    )
    assert row["year"] == 1999
    with pytest.raises(ConfigError, match="group"):
        validate_config(IngestConfig, {"sources": [{"path": "x", "year_from_id": r"\d{4}"}]}, "test")


def test_a_zip_named_xlsx_with_a_malformed_part_is_one_unreadable_file_not_a_crash(tmp_path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(tmp_path / "export.xlsx", "w") as book:
        book.writestr("[Content_Types].xml", "<Types><broken")
        book.writestr("xl/workbook.xml", "<workbook/>")
    write = tmp_path / "ok.jsonl"
    write.write_text(
        '{"id": "r1", "title": "Caries", "abstract": "Estudio en escolares."}\n', encoding="utf-8"
    )
    outcome = ingest(tmp_path, tmp_path, "export.xlsx", "ok.jsonl")
    assert [r["record_id"] for r in outcome.artifact.read().to_pylist()] == ["r1"]
    [bad] = outcome.artifact.excluded().to_pylist()
    assert (bad["source"], bad["reason"]) == ("export.xlsx", "unreadable")
    assert "not a readable XLSX workbook: XMLSyntaxError" in bad["detail"]
