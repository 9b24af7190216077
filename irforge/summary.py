"""Tables a person reads: the per-run summary, ``status`` and ``show``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from rich.table import Table

from irforge.engine import StageOutcome
from irforge.status import StageStatus

_STATE_STYLE = {
    "computed": "green",
    "resumed": "yellow",
    "reused": "cyan",
    "fresh": "green",
    "stale": "yellow",
    "missing": "red",
}


def _reasons(by_reason: dict[str, int], limit: int = 4) -> str:
    top = sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} {v}" for k, v in top[:limit])
    return shown + (f", +{len(top) - limit} more" if len(top) > limit else "")


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:,}"


def run_summary(flow: str, outcomes: Sequence[tuple[str, StageOutcome]]) -> Table:
    table = Table(title=f"irforge run {flow}", title_justify="left")
    for col, justify in [
        ("stage", "left"),
        ("state", "left"),
        ("fingerprint", "left"),
        ("in", "right"),
        ("kept", "right"),
        ("excluded", "right"),
        ("excluded by reason", "left"),
        ("time", "right"),
        ("rows/s", "right"),
    ]:
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for name, outcome in outcomes:
        m = outcome.manifest
        counts = m["counts"]
        style = _STATE_STYLE.get(outcome.state, "")
        stage_time = outcome.wall_s if outcome.state != "reused" else m["wall_s"]
        table.add_row(
            name,
            f"[{style}]{outcome.state}[/]",
            outcome.artifact.fingerprint,
            _num(counts["rows_in"]),
            _num(counts["rows_out"]),
            _num(counts["rows_excluded"]),
            _reasons(counts["excluded_by_reason"]),
            f"{stage_time:.2f}s" + (" (then)" if outcome.state == "reused" else ""),
            _num(int(m["rows_per_s"])) if m.get("rows_per_s") else "-",
        )
    return table


def status_table(flow: str, statuses: Sequence[StageStatus]) -> Table:
    table = Table(title=f"irforge status {flow}", title_justify="left")
    for col in (
        "stage",
        "state",
        "fingerprint",
        "kept",
        "excluded",
        "excluded by reason",
        "time",
        "artifact",
    ):
        table.add_column(col)
    for s in statuses:
        state = f"[{_STATE_STYLE[s.state]}]{s.state}[/]"
        if s.changed:
            state += "\n" + "\n".join(f"  {c}" for c in s.changed)
        table.add_row(
            s.stage,
            state,
            s.fingerprint,
            _num(s.rows_kept),
            _num(s.rows_excluded),
            _reasons(s.excluded_by_reason),
            "-" if s.wall_s is None else f"{s.wall_s:.2f}s",
            s.artifact or "-",
        )
    return table


def rows_table(title: str, table: pa.Table, width: int = 100) -> Table:
    out = Table(title=title, title_justify="left", show_lines=True)
    for name in table.column_names:
        out.add_column(name, overflow="fold")
    for row in table.to_pylist():
        out.add_row(*(_cell(row[c], width) for c in table.column_names))
    return out


def _cell(value: Any, width: int) -> str:
    text = " > ".join(map(str, value)) if isinstance(value, list) else "-" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"
