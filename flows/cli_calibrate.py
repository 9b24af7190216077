"""``irforge calibrate FLOW``: sweep the pool's cut-off on a labelled sample (CURE §2.4: the
relevant-rate minus irrelevant-rate criterion; tasks/cure/calibration.py); registered on
:data:`flows.cli.app` (as flows/cli_quality.py is)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import pyarrow as pa
import pyarrow.compute as pc
import typer

from flows.cli import (
    DEFAULT_ARTIFACTS,
    ArtifactsOpt,
    ConfigOpt,
    FlowArg,
    _fresh_artifact,
    _one_line_errors,
    app,
    out,
)
from flows.registry import get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.errors import IrforgeError
from irforge.summary import rows_table


@app.command()
@_one_line_errors
def calibrate(
    flow: FlowArg,
    labels: Annotated[
        Path,
        typer.Option("--labels", help="Human grades: CSV or JSONL with query_id, passage_id, label (0/1/2)."),
    ],
    scale: Annotated[str, typer.Option("--scale", help="probability (sigmoid) or logit.")] = "probability",
    relevant_min: Annotated[
        int, typer.Option("--relevant-min", help="Grades at least this are relevant.")
    ] = 1,
    out_dir: Annotated[Path, typer.Option("--out", help="Where the sweep CSV and the plot go.")] = Path(),
    config: ConfigOpt = None,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
) -> None:
    """Sweep pool cut-offs on a labelled sample: relevant-rate minus irrelevant-rate, pool size, plot."""
    import pyarrow.csv as pacsv  # noqa: PLC0415 -- a command imports what it runs only

    from tasks.cure import calibration  # noqa: PLC0415
    from tasks.cure.stages.pool import stored_floor  # noqa: PLC0415

    if scale not in ("probability", "logit"):
        raise IrforgeError(f"--scale must be probability or logit, not {scale!r}")
    on: Literal["probability", "logit"] = "probability" if scale == "probability" else "logit"
    pool = _fresh_artifact(flow, "pool", config, ArtifactStore.open(artifacts))
    floor = stored_floor(pool, on)
    if floor is None:
        raise IrforgeError("the pool stage stored no pair: nothing to calibrate")
    result = calibration.calibrate(
        pool.read(),
        calibration.read_labels(labels),
        scale=on,
        floor=floor,
        relevant_min=relevant_min,
    )
    pipeline = get_pipeline(flow)
    flow_config, _ = pipeline.load(config)
    judge = getattr(getattr(flow_config, "stages", None), "judge", None)
    current = judge.pool.threshold if judge is not None and judge.pool.scale == scale else None
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "calibration.csv"
    pacsv.write_csv(result.sweep, csv_path)
    png = calibration.plot(result, out_dir / "calibration.png", scale=on, current=current)
    rows = result.sweep.to_pylist()
    best = max(range(len(rows)), key=lambda i: (rows[i]["criterion"], rows[i]["threshold"]))
    shown = sorted({0, len(rows) - 1, *range(max(0, best - 3), min(len(rows), best + 4))})
    shown_rows = result.sweep.take(shown)
    for i, name in enumerate(shown_rows.column_names):
        if pa.types.is_floating(shown_rows.schema.field(name).type):
            shown_rows = shown_rows.set_column(i, name, pc.round(shown_rows.column(name), 4))
    out.print(rows_table(f"{flow}/pool {pool.fingerprint}: cut-off sweep ({scale})", shown_rows))
    out.print(
        f"best threshold {result.best_threshold:.4f} ({scale}); labelled pairs: {result.labelled_relevant} relevant, "
        f"{result.labelled_irrelevant} irrelevant, {result.labelled_unscored} below the storage floor"
        + (f"; configured {current:g}" if current is not None else ""),
        highlight=False,
    )
    out.print(f"sweep: {csv_path}\nplot: {png}", highlight=False)
