"""Stage ``label``: which study aspects are results, which background or methods (§2.2, §3.4).

One LLM request per aligned summary (prompt ``prompts/evidencebench/label.md``): every aspect,
in order, labelled ``results``, ``background`` or ``methods`` (``LABELS:``, exactly one
line per aspect; grammar-constrained where the server takes GBNF grammars). The
``results`` aspects form the Result-ER evidence set of ``select``.

The 70 % coverage rule (§2.2; ``select`` applies it) is applied here first: an
instance with fewer than 70 % of its aspects aligned is dropped before its labels are paid for.

Units: aligned summaries (``unit_id``). Output: ``align``'s instance columns plus
``aspect_labels`` (one per aspect) and the request's cost. Excluded (``reason``):
``low_coverage`` (``step`` coverage, no request sent), ``invalid_reply``, ``truncated``,
``request_failed`` (``raw_reply`` holds the last reply).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.common.llm.cache import ChatStats
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.port import ChatFailure, ChatOutcome, ChatReply
from tasks.evidencebench.grammars import labels_grammar
from tasks.evidencebench.instance import low_coverage
from tasks.evidencebench.llm_calls import (
    LLM_COST_FIELDS,
    ask,
    constrained,
    excluded_row,
    failure_fields,
    llm_cost,
    spent,
    step_prompt,
)
from tasks.evidencebench.llm_steps import aspects_request, labels_validator
from tasks.evidencebench.pools import SUMMARY_FIELDS
from tasks.evidencebench.stages.decompose import IDENTITY


class LabelConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    prompt: str | None = Field(
        None, description="Label prompt file relative to the config; default prompts/evidencebench/label.md."
    )


INSTANCE = (*IDENTITY, "paper_id", "aspects", "aspect_sentences")
SCHEMA = pa.schema(
    [
        *SUMMARY_FIELDS,
        pa.field("paper_id", pa.string(), nullable=False),
        pa.field("aspects", pa.list_(pa.string()), nullable=False),
        pa.field("aspect_sentences", pa.list_(pa.list_(pa.int32())), nullable=False),
        pa.field("aspect_labels", pa.list_(pa.string()), nullable=False),
        *LLM_COST_FIELDS,
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("unit_id", pa.string(), nullable=False),
    pa.field("review_id", pa.string(), nullable=False),
    pa.field("step", pa.string(), nullable=False),
    pa.field("raw_reply", pa.string()),
    pa.field("attempts", pa.int32(), nullable=False),
)


def inputs(ctx: StageContext[LabelConfig]) -> dict[str, Any]:
    config = ctx.config
    return {
        "llm": describe(config.llm, ctx.base_dir),
        "prompt": step_prompt("label", config.prompt, ctx.base_dir).sha256,
    }


def source(ctx: StageContext[LabelConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["align"], columns=list(INSTANCE))


def process(chunk: pa.Table, ctx: StageContext[LabelConfig]) -> ChunkResult:
    """Label the aspects of every summary of the chunk, one request per summary."""
    config = ctx.config
    prompt = step_prompt("label", config.prompt, ctx.base_dir)
    rows = chunk.to_pylist()
    excluded: list[dict[str, Any]] = []
    # The validator depends on the number of aspects: one cached call per aspect count.
    by_count: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        why = low_coverage(row["aspect_sentences"])
        if why is None:
            by_count.setdefault(len(row["aspects"]), []).append(i)
        else:
            fields = {"reason": "low_coverage", "detail": why, "step": "coverage", "attempts": 0}
            excluded.append(excluded_row(row, fields))
    outcomes: dict[int, ChatOutcome] = {}
    stats = ChatStats()
    for count, members in sorted(by_count.items()):
        requests = [
            constrained(
                aspects_request(
                    "label", rows[i]["unit_id"], rows[i]["summary"], rows[i]["aspects"],
                    prompt=prompt, sampling=config.llm.sampling,
                ),
                labels_grammar(count),
            )
            for i in members
        ]  # fmt: skip
        answered, group_stats = ask(ctx, config.llm, requests, labels_validator(count))
        stats = stats + group_stats
        outcomes.update(zip(members, answered, strict=True))
    kept: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        if i not in outcomes:
            continue  # excluded above, before any request
        outcome = outcomes[i]
        if isinstance(outcome, ChatFailure):
            excluded.append(excluded_row(row, failure_fields("label", outcome)))
            continue
        assert isinstance(outcome, ChatReply)
        kept.append(
            {
                **{name: row[name] for name in INSTANCE},
                "aspect_labels": list(outcome.value),
                "engine": config.llm.engine,
                "model": outcome.model,
                **spent(outcome),
            }
        )
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        cost=llm_cost(config.llm, stats),
    )


SPEC: StageSpec[LabelConfig] = StageSpec(
    name="label",
    version=2,  # 2: the 70 % rule applied before labelling
    config_type=LabelConfig,
    upstream=("align",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    inputs=inputs,
    source=source,
    process=process,
    description="LLM: each aspect labelled results, background or methods.",
)
