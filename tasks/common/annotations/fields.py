"""Reading the fields of one annotation record strictly: text must be text.

A value of another type (an object, a list, a number, NaN, bytes) is never turned into
text: it is an :class:`Invalid` ``wrong_type``, so a record like ``{"passage": {"t": 1}}``
is excluded instead of becoming the passage ``"{'t': 1}"``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

from tasks.common.annotations.exports import NON_JSON, get_path
from tasks.common.annotations.vocab import split_list


class Invalid(Exception):
    """A record that fails validation: ``reason`` is the excluded row's code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def kind(value: object) -> str:
    if isinstance(value, dict) and set(value) == {NON_JSON}:
        return str(value[NON_JSON])  # bytes, a date, ... (see exports.json_default)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    names = {dict: "an object", list: "a list", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def text(record: dict[str, Any], path: str | None, *, numbers: bool = False) -> str | None:
    """The text at ``path``, whitespace-normalised; ``wrong_type`` for anything but a string
    (or a whole number where ``numbers``: ids such as PMIDs are often exported as numbers)."""
    if path is None:
        return None
    value = get_path(record, path)
    if value is None:
        return None
    if numbers and type(value) is int:
        value = str(value)
    if not isinstance(value, str):
        raise Invalid("wrong_type", f"{path!r} is {kind(value)}, not text")
    return " ".join(value.split()) or None


def shown(record: dict[str, Any] | None, path: str) -> str | None:
    """For an excluded row: the text at ``path`` when it is text."""
    value = get_path(record, path) if record else None
    return (" ".join(value.split()) or None) if isinstance(value, str) else None


def domains(record: dict[str, Any], path: str) -> list[str]:
    value = get_path(record, path)
    wrong = [
        v for v in (value if isinstance(value, list) else [value]) if v is not None and not isinstance(v, str)
    ]
    if wrong:
        raise Invalid("wrong_type", f"{path!r} holds {kind(wrong[0])}, not text")
    return split_list(value)


def conflicts(rows: list[dict[str, Any]], id_path: str | None) -> dict[str, str]:
    """record_key → why, for each record whose id another record with other content shares."""
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        record = json.loads(row["record"]) if row["record"] is not None and id_path else None
        record_id = get_path(record, id_path) if record and id_path else None
        if isinstance(record_id, str | int) and not isinstance(record_id, bool):
            by_id[str(record_id)].append({**row, "data": record})
    out: dict[str, str] = {}
    for record_id, same in by_id.items():
        if len({r["record"] for r in same}) < 2:
            continue  # identical copies: the later ones are duplicate_record
        keys = sorted({k for r in same for k in r["data"]})
        differ = [k for k in keys if len({json.dumps(r["data"].get(k), sort_keys=True) for r in same}) > 1]
        for r in same:
            others = ", ".join(f"{o['source_file']} row {o['row']}" for o in same if o is not r)
            out[r["record_key"]] = (
                f"record id {record_id!r} is also at {others}, with a different {', '.join(differ)}"
            )
    return out
