"""The spanish_sr flow's own sections of its run report (``tasks/common/report/sections.py``).

- ``funnel`` (stage ``ingest``): records read → cleaned → question pairs, from the stage
  manifests (:data:`tasks.spanish_sr.release_stats.FUNNEL`; paper 004 §3.1);
- ``retrieval`` (``evaluate``): its ``summary`` table over all reviews, mean ± sd over seeds
  per system and measure, and MAP per query kind as bars (paper 004 Tables 3–4);
- ``significance`` (``evaluate``): question vs expert queries per review and measure, its
  ``significance`` table (paper 004 Table 5, :mod:`tasks.spanish_sr.significance`);
- ``training`` (``train_dense``): both models' ``history`` per seed and epoch (epoch 0: the
  base model) and ``evaluate``'s ``held_out`` self-retrieval, when those stages ran.

Mean ± sd: over the seeds' means (:func:`tasks.spanish_sr.review_eval.summary_rows`); one seed
shows the mean alone.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from irforge.artifacts import Artifact
from tasks.common.report import plots
from tasks.common.report.sections import Section, Source
from tasks.common.report.tables import ReportDataError, read_columns, text_key
from tasks.spanish_sr.release_stats import FUNNEL
from tasks.spanish_sr.report_templates import (
    FUNNEL_TEMPLATE,
    RETRIEVAL_TEMPLATE,
    SIGNIFICANCE_TEMPLATE,
    TRAINING_TEMPLATE,
)
from tasks.spanish_sr.review_eval import ALL
from tasks.spanish_sr.significance import EXPERT, QUESTION

MAP = "AP"  # ir-measures' AP averaged over queries is MAP
NONE = "–"
KIND_COLOURS = {QUESTION: "#3d6fb6", EXPERT: "#e07b39"}
MODELS = (("train_dense", "dual encoder"), ("train_rerank", "cross-encoder reranker"))


@dataclass(frozen=True)
class FunnelStep:
    stage: str
    entering: str
    kept_label: str
    units_in: int | None  # None: the stage is not in this run
    kept: int | None
    excluded: Mapping[str, int]  # reason → units


@dataclass(frozen=True)
class Cell:
    """One value over the seeds: their mean, sd (None with one seed) and range."""

    mean: float
    std: float | None
    low: float
    high: float
    seeds: int

    @property
    def text(self) -> str:
        return f"{self.mean:.3f}" if self.std is None else f"{self.mean:.3f} ± {self.std:.3f}"


@dataclass(frozen=True)
class Grid:
    """Cells by (row, column), with the rows and columns in display order."""

    rows: tuple[str, ...]
    columns: tuple[str, ...]
    cells: Mapping[tuple[str, str], Cell]

    def text(self, row: str, column: str) -> str:
        cell = self.cells.get((row, column))
        return NONE if cell is None else cell.text


@dataclass(frozen=True)
class RetrievalSection:
    measures: Grid  # system × measure, every review and query kind together
    map_by_kind: Grid  # system × query kind, MAP
    seeds: int
    queries: int | None


@dataclass(frozen=True)
class Comparison:
    review: str
    metric: str
    n: int
    mean_question: float
    mean_expert: float
    test: str
    statistic: float | None
    p_value: float | None
    decision: str
    note: str

    @property
    def p_text(self) -> str:
        if self.p_value is None:
            return NONE
        return f"{self.p_value:.1e}" if self.p_value < 0.001 else f"{self.p_value:.3f}"


@dataclass(frozen=True)
class Epoch:
    seed: int
    epoch: int
    train_loss: float | None
    val_loss: float
    val_mrr: float
    best: bool  # the epoch whose weights were kept


@dataclass(frozen=True)
class ModelHistory:
    stage: str
    label: str
    epochs: tuple[Epoch, ...]  # by seed, then epoch


@dataclass(frozen=True)
class TrainingSection:
    models: tuple[ModelHistory, ...]  # the trained models of this run
    held_out: Grid | None  # system × measure; None: no evaluate in this run
    held_out_queries: int | None


def load_funnel(source: Source) -> tuple[FunnelStep, ...]:
    steps = []
    for stage, entering, kept_label in FUNNEL:
        report = source.stages.get(stage)
        if report is None or report.missing:
            steps.append(FunnelStep(stage, entering, kept_label, None, None, {}))
        else:
            steps.append(
                FunnelStep(
                    stage,
                    entering,
                    kept_label,
                    report.count("units_in"),
                    report.count("units_kept"),
                    report.excluded_by_reason,
                )
            )
    return tuple(steps)


def over_seeds(values: Sequence[float]) -> Cell:
    """Mean, sd (two or more seeds) and range of one value per seed."""
    return Cell(
        statistics.fmean(values),
        statistics.stdev(values) if len(values) > 1 else None,
        min(values),
        max(values),
        len(values),
    )


def _ordered(found: Iterable[str], preferred: object) -> tuple[str, ...]:
    """``found`` in the config's order (a list in the manifest), the rest after it by name."""
    seen = set(found)
    first = [str(v) for v in preferred if str(v) in seen] if isinstance(preferred, list) else []
    return (*dict.fromkeys(first), *sorted(seen - set(first)))


def _kinds(found: Iterable[str]) -> tuple[str, ...]:
    return _ordered(found, [QUESTION, EXPERT])


def load_retrieval(source: Source) -> RetrievalSection:
    columns = [
        "review_id",
        "query_kind",
        "system",
        "measure",
        "mean",
        "std",
        "min",
        "max",
        "seeds",
        "queries",
    ]
    rows = [r for r in _side(source.artifact, "summary", columns) if text_key(r["review_id"]) == ALL]
    cells: dict[tuple[str, str, str], Cell] = {}
    for r in rows:
        key = (text_key(r["query_kind"]), text_key(r["system"]), text_key(r["measure"]))
        if key in cells:
            raise ReportDataError(f"evaluate {source.artifact.fingerprint} summary has two rows for {key}")
        std = None if r["std"] is None or int(r["seeds"]) < 2 else float(r["std"])
        cells[key] = Cell(float(r["mean"]), std, float(r["min"]), float(r["max"]), int(r["seeds"]))
    config = source.artifact.manifest.get("material", {}).get("config", {})
    systems = _ordered({s for _k, s, _m in cells}, config.get("systems"))
    overall = {(s, m): c for (k, s, m), c in cells.items() if k == ALL}
    by_kind = {(s, k): c for (k, s, m), c in cells.items() if k != ALL and m == MAP}
    queries = {int(r["queries"]) for r in rows if r["query_kind"] == ALL}
    return RetrievalSection(
        measures=Grid(systems, _ordered({m for _s, m in overall}, config.get("measures")), overall),
        map_by_kind=Grid(systems, _kinds(k for _s, k in by_kind), by_kind),
        seeds=max((c.seeds for c in cells.values()), default=0),
        queries=queries.pop() if len(queries) == 1 else None,
    )


def load_significance(source: Source) -> tuple[Comparison, ...]:
    columns = ["review", "metric", "n", "mean_question", "mean_expert", "test", "statistic", "p_value"]
    rows = _side(source.artifact, "significance", [*columns, "decision", "note"])
    return tuple(
        Comparison(
            text_key(r["review"]),
            text_key(r["metric"]),
            int(r["n"]),
            float(r["mean_question"]),
            float(r["mean_expert"]),
            text_key(r["test"]),
            r["statistic"],
            r["p_value"],
            text_key(r["decision"]),
            r["note"] or "",
        )
        for r in sorted(rows, key=lambda r: (text_key(r["review"]), text_key(r["metric"])))
    )


def _side(artifact: Artifact, table: str, columns: list[str]) -> list[dict[str, Any]]:
    """The rows of side table ``table`` (those columns), or an error naming the artifact."""
    if table not in artifact.table_names:
        raise ReportDataError(f"{artifact.stage} {artifact.fingerprint} has no side table {table!r}")
    rows: list[dict[str, Any]] = read_columns(artifact, columns, table=table).to_pylist()
    return rows


def _history(stage: str, label: str, source: Source) -> ModelHistory | None:
    report = source.stages.get(stage)
    if report is None or report.artifact is None:
        return None
    best = {
        (int(r["seed"]), int(r["best_epoch"]))
        for r in read_columns(report.artifact, ["seed", "best_epoch"]).to_pylist()
    }
    columns = ["seed", "epoch", "train_loss", "val_loss", "val_mrr"]
    rows = _side(report.artifact, "history", columns)
    epochs = [
        Epoch(
            int(r["seed"]),
            int(r["epoch"]),
            r["train_loss"],
            float(r["val_loss"]),
            float(r["val_mrr"]),
            (int(r["seed"]), int(r["epoch"])) in best,
        )
        for r in rows
    ]
    return ModelHistory(stage, label, tuple(sorted(epochs, key=lambda e: (e.seed, e.epoch))))


def _held_out(source: Source) -> tuple[Grid, int | None] | None:
    report = source.stages.get("evaluate")
    if report is None or report.artifact is None or "held_out" not in report.artifact.table_names:
        return None  # not run, or (an older evaluate) without it: its own sections say what is wrong
    columns = ["seed", "system", "measure", "value", "queries"]
    rows = _side(report.artifact, "held_out", columns)
    values: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for r in rows:
        values[(text_key(r["system"]), text_key(r["measure"]))][int(r["seed"])] = float(r["value"])
    cells = {key: over_seeds([v for _s, v in sorted(by_seed.items())]) for key, by_seed in values.items()}
    config = report.config
    grid = Grid(
        _ordered({s for s, _m in cells}, config.get("systems")),
        _ordered({m for _s, m in cells}, config.get("held_out_measures")),
        cells,
    )
    queries = {int(r["queries"]) for r in rows}
    return grid, queries.pop() if len(queries) == 1 else None


def load_training(source: Source) -> TrainingSection:
    models = (_history(stage, label, source) for stage, label in MODELS)
    held_out = _held_out(source)
    return TrainingSection(
        models=tuple(m for m in models if m is not None),
        held_out=held_out[0] if held_out else None,
        held_out_queries=held_out[1] if held_out else None,
    )


def map_figure(retrieval: RetrievalSection) -> str | None:
    """Bars: MAP of each system on each query kind; with several seeds, their range as error bars."""
    grid = retrieval.map_by_kind
    if not grid.cells:
        return None
    width = 0.8 / max(len(grid.columns), 1)
    with plots.styled():
        fig = plots.new_figure(1.6 + 0.75 * len(grid.rows), 2.8)
        ax = fig.add_subplot()
        for i, kind in enumerate(grid.columns):
            shown = [(x, grid.cells[(s, kind)]) for x, s in enumerate(grid.rows) if (s, kind) in grid.cells]
            spread = [[c.mean - c.low for _x, c in shown], [c.high - c.mean for _x, c in shown]]
            several = any(c.seeds > 1 for _x, c in shown)
            bars = ax.bar(
                [x - 0.4 + width * (i + 0.5) for x, _c in shown],
                [c.mean for _x, c in shown],
                width=width,
                color=KIND_COLOURS.get(kind, plots.OTHER_COLOUR),
                label=kind,
                yerr=spread if several else None,
                capsize=2 if several else 0,
            )
            ax.bar_label(bars, labels=[f"{c.mean:.2f}" for _x, c in shown], padding=2, fontsize=7)
        ax.set_xticks(range(len(grid.rows)), list(grid.rows))
        ax.set_ylabel("MAP")
        ax.set_ylim(0, 1.12)
        ax.legend(title="queries", fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return plots.to_svg(fig, "map-by-query-kind")


SECTIONS: tuple[Section[Any], ...] = (
    Section("funnel", "ingest", "From records to pairs", load_funnel, FUNNEL_TEMPLATE),
    Section(
        "retrieval",
        "evaluate",
        "Retrieval on the review queries",
        load_retrieval,
        RETRIEVAL_TEMPLATE,
        map_figure,
    ),
    Section(
        "significance",
        "evaluate",
        "Question vs expert queries (paper 004 Table 5)",
        load_significance,
        SIGNIFICANCE_TEMPLATE,
    ),
    Section("training", "train_dense", "Training", load_training, TRAINING_TEMPLATE),
)
