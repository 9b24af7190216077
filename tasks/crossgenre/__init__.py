"""The cross-genre flow's stages (paper 003: Zuo et al., EMNLP 2020, §2–3).

``ingest`` reads news pages (saved HTML, JSONL, WARC, RSS/Atom feeds fetched politely);
``extract`` takes headline, date, main text, study links and identifiers (trafilatura);
``journal_links`` keeps pages citing research (DOI, PubMed, PMC, Europe PMC, journal
domains); ``single_study`` keeps pages reporting on one study (rules, then an optional
LLM); ``resolve`` turns the cited references into PubMed records; ``claims`` makes one
query per article (syndicated copies kept once), the cited corpus and the qrels;
``distractors`` adds the negative abstracts; ``candidates`` ranks them with Okapi BM25,
BM25+ and BM25+† (top 500, paper Table 2); ``splits`` cuts train/dev/test by groups;
``pairs`` writes the reranker data; ``evaluate`` scores BM25+† and rerankers (Table 3);
``release`` writes the Hugging Face dataset.
"""

from __future__ import annotations

from typing import Any, Literal

from irforge.config import StrictModel
from irforge.pipeline import FlowConfig
from irforge.stage import StageSpec
from tasks.crossgenre.stages import candidates as candidates_stage
from tasks.crossgenre.stages import claims as claims_stage
from tasks.crossgenre.stages import distractors as distractors_stage
from tasks.crossgenre.stages import evaluate as evaluate_stage
from tasks.crossgenre.stages import extract as extract_stage
from tasks.crossgenre.stages import ingest as ingest_stage
from tasks.crossgenre.stages import journal_links as journal_links_stage
from tasks.crossgenre.stages import pairs as pairs_stage
from tasks.crossgenre.stages import release as release_stage
from tasks.crossgenre.stages import resolve as resolve_stage
from tasks.crossgenre.stages import single_study as single_study_stage
from tasks.crossgenre.stages import splits as splits_stage
from tasks.crossgenre.stages.candidates import CandidatesConfig
from tasks.crossgenre.stages.claims import ClaimsConfig
from tasks.crossgenre.stages.distractors import DistractorsConfig
from tasks.crossgenre.stages.evaluate import EvaluateConfig
from tasks.crossgenre.stages.extract import ExtractConfig
from tasks.crossgenre.stages.ingest import IngestConfig
from tasks.crossgenre.stages.journal_links import JournalLinksConfig
from tasks.crossgenre.stages.pairs import PairsConfig
from tasks.crossgenre.stages.release import ReleaseConfig
from tasks.crossgenre.stages.resolve import ResolveConfig
from tasks.crossgenre.stages.single_study import SingleStudyConfig
from tasks.crossgenre.stages.splits import SplitsConfig


class CrossgenreStages(StrictModel):
    ingest: IngestConfig
    # Optional: a flow config without them stops earlier (each needs the ones it reads from).
    extract: ExtractConfig | None = None
    journal_links: JournalLinksConfig | None = None
    single_study: SingleStudyConfig | None = None
    resolve: ResolveConfig | None = None
    claims: ClaimsConfig | None = None
    distractors: DistractorsConfig | None = None
    candidates: CandidatesConfig | None = None
    splits: SplitsConfig | None = None
    pairs: PairsConfig | None = None
    evaluate: EvaluateConfig | None = None
    release: ReleaseConfig | None = None


class CrossgenreConfig(FlowConfig):
    flow: Literal["crossgenre"] = "crossgenre"
    stages: CrossgenreStages


STAGES: tuple[StageSpec[Any], ...] = (
    ingest_stage.SPEC,
    extract_stage.SPEC,
    journal_links_stage.SPEC,
    single_study_stage.SPEC,
    resolve_stage.SPEC,
    claims_stage.SPEC,
    distractors_stage.SPEC,
    candidates_stage.SPEC,
    splits_stage.SPEC,
    pairs_stage.SPEC,
    evaluate_stage.SPEC,
    release_stage.SPEC,
)
