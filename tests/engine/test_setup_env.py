"""``scripts/setup.sh`` gives each clone its own environment (issue 14, item 1).

Two real clones of this repository on one machine, each set up with the real script: an
edit in one clone must not reach the other's ``.venv``, and the second setup must come from
the caches (uv's package cache, the llama-cpp-python wheel) instead of building again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

# The files that define the environment travel from the working tree, so an uncommitted
# change to them is what gets tested (in CI the working tree is the commit).
ENV_FILES = ("scripts/setup.sh", "pyproject.toml", "constraints.txt")
PROBE = "import irforge; print(irforge.__file__); print(getattr(irforge, 'MARKER', None))"


def _clone(dest: Path) -> Path:
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(dest)], check=True, timeout=120)
    for name in ENV_FILES:
        shutil.copyfile(REPO / name, dest / name)
    return dest


def _setup(clone: Path, env: dict[str, str]) -> tuple[str, float]:
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "scripts/setup.sh"],
        check=False,
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr, time.monotonic() - started


def _probe(clone: Path) -> tuple[Path, str]:
    out = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-c", PROBE],
        cwd="/",  # not the clone: the import must come from the environment, not the cwd
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split("\n")
    return Path(out[0]), out[1]


def _uv_cache() -> Path:
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return Path(os.environ.get("UV_CACHE_DIR", home / "uv"))


@pytest.mark.skipif(not (REPO / ".git").exists(), reason=f"{REPO} is not a git clone")
def test_two_clones_each_run_their_own_code(tmp_path: Path) -> None:
    # The bytecode step (a minute per clone) is not what this test is about.
    env = {**os.environ, "IRFORGE_COMPILE_BYTECODE": "0"}
    a, b = _clone(tmp_path / "a"), _clone(tmp_path / "b")
    logs = {}
    for clone in (a, b):
        logs[clone.name], seconds = _setup(clone, env)
        print(f"setup of clone {clone.name}: {seconds:.1f} s")  # informative (pytest -s)

    for clone in (a, b):
        venv = clone / ".venv"
        assert venv.is_dir() and not venv.is_symlink()  # the environment lives in the clone
    assert "building llama-cpp-python" not in logs["b"]  # the wheel came from the cache
    # uv linked both environments' files from its one cache: no second download or copy.
    torch_a, torch_b = (next(c.glob(".venv/lib/python3*/site-packages/torch/__init__.py")) for c in (a, b))
    if _uv_cache().exists() and _uv_cache().stat().st_dev == tmp_path.stat().st_dev:
        assert torch_a.stat().st_ino == torch_b.stat().st_ino

    (b / "irforge" / "__init__.py").write_text('MARKER = "edited in b"\n')
    assert _probe(a) == (a / "irforge" / "__init__.py", "None")
    assert _probe(b) == (b / "irforge" / "__init__.py", "edited in b")

    # Each clone's console script works (both at once: each imports the whole CLI).
    helps = [
        subprocess.Popen(
            [c / ".venv/bin/irforge", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for c in (a, b)
    ]
    for help_run in helps:
        out, err = help_run.communicate(timeout=300)
        assert help_run.returncode == 0 and "Usage: irforge" in out, err[-2000:]

    # A second setup of an unchanged clone reuses its environment.
    log, seconds = _setup(a, env)
    print(f"second setup of clone a: {seconds:.1f} s")
    assert "setup: creating" not in log and "setup: ready" in log
