"""Prefect wiring: one flow, ``irforge``, runs any registered pipeline; each stage a task.

Reuse is decided by the stage engine from content fingerprints, not by Prefect's cache
(which would hash only this wrapper's source), so tasks run with ``NO_CACHE``. What a
person looks for in Prefect's UI is published there too: each stage's ``REUSED`` /
``COMPUTED`` line in its task run's logs, and on the flow run a table of the stages and a
link to the run report (https://docs.prefect.io/v3/concepts/artifacts).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Before Prefect is imported: no telemetry.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

from prefect import flow, task
from prefect.artifacts import create_link_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext, TaskRunContext
from prefect.futures import PrefectFuture
from prefect.logging.handlers import APILogHandler
from prefect.utilities.names import generate_slug

from flows.plain_run import RunResult, artifact_root, write_run_report
from flows.prompt_watch import record as record_prompts
from flows.runners import PrefectChunkRunner, chunk_runner
from flows.stage_runs import RUNS, ActiveRun, stage_task_body
from irforge.artifacts import ArtifactStore
from irforge.config import ExecutionConfig, validate_config
from irforge.contents import resolver
from irforge.engine import StageOutcome
from irforge.pipeline import Selection, select_steps
from irforge.runs import RunRecorder, new_run_id
from irforge.summary import summary_rows

log = logging.getLogger("irforge")


class _InRun(logging.Filter):
    """Pass only records made inside a Prefect flow or task run (the API needs a run id)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return TaskRunContext.get() is not None or FlowRunContext.get() is not None


@contextmanager
def stage_lines_to_prefect() -> Iterator[None]:
    """Send the ``irforge`` logger's records (INFO and up) to the current run's logs.

    ``PREFECT_LOGGING_EXTRA_LOGGERS=irforge`` set from this module did not: a worker's
    flow-run process imports Prefect, which reads that setting once, before it loads this
    module; and the logger's level stayed NOTSET, so Prefect's WARNING root dropped every
    ``COMPUTED`` line. Prefect's API handler tags each record with the run of the thread
    that made it, so each stage's lines land in its own task run.
    """
    handler = APILogHandler(level=logging.INFO)
    handler.addFilter(_InRun())
    added = not any(isinstance(h, APILogHandler) for h in log.handlers)
    if added:
        log.addHandler(handler)
    level = log.level
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        if added:
            log.removeHandler(handler)
        log.setLevel(level)


stage_task = task(name="stage", cache_policy=NO_CACHE, persist_result=False)(stage_task_body)
"""Each stage of a run, a task run named ``<flow>.<stage>`` (its chunks are task runs under it)."""


def run_pipeline(
    flow_name: str,
    config: Path | None,
    artifacts: str | Path,
    selection: Selection,
    execution: dict[str, Any] | None = None,
) -> RunResult:
    """Plan, select and run the stages of ``flow_name`` as Prefect tasks; return their outcomes.

    ``execution`` overrides keys of the config's ``execution`` (``runner``, ``ray_address``, ...).
    """
    # Imported here, not above: a chunk task's worker imports this module (its flow run's
    # flow), and every flow's packages (torch, spaCy, ...) would cost each worker seconds.
    from flows.registry import get_pipeline  # noqa: PLC0415
    from tasks.common.llm.config import close_local_servers  # noqa: PLC0415

    pipeline = get_pipeline(flow_name)
    flow_config, base_dir = pipeline.load(config)
    if execution:
        merged = {**flow_config.execution.model_dump(), **execution}
        flow_config = flow_config.model_copy(
            update={"execution": validate_config(ExecutionConfig, merged, "execution")}
        )
    chunks = chunk_runner(flow_config.execution, flow_name)
    store = ArtifactStore.open(artifacts)
    plans = pipeline.plan(flow_config, base_dir, resolver(store, flow_name))
    steps = select_steps(pipeline, plans, selection, store)
    recorder = RunRecorder(store, flow_name, new_run_id(), config or pipeline.default_config)
    RUNS[recorder.run_id] = ActiveRun(store, flow_name, flow_config.execution, recorder, chunks)
    futures: dict[str, PrefectFuture[StageOutcome]] = {}
    outcomes: list[tuple[str, StageOutcome]] = []
    try:
        with stage_lines_to_prefect():
            for step in steps:
                waits = [futures[u] for u in step.plan.spec.upstream if u in futures]
                futures[step.name] = stage_task.with_options(task_run_name=f"{flow_name}.{step.name}").submit(
                    step, recorder.run_id, wait_for=waits, return_state=False
                )
            for step in steps:
                outcomes.append((step.name, futures[step.name].result()))
    except BaseException:
        recorder.finish("failed")
        _publish(flow_name, outcomes, recorder, write_run_report(store, pipeline, recorder.run_id))
        raise
    finally:
        close_local_servers()  # the embedded LLM server lives as long as the run
        RUNS.pop(recorder.run_id, None)
        if isinstance(chunks, PrefectChunkRunner):
            chunks.close()
    recorder.finish("completed")
    record_prompts(store, flow_name)
    report = write_run_report(store, pipeline, recorder.run_id)
    _publish(flow_name, outcomes, recorder, report)
    return RunResult(flow_name, recorder.run_id, recorder.path, outcomes, report)


def stage_rows(outcomes: Sequence[tuple[str, StageOutcome]]) -> list[dict[str, Any]]:
    """The run summary ``irforge run`` prints, every exclusion reason named, as table rows
    (Prefect's UI reads cells as Markdown: an empty one is "none", since "-" draws a bullet)."""
    rows = summary_rows(outcomes, reasons_limit=1_000_000)
    return [{k: "none" if v in (None, "") else v for k, v in row.items()} for row in rows]


def _publish(
    flow_name: str, outcomes: Sequence[tuple[str, StageOutcome]], recorder: RunRecorder, report: Path | None
) -> None:
    """The stage table and the report's location as artifacts of the flow run (keys
    ``<flow>-stages`` and ``<flow>-report``, so the UI keeps their history; Prefect allows
    only lower-case letters, digits and dashes in a key, so ``spanish_sr`` is ``spanish-sr``)."""
    if FlowRunContext.get() is None:
        return
    key = artifact_key(flow_name)
    try:
        create_table_artifact(
            stage_rows(outcomes),
            key=f"{key}-stages",
            description=f"irforge run {flow_name} {recorder.run_id}: stages reused or computed",
        )
        if report is not None:
            create_link_artifact(
                report.as_uri(),
                link_text=str(report),
                key=f"{key}-report",
                description=f"The run report, on the host that ran the flow. Run record: {recorder.path}",
            )
    except Exception as exc:  # the run's own artifacts are written: only the UI's view is missing
        log.warning("Prefect artifacts not published: %s: %s", type(exc).__name__, exc)


def artifact_key(flow_name: str) -> str:
    """``flow_name`` as a Prefect artifact key stem: lower case, anything else than a letter or digit a dash."""
    return re.sub(r"[^a-z0-9]+", "-", flow_name.lower()).strip("-") or "flow"


def _run_name() -> str:
    """``<flow>-<two words>`` (e.g. ``cure-witty-otter``): the run's name says which flow it runs."""
    context = FlowRunContext.get()
    parameters = (context.parameters if context is not None else None) or {}
    return f"{parameters.get('flow', 'irforge')}-{generate_slug(2)}"


@flow(name="irforge", flow_run_name=_run_name)
def irforge_flow(
    flow: str,
    config: str | None = None,
    artifacts: str | None = None,
    from_stage: str | None = None,
    only: str | None = None,
    until: str | None = None,
    force: bool = False,
    runner: str | None = None,
    ray_address: str | None = None,
    chunk_rows: int | None = None,
) -> RunResult:
    """Run ``flow``, any flow of ``flows/registry.py``, or part of it (``from_stage`` / ``only`` /
    ``until`` / ``force``: ``irforge run --help``).

    Plain parameters, so a deployment (``infra/prefect.yaml``) can set them as JSON;
    ``config`` left out: the flow's bundled config; ``artifacts`` left out: see :func:`artifact_root`;
    ``runner`` / ``ray_address`` / ``chunk_rows`` set: they replace the config's ``execution`` keys.
    """
    selection = Selection(from_stage=from_stage, only=only, until=until, force=force)
    given = {"runner": runner, "ray_address": ray_address, "chunk_rows": chunk_rows}
    overrides = {k: v for k, v in given.items() if v is not None}
    return run_pipeline(
        flow, Path(config) if config else None, artifact_root(artifacts), selection, overrides
    )
