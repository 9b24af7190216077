"""Flow name → its pipeline description, imported when first asked for.

Naming the flows imports none of them: ``irforge --help`` and a command on one flow pay
for that flow's stage modules only (``tests/engine/test_startup.py``). Importing this does
not import Prefect.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from irforge.errors import IrforgeError
from irforge.pipeline import Pipeline

CONFIGS = Path(__file__).resolve().parent / "configs"


@dataclass(frozen=True)
class FlowEntry:
    """Where a flow lives: ``tasks.<package>`` holds ``STAGES`` and the config class."""

    package: str
    config_class: str
    release_stage: str = "release"


FLOWS: dict[str, FlowEntry] = {
    "cure": FlowEntry("tasks.cure", "CureConfig"),
    "evidencebench": FlowEntry("tasks.evidencebench", "EvidenceBenchConfig", release_stage="export"),
    "crossgenre": FlowEntry("tasks.crossgenre", "CrossgenreConfig"),
    "spanish_sr": FlowEntry("tasks.spanish_sr", "SpanishSrConfig"),
}


@cache
def _load(name: str) -> Pipeline:
    entry = FLOWS[name]
    package = importlib.import_module(entry.package)
    return Pipeline(
        name=name,
        config_type=getattr(package, entry.config_class),
        stages=package.STAGES,
        default_config=CONFIGS / f"{name}.yaml",
        release_stage=entry.release_stage,
        report_module=f"{entry.package}.report",
    )


class _Pipelines(Mapping[str, Pipeline]):
    """The registry as a mapping whose values are imported on first access."""

    def __getitem__(self, name: str) -> Pipeline:
        if name not in FLOWS:
            raise KeyError(name)
        return _load(name)

    def __iter__(self) -> Iterator[str]:
        return iter(FLOWS)

    def __len__(self) -> int:
        return len(FLOWS)


PIPELINES: Mapping[str, Pipeline] = _Pipelines()


def get_pipeline(name: str) -> Pipeline:
    if name not in FLOWS:
        raise IrforgeError(f"unknown flow {name!r} (flows: {', '.join(sorted(FLOWS))})")
    return _load(name)
