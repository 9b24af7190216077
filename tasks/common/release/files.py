"""The data files of a Hugging Face dataset release: JSON Lines, one file per (config, split),
each recorded with its rows, bytes and sha256 (the file layout the Hub's manual configuration
reads: https://huggingface.co/docs/hub/datasets-manual-configuration)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from irforge.stage import exclusion_schema


@dataclass(frozen=True)
class ReleaseFile:
    """One written data file: its config and split, POSIX path relative to the release folder, digest."""

    config: str
    split: str
    path: str
    rows: int
    bytes: int
    sha256: str


FILES_SCHEMA = pa.schema(
    [
        pa.field("config", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("sha256", pa.string(), nullable=False),
    ]
)
"""A release stage's kept rows: one per :class:`ReleaseFile`."""


def write_jsonl(
    root: Path, relative: str, config: str, split: str, keys: Sequence[str], records: Iterable[Sequence[Any]]
) -> ReleaseFile:
    """``records`` (value tuples in ``keys`` order) as ``root / relative``, one JSON object a line
    (UTF-8, not ASCII-escaped), with what was written."""
    digest, rows, size = hashlib.sha256(), 0, 0
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    with (root / relative).open("wb") as out:
        for values in records:
            # Arrow strings are valid UTF-8, so encoding cannot fail.
            line = (json.dumps(dict(zip(keys, values, strict=True)), ensure_ascii=False) + "\n").encode()
            out.write(line)
            digest.update(line)
            rows += 1
            size += len(line)
    return ReleaseFile(config, split, relative, rows, size, digest.hexdigest())


@contextlib.contextmanager
def staged_folder(folder: Path) -> Iterator[Path]:
    """A fresh sibling folder to write a release into; when the block ends it replaces
    ``folder`` (renamed in, the old one renamed out, then deleted), or is deleted if the block
    raised: readers see the old release or the new one, never a half-written folder."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent))
    try:
        partial.chmod(0o755)  # mkdtemp makes it private; a release is meant to be read
        yield partial
        if not folder.exists():
            partial.rename(folder)
            return
        old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=folder.parent))
        old.rmdir()
        folder.rename(old)
        partial.rename(folder)
        shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


FILE_UNITS = pa.schema([pa.field("config", pa.string()), pa.field("split", pa.string())])
"""A release stage's units: the (config, split) files it may write."""
FILE_EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("config", pa.string(), nullable=False), pa.field("split", pa.string(), nullable=False)
)
"""``empty_split``: a (config, split) unit with no row, so no file (``datasets`` cannot load an empty split)."""


def file_outcome(units: pa.Table, written: Iterable[ReleaseFile]) -> tuple[pa.Table, pa.Table]:
    """``(kept, excluded)`` of a release stage's (config, split) ``units``: the file written for
    each (:data:`FILES_SCHEMA`), or an ``empty_split`` row (:data:`FILE_EXCLUDED_SCHEMA`)."""
    by_unit = {(f.config, f.split): f for f in written}
    kept, excluded = [], []
    for unit in units.select(["config", "split"]).to_pylist():
        f = by_unit.get((unit["config"], unit["split"]))
        if f is None:
            detail = f"no {unit['config']} row in split {unit['split']!r}: the split is not declared"
            excluded.append({**unit, "reason": "empty_split", "detail": detail})
        else:
            kept.append(dataclasses.asdict(f))
    return (
        pa.Table.from_pylist(kept, schema=FILES_SCHEMA),
        pa.Table.from_pylist(excluded, schema=FILE_EXCLUDED_SCHEMA),
    )
