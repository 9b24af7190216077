"""Shared helpers: where the real samples are, and running CURE stages without Prefect."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.registry import get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.pipeline import Selection, execute_step, select_steps

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
REPO = Path(__file__).resolve().parents[1]
needs_samples = pytest.mark.skipif(
    not (SAMPLES / "articles" / "SOURCES.json").is_file(),
    reason=f"the shared sample articles are not at {SAMPLES} (they live beside the checkout, not in it)",
)


@pytest.fixture(scope="session", autouse=True)
def _stop_prefects_temporary_server() -> Iterator[None]:
    """Stop a temporary Prefect server a test started while pytest's streams are open: at exit,
    Prefect's stop message would go to a closed capture stream ("Logging error")."""
    yield
    if "prefect.server.api.server" in sys.modules:
        from prefect.server.api.server import SubprocessASGIServer

        for server in list(SubprocessASGIServer._instances.values()):
            if server.running:
                server.stop()


def fake_key(prefix: str, label: str) -> str:
    """A credential-shaped test value, made at run time so no key-like literal sits in the
    source (secret scanners cannot tell a test value from a real one)."""
    return prefix + hashlib.sha256(label.encode()).hexdigest()[:32]


def run_cure(
    root: Path,
    sources: list[str],
    base_dir: Path,
    selection: Selection | None = None,
    chunk_rows: int = 500,
    **stages: Any,
) -> dict[str, StageOutcome]:
    """Run CURE stages the way the Prefect tasks do (same engine calls), without a server."""
    pipeline = get_pipeline("cure")
    data = {"execution": {"chunk_rows": chunk_rows}, "stages": {"ingest": {"sources": sources}, **stages}}
    config = validate_config(pipeline.config_type, data, "test config")
    store = ArtifactStore(root)
    steps = select_steps(pipeline, pipeline.plan(config, base_dir), selection or Selection(), store)
    return {s.name: execute_step(s, store, "cure", config.execution) for s in steps}
