"""Damaged copies of good input files, for the ingest fuzz tests (issue 30 §3).

Each good file gives the same set of damaged ones, seeded: empty, a byte-order mark alone,
cut at a half and a third, 32 bytes overwritten at random places, NUL bytes strewn in, a
UTF-8 text re-encoded as Latin-1, and a doubled copy cut mid-way. A gzipped file also gives
its text damaged then compressed again (the damage inside, the gzip frame intact).
"""

from __future__ import annotations

import gzip
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from irforge.artifacts import ArtifactStore
from tests.conftest import REPO

COMPRESSED = (".gz",)


def split_name(name: str) -> tuple[str, str]:
    """(stem, suffixes): ``page.html.gz`` → (``page``, ``.html.gz``)."""
    stem, dot, rest = name.partition(".")
    return stem, dot + rest


def _flipped(data: bytes, rng: random.Random, count: int) -> bytes:
    out = bytearray(data)
    for _ in range(min(count, len(out))):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def _nuls(data: bytes, rng: random.Random, count: int) -> bytes:
    out = bytearray(data)
    for _ in range(count):
        out.insert(rng.randrange(len(out) + 1), 0)
    return bytes(out)


def damaged(data: bytes, rng: random.Random) -> dict[str, bytes]:
    """The damaged versions of ``data`` by kind."""
    text = data.decode("utf-8", errors="replace")
    return {
        "empty": b"",
        "bom": b"\xef\xbb\xbf",
        "half": data[: len(data) // 2],
        "third": data[: len(data) // 3],
        "flipped": _flipped(data, rng, 32),
        "nul": _nuls(data, rng, 16),
        "latin1": text.encode("latin-1", errors="replace"),
        "doubled": (data + data)[: len(data) * 3 // 2],
    }


def write_damaged(good: dict[str, bytes], folder: Path, seed: int = 0) -> list[str]:
    """Write every good file's damaged copies into ``folder``; their names, sorted."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for name, data in sorted(good.items()):
        stem, suffix = split_name(name)
        versions = damaged(data, rng)
        if suffix.endswith(COMPRESSED):
            inner = gzip.decompress(data)
            versions |= {f"inner-{k}": gzip.compress(v, mtime=0) for k, v in damaged(inner, rng).items()}
        for kind, content in versions.items():
            target = f"{stem}-{kind}{suffix}"
            (folder / target).write_bytes(content)
            names.append(target)
    return sorted(names)


def ingest_through_the_command(flow: str, config: Path, tmp: Path) -> dict[str, Any]:
    """``irforge run <flow> --until ingest -c config`` in its own artifact root and Prefect home;
    it must exit 0; the ingest artifact's manifest ``counts``."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env |= {"IRFORGE_ARTIFACTS": str(tmp / "art"), "PREFECT_HOME": str(tmp / "prefect")}
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", flow, "-c", str(config), "--until", "ingest"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    store = ArtifactStore.open(tmp / "art")
    [fingerprint] = store.fingerprints(flow, "ingest")
    counts: dict[str, Any] = store.get(flow, "ingest", fingerprint).manifest["counts"]
    return counts
