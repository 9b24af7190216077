"""The test harness's ``artifact_of``: two tables of one shape but other values are two artifacts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tests.stage_harness import artifact_of


def test_tables_differing_only_in_values_or_side_tables_are_not_reused(tmp_path: Path) -> None:
    first = artifact_of(tmp_path, "thing", pa.table({"id": ["a", "b"]}))
    other = artifact_of(tmp_path, "thing", pa.table({"id": ["a", "c"]}))
    assert first.fingerprint != other.fingerprint and other.read()["id"].to_pylist() == ["a", "c"]
    side = artifact_of(tmp_path, "thing", pa.table({"id": ["a", "b"]}), {"extra": pa.table({"v": [2]})})
    assert side.read(table="extra")["v"].to_pylist() == [2]
    again = artifact_of(tmp_path, "thing", pa.table({"id": ["a", "b"]}))
    assert again.fingerprint == first.fingerprint  # the same content is the same artifact
