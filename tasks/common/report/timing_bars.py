"""The report's stage-timings figure as inline SVG, written directly (no matplotlib).

A run's timings differ on every run, so this figure is never read back from the figure cache;
matplotlib's import and layout cost about a second per run (issue 26), more than the stages of a
small run. Horizontal bars, one per stage in pipeline order, labelled with the wall time; names
and labels are escaped (``html.escape``), so nothing taken from data becomes markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from tasks.common.report.plots import BAR_COLOUR

ROW = 20  # px per stage
NAME_WIDTH = 150  # px for the stage names, right-aligned
BAR_WIDTH = 520  # px of the longest bar
LABEL_WIDTH = 70  # px after the longest bar for its label


def seconds_label(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


def stage_times(times: Sequence[tuple[str, float]]) -> str:
    """Horizontal bars: wall time of each stage in this run, in pipeline order, top to bottom."""
    longest = max((s for _, s in times), default=0.0) or 1.0
    width = NAME_WIDTH + BAR_WIDTH + LABEL_WIDTH
    height = ROW * max(len(times), 1) + ROW
    parts = [
        f'<svg class="plot" data-plot="stage-times" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="wall time of each stage" font-size="11" font-family="sans-serif">'
    ]
    for row, (name, seconds) in enumerate(times):
        y = row * ROW
        bar = max(seconds, 0.0) / longest * BAR_WIDTH
        parts.append(
            f'<text x="{NAME_WIDTH - 6}" y="{y + 14}" text-anchor="end">{escape(name)}</text>'
            f'<rect x="{NAME_WIDTH}" y="{y + 3}" width="{bar:.1f}" height="{ROW - 6}" fill="{BAR_COLOUR}">'
            f"<title>{escape(name)}: {seconds:.2f} s</title></rect>"
            f'<text x="{NAME_WIDTH + bar + 4:.1f}" y="{y + 14}">{escape(seconds_label(seconds))}</text>'
        )
    axis = ROW * len(times)
    parts.append(
        f'<line x1="{NAME_WIDTH}" y1="{axis + 2}" x2="{NAME_WIDTH + BAR_WIDTH}" y2="{axis + 2}" stroke="#999"/>'
        f'<text x="{NAME_WIDTH + BAR_WIDTH}" y="{axis + 16}" text-anchor="end" fill="#555">'
        f"wall time (s), longest {escape(seconds_label(longest))}</text></svg>"
    )
    return "".join(parts)
