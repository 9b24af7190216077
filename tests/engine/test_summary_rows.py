"""irforge.summary.rows_table: what ``irforge show`` prints (issue 29 §6)."""

from __future__ import annotations

import pyarrow as pa
from rich.console import Console

from irforge.summary import rows_table


def _text(renderable: object, width: int = 100) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_floats_have_four_significant_digits_unless_raw() -> None:
    table = pa.table({"metric": ["AP"], "value": [0.38685280723454163], "values": [[0.123456789, 2.0]]})
    shown = _text(rows_table("t", table, terminal=100))
    assert "0.3869" in shown and "0.38685280723454163" not in shown and "0.1235 > 2" in shown
    assert "0.38685280723454163" in _text(rows_table("t", table, raw=True, terminal=100))


def test_a_table_too_wide_for_the_terminal_prints_one_block_per_row() -> None:
    table = pa.table({f"column_{i}": [f"value {i}", f"other {i}"] for i in range(12)})
    shown = _text(rows_table("wide", table, terminal=80), width=80)
    assert "row 1" in shown and "row 2" in shown
    assert any(line.split() == ["column_11", "value", "11"] for line in shown.splitlines())
    narrow = _text(rows_table("narrow", table.select(["column_0", "column_1"]), terminal=80), width=80)
    assert "row 1" not in narrow and "column_1" in narrow
