"""Reading an artifact's tables for a report section: the columns it needs, counted and summed.

A section's loader (``tasks/common/report/sections.py``) names the columns it reads; a table
without them is a :class:`ReportDataError` that the page shows in place of the section.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from irforge.artifacts import Artifact
from irforge.errors import IrforgeError

NO_VALUE = "(none)"  # how a null group key (a row without a domain) is labelled, rather than dropped


class ReportDataError(IrforgeError):
    """An artifact's tables do not have the shape its report section needs."""


def read_columns(artifact: Artifact, columns: list[str], table: str | None = None) -> pa.Table:
    """Those columns of the rows (or of a side table), or an error naming what is missing."""
    names = artifact.schema(table=table).names
    missing = [c for c in columns if c not in names]
    if missing:
        what = f"table {table!r}" if table else "rows"
        raise ReportDataError(
            f"{artifact.stage} {artifact.fingerprint} {what} lack column(s) {missing} (columns: {names})"
        )
    return artifact.read(columns=columns, table=table)


def text_key(value: Any) -> str:
    """A value as the text a page groups and labels by (null: :data:`NO_VALUE`)."""
    return NO_VALUE if value is None else str(value)


def value_counts(column: pa.ChunkedArray) -> dict[str, int]:
    """Rows per distinct value, keyed by :func:`text_key`."""
    counts = pc.value_counts(column)
    return {
        text_key(v): int(n)
        for v, n in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    }


def int_counts(column: pa.ChunkedArray) -> dict[int, int]:
    """Rows per value of an integer column, by value (nulls left out: the caller counts those)."""
    counts = pc.value_counts(column.drop_null())
    pairs = zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    return dict(sorted((int(v), int(n)) for v, n in pairs))


def int_sum(column: pa.ChunkedArray) -> int:
    """The column's sum as an int (booleans count their true values; empty: 0)."""
    return int(pc.sum(pc.cast(column, pa.int64())).as_py() or 0)


def mean(column: pa.ChunkedArray) -> float | None:
    """The column's mean; None when it has no value."""
    value = pc.mean(column).as_py()
    return None if value is None else float(value)
