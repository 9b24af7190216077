"""Stage ``hypothesis``: the hypothesis each refined summary was written to support (EvidenceBench App. G).

Two LLM steps per summary kept by ``refine`` (prompts ``prompts/evidencebench/hypothesis_recover.md``
and ``prompts/evidencebench/hypothesis_trim.md``, see :mod:`tasks.evidencebench.llm_steps`):

1. **recover**: from the refined summary and the review's text around it (the summary's
   paragraph with the context paragraphs before and after it), the hypothesis the
   review's authors reported this evidence for (``HYPOTHESIS:``);
2. **trim**: that hypothesis cut to its central claim, without the summarised evidence,
   read against the summary's paragraph (``HYPOTHESIS:``).

Each step is one batched call per chunk through the reply cache
(``<artifacts>/cache/llm_replies.sqlite``), so a rerun sends only what was never
answered; a reply that does not parse is re-asked (``llm.max_invalid_retries``), then
quarantined. The fingerprint holds the model's description and both prompts' digests.

Units: refined summaries (``unit_id``). Output: ``unit_id``, ``review_id``,
``cited_ref_id``, ``summary``, ``suitability``, ``recovered_hypothesis`` (step 1),
``hypothesis`` (step 2), ``engine``, ``model``, and what both requests cost together:
``prompt_tokens``, ``completion_tokens``, ``attempts``, ``cached``.

Excluded (``reason``, with ``step``: ``hypothesis_recover`` or ``hypothesis_trim``):
``invalid_reply``, ``truncated``, ``request_failed`` (``raw_reply`` holds the last reply,
if any). The manifest's cost: requests sent, cache hits, tokens, USD, over both steps.
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
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.port import ChatFailure, ChatReply
from tasks.evidencebench.grammars import hypothesis_grammar
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
from tasks.evidencebench.llm_steps import (
    parse_hypothesis,
    recover_hypothesis_request,
    trim_hypothesis_request,
)


class HypothesisConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    recover_prompt: str | None = Field(
        None,
        description="Recover prompt file relative to the config; default prompts/evidencebench/hypothesis_recover.md.",
    )
    trim_prompt: str | None = Field(
        None,
        description="Trim prompt file relative to the config; default prompts/evidencebench/hypothesis_trim.md.",
    )


SCHEMA = pa.schema(
    [
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("review_id", pa.string(), nullable=False),
        pa.field("cited_ref_id", pa.string(), nullable=False),
        pa.field("summary", pa.string(), nullable=False),
        pa.field("suitability", pa.string(), nullable=False),
        pa.field("recovered_hypothesis", pa.string(), nullable=False),
        pa.field("hypothesis", pa.string(), nullable=False),
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
_COLUMNS = [
    "unit_id",
    "review_id",
    "cited_ref_id",
    "summary",
    "suitability",
    "paragraph",
    "context_before",
    "context_after",
]


def review_context(paragraph: str, before: list[str], after: list[str]) -> str:
    """The review's text around a summary: its paragraph between the context paragraphs, blank-line separated."""
    return "\n\n".join([*before, paragraph, *after])


def inputs(ctx: StageContext[HypothesisConfig]) -> dict[str, Any]:
    config = ctx.config
    return {
        "llm": describe(config.llm, ctx.base_dir),
        "prompts": {
            "recover": step_prompt("hypothesis_recover", config.recover_prompt, ctx.base_dir).sha256,
            "trim": step_prompt("hypothesis_trim", config.trim_prompt, ctx.base_dir).sha256,
        },
    }


def source(ctx: StageContext[HypothesisConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["refine"], columns=_COLUMNS)


def process(chunk: pa.Table, ctx: StageContext[HypothesisConfig]) -> ChunkResult:
    """Recover the hypothesis of every summary of the chunk, then trim the recovered ones."""
    config = ctx.config
    sampling = config.llm.sampling
    recover_prompt = step_prompt("hypothesis_recover", config.recover_prompt, ctx.base_dir)
    rows = chunk.to_pylist()
    grammar = hypothesis_grammar(400)  # a longer grammar bound compiles slowly; hypotheses are shorter
    requests = [
        constrained(
            recover_hypothesis_request(
                r["unit_id"],
                review_context(r["paragraph"], r["context_before"], r["context_after"]),
                r["summary"],
                prompt=recover_prompt,
                sampling=sampling,
            ),
            grammar,
        )
        for r in rows
    ]
    recovered, recover_stats = ask(ctx, config.llm, requests, parse_hypothesis)

    excluded: list[dict[str, Any]] = []
    to_trim: list[tuple[dict[str, Any], ChatReply]] = []
    for row, outcome in zip(rows, recovered, strict=True):
        if isinstance(outcome, ChatFailure):
            excluded.append(excluded_row(row, failure_fields("hypothesis_recover", outcome)))
        else:
            assert isinstance(outcome, ChatReply)
            to_trim.append((row, outcome))

    trim_prompt = step_prompt("hypothesis_trim", config.trim_prompt, ctx.base_dir)
    requests = [
        constrained(
            trim_hypothesis_request(
                row["unit_id"], row["paragraph"], reply.value, prompt=trim_prompt, sampling=sampling
            ),
            grammar,
        )
        for row, reply in to_trim
    ]
    trimmed, trim_stats = ask(ctx, config.llm, requests, parse_hypothesis)

    kept: list[dict[str, Any]] = []
    for (row, recover_reply), outcome in zip(to_trim, trimmed, strict=True):
        if isinstance(outcome, ChatFailure):
            excluded.append(excluded_row(row, failure_fields("hypothesis_trim", outcome)))
            continue
        assert isinstance(outcome, ChatReply)
        kept.append(
            {
                **{
                    name: row[name]
                    for name in ("unit_id", "review_id", "cited_ref_id", "summary", "suitability")
                },
                "recovered_hypothesis": recover_reply.value,
                "hypothesis": outcome.value,
                "engine": config.llm.engine,
                "model": outcome.model,
                **spent(recover_reply, outcome),
            }
        )
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        cost=llm_cost(config.llm, recover_stats + trim_stats),
    )


SPEC: StageSpec[HypothesisConfig] = StageSpec(
    name="hypothesis",
    version=1,
    config_type=HypothesisConfig,
    upstream=("refine",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    inputs=inputs,
    source=source,
    process=process,
    description="LLM: the hypothesis each refined summary supports, recovered then trimmed to its claim.",
)
