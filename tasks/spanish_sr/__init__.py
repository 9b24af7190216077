"""The Spanish systematic-review flow's stages (paper 004: Ofori-Boateng et al., NAACL 2024, §3–4).

``ingest`` reads bibliographic exports (LILACS/BVS XLSX or CSV, RIS, JSON/JSONL, BioC, MEDLINE
XML, brat) through a field map; ``clean`` repairs mojibake and drops placeholder, short,
wrong-language and duplicate records; ``questions`` turns titles into questions (title, rules
or an LLM); ``bm25`` picks k1 and b by self-retrieval MRR; ``train_dense`` fine-tunes a dual
encoder per seed; ``hybrid`` ranks with λ·BM25 + dense and its normalised and RRF variants; ``train_rerank``
fine-tunes a cross-encoder listwise on the hybrid candidates; ``reviews`` checks review query
sets against the corpus; ``evaluate`` measures every system on them over the seeds (MAP,
nDCG, recall; question vs expert queries tested as paper 004 Table 5); ``release`` writes
the Hugging Face dataset folder and its card.
"""

from __future__ import annotations

from typing import Any, Literal

from irforge.config import StrictModel
from irforge.pipeline import FlowConfig
from irforge.stage import StageSpec
from tasks.spanish_sr.stages import bm25 as bm25_stage
from tasks.spanish_sr.stages import clean as clean_stage
from tasks.spanish_sr.stages import evaluate as evaluate_stage
from tasks.spanish_sr.stages import hybrid as hybrid_stage
from tasks.spanish_sr.stages import ingest as ingest_stage
from tasks.spanish_sr.stages import questions as questions_stage
from tasks.spanish_sr.stages import release as release_stage
from tasks.spanish_sr.stages import reviews as reviews_stage
from tasks.spanish_sr.stages import train_dense as train_dense_stage
from tasks.spanish_sr.stages import train_rerank as train_rerank_stage
from tasks.spanish_sr.stages.bm25 import Bm25Config
from tasks.spanish_sr.stages.clean import CleanConfig
from tasks.spanish_sr.stages.evaluate import EvaluateConfig
from tasks.spanish_sr.stages.hybrid import HybridConfig
from tasks.spanish_sr.stages.ingest import IngestConfig
from tasks.spanish_sr.stages.questions import QuestionsConfig
from tasks.spanish_sr.stages.release import ReleaseConfig
from tasks.spanish_sr.stages.reviews import ReviewsConfig
from tasks.spanish_sr.stages.train_dense import TrainDenseConfig
from tasks.spanish_sr.stages.train_rerank import TrainRerankConfig


class SpanishSrStages(StrictModel):
    ingest: IngestConfig
    # Optional: a flow config without them stops earlier (each needs the ones it reads from).
    clean: CleanConfig | None = None
    questions: QuestionsConfig | None = None
    bm25: Bm25Config | None = None
    train_dense: TrainDenseConfig | None = None
    hybrid: HybridConfig | None = None
    train_rerank: TrainRerankConfig | None = None
    reviews: ReviewsConfig | None = None
    evaluate: EvaluateConfig | None = None
    release: ReleaseConfig | None = None


class SpanishSrConfig(FlowConfig):
    flow: Literal["spanish_sr"] = "spanish_sr"
    stages: SpanishSrStages


STAGES: tuple[StageSpec[Any], ...] = (
    ingest_stage.SPEC,
    clean_stage.SPEC,
    questions_stage.SPEC,
    bm25_stage.SPEC,
    train_dense_stage.SPEC,
    hybrid_stage.SPEC,
    train_rerank_stage.SPEC,
    reviews_stage.SPEC,
    evaluate_stage.SPEC,
    release_stage.SPEC,
)
