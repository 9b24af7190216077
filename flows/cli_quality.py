"""``irforge quality FLOW``: score parse → segment → filter on the labelled passage set
(docs/decisions/passage-quality.md); registered on :data:`flows.cli.app`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli import INTERNAL_ERROR, ConfigOpt, FlowArg, _one_line_errors, app, err, out
from flows.registry import get_pipeline
from irforge.errors import IrforgeError

DEFAULT_GOLD = Path(__file__).resolve().parents[1] / "data" / "passage_gold"


@app.command()
@_one_line_errors
def quality(
    flow: FlowArg,
    config: ConfigOpt = None,
    gold: Annotated[
        Path, typer.Option("--gold", help="Labelled passage set (data/passage_gold layout).")
    ] = DEFAULT_GOLD,
    only: Annotated[
        str | None, typer.Option("--only", help="Only documents whose name contains this.")
    ] = None,
    blocks: Annotated[
        Path | None,
        typer.Option("--blocks", help="Print the source blocks of this article file (to label it)."),
    ] = None,
) -> None:
    """Score parse → segment → filter on the labelled passage set; exit 1 when a figure is under its floor."""
    if flow != "cure":
        raise IrforgeError(f"quality: only the cure flow has a labelled passage set, not {flow!r}")
    from tasks.cure.quality import report as quality_report  # noqa: PLC0415 -- what the command runs
    from tasks.cure.quality.measure import Stages  # noqa: PLC0415

    if blocks is not None:
        typer.echo("\n".join(quality_report.block_listing(blocks)))
        return
    flow_config, _ = get_pipeline(flow).load(config)
    stages = flow_config.stages  # type: ignore[attr-defined]
    scores = quality_report.score_all(gold, Stages(stages.parse, stages.segment, stages.filter), only)
    if not scores:
        raise IrforgeError(f"--only {only!r} matches no document of {gold}")
    quality_report.print_report(scores, out)
    failed = quality_report.failed_floors(scores, quality_report.Floors())
    for line in failed:
        err.print(f"under the floor: {line}", highlight=False)
    out.print(quality_report.summary_line(scores), highlight=False)
    if failed:
        raise typer.Exit(INTERNAL_ERROR)
