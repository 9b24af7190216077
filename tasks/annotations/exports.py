"""Reading annotation exports (JSON, JSONL, CSV, Parquet) into raw records with provenance.

Every record keeps the file and the 1-based row it came from, so an invalid one can be
named precisely. A line that is not valid JSON is not fatal: it becomes a record whose
``error`` says why, and the annotations stage quarantines it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq

from irforge.errors import ConfigError

ExportFormat = Literal["auto", "json", "jsonl", "csv", "parquet"]
_SUFFIX_FORMATS = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True)
class RawRecord:
    source_file: str
    row: int  # 1-based: the line of a JSONL/CSV file (after the header), the index + 1 elsewhere
    data: dict[str, Any] | None
    error: str | None = None


def export_format(path: Path, declared: ExportFormat) -> str:
    if declared != "auto":
        return declared
    try:
        return _SUFFIX_FORMATS[path.suffix.lower()]
    except KeyError:
        raise ConfigError(
            f"{path}: cannot tell the export format from the suffix {path.suffix!r}; set stages.annotations.format"
        ) from None


def read_export(path: Path, display: str, fmt: str, records_path: str | None) -> Iterator[RawRecord]:
    if fmt == "jsonl":
        yield from _jsonl(path, display)
    elif fmt == "json":
        yield from _json(path, display, records_path)
    elif fmt == "csv":
        yield from _csv(path, display)
    else:
        for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield RawRecord(display, i, row)


def _jsonl(path: Path, display: str) -> Iterator[RawRecord]:
    with path.open(encoding="utf-8-sig") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                yield RawRecord(display, line_no, None, f"not valid JSON: {err.msg} at column {err.colno}")
                continue
            if isinstance(data, dict):
                yield RawRecord(display, line_no, data)
            else:
                yield RawRecord(
                    display, line_no, None, f"a record must be a JSON object, got {type(data).__name__}"
                )


def _json(path: Path, display: str, records_path: str | None) -> Iterator[RawRecord]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{display}: not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
        ) from None
    if records_path is None and isinstance(doc, dict) and isinstance(doc.get("records"), list):
        records_path = "records"  # Argilla's and many tools' layout
    records = get_path(doc, records_path) if records_path else doc
    if not isinstance(records, list):
        where = f"at {records_path!r}" if records_path else "at the top level"
        raise ConfigError(
            f"{display}: expected a list of records {where}; set stages.annotations.records_path"
        )
    for i, data in enumerate(records, start=1):
        if isinstance(data, dict):
            yield RawRecord(display, i, data)
        else:
            yield RawRecord(display, i, None, f"a record must be a JSON object, got {type(data).__name__}")


def _csv(path: Path, display: str) -> Iterator[RawRecord]:
    text = path.read_text(encoding="utf-8-sig")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    for row in reader:
        # DictReader puts extra cells under the key None: a row longer than the header.
        if None in row:
            yield RawRecord(display, reader.line_num, None, "more cells than header columns")
            continue
        yield RawRecord(display, reader.line_num, {k: (v if v != "" else None) for k, v in row.items()})


def get_path(data: Any, path: str) -> Any:
    """``a.b[0].c`` inside nested dicts/lists; None where any step is missing."""
    current = data
    for key, index in _PATH_PART.findall(path):
        if index:
            if not isinstance(current, list) or int(index) >= len(current):
                return None
            current = current[int(index)]
        else:
            if not isinstance(current, dict) or key not in current:
                return None
            current = current[key]
    return current
