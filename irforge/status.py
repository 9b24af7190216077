"""``irforge status``: per stage, is the artifact for the current config there, and if not, why.

- **fresh**: an artifact with the fingerprint the current config and inputs give exists;
- **stale**: the stage ran before (``latest.json``) but its inputs changed since; the
  report names what changed (config keys, upstream stages, input files, stage version);
- **missing**: it never ran.

It reads manifests and ``latest.json`` only (``ArtifactStore.manifest`` in irforge/artifacts.py):
on an object store root (irforge/object_store.py) it downloads no artifact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from irforge.artifacts import ArtifactStore
from irforge.contents import resolver
from irforge.engine import StagePlan
from irforge.pipeline import FlowConfig, Pipeline
from irforge.runs import latest_fingerprints

State = Literal["fresh", "stale", "missing"]
_MAX_CHANGES = 8


@dataclass(frozen=True)
class StageStatus:
    stage: str
    fingerprint: str
    state: State
    changed: list[str]
    artifact: str | None
    artifact_fingerprint: str | None
    rows_kept: int | None
    rows_excluded: int | None
    excluded_by_reason: dict[str, int]
    wall_s: float | None
    created_at: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def flow_status(
    pipeline: Pipeline,
    config: FlowConfig,
    base_dir: Path,
    store: ArtifactStore,
    plans: dict[str, StagePlan] | None = None,
) -> list[StageStatus]:
    """Each configured stage's status (``plans``: already made for this config and store)."""
    plans = plans if plans is not None else pipeline.plan(config, base_dir, resolver(store, pipeline.name))
    latest = latest_fingerprints(store, pipeline.name)
    out: list[StageStatus] = []
    for name, plan in plans.items():
        state: State = "fresh"
        changed = [  # early cut-off (irforge/contents.py): the upstream's content is an earlier one's
            f"upstream {u} recomputed, output unchanged (as {fp})"
            for u, fp in plan.upstream_fingerprints.items()
            if u in plans and fp != plans[u].fingerprint
        ]
        found: str | None = plan.fingerprint
        manifest = store.manifest(pipeline.name, name, plan.fingerprint)
        if manifest is None:
            found = latest.get(name)
            manifest = store.manifest(pipeline.name, name, found) if found else None
            if manifest is None:
                state, found = "missing", None
            else:
                state = "stale"
                changed = describe_changes(manifest.get("material", {}), plan.material) + changed
        where = store.location(pipeline.name, name, found) if found else None
        out.append(_status(name, plan.fingerprint, state, changed, found, where, manifest or {}))
    return out


def _status(
    name: str,
    fp: str,
    state: State,
    changed: list[str],
    found: str | None,
    where: str | None,
    manifest: dict[str, Any],
) -> StageStatus:
    counts = manifest.get("counts", {})
    return StageStatus(
        stage=name,
        fingerprint=fp,
        state=state,
        changed=changed,
        artifact=where,
        artifact_fingerprint=found,
        rows_kept=counts.get("rows_out"),
        rows_excluded=counts.get("rows_excluded"),
        excluded_by_reason=counts.get("excluded_by_reason", {}),
        wall_s=manifest.get("wall_s"),
        created_at=manifest.get("created_at"),
    )


def describe_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two fingerprint materials, most telling first."""
    changes: list[str] = []
    if old.get("version") != new.get("version"):
        changes.append(f"stage version {old.get('version')} -> {new.get('version')}")
    for up in sorted(set(old.get("upstream", {})) | set(new.get("upstream", {}))):
        if old.get("upstream", {}).get(up) != new.get("upstream", {}).get(up):
            changes.append(f"upstream {up} changed")
    changes += [f"config {c}" for c in _diff(old.get("config"), new.get("config"), "")]
    changes += [f"input {c}" for c in _diff(old.get("inputs"), new.get("inputs"), "")]
    if len(changes) > _MAX_CHANGES:
        changes = [*changes[:_MAX_CHANGES], f"... and {len(changes) - _MAX_CHANGES} more"]
    return changes


def _diff(old: Any, new: Any, path: str) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in old:
                out.append(f"{sub}: added")
            elif key not in new:
                out.append(f"{sub}: removed")
            else:
                out += _diff(old[key], new[key], sub)
        return out
    if old != new:
        return [f"{path or '<value>'}: {_short(old)} -> {_short(new)}"]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
