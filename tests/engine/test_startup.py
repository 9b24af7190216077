"""A command imports what it runs: ``--help`` no flow, ``status`` / ``show`` / ``release`` /
``gc`` no ML library and no Prefect (issue 26: ``irforge status cure`` took 40 s under load,
114 s of it nlpaug → transformers → torch pulled in by an unrelated flow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flows.registry import FLOWS
from tests.conftest import REPO

# Libraries that take seconds to import and that no planning command uses.
HEAVY = (
    "torch",
    "transformers",
    "nlpaug",
    "sentence_transformers",
    "sklearn",
    "statsmodels",
    "scipy.stats",
    "openai",
    "elasticsearch",
    "matplotlib",
    "prefect",
    "ray",
    "bm25s",
    "huggingface_hub",
)
MARK = "IMPORTED:"
# Runs the command in this process, then prints which of HEAVY (and which flow packages) it imported.
PROBE = """
import json, sys
from flows.cli import app
args, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["irforge", *args]
try:
    app()
except SystemExit:
    pass
found = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))
flows = sorted(m for m in sys.modules if m.count(".") == 1 and m.startswith("tasks.") and m != "tasks.common")
print("\\n" + "IMPORTED:" + json.dumps({"heavy": found, "flows": flows}))
"""


def imported(tmp_path: Path, *args: str) -> dict[str, list[str]]:
    env_artifacts = tmp_path / "artifacts"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            json.dumps([*args, *_artifacts(args, env_artifacts)]),
            json.dumps(HEAVY),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    assert lines, f"the probe printed nothing: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    result: dict[str, list[str]] = json.loads(lines[-1].removeprefix(MARK))
    return result


def _artifacts(args: tuple[str, ...], root: Path) -> list[str]:
    takes_root = args and args[0] in ("status", "show", "release", "gc", "report")
    return ["--artifacts", str(root)] if takes_root else []


def test_help_imports_no_flow_and_no_heavy_library(tmp_path: Path) -> None:
    found = imported(tmp_path, "--help")
    assert found == {"heavy": [], "flows": []}


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_status_imports_its_flow_only_and_no_heavy_library(flow: str, tmp_path: Path) -> None:
    if flow == "spanish_sr":
        # Its planning digests the builtin cross-encoder's files, built (with torch) once per
        # machine: build it here first, as any earlier run would have.
        from tasks.common.rerank.builtin import MINILM_CROSS_ENCODER, builtin_cross_encoder_path

        builtin_cross_encoder_path(MINILM_CROSS_ENCODER)
    found = imported(tmp_path, "status", flow)
    assert found == {"heavy": [], "flows": [f"tasks.{flow}"]}


@pytest.mark.parametrize(
    "args",
    [("show", "cure", "filter"), ("release", "cure"), ("gc", "--dry-run")],
    ids=["show", "release", "gc"],
)
def test_reading_commands_import_no_heavy_library(args: tuple[str, ...], tmp_path: Path) -> None:
    # On an empty artifact root show and release end with their one-line error: the imports
    # are those of the command all the same.
    found = imported(tmp_path, *args)
    assert found["heavy"] == []
    assert found["flows"] == ([] if args[0] == "gc" else ["tasks.cure"])


def test_a_flow_is_imported_when_first_asked_for() -> None:
    code = (
        "import sys, flows.registry as r; assert 'tasks.cure' not in sys.modules;"
        "p = r.get_pipeline('cure'); assert 'tasks.cure' in sys.modules and 'tasks.crossgenre' not in sys.modules;"
        "assert r.PIPELINES['cure'] is p and sorted(r.PIPELINES) == sorted(r.FLOWS)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
