"""What a run report shows: the run's stages (:mod:`.records`) and its flow's sections (:mod:`.sections`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from irforge.artifacts import ArtifactStore
from tasks.common.report.records import RunRecord, StageReport, read_run_record, stage_report, upstream_first
from tasks.common.report.sections import Section, load_section


@dataclass(frozen=True)
class RunReport:
    record: RunRecord
    stages: tuple[StageReport, ...]  # upstream before downstream
    sections: tuple[Section[Any], ...] = ()  # the flow's sections whose stage is in the run
    data: Mapping[str, Any] = field(default_factory=dict)  # section id → what it loaded (absent: nothing)
    section_problems: Mapping[str, str] = field(default_factory=dict)  # stage → why its section is absent

    @property
    def flow(self) -> str:
        return self.record.flow

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def status(self) -> str:
        return self.record.status or "unfinished"

    @property
    def total_s(self) -> float | None:
        started, finished = self.record.started_at, self.record.finished_at
        return (finished - started).total_seconds() if started and finished else None

    def stage(self, name: str) -> StageReport | None:
        return next((s for s in self.stages if s.name == name), None)


def load_report(
    root: Path, flow: str, run_id: str | None = None, *, sections: Sequence[Section[Any]]
) -> RunReport:
    """The report of one run (``run_id=None``: the run that started last), with the flow's
    ``sections`` whose stage the run has (shown even when the stage's artifact is gone)."""
    record = read_run_record(root, flow, run_id)
    store = ArtifactStore(root)
    stages = {name: stage_report(store, flow, name, rec) for name, rec in record.stages.items()}
    present = tuple(s for s in sections if s.stage in stages)
    problems: dict[str, str] = {}
    loaded = {s.id: load_section(s, record, stages, problems) for s in present}
    return RunReport(
        record=record,
        stages=tuple(stages[name] for name in upstream_first(stages)),
        sections=present,
        data={k: v for k, v in loaded.items() if v is not None},
        section_problems=problems,
    )
