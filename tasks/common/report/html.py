"""Render a :class:`~tasks.common.report.data.RunReport` as one self-contained HTML page.

The page has inline CSS and inline SVG figures, and no script, link or remote resource: it
opens from a file, offline, years later. It is rendered with Jinja2 with autoescaping on, so
every string taken from data (passage ids, LLM explanations, exclusion details: untrusted
text) reaches the page as text, never as markup; only the SVG figures (``plots.py`` and the
flows' own) are inserted as markup.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, StrictUndefined, Template
from markupsafe import Markup

from tasks.common.report import timing_bars
from tasks.common.report.data import RunReport, load_report
from tasks.common.report.figure_cache import FOLDER, cached_svg, run_material
from tasks.common.report.page import PAGE, STYLE
from tasks.common.report.sections import Section

STATE_CLASS = {
    "computed": "ok",
    "resumed": "warn",
    "reused": "info",
    "completed": "ok",
    "failed": "bad",
    "missing": "bad",
    "unfinished": "warn",
}
NONE = "–"


def _number(value: Any) -> str:
    if value is None:
        return NONE
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def _rate(value: float | None) -> str:
    if value is None:
        return NONE
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return NONE if value is None else f"{value:,.2f}"


def _metric(value: float | None) -> str:
    return NONE if value is None else f"{value:.3f}"


def _percent(value: float | None) -> str:
    return NONE if value is None else f"{100 * value:.1f} %"


def _cost(value: float, name: str) -> str:
    return f"${value:,.4f}" if name == "usd" else _number(value)


def _seconds(value: float | None) -> str:
    if value is None:
        return NONE
    if value < 60:
        return f"{value:.2f} s"
    minutes, secs = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _when(value: Any) -> str:
    return NONE if value is None else str(value.isoformat(sep=" "))


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _environment() -> Environment:
    env = Environment(autoescape=True, undefined=StrictUndefined)
    env.filters.update(
        number=_number,
        rate=_rate,
        ratio=_ratio,
        metric=_metric,
        percent=_percent,
        cost=_cost,
        seconds=_seconds,
        when=_when,
        pretty_json=_pretty_json,
    )
    return env


_ENV = _environment()
_PAGE = _ENV.from_string(PAGE)


@lru_cache(maxsize=64)
def _body(source: str) -> Template:
    """A section's body template, compiled once."""
    return _ENV.from_string(source)


def render_report(report: RunReport, figures_dir: Path | None = None) -> str:
    """The report as one HTML page (a string); figures drawn before are read from
    ``figures_dir`` when given (:mod:`tasks.common.report.figure_cache`)."""
    times = [(s.name, s.record.wall_s or 0.0) for s in report.stages]
    run = run_material(report)
    figures = {
        s.id: _markup(cached_svg(figures_dir, run + s.id.encode(), s.figure, report.data.get(s.id)))
        if s.figure
        else None
        for s in report.sections
    }
    return _PAGE.render(
        r=report,
        style=Markup(STYLE),
        timings=Markup(timing_bars.stage_times(times)),
        figures=figures,
        bodies={s.id: _body(s.template) for s in report.sections},
        nav=_nav(report),
        state_class=STATE_CLASS,
        stage_states=_stage_states(report),
    )


def write_report(
    root: Path, flow: str, run_id: str | None = None, *, sections: Sequence[Section[Any]]
) -> Path:
    """Write ``<root>/<flow>/reports/<run_id>.html`` (temp file + rename) and return its path.

    ``sections``: the flow's own (its ``Pipeline.report_sections``, ``flows/registry.py``).
    """
    report = load_report(root, flow, run_id, sections=sections)
    page = render_report(report, root / flow / "reports" / FOLDER)
    path = root / flow / "reports" / f"{report.run_id}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(page)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _markup(svg: str | None) -> Markup | None:
    return None if svg is None else Markup(svg)


def _nav(report: RunReport) -> list[tuple[str, str]]:
    present = [(s.id, s.title) for s in report.sections]
    return [("summary", "Stages"), ("timings", "Timings"), *present, ("details", "Stage details")]


def _stage_states(report: RunReport) -> str:
    states: dict[str, int] = {}
    for s in report.stages:
        state = "missing" if s.missing else s.record.state
        states[state] = states.get(state, 0) + 1
    shown = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    return f"{len(report.stages)} ({shown})"
