"""The EvidenceBench flow's stages (EvidenceBench §2–3): harvest → papers, so far.

``harvest`` takes evidence summaries from JATS reviews; ``papers`` finds the research paper
each summary cites and turns it into the indexed candidate pool the later stages address.
"""

from __future__ import annotations

from typing import Any, Literal

from irforge.config import StrictModel
from irforge.pipeline import FlowConfig
from irforge.stage import StageSpec
from tasks.evidencebench import harvest as harvest_stage
from tasks.evidencebench import papers as papers_stage
from tasks.evidencebench.harvest import HarvestConfig
from tasks.evidencebench.papers import PapersConfig


class EvidenceBenchStages(StrictModel):
    harvest: HarvestConfig
    # Optional: a flow config without it only harvests.
    papers: PapersConfig | None = None


class EvidenceBenchConfig(FlowConfig):
    flow: Literal["evidencebench"] = "evidencebench"
    stages: EvidenceBenchStages


STAGES: tuple[StageSpec[Any], ...] = (harvest_stage.SPEC, papers_stage.SPEC)
