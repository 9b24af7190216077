"""The function of the ``stage`` task and the runs it belongs to, in a module light to import.

A chunk task's worker process unpickles its parent task, the stage task: its function is
found here by name (pickled as a reference, not by value with the run's locks and pools),
and importing this module costs a worker nothing beyond the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from irforge.artifacts import ArtifactStore
from irforge.config import ExecutionConfig
from irforge.engine import StageOutcome
from irforge.parallel import ChunkRunner
from irforge.pipeline import Step, execute_step
from irforge.progress import stage_progress
from irforge.runs import RunRecorder


@dataclass(frozen=True)
class ActiveRun:
    """What every stage task of one run shares (locks, pools): found by run id, never
    passed as a task parameter, since a chunk task's process receives its parent's parameters."""

    store: ArtifactStore
    flow_name: str
    execution: ExecutionConfig
    recorder: RunRecorder
    chunks: ChunkRunner
    used: dict[str, str] = field(default_factory=dict)  # stage → the fingerprint it ended with


RUNS: dict[str, ActiveRun] = {}


def run_stage_of(step: Step, run_id: str) -> StageOutcome:
    """One stage of run ``run_id``. Importable by name: a chunk task's process unpickles its
    parent task, and a function reachable by name is pickled as a reference, not by value."""
    run = RUNS[run_id]
    outcome = execute_step(
        step, run.store, run.flow_name, run.execution, stage_progress(), run.chunks, run.used
    )
    run.used[step.name] = outcome.artifact.fingerprint
    run.recorder.stage_done(step.name, outcome)
    return outcome


def stage_task_body(step: Step, run_id: str) -> Any:
    """The ``stage`` task's function: :func:`run_stage_of`, a reused artifact reported to Prefect
    as ``Cached`` (a completed state, the name Prefect gives its own cache hits) with the
    artifact in its message; the outcome is the task's result either way."""
    outcome = run_stage_of(step, run_id)
    if outcome.state != "reused":
        return outcome
    from prefect.states import Completed  # noqa: PLC0415 -- a chunk worker importing this module needs none

    return Completed(data=outcome, name="Cached", message=f"reused {outcome.artifact.fingerprint}")
