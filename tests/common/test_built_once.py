"""``built_once``: processes racing for one folder build it once; a failed build leaves nothing."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from tasks.common.built_once import DONE, built_once


def _build_slowly(log: Path, tmp: Path) -> None:
    with log.open("a", encoding="utf-8") as out:
        out.write(f"{tmp.name}\n")
    time.sleep(0.5)  # long enough for every other process to arrive while it builds
    (tmp / "index.bin").write_bytes(b"built")


def _race(folder: Path, log: Path, start: float) -> str:
    time.sleep(max(0.0, start - time.time()))
    done = built_once(folder, lambda tmp: _build_slowly(log, tmp))
    return (done / "index.bin").read_text()


def test_four_processes_build_the_folder_once(tmp_path: Path) -> None:
    folder, log = tmp_path / "scratch" / "index", tmp_path / "builds.log"
    start = time.time() + 1.0
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        got = pool.starmap(_race, [(folder, log, start)] * 4)
    assert got == ["built"] * 4
    assert len(log.read_text().splitlines()) == 1
    assert sorted(p.name for p in folder.iterdir()) == [DONE, "index.bin"]
    assert [p.name for p in folder.parent.iterdir() if ".tmp-" in p.name] == []


def test_a_failed_build_leaves_no_folder_and_the_next_call_builds_it(tmp_path: Path) -> None:
    folder = tmp_path / "index"

    def broken(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError, match="killed mid-build"):
        built_once(folder, broken)
    assert not folder.exists() and not any(".tmp-" in p.name for p in tmp_path.iterdir())
    calls: list[Path] = []
    built_once(folder, calls.append)
    built_once(folder, calls.append)  # built: not again
    assert len(calls) == 1 and (folder / DONE).is_file()
