"""Prefect wiring: each stage a task, the flow a DAG of them (DESIGN §3).

Reuse is decided by the stage engine from content fingerprints, not by Prefect's cache
(which would hash only this wrapper's source), so tasks run with ``NO_CACHE``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

# Before Prefect is imported: no telemetry, and our logger's records reach Prefect's logs.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "irforge")

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from flows.registry import get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.config import ExecutionConfig
from irforge.engine import StageOutcome
from irforge.pipeline import Selection, Step, execute_step, select_steps
from irforge.progress import RichProgress
from irforge.runs import RunRecorder, new_run_id
from tasks.llm.config import close_local_servers
from tasks.report.html import write_report

log = logging.getLogger("irforge")


@dataclass(frozen=True)
class RunResult:
    flow: str
    run_id: str
    record_path: Path
    outcomes: list[tuple[str, StageOutcome]]
    report_path: Path | None


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
            step, store, flow_name, flow_config.execution, recorder, wait_for=waits, return_state=False
        )
    outcomes: list[tuple[str, StageOutcome]] = []
    try:
        for step in steps:
            outcomes.append((step.name, futures[step.name].result()))
    except BaseException:
        recorder.finish("failed")
        _report(store, flow_name, recorder.run_id)
        raise
    finally:
        close_local_servers()  # the embedded LLM server lives as long as the run
    recorder.finish("completed")
    return RunResult(
        flow_name, recorder.run_id, recorder.path, outcomes, _report(store, flow_name, recorder.run_id)
    )


def _report(store: ArtifactStore, flow_name: str, run_id: str) -> Path | None:
    """The run's HTML report; a failure to draw it is logged, never fatal to the run."""
    try:
        return write_report(store.root, flow_name, run_id)
    except Exception as exc:
        log.warning("run report not written: %s: %s", type(exc).__name__, exc)
        return None


@flow(name="cure")
def cure(
    config: str | None = None,
    artifacts: str = "data/artifacts",
    from_stage: str | None = None,
    only: str | None = None,
    until: str | None = None,
    force: bool = False,
) -> RunResult:
    """CURE (papers 000/001): articles → passages → ... → a Hugging Face release.

    Plain parameters, so a deployment (``infra/prefect.yaml``) can set them as JSON.
    """
    selection = Selection(from_stage=from_stage, only=only, until=until, force=force)
    return run_pipeline("cure", Path(config) if config else None, Path(artifacts), selection)


@flow(name="evidencebench")
def evidencebench(
    config: str | None = None,
    artifacts: str = "data/artifacts",
    from_stage: str | None = None,
    only: str | None = None,
    until: str | None = None,
    force: bool = False,
) -> RunResult:
    """EvidenceBench (paper 002): reviews → evidence summaries → cited papers' sentence pools → refined summaries → hypotheses."""
    selection = Selection(from_stage=from_stage, only=only, until=until, force=force)
    return run_pipeline("evidencebench", Path(config) if config else None, Path(artifacts), selection)


FLOWS = {"cure": cure, "evidencebench": evidencebench}
