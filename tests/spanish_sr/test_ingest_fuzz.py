"""Damaged exports of every accepted shape (issue 30 §3): each file gives kept rows or
excluded rows with a reason naming it, never an aborted run, and rows in = kept + excluded.

The good files are real exports (tests/spanish_sr/real_exports), a CT-EBM-SP brat text and
small XLSX, JSON, JSONL and BioC files written here; tests/mangle.py damages each in the same
eight ways (and gzipped ones inside their stream too)."""

from __future__ import annotations

import gzip
import io
import json
from collections import Counter
from pathlib import Path

import bioc
import openpyxl
import pytest
from bioc import biocxml

from tests.conftest import REPO
from tests.mangle import ingest_through_the_command, write_damaged
from tests.spanish_sr.test_ingest import ingest

EXPORTS = REPO / "tests" / "spanish_sr" / "real_exports"
REAL = (
    "asreview_generic_semicolon.csv",
    "biopython_entrez_pubmed1.xml",
    "biopython_medline_pubmed_result2.txt",
    "rispy_example_full.ris",
    "synthesisr_scielo.ris",
)
RECORDS = [
    {"id": f"r{i}", "title": f"Título {i}", "abstract": f"Resumen número {i} del estudio."} for i in range(3)
]


def _xlsx() -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["id", "title", "abstract"])
    for r in RECORDS:
        sheet.append([r["id"], r["title"], r["abstract"]])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _bioc() -> bytes:
    collection = bioc.BioCCollection()
    for r in RECORDS:
        doc = bioc.BioCDocument()
        doc.id = r["id"]
        for offset, kind in enumerate(("title", "abstract")):
            passage = bioc.BioCPassage()
            passage.infons["type"], passage.text, passage.offset = kind, r[kind], offset
            doc.add_passage(passage)
        collection.add_document(doc)
    return str(biocxml.dumps(collection)).encode("utf-8")


def good_files() -> dict[str, bytes]:
    good = {name: (EXPORTS / name).read_bytes() for name in REAL}
    good["pmc.nbib"] = (EXPORTS / "nbib_pmc_medlars.txt").read_bytes()
    good["pubmed.xml.gz"] = gzip.compress(good["biopython_entrez_pubmed1.xml"], mtime=0)
    good["brat.txt"] = min((REPO / "data" / "spanish_sr" / "ct-ebm-sp").glob("*.txt")).read_bytes()
    good["records.json"] = json.dumps(RECORDS, ensure_ascii=False).encode("utf-8")
    good["records.jsonl"] = "\n".join(json.dumps(r, ensure_ascii=False) for r in RECORDS).encode("utf-8")
    good["lilacs.xlsx"] = _xlsx()
    good["docs.xml"] = _bioc()
    return good


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    folder = tmp_path_factory.mktemp("fuzz") / "in"
    return folder, write_damaged(good_files(), folder)


def test_every_damaged_file_is_kept_or_excluded_with_its_reason(
    damaged: tuple[Path, list[str]], tmp_path: Path
) -> None:
    folder, names = damaged
    outcome = ingest(tmp_path, folder, ".")
    kept = outcome.artifact.read().to_pylist()
    excluded = outcome.artifact.excluded().to_pylist()
    files = {f["source"]: f for f in outcome.artifact.read(table="files").to_pylist()}
    assert sorted(files) == names  # every file, none vanished
    rows = Counter(r["source"] for r in kept) + Counter(e["source"] for e in excluded)
    for name, file in files.items():
        whole = [e for e in excluded if e["source"] == name and e["record"] == 0]
        if whole:  # the file as a whole: one row, nothing else from it
            assert rows[name] == 1 and file["records"] == 0, name
        else:  # rows in = kept + excluded, record by record
            assert rows[name] == file["records"] > 0, name
    for row in excluded:
        assert row["detail"].startswith(row["source"]), row  # the one line names its file
    empty = {e["source"]: e["reason"] for e in excluded if e["record"] == 0}
    blank = [n for n in names if "-empty." in n or "-bom." in n or "-inner-empty." in n or "-inner-bom." in n]
    assert blank and all(empty.get(n) == "empty_file" for n in blank)
    assert len(blank) == sum(r == "empty_file" for r in empty.values())
    assert kept  # the damage left some records readable (cut files keep their first records)


@pytest.mark.slow
def test_a_run_over_the_damaged_files_exits_0_and_accounts_for_every_row(
    damaged: tuple[Path, list[str]], tmp_path: Path
) -> None:
    folder, names = damaged
    config = folder.parent / "fuzz.yaml"
    config.write_text(
        f"flow: spanish_sr\nstages:\n  ingest:\n    sources: [{folder.name}]\n", encoding="utf-8"
    )
    counts = ingest_through_the_command("spanish_sr", config, tmp_path)
    assert counts["units_in"] == counts["units_kept"] + counts["units_excluded"] > len(names)
    assert counts["excluded_by_reason"]["empty_file"] == sum("-empty." in n or "-bom." in n for n in names)
