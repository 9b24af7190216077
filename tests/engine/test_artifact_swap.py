"""A forced rerun replaces an artifact in one step: a reader never finds it missing (issue 14, item 7)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from irforge import artifacts
from irforge.artifacts import MANIFEST, ArtifactStore, exchange_dirs
from tests.conftest import REPO

FLOW, STAGE, FP = "toy", "numbers", "0123456789abcdef"

# A separate process resolves and reads the artifact until told to stop, then prints its counts.
READER = """
import json, sys
from pathlib import Path
from irforge.artifacts import ArtifactStore
store, stop = ArtifactStore(Path(sys.argv[1])), Path(sys.argv[2])
reads = misses = 0
versions = set()
print("ready", flush=True)
while not stop.exists():
    reads += 1
    try:
        found = store.find("toy", "numbers", "0123456789abcdef")
        if found is None:
            misses += 1
            continue
        rows = found.read().column("version").to_pylist()
        assert rows == [rows[0]] * 100, rows
        versions.add(rows[0])
    except (OSError, IndexError):  # gone between resolving and reading (IndexError: no part left)
        misses += 1
print(json.dumps({"reads": reads, "misses": misses, "versions": len(versions)}), flush=True)
"""


def _version(store: ArtifactStore, number: int) -> Path:
    tmp = store.new_tmp_dir(FLOW, STAGE, FP)
    pq.write_table(pa.table({"version": [number] * 100}), tmp / "part-00000.parquet")
    (tmp / MANIFEST).write_text(json.dumps({"version": number}), encoding="utf-8")
    return tmp


@pytest.mark.slow
def test_a_reader_never_misses_an_artifact_while_it_is_force_replaced(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    store.publish(_version(store, 0), FLOW, STAGE, FP)
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(store.root), str(stop)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
    number, until = 0, time.monotonic() + 2.0  # long enough to overlap on a busy machine
    try:
        while number < 200 or time.monotonic() < until:
            number += 1
            store.publish(_version(store, number), FLOW, STAGE, FP)
    finally:
        stop.touch()
    counts = json.loads(reader.communicate(timeout=60)[0])
    assert counts["reads"] > 100 and counts["versions"] > 1, counts  # it read while versions changed
    assert counts["misses"] == 0, counts
    assert store.get(FLOW, STAGE, FP).read().column("version")[0].as_py() == number
    # The replaced versions go after a grace period: then nothing is left beside the artifact.
    deadline = time.monotonic() + artifacts._OLD_VERSION_GRACE_S + 10
    while len(list(store.stage_dir(FLOW, STAGE).iterdir())) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p.name for p in store.stage_dir(FLOW, STAGE).iterdir()] == [FP]


def test_exchange_swaps_two_directories(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "which").write_text("a")
    (b / "which").write_text("b")
    if not exchange_dirs(a, b):
        pytest.skip("this filesystem cannot exchange two paths (renameat2 RENAME_EXCHANGE)")
    assert (a / "which").read_text() == "b" and (b / "which").read_text() == "a"


def test_without_exchange_find_waits_out_the_gap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where the filesystem cannot exchange, the old artifact is renamed away for a moment:
    # a reader then waits for the new one instead of reporting it missing.
    monkeypatch.setattr(artifacts, "exchange_dirs", lambda a, b: False)
    store = ArtifactStore(tmp_path)
    store.publish(_version(store, 0), FLOW, STAGE, FP)
    final = store.stage_dir(FLOW, STAGE) / FP
    trash = final.with_name(f".trash-{FP}-12345678")
    final.rename(trash)  # the gap, as publish opens it
    new = _version(store, 1)
    timer = threading.Timer(0.2, new.rename, (final,))
    timer.start()
    started = time.monotonic()
    found = store.find(FLOW, STAGE, FP)
    timer.join()
    assert found is not None and found.manifest == {"version": 1}
    assert time.monotonic() - started >= 0.15
    shutil.rmtree(trash)
    store.publish(_version(store, 2), FLOW, STAGE, FP)  # the fallback path itself
    assert store.get(FLOW, STAGE, FP).manifest == {"version": 2}
    assert not list(store.stage_dir(FLOW, STAGE).glob(".trash-*"))
