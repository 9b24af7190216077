"""Run records: which fingerprint each stage of a run used.

``<root>/<flow>/runs/<run_id>.json`` is rewritten after every stage, so a crashed run
still says how far it got; ``<root>/<flow>/latest.json`` maps each stage to the
fingerprint it last ran with, which ``status`` compares against the current config. On an
object store root both are also uploaded under the URL (``ArtifactStore.write_record`` in
``irforge/object_store.py``), so ``status`` on another host sees them.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from irforge.artifacts import ArtifactStore
from irforge.engine import StageOutcome


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


class RunRecorder:
    def __init__(self, store: ArtifactStore, flow: str, run_id: str, config_path: Path) -> None:
        self.store = store
        self.flow = flow
        self.run_id = run_id
        self.record: dict[str, Any] = {
            "run_id": run_id,
            "flow": flow,
            "config": str(config_path),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "stages": {},
        }
        self._lock = threading.Lock()  # stages of one run may finish on concurrent threads

    @property
    def relative(self) -> str:
        return f"{self.flow}/runs/{self.run_id}.json"

    @property
    def path(self) -> Path:
        return self.store.root / self.relative

    def stage_done(self, stage: str, outcome: StageOutcome) -> None:
        with self._lock:
            self.record["stages"][stage] = {
                "fingerprint": outcome.artifact.fingerprint,
                "state": outcome.state,
                "wall_s": round(outcome.wall_s, 4),
            }
            self.store.write_record(self.relative, self.record)
            latest = latest_fingerprints(self.store, self.flow)
            latest[stage] = outcome.artifact.fingerprint
            self.store.write_record(f"{self.flow}/latest.json", latest)

    def finish(self, status: str) -> None:
        self.record["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.record["status"] = status
        with self._lock:
            self.store.write_record(self.relative, self.record)


def latest_fingerprints(store: ArtifactStore, flow: str) -> dict[str, str]:
    data = store.read_record(f"{flow}/latest.json")
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
