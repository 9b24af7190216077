"""Stage ``single_study``: keep the pages about one study (paper 003 §2).

The paper dropped "aggregations of disparate medical studies" by heuristics and a manual
check, keeping pages about one study or a closely related series. Each page's study
references (journal_links' ``study_links``) are grouped into works and decided by the rules
of :func:`tasks.crossgenre.works.decide` (:mod:`tasks.crossgenre.works`), each naming itself in
``decided_by``; pages they leave undecided go to the LLM when ``llm`` is set
(:mod:`tasks.crossgenre.single_study_llm`), else are excluded ``undecided``.

Kept: journal_links' columns plus ``works``, ``cited`` (each kept work: its PMID — ``id_kind:
pmid`` —, else its own identifier, else ``id_kind: url``), ``decided_by``, ``decision``. Excluded:
``roundup``, ``not_a_report``, ``multiple_studies``, ``undecided`` and the LLM's ``invalid_reply`` /
``truncated`` / ``request_failed`` (with the raw reply).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import pyarrow as pa
from pydantic import Field, field_validator

from irforge.config import StrictModel
from irforge.contents import accounting
from irforge.parallel import Resources
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.stage import LLMCalls, llm_cost, llm_resources
from tasks.common.pubmed.config import PubmedConfig, describe_pubmed, pubmed_source
from tasks.crossgenre.single_study_llm import DEFAULT_PROMPT, ask_llm, load_prompt
from tasks.crossgenre.stages.journal_links import SCHEMA as LINKS_SCHEMA
from tasks.crossgenre.works import decide_page, lookup_works, works_text


class SingleStudyConfig(StrictModel):
    pubmed: PubmedConfig = PubmedConfig()
    max_works: int = Field(3, ge=1, description="More distinct cited works than this: multiple_studies.")
    roundup_patterns: list[str] = Field(
        [], description="More round-up headline regexes (case-insensitive), e.g. other languages."
    )
    llm: LLMConfig | None = Field(None, description="Asked about undecided pages; None: they are excluded.")
    prompt: str = Field(
        DEFAULT_PROMPT, description="Template in prompts/ (or a path relative to the config)."
    )
    max_text_chars: int = Field(6000, ge=200, description="Main text shown to the LLM, cut at this length.")

    @field_validator("roundup_patterns")
    @classmethod
    def _regexes(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"{pattern!r} is not a regular expression: {err}") from None
        return patterns


_S = pa.string()
CITED_TYPE = pa.struct(
    [pa.field("id_kind", _S, nullable=False), pa.field("id_value", _S, nullable=False), pa.field("url", _S)]
)
SCHEMA = pa.schema(
    [
        *LINKS_SCHEMA,
        pa.field("works", pa.int32(), nullable=False),
        pa.field("cited", pa.list_(CITED_TYPE), nullable=False),
        pa.field("decided_by", _S, nullable=False),
        pa.field("decision", _S, nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("page_id", _S, nullable=False),
    pa.field("url", _S),
    pa.field("decided_by", _S, nullable=False),
    pa.field("works", pa.int32()),
    pa.field("raw_reply", _S),
    accounting(pa.field("attempts", pa.int32())),
)


# -- the stage ---------------------------------------------------------------------------


def inputs(ctx: StageContext[SingleStudyConfig]) -> dict[str, Any]:
    config = ctx.config
    out: dict[str, Any] = {"pubmed": describe_pubmed(config.pubmed, ctx.base_dir)}
    if config.llm is not None:
        out["llm"] = describe(config.llm, ctx.base_dir)
        out["prompt_sha256"] = load_prompt(ctx.base_dir, config.prompt).sha256
    return out


def _source(ctx: StageContext[SingleStudyConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["journal_links"], columns=LINKS_SCHEMA.names)


def process(chunk: pa.Table, ctx: StageContext[SingleStudyConfig]) -> ChunkResult:
    config = ctx.config
    rows = chunk.to_pylist()
    with contextlib.closing(pubmed_source(config.pubmed, ctx.base_dir, ctx.cache_dir)) as source:
        page_works, records = lookup_works(source, [row["study_links"] for row in rows])
    kept, excluded, undecided = [], [], []
    for page, works in zip(rows, page_works, strict=True):
        verdict = decide_page(page, works, records, config.max_works, config.roundup_patterns)
        chosen = verdict.cited_works(works)
        row = {**page, "works": len(works), "cited": [w.cited() for w in chosen], "decided_by": verdict.rule}
        if verdict.keep:
            kept.append({**row, "decision": verdict.why})
        elif verdict.keep is None and config.llm is not None:
            undecided.append({**row, "decided_by": "llm", "_works_text": works_text(works, records)})
        else:
            excluded.append({**row, "reason": verdict.reason, "detail": verdict.why})
    cost: dict[str, float] = {}
    if config.llm is not None:
        calls = LLMCalls(ctx, config.llm, SCHEMA, EXCLUDED_SCHEMA)
        answered, refused = ask_llm(ctx, config.llm, undecided, calls) if undecided else ([], [])
        kept += answered
        excluded += refused + calls.excluded
        cost = llm_cost(config.llm, calls.stats)
    return ChunkResult(
        rows_to_table([{n: r[n] for n in SCHEMA.names} for r in kept], SCHEMA),
        rows_to_table([{n: r.get(n) for n in EXCLUDED_SCHEMA.names} for r in excluded], EXCLUDED_SCHEMA),
        cost=cost,
    )


SPEC: StageSpec[SingleStudyConfig] = StageSpec(
    name="single_study",
    version=2,  # 2: report evidence, page kinds, a reported work among cited ones (issue 27)
    config_type=SingleStudyConfig,
    upstream=("journal_links",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("page_id",),
    inputs=inputs,
    source=_source,
    process=process,
    # E-utilities' pace holds per process (tasks/common/pubmed/ncbi.py): its chunks stay in one.
    resources=lambda c: Resources(parallel=False) if c.pubmed.engine == "eutils" else llm_resources(c.llm),
    description="Pages about one study (or a tight series): works by PMID, round-up wording, optional LLM.",
)
