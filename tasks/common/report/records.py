"""A run as its record and its artifacts tell it: the parts of the report every flow gets.

A run record (``<root>/<flow>/runs/<run_id>.json``, :mod:`irforge.runs`) says which
fingerprint each stage used; each artifact's manifest gives counts, exclusions, timings and
cost. A stage whose artifact is gone is shown as missing rather than failing the report: a
report is how one finds out what went wrong.
"""

from __future__ import annotations

import graphlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from irforge.artifacts import EXCLUDED, Artifact, ArtifactStore
from irforge.errors import IrforgeError
from tasks.common.report.tables import value_counts

EXAMPLES_PER_REASON = 3


class ReportError(IrforgeError):
    """There is no run to report on, or its record cannot be read."""


class StageRecord(BaseModel):
    """One stage's line in a run record."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    fingerprint: str | None = None
    state: str = "unknown"
    wall_s: float | None = None


class RunRecord(BaseModel):
    """``runs/<run_id>.json`` as :class:`irforge.runs.RunRecorder` writes it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    flow: str
    config: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    status: str | None = None  # None: the run never finished (still running, or killed)
    stages: dict[str, StageRecord] = Field(default_factory=dict)


@dataclass(frozen=True)
class ExclusionExample:
    reason: str
    detail: str | None


@dataclass(frozen=True)
class StageReport:
    """A stage of the run; ``artifact`` is None when it cannot be found, ``problem`` says why."""

    name: str
    record: StageRecord
    artifact: Artifact | None
    problem: str | None = None
    excluded_examples: tuple[ExclusionExample, ...] = ()

    @property
    def missing(self) -> bool:
        return self.artifact is None

    @property
    def manifest(self) -> dict[str, Any]:
        return self.artifact.manifest if self.artifact is not None else {}

    def count(self, name: str) -> int | None:
        value = self.manifest.get("counts", {}).get(name)
        return None if value is None else int(value)

    @property
    def excluded_by_reason(self) -> dict[str, int]:
        reasons: dict[str, int] = self.manifest.get("counts", {}).get("excluded_by_reason", {})
        return dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def cost(self) -> dict[str, float]:
        return {str(k): float(v) for k, v in self.manifest.get("cost", {}).items()}

    @property
    def computed_wall_s(self) -> float | None:
        """How long computing the artifact took (for a reused stage: back when it was computed)."""
        value = self.manifest.get("wall_s")
        return None if value is None else float(value)

    @property
    def rows_per_s(self) -> float | None:
        value = self.manifest.get("rows_per_s")
        return None if value is None else float(value)

    @property
    def side_tables(self) -> dict[str, int]:
        tables: dict[str, int] = self.manifest.get("tables", {})
        return tables

    @property
    def upstream(self) -> list[str]:
        return sorted(self.manifest.get("material", {}).get("upstream", {}))

    @property
    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = self.manifest.get("material", {}).get("config", {})
        return config


def read_run_record(root: Path, flow: str, run_id: str | None = None) -> RunRecord:
    """The record of run ``run_id`` of ``flow`` (None: the run that started last)."""
    runs = root / flow / "runs"
    if run_id is not None:
        path = runs / f"{run_id}.json"
        if not path.is_file():
            known = sorted(p.stem for p in runs.glob("*.json"))[-5:]
            raise ReportError(f"no run {run_id!r} of flow {flow!r} under {runs} (latest runs: {known})")
        return _parse_record(path)
    records = [_parse_record(p) for p in sorted(runs.glob("*.json"))]
    if not records:
        raise ReportError(f"flow {flow!r} has no run records under {runs}: run it first")
    return max(records, key=lambda r: (r.started_at.timestamp() if r.started_at else float("-inf"), r.run_id))


def _parse_record(path: Path) -> RunRecord:
    try:
        return RunRecord.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as e:
        summary = " | ".join(str(e).splitlines()[:4])
        raise ReportError(f"run record {path} cannot be read: {summary}") from e


def stage_report(store: ArtifactStore, flow: str, name: str, record: StageRecord) -> StageReport:
    """The stage's artifact, its manifest and a few excluded rows, or what keeps them from being read."""
    if not record.fingerprint:
        return StageReport(name, record, None, f"the run record names no artifact (state {record.state})")
    artifact = store.find(flow, name, record.fingerprint)
    if artifact is None:
        where = store.stage_dir(flow, name) / record.fingerprint
        return StageReport(name, record, None, f"artifact missing: {where} (deleted since the run?)")
    try:
        _ = artifact.manifest
    except (OSError, ValueError) as e:
        return StageReport(name, record, None, f"manifest of {artifact.path} unreadable: {e}")
    try:
        examples = exclusion_examples(artifact)
    except (OSError, pa.ArrowException) as e:
        return StageReport(name, record, artifact, f"excluded rows unreadable: {e}")
    return StageReport(name, record, artifact, None, examples)


def upstream_first(stages: Mapping[str, StageReport]) -> list[str]:
    """Stages in dependency order (from the manifests' upstream), by name within a level."""
    sorter = graphlib.TopologicalSorter(
        {name: [u for u in s.upstream if u in stages] for name, s in stages.items()}
    )
    sorter.prepare()
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return order


def exclusion_examples(
    artifact: Artifact, per_reason: int = EXAMPLES_PER_REASON
) -> tuple[ExclusionExample, ...]:
    """The first few excluded rows of each reason (reason and detail), most frequent reason first."""
    path = artifact.path / EXCLUDED
    if not path.is_file():
        return ()
    names = pq.read_schema(path).names
    excluded = pq.read_table(path, columns=[c for c in ("reason", "detail") if c in names])
    if "reason" not in excluded.column_names or excluded.num_rows == 0:
        return ()
    by_count = sorted(value_counts(excluded["reason"]).items(), key=lambda kv: (-kv[1], kv[0]))
    examples = []
    for reason, _n in by_count:
        rows = excluded.filter(pc.equal(excluded["reason"], reason)).slice(0, per_reason).to_pylist()
        examples += [ExclusionExample(reason, _detail(r.get("detail"))) for r in rows]
    return tuple(examples)


def _detail(value: Any) -> str | None:
    return None if value is None else str(value)
