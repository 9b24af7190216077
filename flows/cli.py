"""The ``irforge`` command: run flows, see their status, look inside artifacts.

Exit status: 0 done; 2 an error that is the user's to fix (a bad config, input file or
option: one line ``error: ...``, as click does for a bad option); 1 anything else (one
line naming the exception: a bug or the environment); 128 + N when signal N ended it
(143 for SIGTERM: the run's ``finally`` blocks and atexit handlers ran, child servers were
stopped). ``--debug`` (or ``IRFORGE_DEBUG=1``) also prints the traceback; without it,
Prefect's own traceback of a user error is not logged either. The console script is
:func:`main` (``pyproject.toml``), which installs the SIGTERM handler.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import traceback
from collections.abc import Callable
from functools import wraps
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pyarrow.compute as pc
import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from flows import local_server
from flows.plain_run import RunResult, artifact_root, nothing_to_compute, run_reused
from flows.prompt_watch import unused_edits
from flows.registry import get_pipeline
from flows.sigterm import Terminated, exit_on_sigterm, leave
from irforge.artifacts import Artifact, ArtifactStore
from irforge.contents import resolver
from irforge.errors import IrforgeError
from irforge.pipeline import Selection, select_steps
from irforge.runs import latest_fingerprints
from irforge.status import flow_status
from irforge.summary import rows_table, run_summary, status_table

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Build IR test collections as Prefect flows."
)
# Off a terminal (CI logs, pipes) rich would assume 80 columns and fold every table.
out = Console(width=None if sys.stdout.isatty() else 180)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 180)

F = TypeVar("F", bound=Callable[..., Any])

FlowArg = Annotated[str, typer.Argument(help="Flow name.")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Flow config (YAML). Default: the bundled demo config.")
]
ArtifactsOpt = Annotated[
    str,  # a folder or an fsspec URL (s3://bucket/prefix): Path would fold its "//"
    typer.Option("--artifacts", "-a", envvar="IRFORGE_ARTIFACTS", help="Artifact root: folder or s3:// URL."),
]
DEFAULT_ARTIFACTS = "data/artifacts"
USER_ERROR = 2
INTERNAL_ERROR = 1


def _debug() -> bool:
    return bool(os.environ.get("IRFORGE_DEBUG"))


def _one_line_errors(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except IrforgeError as e:
            _fail(e, " | ".join(str(e).splitlines()), USER_ERROR)
        except (typer.Exit, KeyboardInterrupt):
            raise
        except Exception as e:
            _fail(e, f"{type(e).__name__}: {e} (--debug shows the traceback)", INTERNAL_ERROR)

    return wrapper  # type: ignore[return-value]


def _fail(error: BaseException, message: str, code: int) -> None:
    if _debug():
        sys.stderr.write("".join(traceback.format_exception(error)))
    err.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code) from None


class _HideUserErrorTracebacks(logging.Filter):
    """Drops Prefect's log records that carry an :class:`IrforgeError` (with its traceback):
    the CLI prints that error as one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], IrforgeError))


def _quiet_prefect_on_user_errors() -> None:
    # The flow and task engines log a failure on these loggers (prefect/logging/logging.yml);
    # a filter on a logger survives Prefect's re-configuration of its handlers.
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _HideUserErrorTracebacks) for f in logger.filters):
            logger.addFilter(_HideUserErrorTracebacks())


def _print_version(value: bool) -> None:
    if value:
        out.print(f"irforge {package_version('irforge')}", highlight=False)
        raise typer.Exit


@app.callback()
def _options(
    _version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Print the traceback of an error (as IRFORGE_DEBUG=1 does).")
    ] = False,
) -> None:
    """Build IR test collections as Prefect flows."""
    if debug:
        os.environ["IRFORGE_DEBUG"] = "1"


def _setup_logging() -> None:
    handler = RichHandler(console=err, show_path=False, show_time=False, markup=False)
    logger = logging.getLogger("irforge")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


@app.command()
@_one_line_errors
def run(
    flow: Annotated[str, typer.Argument(help="Flow name, e.g. cure.")],
    config: ConfigOpt = None,
    from_stage: Annotated[
        str | None, typer.Option("--from", help="Recompute this stage and everything after it.")
    ] = None,
    only: Annotated[str | None, typer.Option("--only", help="Recompute this stage alone.")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Stop after this stage.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Recompute every selected stage.")] = False,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
) -> None:
    """Run a flow (or part of it). Stages whose fingerprint exists are reused."""
    _setup_logging()
    pipeline = get_pipeline(flow)
    # A bad flow name, config or stage fails here, before Prefect starts a server.
    flow_config, base_dir = pipeline.load(config)
    selection = Selection(from_stage=from_stage, only=only, until=until, force=force)
    store = ArtifactStore.open(artifact_root(artifacts))
    plans = pipeline.plan(flow_config, base_dir, resolver(store, flow))  # early cut-off: irforge/contents.py
    steps = select_steps(pipeline, plans, selection, store)
    # `irforge server start`'s server, set before Prefect reads its settings.
    local = local_server.use_running_server()
    named = local or os.environ.get("PREFECT_API_URL")
    if not named and nothing_to_compute(pipeline, steps, store):
        # Every artifact exists and no server is named: reuse them without starting Prefect's
        # temporary server (seconds for no work). With a server the run shows in its UI.
        result = run_reused(pipeline, config, store, steps, flow_config.execution)
    else:
        result = _run_with_prefect(flow, config, artifacts, selection, local=bool(local))
    out.print(run_summary(flow, result.outcomes))
    out.print(f"run record: {result.record_path}", highlight=False)
    if result.report_path is not None:
        out.print(f"run report: {result.report_path}", highlight=False)


def _run_with_prefect(
    flow: str, config: Path | None, artifacts: str, selection: Selection, *, local: bool
) -> RunResult:
    from prefect.settings import PREFECT_API_URL  # noqa: PLC0415 -- Prefect is slow to import: only `run` needs it

    from flows.run import irforge_flow  # noqa: PLC0415

    if not _debug():
        _quiet_prefect_on_user_errors()
    if not PREFECT_API_URL.value():  # no server named (environment or Prefect profile)
        # Prefect's server code (FastAPI, SQLAlchemy: seconds) is imported only to start one.
        from flows.ephemeral import guard_temporary_server  # noqa: PLC0415

        guard_temporary_server()
        local = True
    with local_server.heartbeat_settings(ours=local):
        result: RunResult = irforge_flow(
            flow=flow,
            config=str(config) if config else None,
            artifacts=artifacts,
            from_stage=selection.from_stage,
            only=selection.only,
            until=selection.until,
            force=selection.force,
        )
    return result


@app.command()
@_one_line_errors
def status(
    flow: FlowArg,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
) -> None:
    """Per stage: fingerprint, fresh / stale (and what changed) / missing, rows, time."""
    pipeline = get_pipeline(flow)
    flow_config, base_dir = pipeline.load(config)
    store = ArtifactStore.open(artifacts)
    plans = pipeline.plan(flow_config, base_dir, resolver(store, flow))
    statuses = flow_status(pipeline, flow_config, base_dir, store, plans)
    warnings = unused_edits(store, flow, plans)
    if as_json:
        payload = {"flow": flow, "artifacts": store.url, "stages": [s.to_json() for s in statuses]}
        sys.stdout.write(json.dumps({**payload, "warnings": warnings}, indent=2) + "\n")
    else:
        out.print(status_table(flow, statuses))
        for line in warnings:
            err.print(f"[yellow]warning:[/] {line}", highlight=False)


def _current_fingerprint(flow: str, stage: str, config: Path | None, store: ArtifactStore) -> str:
    """The fingerprint ``stage`` of ``flow`` has under the config (an error if it is not configured)."""
    pipeline = get_pipeline(flow)
    pipeline.spec(stage)
    flow_config, base_dir = pipeline.load(config)
    plans = pipeline.plan(flow_config, base_dir, resolver(store, flow))
    if stage not in plans:
        raise IrforgeError(f"the {flow} config has no {stage} stage")
    return plans[stage].fingerprint


def _artifact_for_show(flow: str, stage: str, config: Path | None, store: ArtifactStore) -> Artifact:
    found = store.find(flow, stage, _current_fingerprint(flow, stage, config, store))
    if found is not None:
        return found
    previous = latest_fingerprints(store, flow).get(stage)
    found = store.find(flow, stage, previous) if previous else None
    if found is None:
        raise IrforgeError(f"no artifact for {flow}/{stage}: run `irforge run {flow} --until {stage}` first")
    err.print(
        f"[yellow]note:[/] {flow}/{stage} is stale; showing the last run's artifact {found.fingerprint}"
    )
    return found


def _fresh_artifact(flow: str, stage: str, config: Path | None, store: ArtifactStore) -> Artifact:
    """The artifact of ``stage`` under the current config; an error if it was not computed yet."""
    found = store.find(flow, stage, _current_fingerprint(flow, stage, config, store))
    if found is None:
        raise IrforgeError(
            f"{flow}/{stage} is not computed for this config: run `irforge run {flow} --until {stage}`"
        )
    return found


@app.command()
@_one_line_errors
def show(
    flow: FlowArg,
    stage: Annotated[str, typer.Argument(help="Stage name.")],
    excluded: Annotated[bool, typer.Option("--excluded", help="Show the rows the stage dropped.")] = False,
    n: Annotated[
        int | None, typer.Option("-n", help="Number of rows (default 10; a side table: 50).", min=0)
    ] = None,
    columns: Annotated[str | None, typer.Option("--columns", help="Comma-separated columns to show.")] = None,
    reason: Annotated[str | None, typer.Option("--reason", help="With --excluded: only this reason.")] = None,
    side_table: Annotated[
        str | None, typer.Option("--table", help="A named side table of the artifact (see the manifest).")
    ] = None,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="Print rows as JSON lines.")] = False,
    raw: Annotated[
        bool, typer.Option("--raw", help="Numbers at full precision (default: 4 digits).")
    ] = False,
    config: ConfigOpt = None,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
) -> None:
    """Print rows of a stage's artifact (kept rows, or --excluded ones with their reasons)."""
    artifact = _artifact_for_show(flow, stage, config, ArtifactStore.open(artifacts))
    if excluded and side_table:
        raise IrforgeError("--excluded and --table are exclusive")
    table = artifact.excluded() if excluded else artifact.read(table=side_table)
    if reason is not None:
        if not excluded:
            raise IrforgeError("--reason needs --excluded")
        table = table.filter(pc.equal(table.column("reason"), reason))
    if columns:
        wanted = [c.strip() for c in columns.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in table.column_names]
        if unknown:
            raise IrforgeError(f"unknown column(s) {unknown}; columns: {', '.join(table.column_names)}")
        table = table.select(wanted)
    total = table.num_rows
    table = table.slice(0, n if n is not None else SIDE_TABLE_ROWS if side_table else 10)
    if jsonl:
        for row in table.to_pylist():
            sys.stdout.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        return
    what = "excluded" if excluded else f"{side_table} table" if side_table else "kept"
    title = f"{flow}/{stage} {artifact.fingerprint}: {table.num_rows} of {total} {what} rows"
    out.print(rows_table(title, table, raw=raw, terminal=out.width))


SIDE_TABLE_ROWS = 50


@app.command()
@_one_line_errors
def release(
    flow: FlowArg,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Copy the release folder here.")] = None,
    push: Annotated[
        str | None,
        typer.Option("--push", help="Upload to this Hugging Face dataset repo (HF_TOKEN), one commit."),
    ] = None,
    private: Annotated[bool, typer.Option("--private", help="With --push: create the repo private.")] = False,
    config: ConfigOpt = None,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
) -> None:
    """The release folder of the current config: print it, copy it (--out), or push it (--push)."""
    stage = get_pipeline(flow).release_stage
    artifact = _fresh_artifact(flow, stage, config, ArtifactStore.open(artifacts))
    folder = artifact.files / "release"
    if not folder.is_dir():
        raise IrforgeError(f"{flow}/{stage} {artifact.fingerprint} wrote no release: it kept no rows")
    if out_dir is not None:
        if out_dir.exists() and any(out_dir.iterdir()):
            raise IrforgeError(f"--out {out_dir} exists and is not empty")
        shutil.copytree(folder, out_dir, dirs_exist_ok=True)
        out.print(f"release copied to {out_dir}", highlight=False)
    if push is not None:
        from tasks.common.release.hub import push_release  # noqa: PLC0415

        url = push_release(folder, push, token=os.environ.get("HF_TOKEN") or None, private=private)
        out.print(f"pushed to {push}: {url}", highlight=False)
    if out_dir is None and push is None:
        out.print(str(folder), highlight=False)


@app.command()
@_one_line_errors
def report(
    flow: FlowArg,
    run_id: Annotated[str | None, typer.Option("--run", help="Run id (default: the latest run).")] = None,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
) -> None:
    """Write (again) the HTML report of a run and print its path."""
    from tasks.common.report.html import write_report  # noqa: PLC0415 -- matplotlib

    sections = get_pipeline(flow).report_sections
    root = ArtifactStore.open(artifacts).root
    out.print(str(write_report(root, flow, run_id, sections=sections)), highlight=False)


import flows.cli_calibrate  # noqa: E402  (registers ``irforge calibrate`` on ``app``)
import flows.cli_quality  # noqa: E402  (registers ``irforge quality`` on ``app``)
import flows.cli_server  # noqa: E402  (registers ``irforge server`` on ``app``)
import flows.cli_store  # noqa: E402,F401  (registers ``irforge gc`` on ``app``)


def main() -> None:
    """The ``irforge`` command, called by the console script (``flows/console.py``)."""
    exit_on_sigterm()
    try:
        app()
    except Terminated as stop:  # the main thread has unwound: the run's finally blocks ran
        leave(stop.code if isinstance(stop.code, int) else 128 + signal.SIGTERM)


if __name__ == "__main__":
    main()
