"""The CURE flow's stages (CURE §2–4): ingest → parse → segment → filter; annotations → dedup →
translate; embed → index → mine → corpus; pool → judge → qrels → release → evaluate."""

from __future__ import annotations

from typing import Any, Literal

from irforge.config import StrictModel
from irforge.pipeline import FlowConfig
from irforge.stage import StageSpec
from tasks.cure import corpus as corpus_stage
from tasks.cure import dedup as dedup_stage
from tasks.cure import embed as embed_stage
from tasks.cure import evaluate as evaluate_stage
from tasks.cure import filter as filter_stage
from tasks.cure import index as index_stage
from tasks.cure import ingest as ingest_stage
from tasks.cure import intake as annotations_stage
from tasks.cure import judge as judge_stage
from tasks.cure import mine as mine_stage
from tasks.cure import parse as parse_stage
from tasks.cure import pool as pool_stage
from tasks.cure import qrels as qrels_stage
from tasks.cure import release as release_stage
from tasks.cure import segment as segment_stage
from tasks.cure import translate as translate_stage
from tasks.cure.corpus import CorpusConfig
from tasks.cure.dedup import DedupConfig
from tasks.cure.embed import EmbedConfig
from tasks.cure.evaluate import EvaluateConfig
from tasks.cure.filter import FilterConfig
from tasks.cure.index import IndexConfig
from tasks.cure.ingest import IngestConfig
from tasks.cure.intake import AnnotationsConfig
from tasks.cure.judge import JudgeConfig
from tasks.cure.mine import MineConfig
from tasks.cure.parse import ParseConfig
from tasks.cure.pool import PoolConfig
from tasks.cure.qrels import QrelsConfig
from tasks.cure.release import ReleaseConfig
from tasks.cure.segment import SegmentConfig
from tasks.cure.translate import TranslateConfig


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
