"""Prefect wiring: each stage a task, the flow a DAG of them (DESIGN §3).

Reuse is decided by the stage engine from content fingerprints, not by Prefect's cache
(which would hash only this wrapper's source), so tasks run with ``NO_CACHE``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Before Prefect is imported: no telemetry, and our logger's records reach Prefect's logs.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "irforge")

from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.futures import PrefectFuture  # noqa: E402

from flows.registry import get_pipeline  # noqa: E402
from irforge.artifacts import ArtifactStore  # noqa: E402
from irforge.config import ExecutionConfig  # noqa: E402
from irforge.engine import StageOutcome  # noqa: E402
from irforge.pipeline import Selection, Step, execute_step, select_steps  # noqa: E402
from irforge.progress import RichProgress  # noqa: E402
from irforge.runs import RunRecorder, new_run_id  # noqa: E402


@dataclass(frozen=True)
class RunResult:
    flow: str
    run_id: str
    record_path: Path
    outcomes: list[tuple[str, StageOutcome]]


@task(name="stage", cache_policy=NO_CACHE, persist_result=False)
def stage_task(
    step: Step, store: ArtifactStore, flow_name: str, execution: ExecutionConfig, recorder: RunRecorder
) -> StageOutcome:
    outcome = execute_step(step, store, flow_name, execution, RichProgress())
    recorder.stage_done(step.name, outcome)
    return outcome


def run_pipeline(flow_name: str, config: Path | None, artifacts: Path, selection: Selection) -> RunResult:
    """Plan, select and run the stages of ``flow_name`` as Prefect tasks; return their outcomes."""
    pipeline = get_pipeline(flow_name)
    flow_config, base_dir = pipeline.load(config)
    store = ArtifactStore(artifacts.resolve())
    plans = pipeline.plan(flow_config, base_dir)
    steps = select_steps(pipeline, plans, selection, store)
    recorder = RunRecorder(store, flow_name, new_run_id(), config or pipeline.default_config)
    futures: dict[str, PrefectFuture[StageOutcome]] = {}
    for step in steps:
        waits = [futures[u] for u in step.plan.spec.upstream if u in futures]
        futures[step.name] = stage_task.with_options(task_run_name=f"{flow_name}.{step.name}").submit(
            step, store, flow_name, flow_config.execution, recorder, wait_for=waits
        )
    outcomes: list[tuple[str, StageOutcome]] = []
    try:
        for step in steps:
            outcomes.append((step.name, futures[step.name].result()))
    except BaseException:
        recorder.finish("failed")
        raise
    recorder.finish("completed")
    return RunResult(flow_name, recorder.run_id, recorder.path, outcomes)


@flow(name="cure", validate_parameters=False)
def cure(
    config: Path | None = None,
    artifacts: Path = Path("data/artifacts"),
    selection: Selection | None = None,
) -> RunResult:
    """CURE (papers 000/001): articles → passages → ... → a Hugging Face release."""
    return run_pipeline("cure", config, artifacts, selection or Selection())


FLOWS = {"cure": cure}
