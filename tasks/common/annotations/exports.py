"""Reading annotation exports (JSON, JSONL, CSV, Parquet) into raw records with provenance.

Every record keeps the file and the 1-based row it came from, so an invalid one can be
named precisely. A line that is not valid JSON (or nested deeper than :data:`MAX_DEPTH`) is
not fatal: it becomes a record whose ``error`` says why, and the annotations stage
quarantines it. A file that cannot be read as a whole (empty, not UTF-8, binary, not
parseable, no records) is a :class:`~irforge.errors.ConfigError` naming the file.
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

import pyarrow as pa
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
MAX_DEPTH = 64  # an Argilla v2 record is ~5 levels deep; Python's JSON reader stops near 1000
NON_JSON = "$non_json_type"  # how a value JSON cannot hold (bytes, dates, ...) is carried


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


def read_export(path: Path, display: str, fmt: str, records_path: str | None) -> list[RawRecord]:
    """Every record of one export file; a :class:`ConfigError` naming it if it has none."""
    if fmt == "parquet":
        records = _parquet(path, display)
    else:
        text = _text(path, display)
        if fmt == "jsonl":
            records = list(_jsonl(text, display))
        elif fmt == "json":
            records = list(_json(text, display, records_path))
        else:
            records = list(_csv(text, display))
    if not records:
        raise ConfigError(f"{display}: no annotation records in the file")
    return records


def json_default(value: object) -> dict[str, str]:
    """``json.dumps`` default: a value JSON cannot hold is marked with its type, never turned into text."""
    return {NON_JSON: type(value).__name__}


def _text(path: Path, display: str) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{display}: cannot read: {err.strerror}") from None
    if not data.strip():
        raise ConfigError(f"{display}: empty file ({len(data)} bytes): no annotation records")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ConfigError(f"{display}: binary content (NUL byte at offset {nul}), not a text export")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ConfigError(
            f"{display} line {line}: not valid UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start}); "
            "save the export as UTF-8"
        ) from None


def _too_deep(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        children = (
            current.values() if isinstance(current, dict) else current if isinstance(current, list) else ()
        )
        stack.extend((child, depth + 1) for child in children)
    return False


def _record(display: str, row: int, data: Any) -> RawRecord:
    if not isinstance(data, dict):
        return RawRecord(display, row, None, f"a record must be a JSON object, got {type(data).__name__}")
    if _too_deep(data):
        return RawRecord(display, row, None, f"nested deeper than {MAX_DEPTH} levels")
    return RawRecord(display, row, data)


def _jsonl(text: str, display: str) -> Iterator[RawRecord]:
    for line_no, line in enumerate(text.split("\n"), start=1):  # not splitlines: U+2028 is JSON text
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            yield RawRecord(display, line_no, None, f"not valid JSON: {err.msg} at column {err.colno}")
            continue
        except RecursionError:
            yield RawRecord(display, line_no, None, f"nested deeper than {MAX_DEPTH} levels")
            continue
        yield _record(display, line_no, data)


def _json(text: str, display: str, records_path: str | None) -> Iterator[RawRecord]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{display}: not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{display}: JSON nested too deeply to read (over Python's recursion limit)"
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
        yield _record(display, i, data)


def _csv(text: str, display: str) -> Iterator[RawRecord]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            # DictReader puts extra cells under the key None: a row longer than the header.
            if None in row:
                yield RawRecord(display, reader.line_num, None, "more cells than header columns")
                continue
            yield RawRecord(display, reader.line_num, {k: (v if v != "" else None) for k, v in row.items()})
    except csv.Error as err:
        # line_num counts the lines of the records read whole; the bad one is the next.
        raise ConfigError(f"{display} line {reader.line_num + 1}: not readable as CSV: {err}") from None


def _parquet(path: Path, display: str) -> list[RawRecord]:
    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as err:
        raise ConfigError(f"{display}: not readable as Parquet: {' '.join(str(err).split())[:200]}") from None
    return [_record(display, i, row) for i, row in enumerate(rows, start=1)]


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
