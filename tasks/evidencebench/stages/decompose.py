"""Stage ``decompose``: each summary broken into study aspects, then checked for leaks (App. C.1).

Two LLM steps per summary kept by ``hypothesis`` (prompts ``prompts/evidencebench/decompose.md``
and ``leak_check.md``, see :mod:`tasks.evidencebench.llm_steps`):

1. **decompose**: the summary split into study aspects (``ASPECTS:``), the cited paper's
   pool shown so that the model can apply the granularity rule (an aspect is what one
   sentence of the paper could state);
2. **leak check**: does any aspect carry information the summary does not state
   (``DECISION: yes`` excludes the instance as ``aspect_leak``)?

Replies are grammar-constrained where the server allows (:mod:`tasks.evidencebench.grammars`).

Units: summaries. Output: ``hypothesis``'s identity and texts, ``paper_id``, ``aspects``,
``leak`` (false unless ``exclude_leaks`` is off) and both requests' cost.
Excluded (``reason``, with ``step``): ``paper_not_in_pool`` (the ``papers`` stage found no
pool for the cited paper), ``aspect_leak``, ``invalid_reply``, ``truncated``,
``request_failed`` (``raw_reply`` holds the last reply, if any).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.port import ChatReply
from tasks.common.llm.stage import Check, LLMCalls, Row, failure_schema, kept_schema, llm_resources, required
from tasks.evidencebench.grammars import aspects_grammar, choice_grammar
from tasks.evidencebench.llm_steps import aspects_request, decompose_request, prompt_field, step_prompt
from tasks.evidencebench.parsers import parse_aspects, parse_leak_check
from tasks.evidencebench.pools import SUMMARY_FIELDS, citing_papers, paper_pools


class DecomposeConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    decompose_prompt: str | None = prompt_field("Decompose", "decompose")
    leak_check_prompt: str | None = prompt_field("Leak-check", "leak_check")
    max_aspects: int = Field(
        16, ge=1, le=64, description="Most aspects a grammar-constrained reply may list."
    )
    exclude_leaks: bool = Field(
        True, description="Exclude instances whose leak check says yes (App. C.1); false only records it."
    )


IDENTITY = tuple(field.name for field in SUMMARY_FIELDS)
_S = pa.string()
SCHEMA = kept_schema(*SUMMARY_FIELDS, *required(paper_id=_S, aspects=pa.list_(_S), leak=pa.bool_()))
EXCLUDED_SCHEMA = failure_schema(
    *required(unit_id=_S, review_id=_S),
    pa.field("paper_id", _S),
    extra=[pa.field("aspects", pa.list_(_S))],
    attempts_required=False,
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


def _with_papers(ctx: StageContext[DecomposeConfig], _inputs: dict[str, Any]) -> TableSource:
    table = ctx.upstream["hypothesis"].read(columns=list(IDENTITY))
    papers = citing_papers(ctx.upstream["papers"])
    ids = pa.array([papers.get(u) for u in table.column("unit_id").to_pylist()], pa.string())
    return TableSource(table.append_column("paper_id", ids))


def _no_leak(exclude_leaks: bool) -> Check:
    def check(row: Row, reply: ChatReply) -> Mapping[str, Any] | None:
        if not (reply.value and exclude_leaks):
            return None
        detail = "leak_check: an aspect states information the summary does not"
        fields = {"reason": "aspect_leak", "detail": detail, "step": "leak_check"}
        return {**fields, "raw_reply": reply.text, "attempts": reply.attempts}

    return check


def process(chunk: pa.Table, ctx: StageContext[DecomposeConfig]) -> ChunkResult:
    """Decompose every summary of the chunk, then leak-check the decomposed ones."""
    config, sampling = ctx.config, ctx.config.llm.sampling
    calls = LLMCalls(ctx, config.llm, SCHEMA, EXCLUDED_SCHEMA)
    rows = chunk.to_pylist()
    pools = paper_pools(ctx.upstream["papers"], [r["paper_id"] for r in rows if r["paper_id"] is not None])
    ready: list[Row] = []
    for row in rows:
        if row["paper_id"] in pools:
            ready.append(row)
        else:
            detail = f"no candidate pool for the cited reference {row['cited_ref_id']} (see the papers stage)"
            calls.exclude(row, reason="paper_not_in_pool", detail=detail, step="decompose")
    prompt = step_prompt("decompose", config.decompose_prompt, ctx.base_dir)
    decomposed = calls.step(
        "decompose",
        ready,
        lambda r: decompose_request(
            r["unit_id"],
            r["paper_id"],
            r["summary"],
            pools[r["paper_id"]].texts,
            prompt=prompt,
            sampling=sampling,
        ),
        parse_aspects,
        grammar=aspects_grammar(config.max_aspects),
        into="aspects",
    )
    prompt = step_prompt("leak_check", config.leak_check_prompt, ctx.base_dir)
    checked = calls.step(
        "leak_check",
        decomposed,
        lambda r: aspects_request(
            "leak_check", r["unit_id"], r["summary"], r["aspects"], prompt=prompt, sampling=sampling
        ),
        parse_leak_check,
        grammar=choice_grammar("DECISION", ("yes", "no")),
        into="leak",
        check=_no_leak(config.exclude_leaks),
    )
    return calls.result(checked)


SPEC: StageSpec[DecomposeConfig] = StageSpec(
    name="decompose",
    version=1,
    config_type=DecomposeConfig,
    upstream=("hypothesis", "papers"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    inputs=inputs,
    source=_with_papers,
    process=process,
    resources=lambda config: llm_resources(config.llm),
    description="LLM: each summary broken into study aspects, then checked that no aspect leaks.",
)
