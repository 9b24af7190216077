"""Ingest never leaves its source folder, never blocks, and names every odd entry it finds.

Issue 14 items 10 and 11: links out of the folder, dangling links, loops, FIFOs, folders
named like articles, and an over-long text node each get their own excluded reason, and no
byte of a refused file reaches an artifact.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from irforge.engine import StageOutcome
from irforge.pipeline import Selection
from tasks.common.text.document import InputRejected
from tasks.common.text.html import read_html_metadata
from tests.conftest import REPO, run_cure

ARTICLE = REPO / "data" / "demo" / "articles" / "demo2_dermatology_psoriasis_nbuvb.xml"
SECRET = "SECRET-7f3a root:x:0:0:root:/root:/bin/bash"


def _corpus(tmp_path: Path) -> Path:
    """A source folder with one good article and one entry of every odd kind."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.xml").write_text(SECRET)
    (outside / "article.xml").write_bytes(ARTICLE.read_bytes().replace(b"PMC0000002", b"PMC0000099"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.xml").write_bytes(ARTICLE.read_bytes())
    (corpus / "x.xml").symlink_to(outside / "secret.xml")
    (corpus / "passwd.xml").symlink_to("/etc/passwd")
    (corpus / "linked_article.xml").symlink_to(outside / "article.xml")
    (corpus / "dangling.xml").symlink_to("nowhere.xml")
    (corpus / "loop.xml").symlink_to("loop.xml")
    os.mkfifo(corpus / "pipe.xml")
    (corpus / "folder.xml").mkdir()
    (corpus / "notes.txt").write_text(SECRET)
    (corpus / "sub").mkdir()
    (corpus / "sub" / "up").symlink_to("..")  # a folder loop
    (corpus / "sub" / "text.xml").write_text(SECRET + " (a copy in the folder)")  # not an article
    return corpus


EXPECTED = {
    "x.xml": "outside_source_root",
    "passwd.xml": "outside_source_root",
    "linked_article.xml": "outside_source_root",
    "dangling.xml": "dangling_link",
    "loop.xml": "symlink_loop",
    "pipe.xml": "not_a_regular_file",
    "folder.xml": "not_a_regular_file",
    "up": "symlink_loop",
    "text.xml": "unsupported_format",
}


def _ingest(tmp_path: Path, sources: list[str], **config: Any) -> StageOutcome:
    ingest = {"sources": sources, **config}
    out = run_cure(tmp_path / "artifacts", sources, tmp_path, Selection(until="ingest"), ingest=ingest)
    outcome = out["ingest"]
    counts = outcome.manifest["counts"]
    assert counts["rows_in"] == counts["rows_out"] + counts["rows_excluded"]
    return outcome


def _no_leak(outcome: StageOutcome) -> None:
    for table in (outcome.artifact.read(), outcome.artifact.excluded()):
        for row in table.to_pylist():
            for value in row.values():
                assert "SECRET" not in str(value) and "root:x:0" not in str(value)


@pytest.mark.parametrize("pattern", ["corpus", "corpus/**/*.xml"])
def test_every_odd_entry_is_excluded_with_its_own_reason(tmp_path: Path, pattern: str) -> None:
    _corpus(tmp_path)
    outcome = _ingest(tmp_path, [pattern])
    excluded = {Path(r["source_path"]).name: r for r in outcome.artifact.excluded().to_pylist()}
    assert {name: r["reason"] for name, r in excluded.items()} == EXPECTED
    assert [r["source_path"] for r in outcome.artifact.read().to_pylist()] == ["corpus/good.xml"]
    assert excluded["dangling.xml"]["detail"] == "link to 'nowhere.xml', which does not exist"
    assert excluded["pipe.xml"]["detail"].startswith("a FIFO")
    assert excluded["folder.xml"]["detail"] == "a folder"
    assert "/etc/passwd" in excluded["passwd.xml"]["detail"]
    assert "follow_links_outside" in excluded["x.xml"]["detail"]
    assert excluded["x.xml"]["digest"] is None  # the target was never read
    _no_leak(outcome)


def test_links_outside_are_taken_when_allowed(tmp_path: Path) -> None:
    _corpus(tmp_path)
    outcome = _ingest(tmp_path, ["corpus"], follow_links_outside=True)
    kept = {r["source_path"]: r["article_id"] for r in outcome.artifact.read().to_pylist()}
    assert kept == {"corpus/good.xml": "PMC0000002", "corpus/linked_article.xml": "PMC0000099"}
    excluded = {Path(r["source_path"]).name: r["reason"] for r in outcome.artifact.excluded().to_pylist()}
    assert excluded["x.xml"] == "unsupported_format"  # read now, but still not an article
    assert excluded["dangling.xml"] == "dangling_link"
    _no_leak(outcome)


def test_an_explicitly_named_link_out_of_its_folder_is_refused(tmp_path: Path) -> None:
    _corpus(tmp_path)
    outcome = _ingest(tmp_path, ["corpus/x.xml", "corpus/good.xml"])
    excluded = {r["source_path"]: r["reason"] for r in outcome.artifact.excluded().to_pylist()}
    assert excluded == {"corpus/x.xml": "outside_source_root"}


def test_a_huge_text_node_is_too_large_with_the_limit(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    head, tail = ARTICLE.read_bytes().split(b"</body>")
    (corpus / "huge.xml").write_bytes(head + b"<p>" + b"a" * 21_000_000 + b"</p></body>" + tail)
    outcome = _ingest(tmp_path, ["corpus"])
    (row,) = outcome.artifact.excluded().to_pylist()
    assert row["reason"] == "too_large"
    assert "Text node too long" in row["detail"] and "10,000,000 bytes per text node" in row["detail"]


def test_a_huge_html_text_node_is_too_large_not_silently_dropped() -> None:
    page = b"<html><head><title>T</title></head><body><p>" + b"a" * 21_000_000 + b"</p></body></html>"
    with pytest.raises(InputRejected) as err:
        read_html_metadata(page, encoding="utf-8")
    assert err.value.reason == "too_large" and "10,000,000" in err.value.detail
