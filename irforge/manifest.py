"""The manifest of an artifact: what made it and what it holds (:mod:`irforge.stage`).

``Totals`` adds up the markers of the finished chunks; :func:`build_manifest` turns them,
with the stage's material and fingerprint, into ``manifest.json``'s content.
"""

from __future__ import annotations

import platform
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from irforge.engine import StagePlan

# Libraries whose version is recorded in every manifest (those that can change a result).
_RECORDED_PACKAGES = ("irforge", "pyarrow", "pydantic", "lxml", "justext", "pysbd", "ftfy")


@dataclass
class Totals:
    chunks: int = 0
    rows_in: int = 0
    rows_out: int = 0
    rows_excluded: int = 0
    units_in: int = 0
    units_kept: int = 0
    units_excluded: int = 0
    process_s: float = 0.0
    reasons: Counter[str] = field(default_factory=Counter)
    tables: dict[str, int] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)

    def excluded_text(self) -> str:
        reasons = ", ".join(f"{r} {n}" for r, n in self.reasons.most_common()) or "none"
        return f"{self.units_in} units; excluded: {reasons}"

    def add(self, marker: dict[str, Any]) -> None:
        self.chunks += 1
        for name in ("rows_in", "rows_out", "rows_excluded", "units_in", "units_kept", "units_excluded"):
            setattr(self, name, getattr(self, name) + marker[name])
        self.process_s += marker["process_s"]
        self.reasons.update(marker["reasons"])
        for name, value in marker.get("cost", {}).items():
            self.cost[name] = self.cost.get(name, 0.0) + value


def recorded_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _RECORDED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def build_manifest(
    flow: str,
    plan: StagePlan,
    fp: str,
    material: dict[str, Any],
    totals: Totals,
    wall: float,
    resumed_chunks: int,
) -> dict[str, Any]:
    spec = plan.spec
    return {
        "flow": flow,
        "stage": spec.name,
        "version": spec.version,
        "fingerprint": fp,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "material": material,
        "upstream": {name: str(a.path) for name, a in sorted(plan.context.upstream.items())},
        "versions": recorded_versions(),
        "schema": [{"name": f.name, "type": str(f.type)} for f in spec.schema],
        "key": list(spec.key),
        "counts": {
            "rows_in": totals.rows_in,
            "rows_out": totals.rows_out,
            "rows_excluded": totals.rows_excluded,
            "units_in": totals.units_in,
            "units_kept": totals.units_kept,
            "units_excluded": totals.units_excluded,
            "excluded_by_reason": dict(sorted(totals.reasons.items())),
        },
        "tables": dict(sorted(totals.tables.items())),
        "chunks": {"total": totals.chunks, "resumed": resumed_chunks},
        "wall_s": round(wall, 4),
        "process_s": round(totals.process_s, 4),
        "rows_per_s": round(totals.rows_in / wall, 1) if wall > 0 else None,
        "cost": dict(sorted(totals.cost.items())),
    }
