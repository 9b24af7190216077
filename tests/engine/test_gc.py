"""``irforge gc`` on a local artifact root (flows/cli_store.py): what killed runs left goes,
artifacts, resumable chunks and a running stage's folders stay. Object store roots:
tests/engine/test_object_store.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from irforge.artifacts import ArtifactStore
from tests.engine.toy_pipeline import NumbersConfig, ToyConfig, ToyStages, run_toy


def _leftovers(root: Path) -> dict[str, Path]:
    """A toy run's artifacts, plus a folder of each kind a killed run leaves."""
    out = run_toy(root, ToyConfig(stages=ToyStages(numbers=NumbersConfig(count=30))))
    numbers, square = (root / "toy" / name for name in ("numbers", "square"))
    fp = out["numbers"].artifact.fingerprint
    made = {
        "tmp": numbers / f".tmp-{fp}-0badf00d",  # a killed assembly
        "trash": numbers / f".trash-{fp}-0badf00d",  # a replace cut short
        "published_work": numbers / f".work-{fp}",  # killed after publishing, before cleaning up
        "resumable": square / ".work-ffff",  # finished chunks of an unfinished run: kept
        "running": square / ".tmp-eeee-12345678",  # a live run holds eeee's lock: kept
    }
    for path in made.values():
        path.mkdir()
        (path / "chunk-000000.json").write_text("{}")
    (square / ".lock-eeee").touch()  # the running stage's lock file (ArtifactStore.lock)
    return made


def test_gc_removes_what_killed_runs_left_and_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "artifacts"
    made = _leftovers(root)
    store = ArtifactStore(root)
    before = {p for p in root.rglob("*") if not any(p.is_relative_to(m) for m in made.values())}
    runner = CliRunner()
    young = runner.invoke(app, ["gc", "--artifacts", str(root)])  # all younger than the grace
    assert young.exit_code == 0 and "deleted 0 leftover(s)" in young.output
    assert all(path.is_dir() for path in made.values())
    later = time.time() + 3600
    monkeypatch.setattr("flows.cli_store.time.time", lambda: later)
    with store.lock("toy", "square", "eeee"):
        dry = runner.invoke(app, ["gc", "--artifacts", str(root), "--dry-run"])
        assert dry.exit_code == 0 and "would delete 3 leftover(s)" in dry.output
        assert all(path.is_dir() for path in made.values())
        done = runner.invoke(app, ["gc", "--artifacts", str(root)])
    assert done.exit_code == 0, done.output
    assert "deleted 3 leftover(s)" in done.output and "assembly left by a killed run" in done.output
    assert f"kept {made['running']}: a running stage holds its lock" in done.output
    gone = {name for name, path in made.items() if not path.exists()}
    assert gone == {"tmp", "trash", "published_work"}
    assert {p for p in root.rglob("*") if not any(p.is_relative_to(m) for m in made.values())} == before
    for stage in ("numbers", "square"):
        (fp,) = store.fingerprints("toy", stage)
        assert store.get("toy", stage, fp).read().num_rows > 0
    # Without the lock the running stage's folder is a killed one's: it goes too.
    again = runner.invoke(app, ["gc", "--artifacts", str(root)])
    assert again.exit_code == 0 and "deleted 1 leftover(s)" in again.output
    assert not made["running"].exists() and made["resumable"].is_dir()


def test_gc_errors_are_one_line_and_help_lists_it(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["gc", "--artifacts", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    assert missing.output.strip().splitlines() == [
        f"error: no artifact folder {tmp_path / 'nothing'} (--artifacts or IRFORGE_ARTIFACTS)"
    ]
    assert " gc " in runner.invoke(app, ["--help"]).output
