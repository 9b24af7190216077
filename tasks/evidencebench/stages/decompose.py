"""Stage ``decompose``: each summary broken into study aspects, then checked for leaks (App. C.1).

Two LLM steps per summary kept by ``hypothesis`` (prompts ``prompts/evidencebench/decompose.md``
and ``prompts/evidencebench/leak_check.md``, see :mod:`tasks.evidencebench.llm_steps`):

1. **decompose**: the summary split into study aspects (``ASPECTS:``), the cited paper's
   pool shown so that the model can apply the granularity rule (an aspect is what one
   sentence of the paper could state);
2. **leak check**: does any aspect carry information the summary does not state
   (``DECISION: yes`` excludes the instance as ``aspect_leak``)?

Both go through the reply cache, one batched call per step and chunk; where the server
takes GBNF grammars (``llm.grammar_field``) the replies are constrained to the parsed form
(:mod:`tasks.evidencebench.grammars`) and still validated.

Units: summaries (``unit_id``). Output: the ``hypothesis`` row's identity and texts,
``paper_id``, ``aspects`` (in order), ``leak`` (the check's verdict: always false unless
``exclude_leaks`` is off), ``engine``, ``model`` and both requests' cost.
Excluded (``reason``, with ``step``): ``paper_not_in_pool`` (the ``papers`` stage found no
pool for the cited paper), ``aspect_leak``, ``invalid_reply``, ``truncated``,
``request_failed`` (``raw_reply`` holds the last reply, if any).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.port import ChatFailure, ChatReply
from tasks.evidencebench.grammars import aspects_grammar, choice_grammar
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
from tasks.evidencebench.llm_steps import aspects_request, decompose_request, parse_aspects, parse_leak_check
from tasks.evidencebench.pools import SUMMARY_FIELDS, citing_papers, paper_pools


class DecomposeConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    decompose_prompt: str | None = Field(
        None,
        description="Decompose prompt file relative to the config; default prompts/evidencebench/decompose.md.",
    )
    leak_check_prompt: str | None = Field(
        None,
        description="Leak-check prompt file relative to the config; default prompts/evidencebench/leak_check.md.",
    )
    max_aspects: int = Field(
        16, ge=1, le=64, description="Most aspects a grammar-constrained reply may list."
    )
    exclude_leaks: bool = Field(
        True, description="Exclude instances whose leak check says yes (App. C.1); false only records it."
    )


IDENTITY = ("unit_id", "review_id", "cited_ref_id", "summary", "suitability", "hypothesis")
SCHEMA = pa.schema(
    [
        *SUMMARY_FIELDS,
        pa.field("paper_id", pa.string(), nullable=False),
        pa.field("aspects", pa.list_(pa.string()), nullable=False),
        pa.field("leak", pa.bool_(), nullable=False),
        *LLM_COST_FIELDS,
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("unit_id", pa.string(), nullable=False),
    pa.field("review_id", pa.string(), nullable=False),
    pa.field("paper_id", pa.string()),
    pa.field("step", pa.string(), nullable=False),
    pa.field("aspects", pa.list_(pa.string())),
    pa.field("raw_reply", pa.string()),
    pa.field("attempts", pa.int32()),
)


def inputs(ctx: StageContext[DecomposeConfig]) -> dict[str, Any]:
    config = ctx.config
    return {
        "llm": describe(config.llm, ctx.base_dir),
        "prompts": {
            "decompose": step_prompt("decompose", config.decompose_prompt, ctx.base_dir).sha256,
            "leak_check": step_prompt("leak_check", config.leak_check_prompt, ctx.base_dir).sha256,
        },
        "max_aspects": config.max_aspects,
    }


def source(ctx: StageContext[DecomposeConfig], _inputs: dict[str, Any]) -> TableSource:
    table = ctx.upstream["hypothesis"].read(columns=list(IDENTITY))
    papers = citing_papers(ctx.upstream["papers"])
    ids = pa.array([papers.get(u) for u in table.column("unit_id").to_pylist()], pa.string())
    return TableSource(table.append_column("paper_id", ids))


def _excluded(row: dict[str, Any], step: str, fields: dict[str, Any]) -> dict[str, Any]:
    return excluded_row(row, {"paper_id": row["paper_id"], "step": step, **fields})


def process(chunk: pa.Table, ctx: StageContext[DecomposeConfig]) -> ChunkResult:
    """Decompose every summary of the chunk, then leak-check the decomposed ones."""
    config = ctx.config
    sampling = config.llm.sampling
    rows = chunk.to_pylist()
    pools = paper_pools(ctx.upstream["papers"], [r["paper_id"] for r in rows if r["paper_id"] is not None])
    excluded: list[dict[str, Any]] = []
    ready: list[dict[str, Any]] = []
    for row in rows:
        if row["paper_id"] not in pools:
            detail = f"no candidate pool for the cited reference {row['cited_ref_id']} (see the papers stage)"
            excluded.append(_excluded(row, "decompose", {"reason": "paper_not_in_pool", "detail": detail}))
        else:
            ready.append(row)

    prompt = step_prompt("decompose", config.decompose_prompt, ctx.base_dir)
    grammar = aspects_grammar(config.max_aspects)
    requests = [
        constrained(
            decompose_request(
                r["unit_id"], r["paper_id"], r["summary"], pools[r["paper_id"]].texts,
                prompt=prompt, sampling=sampling,
            ),
            grammar,
        )
        for r in ready
    ]  # fmt: skip
    decomposed, decompose_stats = ask(ctx, config.llm, requests, parse_aspects)
    checking: list[tuple[dict[str, Any], ChatReply]] = []
    for row, outcome in zip(ready, decomposed, strict=True):
        if isinstance(outcome, ChatFailure):
            fields = failure_fields("decompose", outcome)
            excluded.append(_excluded(row, "decompose", fields))
        else:
            assert isinstance(outcome, ChatReply)
            checking.append((row, outcome))

    prompt = step_prompt("leak_check", config.leak_check_prompt, ctx.base_dir)
    grammar = choice_grammar("DECISION", ("yes", "no"))
    requests = [
        constrained(
            aspects_request(
                "leak_check", row["unit_id"], row["summary"], reply.value, prompt=prompt, sampling=sampling
            ),
            grammar,
        )
        for row, reply in checking
    ]
    checked, leak_stats = ask(ctx, config.llm, requests, parse_leak_check)
    kept: list[dict[str, Any]] = []
    for (row, reply), outcome in zip(checking, checked, strict=True):
        aspects = list(reply.value)
        if isinstance(outcome, ChatFailure):
            fields = failure_fields("leak_check", outcome)
            excluded.append(_excluded(row, "leak_check", {**fields, "aspects": aspects}))
            continue
        assert isinstance(outcome, ChatReply)
        if outcome.value and config.exclude_leaks:
            fields = {
                "reason": "aspect_leak",
                "detail": "leak_check: an aspect states information the summary does not",
                "aspects": aspects,
                "raw_reply": outcome.text,
                "attempts": outcome.attempts,
            }
            excluded.append(_excluded(row, "leak_check", fields))
            continue
        kept.append(
            {
                **{name: row[name] for name in IDENTITY},
                "paper_id": row["paper_id"],
                "aspects": aspects,
                "leak": bool(outcome.value),
                "engine": config.llm.engine,
                "model": outcome.model,
                **spent(reply, outcome),
            }
        )
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        cost=llm_cost(config.llm, decompose_stats + leak_stats),
    )


SPEC: StageSpec[DecomposeConfig] = StageSpec(
    name="decompose",
    version=1,
    config_type=DecomposeConfig,
    upstream=("hypothesis", "papers"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    inputs=inputs,
    source=source,
    process=process,
    description="LLM: each summary broken into study aspects, then checked that no aspect leaks.",
)
