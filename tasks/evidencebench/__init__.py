"""The EvidenceBench flow's stages (EvidenceBench §2–3): harvest → papers, refine → hypothesis, so far.

``harvest`` takes evidence summaries from JATS reviews; ``papers`` finds the research paper
each summary cites and turns it into the indexed candidate pool the later stages address;
``refine`` (LLM) cuts each summary to the cited paper's own evidence and keeps those that
report results; ``hypothesis`` (LLM) recovers the hypothesis each one supports.
"""

from __future__ import annotations

from typing import Any, Literal

from irforge.config import StrictModel
from irforge.pipeline import FlowConfig
from irforge.stage import StageSpec
from tasks.evidencebench import harvest as harvest_stage
from tasks.evidencebench import hypothesis as hypothesis_stage
from tasks.evidencebench import papers as papers_stage
from tasks.evidencebench import refine as refine_stage
from tasks.evidencebench.harvest import HarvestConfig
from tasks.evidencebench.hypothesis import HypothesisConfig
from tasks.evidencebench.papers import PapersConfig
from tasks.evidencebench.refine import RefineConfig


class EvidenceBenchStages(StrictModel):
    harvest: HarvestConfig
    # Optional: a flow config without them stops earlier (each needs the ones it reads from).
    papers: PapersConfig | None = None
    refine: RefineConfig | None = None
    hypothesis: HypothesisConfig | None = None


class EvidenceBenchConfig(FlowConfig):
    flow: Literal["evidencebench"] = "evidencebench"
    stages: EvidenceBenchStages


STAGES: tuple[StageSpec[Any], ...] = (
    harvest_stage.SPEC,
    papers_stage.SPEC,
    refine_stage.SPEC,
    hypothesis_stage.SPEC,
)
