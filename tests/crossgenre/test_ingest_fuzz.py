"""Damaged inputs of every accepted shape (issue 30 §3): saved pages plain and gzipped, JSONL
and WARC (plain and gzipped), each damaged eight ways by tests/mangle.py (gzipped ones inside
their stream too). Every file gives kept pages or excluded rows naming it, never an aborted
run; a blank page is ``empty_file``; rows in = kept + excluded."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.crossgenre.test_ingest import _ingest, _warc
from tests.mangle import ingest_through_the_command, write_damaged

REAL_PAGES = REPO / "tests" / "crossgenre" / "real_pages"
PAGES = ["in/pages", "in/*.jsonl", "in/*.warc", "in/*.warc.gz"]


def good_files(scratch: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(saved pages, containers): three real pages gzipped, one plain; a JSONL of the three;
    a WARC plain and gzipped (a page and a 404)."""
    real = sorted(REAL_PAGES.glob("*.html.gz"))[:3]
    pages = {p.name: p.read_bytes() for p in real}
    pages["plain.html"] = gzip.decompress(real[0].read_bytes())
    lines = [
        json.dumps({"url": f"https://a.example/{i}", "html": gzip.decompress(p.read_bytes()).decode("utf-8")})
        for i, p in enumerate(real)
    ]
    containers = {"crawl.jsonl": "\n".join(lines).encode("utf-8")}
    for name in ("crawl.warc", "crawl.warc.gz"):
        _warc(scratch / name, gz=name.endswith(".gz"))
        containers[name] = (scratch / name).read_bytes()
    return pages, containers


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    base = tmp_path_factory.mktemp("fuzz")
    pages, containers = good_files(base)
    names = [f"pages/{n}" for n in write_damaged(pages, base / "in" / "pages")]
    names += write_damaged(containers, base / "in", seed=1)
    return base, sorted(names)


def test_every_damaged_file_gives_rows_each_with_its_reason(
    damaged: tuple[Path, list[str]], tmp_path: Path
) -> None:
    base, names = damaged
    outcome = _ingest(tmp_path / "art", base, pages=PAGES)
    kept = outcome.artifact.read().to_pylist()
    excluded = outcome.artifact.excluded().to_pylist()
    rows = Counter(r["source"] for r in kept) + Counter(e["source"] for e in excluded)
    assert sorted(rows) == [f"in/{n}" for n in names]  # none vanished
    for row in excluded:  # one line naming the item (a duplicate: the page it repeats)
        assert row["item"].startswith(row["source"]) and "\n" not in row["detail"], row
        assert row["detail"].startswith(row["source"]) or row["reason"] == "duplicate_page", row
    reasons = {e["source"]: e["reason"] for e in excluded}
    blank_pages = [f"in/{n}" for n in names if n.startswith("pages/") and ("-empty." in n or "-bom." in n)]
    assert blank_pages and all(reasons[n] == "empty_file" for n in blank_pages)
    blank_containers = [f"in/{n}" for n in names if not n.startswith("pages/") and "-empty." in n]
    assert all(reasons[n] == "empty_file" for n in blank_containers)
    assert kept  # what the damage spared is still read


@pytest.mark.slow
def test_a_run_over_the_damaged_files_exits_0_and_accounts_for_every_row(
    damaged: tuple[Path, list[str]], tmp_path: Path
) -> None:
    base, names = damaged
    config = base / "fuzz.yaml"
    config.write_text(
        f"flow: crossgenre\nstages:\n  ingest:\n    pages: {json.dumps(PAGES)}\n", encoding="utf-8"
    )
    counts = ingest_through_the_command("crossgenre", config, tmp_path)
    assert counts["units_in"] == counts["units_kept"] + counts["units_excluded"] >= len(names)
