"""The EvidenceBench flow's stages (EvidenceBench §2–3, App. C, G, H).

``harvest`` takes evidence summaries from JATS reviews; ``papers`` finds the research paper
each summary cites and turns it into the indexed candidate pool the later stages address;
``refine`` (LLM) cuts each summary to the cited paper's own evidence and keeps those that
report results; ``hypothesis`` (LLM) recovers the hypothesis each one supports;
``decompose`` (LLM) breaks the summary into study aspects and checks them for leaks;
``align`` (LLM) finds the sentences stating each aspect in windows of 10, stride 5;
``label`` (LLM) says which aspects are results; ``select`` applies the 70 % coverage rule
and computes the exact optimal evidence sets; ``export`` writes the released JSON schema
and a Hugging Face folder; ``evaluate`` scores retrieval systems with ER@K.
"""

from __future__ import annotations

from typing import Any, Literal

from irforge.config import StrictModel
from irforge.pipeline import FlowConfig
from irforge.stage import StageSpec
from tasks.evidencebench.stages import align as align_stage
from tasks.evidencebench.stages import decompose as decompose_stage
from tasks.evidencebench.stages import evaluate as evaluate_stage
from tasks.evidencebench.stages import export as export_stage
from tasks.evidencebench.stages import harvest as harvest_stage
from tasks.evidencebench.stages import hypothesis as hypothesis_stage
from tasks.evidencebench.stages import label as label_stage
from tasks.evidencebench.stages import papers as papers_stage
from tasks.evidencebench.stages import refine as refine_stage
from tasks.evidencebench.stages import select as select_stage
from tasks.evidencebench.stages.align import AlignConfig
from tasks.evidencebench.stages.decompose import DecomposeConfig
from tasks.evidencebench.stages.evaluate import EvaluateConfig
from tasks.evidencebench.stages.export import ExportConfig
from tasks.evidencebench.stages.harvest import HarvestConfig
from tasks.evidencebench.stages.hypothesis import HypothesisConfig
from tasks.evidencebench.stages.label import LabelConfig
from tasks.evidencebench.stages.papers import PapersConfig
from tasks.evidencebench.stages.refine import RefineConfig
from tasks.evidencebench.stages.select import SelectConfig


class EvidenceBenchStages(StrictModel):
    harvest: HarvestConfig
    # Optional: a flow config without them stops earlier (each needs the ones it reads from).
    papers: PapersConfig | None = None
    refine: RefineConfig | None = None
    hypothesis: HypothesisConfig | None = None
    decompose: DecomposeConfig | None = None
    align: AlignConfig | None = None
    label: LabelConfig | None = None
    select: SelectConfig | None = None
    export: ExportConfig | None = None
    evaluate: EvaluateConfig | None = None


class EvidenceBenchConfig(FlowConfig):
    flow: Literal["evidencebench"] = "evidencebench"
    stages: EvidenceBenchStages


STAGES: tuple[StageSpec[Any], ...] = (
    harvest_stage.SPEC,
    papers_stage.SPEC,
    refine_stage.SPEC,
    hypothesis_stage.SPEC,
    decompose_stage.SPEC,
    align_stage.SPEC,
    label_stage.SPEC,
    select_stage.SPEC,
    export_stage.SPEC,
    evaluate_stage.SPEC,
)
