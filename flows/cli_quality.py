"""``irforge quality FLOW``: score a flow's stages on its labelled set — cure: parse → segment
→ filter on the labelled passage set (docs/decisions/passage-quality.md); crossgenre: the page
stages on a folder of labelled real news pages (tests/crossgenre/real_pages/README.md).
Registered on :data:`flows.cli.app`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli import INTERNAL_ERROR, ConfigOpt, FlowArg, _one_line_errors, app, err, out
from flows.registry import get_pipeline
from irforge.errors import IrforgeError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_GOLD = {
    "cure": ROOT / "data" / "passage_gold",
    "crossgenre": ROOT / "tests" / "crossgenre" / "real_pages",
}


@app.command()
@_one_line_errors
def quality(
    flow: FlowArg,
    config: ConfigOpt = None,
    gold: Annotated[
        Path | None,
        typer.Option(
            "--gold",
            help="Labelled set: cure, data/passage_gold's layout; crossgenre, a folder of pages "
            "with gold.jsonl (default: the flow's bundled set).",
        ),
    ] = None,
    only: Annotated[
        str | None, typer.Option("--only", help="Only documents (pages) whose name contains this.")
    ] = None,
    blocks: Annotated[
        Path | None,
        typer.Option("--blocks", help="Print the source blocks of this article file (to label it)."),
    ] = None,
) -> None:
    """Score a flow's stages on its labelled set; exit 1 when a figure is under its floor."""
    if flow not in DEFAULT_GOLD:
        raise IrforgeError(f"quality: {flow!r} has no labelled set (cure and crossgenre have)")
    gold = gold or DEFAULT_GOLD[flow]
    if flow == "crossgenre":
        _crossgenre(config, gold, only)
        return
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


def _crossgenre(config: Path | None, gold: Path, only: str | None) -> None:
    """The page stages (rules only) on the labelled pages of ``gold``."""
    from tasks.crossgenre.quality import report  # noqa: PLC0415 -- what the command runs
    from tasks.crossgenre.quality.gold import load_gold  # noqa: PLC0415
    from tasks.crossgenre.quality.measure import Tools, measure_all, opened_source  # noqa: PLC0415
    from tasks.crossgenre.stages.journal_links import domains_for_config  # noqa: PLC0415

    flow_config, base_dir = get_pipeline("crossgenre").load(config)
    stages = flow_config.stages  # type: ignore[attr-defined]
    pages = [p for p in load_gold(gold) if only is None or only in p.file]
    if not pages:
        raise IrforgeError(f"--only {only!r} matches no page of {gold}")
    single = stages.single_study.model_copy(update={"llm": None})  # rules only
    with opened_source(single, base_dir) as source:
        tools = Tools(stages.extract, domains_for_config(stages.journal_links, base_dir), single, source)
        results = measure_all(gold, pages, tools)
    report.print_report(results, out)
    failed = report.failed_floors(results, report.Floors())
    for line in failed:
        err.print(f"under the floor: {line}", highlight=False)
    out.print(report.summary_line(results), highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(INTERNAL_ERROR)
