"""What a run needs without Prefect: where artifacts go, a run's result and report, and the
run with nothing to compute (every selected stage's artifact exists).

Such a run reuses each artifact, records the run (``runs/<id>.json``) and writes its report
as any run does, without importing Prefect or starting its temporary server, which cost
seconds to tens of seconds for a run that does none of its own work (issue 26). A run
with one stage to compute goes through Prefect (:mod:`flows.run`) as before. Importing
this does not import Prefect.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flows.prompt_watch import record as record_prompts
from irforge.artifacts import ArtifactStore
from irforge.config import ExecutionConfig
from irforge.engine import StageOutcome
from irforge.pipeline import Pipeline, Step, execute_step
from irforge.runs import RunRecorder, new_run_id

log = logging.getLogger("irforge")

CHECKOUT = Path(__file__).resolve().parents[1]
DEFAULT_ARTIFACTS = "data/artifacts"


def artifact_root(artifacts: str | None) -> str:
    """Where a run writes: ``artifacts`` when given (a folder relative to the working
    directory, or an fsspec URL such as ``s3://bucket/prefix``); else ``$IRFORGE_ARTIFACTS``,
    else ``data/artifacts``, a relative folder taken from ``$IRFORGE_HOME`` (the worker's
    checkout), else from this checkout."""
    if artifacts:
        return artifacts if "://" in artifacts else str(Path(artifacts).expanduser().resolve())
    text = os.environ.get("IRFORGE_ARTIFACTS") or DEFAULT_ARTIFACTS
    if "://" in text:
        return text
    path = Path(text).expanduser()
    home = Path(os.environ.get("IRFORGE_HOME") or CHECKOUT).expanduser()
    return str((path if path.is_absolute() else home / path).resolve())


@dataclass(frozen=True)
class RunResult:
    flow: str
    run_id: str
    record_path: Path
    outcomes: list[tuple[str, StageOutcome]]
    report_path: Path | None


def nothing_to_compute(pipeline: Pipeline, steps: Sequence[Step], store: ArtifactStore) -> bool:
    """True when no step is forced and every step's artifact is already in ``store``."""
    return all(not s.force and store.find(pipeline.name, s.name, s.plan.fingerprint) for s in steps)


def run_reused(
    pipeline: Pipeline,
    config: Path | None,
    store: ArtifactStore,
    steps: Sequence[Step],
    execution: ExecutionConfig,
) -> RunResult:
    """Reuse every step (the engine checks each artifact again under its lock) and record the run."""
    recorder = RunRecorder(store, pipeline.name, new_run_id(), config or pipeline.default_config)
    outcomes: list[tuple[str, StageOutcome]] = []
    used: dict[str, str] = {}
    try:
        for step in steps:
            outcome = execute_step(step, store, pipeline.name, execution, used=used)
            used[step.name] = outcome.artifact.fingerprint
            recorder.stage_done(step.name, outcome)
            outcomes.append((step.name, outcome))
    except BaseException:
        recorder.finish("failed")
        raise
    recorder.finish("completed")
    record_prompts(store, pipeline.name)
    return RunResult(
        pipeline.name,
        recorder.run_id,
        recorder.path,
        outcomes,
        write_run_report(store, pipeline, recorder.run_id),
    )


def write_run_report(store: ArtifactStore, pipeline: Pipeline, run_id: str) -> Path | None:
    """The run's HTML report; a failure to draw it is logged, never fatal to the run."""
    try:
        from tasks.common.report.html import write_report  # noqa: PLC0415 -- matplotlib: seconds

        return write_report(store.root, pipeline.name, run_id, sections=pipeline.report_sections)
    except Exception as exc:
        log.warning("run report not written: %s: %s", type(exc).__name__, exc)
        return None
