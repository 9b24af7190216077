"""The CURE flow's stages (CURE §2): ingest → parse → segment → filter → ... ."""

from __future__ import annotations

from typing import Any, Literal

from irforge.config import StrictModel
from irforge.pipeline import FlowConfig
from irforge.stage import StageSpec
from tasks.cure import filter as filter_stage
from tasks.cure import ingest, parse, segment


class CureStages(StrictModel):
    ingest: ingest.IngestConfig
    parse: parse.ParseConfig = parse.ParseConfig()
    segment: segment.SegmentConfig = segment.SegmentConfig()
    filter: filter_stage.FilterConfig = filter_stage.FilterConfig()


class CureConfig(FlowConfig):
    flow: Literal["cure"] = "cure"
    stages: CureStages


STAGES: tuple[StageSpec[Any], ...] = (ingest.SPEC, parse.SPEC, segment.SPEC, filter_stage.SPEC)
