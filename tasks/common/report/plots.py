"""The report's figures, drawn with matplotlib and returned as inline SVG markup.

Figures are built with matplotlib's object API (no pyplot: no global figure state, safe in
a worker thread). Text stays ``<text>`` (``svg.fonttype: none``), which matplotlib escapes, so
a label taken from data cannot inject markup; each figure gets its own ``svg.hashsalt`` so the
clip-path ids of several figures inlined in one page never collide.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.typing import RcKeyType

from tasks.common.report.data import HistogramBin

LABEL_COLOURS = {0: "#c4cad3", 1: "#f2b134", 2: "#2a9d8f"}
OTHER_COLOUR = "#8d6cab"
# One colour per ER@K task: the two @optimal tasks dark, their fixed-K partners light.
TASK_COLOURS = {
    "ER@optimal": "#1d4f91",
    "ER@10": "#7fa7dc",
    "Result-ER@optimal": "#1f7a6f",
    "Result-ER@5": "#7cc8bd",
}
BAR_COLOUR = "#3d6fb6"
THRESHOLD_COLOUR = "#d1495b"
_STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 9,
    "axes.titleweight": "bold",
}
_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)  # XML declaration and DOCTYPE
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


def to_svg(fig: Figure, name: str) -> str:
    """The figure as an ``<svg>`` element ready to inline in HTML (no XML prologue, no metadata)."""
    buffer = io.StringIO()
    style: dict[RcKeyType, Any] = {**_STYLE, "svg.hashsalt": f"irforge-report-{name}"}
    with mpl.rc_context(style):
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = _METADATA.sub("", _PROLOGUE.sub("", buffer.getvalue(), count=1), count=1)
    return svg.replace("<svg ", f'<svg class="plot" data-plot="{name}" ', 1)


def _figure(width: float, height: float) -> Figure:
    with mpl.rc_context(_STYLE):  # rc values are read when artists are created
        return Figure(figsize=(width, height), layout="constrained")


def stage_times(times: Sequence[tuple[str, float]]) -> str:
    """Horizontal bars: wall time of each stage in this run, in pipeline order, top to bottom."""
    with mpl.rc_context(_STYLE):
        fig = _figure(8, 0.8 + 0.28 * max(len(times), 1))
        ax = fig.add_subplot()
        names = [n for n, _ in times]
        seconds = [s for _, s in times]
        bars = ax.barh(names, seconds, color=BAR_COLOUR)
        ax.bar_label(bars, labels=[_seconds(s) for s in seconds], padding=3, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("wall time (s)")
        ax.margins(x=0.12)
        return to_svg(fig, "stage-times")


def pool_histograms(histograms: Mapping[str, Sequence[HistogramBin]], threshold: float) -> str:
    """One histogram per domain of all scored pairs' probabilities, with the pooling cut-off."""
    domains = sorted(histograms)
    columns = min(len(domains), 5) or 1
    rows = math.ceil(len(domains) / columns) or 1
    with mpl.rc_context(_STYLE):
        fig = _figure(2.7 * columns, 2.1 * rows + 0.4)
        axes = fig.subplots(rows, columns, squeeze=False, sharex=True)
        for ax in axes.flat[len(domains) :]:
            ax.set_visible(False)
        for ax, domain in zip(axes.flat, domains, strict=False):
            bins = histograms[domain]
            ax.bar(
                [b.low for b in bins],
                [b.pairs for b in bins],
                width=[b.high - b.low for b in bins],
                align="edge",
                color=BAR_COLOUR,
                edgecolor="white",
                linewidth=0.4,
            )
            ax.axvline(threshold, color=THRESHOLD_COLOUR, linestyle="--", linewidth=1)
            if any(b.pairs for b in bins):
                ax.set_yscale("log")  # most pairs score near 0: a linear axis hides the pooled tail
            ax.set_xlim(0, 1)
            ax.set_title(domain.replace("_", " "), fontsize=8)
        fig.supxlabel(f"cross-encoder probability (dashed: pooling cut-off {threshold:g})", fontsize=8)
        fig.supylabel("pairs (log)", fontsize=8)
        return to_svg(fig, "pool-histograms")


def label_distribution(labels: Mapping[str, Mapping[int, int]]) -> str:
    """Stacked horizontal bars: judgements per domain by relevance label."""
    domains = sorted(labels)
    scores = sorted({s for by_score in labels.values() for s in by_score})
    with mpl.rc_context(_STYLE):
        fig = _figure(8, 1.0 + 0.3 * max(len(domains), 1))
        ax = fig.add_subplot()
        left = [0] * len(domains)
        for score in scores:
            counts = [labels[d].get(score, 0) for d in domains]
            colour = LABEL_COLOURS.get(score, OTHER_COLOUR)
            ax.barh(domains, counts, left=left, color=colour, label=f"score {score}")
            left = [a + b for a, b in zip(left, counts, strict=True)]
        ax.invert_yaxis()
        ax.set_xlabel("judgements")
        fig.legend(loc="outside upper right", ncols=max(len(scores), 1), fontsize=8, frameon=False)
        return to_svg(fig, "label-distribution")


def recall_bars(
    systems: Sequence[str], tasks: Sequence[str], recall: Mapping[tuple[str, str], float | None]
) -> str:
    """Grouped horizontal bars: mean recall (%) of each system (a group) on each task (a bar).

    Horizontal, because system names (``dense:<model>+E6``) are long; a missing or unscored
    cell draws no bar rather than a 0 that would read as a result.
    """
    width = 0.8 / max(len(tasks), 1)
    with mpl.rc_context(_STYLE):
        fig = _figure(8, 1.0 + 0.18 * max(len(systems), 1) * max(len(tasks), 1))
        ax = fig.add_subplot()
        for i, task in enumerate(tasks):
            values = [recall.get((s, task)) for s in systems]
            shown = [(y, 100 * v) for y, v in enumerate(values) if v is not None]
            bars = ax.barh(
                [y - 0.4 + width * (i + 0.5) for y, _v in shown],
                [v for _y, v in shown],
                height=width,
                color=TASK_COLOURS.get(task, OTHER_COLOUR),
                label=task,
            )
            ax.bar_label(bars, labels=[f"{v:.1f}" for _y, v in shown], padding=2, fontsize=7)
        ax.set_yticks(range(len(systems)), list(systems))
        ax.invert_yaxis()
        ax.set_xlim(0, 112)  # room for the labels of 100 % bars
        ax.set_xticks([0, 25, 50, 75, 100])
        ax.set_xlabel("mean aspect recall (%)")
        fig.legend(loc="outside upper right", ncols=max(len(tasks), 1), fontsize=8, frameon=False)
        return to_svg(fig, "recall-bars")


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"
