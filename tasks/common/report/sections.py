"""A flow's own part of its run report: read from one stage's artifact, drawn by a template.

The report knows no flow: each flow package lists its sections (``tasks/<flow>/report``)
and ``flows/registry.py`` hands them to the report through its ``Pipeline``. A flow without
sections gets the generic parts only (stages, timings, exclusions, details); two flows may
name different stages alike (both have an ``evaluate``), so sections are never guessed from
stage names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import pyarrow as pa

from irforge.artifacts import Artifact
from irforge.errors import IrforgeError
from tasks.common.report.records import RunRecord, StageReport

T = TypeVar("T")


@dataclass(frozen=True)
class Source:
    """What a section's loader reads: its stage's artifact, and the run around it."""

    artifact: Artifact
    record: RunRecord  # ``record.config``: the config file the run was started with
    stages: Mapping[str, StageReport]  # every stage of the run, by name (their manifests' configs)


@dataclass(frozen=True)
class Section(Generic[T]):
    """One section of the page, in the flow's page order.

    ``template`` is the Jinja body of the section (``tasks/common/report/page.py`` wraps it in
    its ``<section>``, title and problems); it sees ``data`` (what ``load`` returned),
    ``figure`` (what ``figure`` drew, inline SVG, or None), ``r`` (the whole
    :class:`~tasks.common.report.data.RunReport`) and the page's macros (``num``, ``badge``,
    ``problem``, ``reasons_table``). Every string is escaped, but the figure's markup.
    """

    id: str  # the page anchor
    stage: str  # the stage whose artifact it reads
    title: str
    load: Callable[[Source], T]
    template: str
    figure: Callable[[T], str | None] | None = None


def load_section(
    section: Section[T], record: RunRecord, stages: Mapping[str, StageReport], problems: dict[str, str]
) -> T | None:
    """The section's data; None when its artifact is gone or unreadable (``problems`` says why)."""
    stage = stages.get(section.stage)
    if stage is None or stage.artifact is None:
        return None
    try:
        return section.load(Source(stage.artifact, record, stages))
    except (IrforgeError, OSError, pa.ArrowException) as e:
        problems[section.stage] = f"{type(e).__name__}: {e}"
        return None
