"""The report's figures, drawn with matplotlib and returned as inline SVG markup.

Figures are built with matplotlib's object API (no pyplot: no global figure state, safe in
a worker thread). Text stays ``<text>`` (``svg.fonttype: none``), which matplotlib escapes, so
a label taken from data cannot inject markup; each figure gets its own ``svg.hashsalt`` so the
clip-path ids of several figures inlined in one page never collide.
"""

from __future__ import annotations

import io
import re
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn: a report of cached figures needs none
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

OTHER_COLOUR = "#8d6cab"  # a series without a colour of its own
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
    import matplotlib as mpl  # noqa: PLC0415

    buffer = io.StringIO()
    style: dict[RcKeyType, Any] = {**_STYLE, "svg.hashsalt": f"irforge-report-{name}"}
    with mpl.rc_context(style):
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = _METADATA.sub("", _PROLOGUE.sub("", buffer.getvalue(), count=1), count=1)
    return svg.replace("<svg ", f'<svg class="plot" data-plot="{name}" ', 1)


def styled() -> AbstractContextManager[Any]:
    """The report's matplotlib style; draw a figure inside it (rc values are read when artists are created)."""
    import matplotlib as mpl  # noqa: PLC0415

    return mpl.rc_context(_STYLE)


def new_figure(width: float, height: float) -> Figure:
    """A figure of that size in inches, laid out by matplotlib (``constrained``)."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    with styled():
        return Figure(figsize=(width, height), layout="constrained")
