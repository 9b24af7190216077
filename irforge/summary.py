"""Tables a person reads: the per-run summary, ``status`` and ``show``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from rich.console import Group
from rich.table import Table
from rich.text import Text

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


def summary_rows(
    outcomes: Sequence[tuple[str, StageOutcome]], *, reasons_limit: int = 4
) -> list[dict[str, str]]:
    """One row of plain text per stage: what ``irforge run`` prints and what a flow run
    publishes to Prefect (``flows/run.py``). A reused stage shows its time and cost of then."""
    rows = []
    for name, outcome in outcomes:
        m = outcome.manifest
        counts = m["counts"]
        then = " (then)" if outcome.state == "reused" else ""
        cost = ", ".join(f"{k} {v:g}" for k, v in m.get("cost", {}).items())
        rows.append(
            {
                "stage": name,
                "state": outcome.state,
                "fingerprint": outcome.artifact.fingerprint,
                "in": counts["rows_in"],
                "kept": counts["rows_out"],
                "excluded": counts["rows_excluded"],
                "excluded by reason": _reasons(counts["excluded_by_reason"], reasons_limit),
                "time": f"{m['wall_s'] if then else outcome.wall_s:.2f}s{then}",
                "rows/s": int(m["rows_per_s"]) if m.get("rows_per_s") else None,
                "cost": cost + then if cost else None,
            }
        )
    return rows


_RUN_COLUMNS = (
    "stage",
    "state",
    "fingerprint",
    "in",
    "kept",
    "excluded",
    "excluded by reason",
    "time",
    "rows/s",
)
_RIGHT = {"in", "kept", "excluded", "time", "rows/s"}


def run_summary(flow: str, outcomes: Sequence[tuple[str, StageOutcome]]) -> Table:
    table = Table(title=f"irforge run {flow}", title_justify="left")
    for col in _RUN_COLUMNS:
        table.add_column(col, justify="right" if col in _RIGHT else "left")
    for row in summary_rows(outcomes):
        style = _STATE_STYLE.get(row["state"], "")
        cells = [row[c] if isinstance(row[c], str) else _num(row[c]) for c in _RUN_COLUMNS]
        cells[_RUN_COLUMNS.index("state")] = f"[{style}]{row['state']}[/]"
        table.add_row(*cells)
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


MIN_COLUMN_CHARS = 12  # narrower than this a column wraps every word: one block per row instead


def rows_table(
    title: str, table: pa.Table, width: int = 100, *, raw: bool = False, terminal: int | None = None
) -> Table | Group:
    """Rows as a table; as one block per row (column: value lines) when the columns would not
    fit ``terminal`` characters at :data:`MIN_COLUMN_CHARS` each. Floats to 4 significant
    digits unless ``raw``."""
    names = table.column_names
    if terminal is not None and len(names) * MIN_COLUMN_CHARS > terminal:
        return _row_blocks(title, table, width, raw)
    out = Table(title=title, title_justify="left", show_lines=True)
    for name in names:
        out.add_column(name, overflow="fold")
    for row in table.to_pylist():
        out.add_row(*(_cell(row[c], width, raw) for c in names))
    return out


def _row_blocks(title: str, table: pa.Table, width: int, raw: bool) -> Group:
    blocks: list[Any] = [Text(title, style="bold")]
    for i, row in enumerate(table.to_pylist(), start=1):
        block = Table(title=f"row {i}", title_justify="left", show_header=False, box=None, padding=(0, 1))
        block.add_column(style="bold", no_wrap=True)
        block.add_column(overflow="fold")
        for name, value in row.items():
            block.add_row(name, _cell(value, width, raw))
        blocks.append(block)
    return Group(*blocks)


def _cell(value: Any, width: int, raw: bool = False) -> str:
    if isinstance(value, float) and not raw:
        text = f"{value:.4g}"
    elif isinstance(value, list):
        text = " > ".join(f"{v:.4g}" if isinstance(v, float) and not raw else str(v) for v in value)
    else:
        text = "-" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"
