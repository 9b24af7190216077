"""Flow name → its pipeline description. Importing this does not import Prefect."""

from __future__ import annotations

from pathlib import Path

import tasks.crossgenre
import tasks.crossgenre.report
import tasks.cure
import tasks.cure.report
import tasks.evidencebench
import tasks.evidencebench.report
import tasks.spanish_sr
import tasks.spanish_sr.report
from irforge.errors import IrforgeError
from irforge.pipeline import Pipeline

CONFIGS = Path(__file__).resolve().parent / "configs"

PIPELINES: dict[str, Pipeline] = {
    "cure": Pipeline(
        name="cure",
        config_type=tasks.cure.CureConfig,
        stages=tasks.cure.STAGES,
        default_config=CONFIGS / "cure.yaml",
        report_sections=tasks.cure.report.SECTIONS,
    ),
    "evidencebench": Pipeline(
        name="evidencebench",
        config_type=tasks.evidencebench.EvidenceBenchConfig,
        stages=tasks.evidencebench.STAGES,
        default_config=CONFIGS / "evidencebench.yaml",
        release_stage="export",
        report_sections=tasks.evidencebench.report.SECTIONS,
    ),
    "crossgenre": Pipeline(
        name="crossgenre",
        config_type=tasks.crossgenre.CrossgenreConfig,
        stages=tasks.crossgenre.STAGES,
        default_config=CONFIGS / "crossgenre.yaml",
        report_sections=tasks.crossgenre.report.SECTIONS,
    ),
    "spanish_sr": Pipeline(
        name="spanish_sr",
        config_type=tasks.spanish_sr.SpanishSrConfig,
        stages=tasks.spanish_sr.STAGES,
        default_config=CONFIGS / "spanish_sr.yaml",
        report_sections=tasks.spanish_sr.report.SECTIONS,
    ),
}


def get_pipeline(name: str) -> Pipeline:
    try:
        return PIPELINES[name]
    except KeyError:
        raise IrforgeError(f"unknown flow {name!r} (flows: {', '.join(sorted(PIPELINES))})") from None
