"""Issue 29 §2: an edit to a prompt file that no stage of the config reads is named by
``status`` instead of passing for one that took effect (flows/prompt_watch.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flows import prompt_watch
from irforge.artifacts import ArtifactStore


@pytest.fixture
def prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "prompts"
    (folder / "toy").mkdir(parents=True)
    (folder / "common").mkdir()
    (folder / "toy" / "decide.md").write_text("Decide: $text\n", encoding="utf-8")
    (folder / "common" / "shared.md").write_text("Shared: $text\n", encoding="utf-8")
    monkeypatch.setattr(prompt_watch, "PROMPTS_DIR", folder)
    return folder


def _plans(*digests: str) -> dict[str, Any]:
    return {"decide": SimpleNamespace(inputs={"prompt": {"templates": list(digests)}})}


def test_an_edit_no_stage_reads_is_named_and_one_a_stage_reads_is_not(prompts: Path, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    assert prompt_watch.unused_edits(store, "toy", _plans()) == []  # no run recorded yet
    prompt_watch.record(store, "toy")
    assert prompt_watch.unused_edits(store, "toy", _plans()) == []  # nothing changed
    edited = prompts / "toy" / "decide.md"
    edited.write_text("<!-- a note -->\nDecide: $text\n", encoding="utf-8")
    [warning] = prompt_watch.unused_edits(store, "toy", _plans())
    assert warning.startswith("prompts/toy/decide.md changed since the last run, but no stage")
    digest = hashlib.sha256(edited.read_bytes()).hexdigest()
    assert prompt_watch.unused_edits(store, "toy", _plans(digest)) == []  # a stage sends it: it takes effect
    prompt_watch.record(store, "toy")  # the next run
    assert prompt_watch.unused_edits(store, "toy", _plans()) == []
