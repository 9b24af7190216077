"""``irforge quality crossgenre`` on the labelled real pages (tests/crossgenre/real_pages) and on
small folders made here: the floors hold on the real set, a wrong label makes it exit 1, a
bad label line is a one-line error naming the file and line."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app
from tests.conftest import REPO

REAL = REPO / "tests" / "crossgenre" / "real_pages"
EXCLUDED = REPO.parent / "shared" / "corpora" / "news-pages" / "excluded-sha256.txt"
GOLD = [json.loads(line) for line in (REAL / "gold.jsonl").read_text(encoding="utf-8").splitlines()]


def test_the_real_pages_are_above_every_floor() -> None:
    result = CliRunner().invoke(app, ["quality", "crossgenre"])
    assert result.exit_code == 0, result.output
    summary = result.output.rstrip().splitlines()[-1]
    figures = {k.strip(): v for k, v in re.findall(r"([a-z -]+) \d+/\d+ \(([\d.]+) %\)", summary)}
    assert float(figures["headline"]) >= 97.0
    assert float(figures["study identifier"]) >= 95.0
    assert float(figures["single-study decision"]) >= 95.0
    assert float(figures["non-report pages dropped"]) >= 90.0


def test_the_labelled_set_is_what_issue_27_asks_for() -> None:
    pages = sorted(p.name for p in REAL.glob("*.html.gz"))
    assert pages == sorted(g["file"] for g in GOLD)  # every page labelled, every label a page
    assert len(GOLD) >= 60
    assert len({g["outlet"].removeprefix("www.") for g in GOLD}) >= 15
    assert len({g["language"] for g in GOLD}) >= 4
    assert sum(g["expected"] != "claim" for g in GOLD) >= 20


def test_every_page_is_listed_in_sources_with_its_digest_and_none_is_held_back() -> None:
    sources = (REAL / "SOURCES.md").read_text(encoding="utf-8")
    held_back = set(EXCLUDED.read_text().split()) if EXCLUDED.is_file() else set()
    for g in GOLD:
        raw = (REAL / g["file"]).read_bytes()
        page = gzip.decompress(raw)
        digest = hashlib.sha256(page).hexdigest()
        assert digest == g["sha256"], g["file"]
        assert f"`{g['file']}`" in sources and digest in sources, g["file"]
        assert not {digest, hashlib.sha256(raw).hexdigest()} & held_back, g["file"]


def _folder(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "pages"
    folder.mkdir()
    rows = [g for g in GOLD if g["file"] in names]
    for g in rows:
        shutil.copy(REAL / g["file"], folder / g["file"])
    (folder / "gold.jsonl").write_text("".join(json.dumps(g) + "\n" for g in rows), encoding="utf-8")
    return folder


def test_a_wrong_label_exits_1_naming_the_page_and_the_rule(tmp_path: Path) -> None:
    claim = next(g for g in GOLD if g["expected"] == "claim")
    folder = _folder(tmp_path, [claim["file"]])
    flipped = {**claim, "expected": "excluded:not_single_study"}
    (folder / "gold.jsonl").write_text(json.dumps(flipped) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["quality", "crossgenre", "--gold", str(folder)])
    assert result.exit_code == 1, result.output
    assert "under the floor: non-report pages dropped 0/1 (0.0 %)" in result.output
    assert f"{claim['file']} labelled excluded:not_single_study" in result.output


def test_a_bad_label_line_is_a_one_line_error(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [GOLD[0]["file"]])
    with (folder / "gold.jsonl").open("a", encoding="utf-8") as fh:
        fh.write('{"file": "missing.html.gz"}\n')
    result = CliRunner().invoke(app, ["quality", "crossgenre", "--gold", str(folder)])
    assert result.exit_code == 2
    assert "gold.jsonl:2: missing field(s) headline" in result.output
    assert "Traceback" not in result.output
