"""Real record exports (tests/spanish_sr/real_exports, see its README.md): ingest then clean on
each file gives the counts labelled in gold.jsonl (read from the files, not from the code)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from irforge.config import validate_config
from tasks.spanish_sr.stages.clean import SPEC as CLEAN
from tasks.spanish_sr.stages.clean import CleanConfig
from tasks.spanish_sr.stages.ingest import SPEC as INGEST
from tasks.spanish_sr.stages.ingest import IngestConfig
from tests.conftest import REPO
from tests.spanish_sr.conftest import run_one

EXPORTS = REPO / "tests" / "spanish_sr" / "real_exports"
GOLD = [json.loads(line) for line in (EXPORTS / "gold.jsonl").read_text(encoding="utf-8").splitlines()]


CASES = [
    pytest.param(g, marks=pytest.mark.xfail(strict=True, reason=g["pending"])) if "pending" in g else g
    for g in GOLD
]


@pytest.mark.parametrize("gold", CASES, ids=[g["file"] for g in GOLD])
def test_ingest_and_clean_give_the_labelled_counts(tmp_path: Path, gold: dict) -> None:  # type: ignore[type-arg]
    expected = gold["expected"]
    ingested = run_one(
        tmp_path,
        INGEST,
        validate_config(IngestConfig, {"sources": [gold["file"]]}, "test"),
        {},
        base_dir=EXPORTS,
    )
    config = validate_config(CleanConfig, {"language": expected["clean_language"]}, "test")
    cleaned = run_one(tmp_path, CLEAN, config, {"ingest": ingested.artifact})
    for outcome, want in ((ingested, expected["ingest"]), (cleaned, expected["clean"])):
        reasons = Counter(r["reason"] for r in outcome.artifact.excluded().to_pylist())
        assert (outcome.artifact.read().num_rows, dict(reasons)) == (want["kept"], want["excluded"])


def test_every_export_is_listed_with_its_digest() -> None:
    sources = (EXPORTS / "SOURCES.md").read_text(encoding="utf-8")
    files = sorted(
        p.name for p in EXPORTS.iterdir() if p.name not in ("gold.jsonl", "SOURCES.md", "README.md")
    )
    assert files == sorted(g["file"] for g in GOLD)
    for g in GOLD:
        digest = hashlib.sha256((EXPORTS / g["file"]).read_bytes()).hexdigest()
        assert digest == g["sha256"] and digest in sources, g["file"]
