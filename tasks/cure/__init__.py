"""The CURE flow's stages (CURE §2–4): ingest → parse → segment → filter; annotations → dedup →
translate; embed → index → mine → corpus; pool → judge → qrels → release → evaluate."""

from __future__ import annotations

from typing import Any, Literal

from irforge.config import StrictModel
from irforge.pipeline import FlowConfig
from irforge.stage import StageSpec
from tasks.cure.stages import annotations as annotations_stage
from tasks.cure.stages import corpus as corpus_stage
from tasks.cure.stages import dedup as dedup_stage
from tasks.cure.stages import embed as embed_stage
from tasks.cure.stages import evaluate as evaluate_stage
from tasks.cure.stages import filter as filter_stage
from tasks.cure.stages import index as index_stage
from tasks.cure.stages import ingest as ingest_stage
from tasks.cure.stages import judge as judge_stage
from tasks.cure.stages import mine as mine_stage
from tasks.cure.stages import parse as parse_stage
from tasks.cure.stages import pool as pool_stage
from tasks.cure.stages import qrels as qrels_stage
from tasks.cure.stages import release as release_stage
from tasks.cure.stages import segment as segment_stage
from tasks.cure.stages import translate as translate_stage
from tasks.cure.stages.annotations import AnnotationsConfig
from tasks.cure.stages.corpus import CorpusConfig
from tasks.cure.stages.dedup import DedupConfig
from tasks.cure.stages.embed import EmbedConfig
from tasks.cure.stages.evaluate import EvaluateConfig
from tasks.cure.stages.filter import FilterConfig
from tasks.cure.stages.index import IndexConfig
from tasks.cure.stages.ingest import IngestConfig
from tasks.cure.stages.judge import JudgeConfig
from tasks.cure.stages.mine import MineConfig
from tasks.cure.stages.parse import ParseConfig
from tasks.cure.stages.pool import PoolConfig
from tasks.cure.stages.qrels import QrelsConfig
from tasks.cure.stages.release import ReleaseConfig
from tasks.cure.stages.segment import SegmentConfig
from tasks.cure.stages.translate import TranslateConfig


class CureStages(StrictModel):
    ingest: IngestConfig
    parse: ParseConfig = ParseConfig()
    segment: SegmentConfig = SegmentConfig()
    filter: FilterConfig = FilterConfig()
    # Stages from here on are optional: a flow config without them runs up to the filter.
    annotations: AnnotationsConfig | None = None
    dedup: DedupConfig | None = None
    translate: TranslateConfig | None = None
    embed: EmbedConfig | None = None
    index: IndexConfig | None = None
    mine: MineConfig | None = None
    corpus: CorpusConfig | None = None
    pool: PoolConfig | None = None
    judge: JudgeConfig | None = None
    qrels: QrelsConfig | None = None
    release: ReleaseConfig | None = None
    evaluate: EvaluateConfig | None = None


class CureConfig(FlowConfig):
    flow: Literal["cure"] = "cure"
    stages: CureStages


STAGES: tuple[StageSpec[Any], ...] = (
    ingest_stage.SPEC,
    parse_stage.SPEC,
    segment_stage.SPEC,
    filter_stage.SPEC,
    annotations_stage.SPEC,
    dedup_stage.SPEC,
    translate_stage.SPEC,
    embed_stage.SPEC,
    index_stage.SPEC,
    mine_stage.SPEC,
    corpus_stage.SPEC,
    pool_stage.SPEC,
    judge_stage.SPEC,
    qrels_stage.SPEC,
    release_stage.SPEC,
    evaluate_stage.SPEC,
)
