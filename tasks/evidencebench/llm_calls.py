"""What every LLM stage of the flow shares: its prompts, the cached call, cost and failure rows.

The stages refine, hypothesis, decompose, align, label and evaluate ask through the reply
cache at ``<cache_dir>/llm_replies.sqlite`` (:func:`ask`), attach GBNF grammars where the
server takes them (:func:`constrained`), end their rows with :data:`LLM_COST_FIELDS` and
quarantine a failed request with :func:`failure_fields`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from irforge.errors import IrforgeError
from irforge.stage import StageContext
from tasks.common.llm.cache import ChatStats, ReplyCache, cached_chat
from tasks.common.llm.config import LLMConfig, chat_model, cost_usd
from tasks.common.llm.port import ChatFailure, ChatOutcome, ChatReply, ChatRequest, Validator
from tasks.evidencebench.llm_steps import Prompt, Step, load_prompt

LLM_COST_FIELDS = (
    pa.field("engine", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("prompt_tokens", pa.int64(), nullable=False),
    pa.field("completion_tokens", pa.int64(), nullable=False),
    pa.field("attempts", pa.int32(), nullable=False),
    pa.field("cached", pa.bool_(), nullable=False),
)
"""Every LLM stage's last columns: which model answered and what its requests cost."""


def step_prompt(step: Step, path: str | None, base_dir: Path) -> Prompt:
    """The prompt of ``step``: the file ``path`` (relative to the config) or the default one."""
    return load_prompt(step, None if path is None else base_dir / path)


def ask(
    ctx: StageContext[Any], llm: LLMConfig, requests: Sequence[ChatRequest], validate: Validator
) -> tuple[list[ChatOutcome], ChatStats]:
    """``requests`` answered through the reply cache at ``<cache_dir>/llm_replies.sqlite``."""
    if ctx.cache_dir is None or ctx.files_dir is None:
        raise IrforgeError("no cache or work folder for the LLM replies (run the stage through the engine)")
    if not requests:
        return [], ChatStats()
    model = chat_model(llm, ctx.base_dir, ctx.files_dir)
    ctx.cache_dir.mkdir(parents=True, exist_ok=True)
    with ReplyCache(ctx.cache_dir / "llm_replies.sqlite") as cache:
        return cached_chat(model, cache, requests, validate)


def llm_cost(llm: LLMConfig, stats: ChatStats) -> dict[str, float]:
    """The manifest's cost entry for the requests behind ``stats``."""
    return {
        "requests_sent": stats.sent,
        "cache_hits": stats.hits,
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "usd": cost_usd(llm, stats.prompt_tokens, stats.completion_tokens),
    }


def failure_fields(step: str, outcome: ChatFailure) -> dict[str, Any]:
    """The excluded-row fields of a request that ended without a valid reply."""
    return {
        "reason": outcome.reason,
        "detail": f"{step}: {outcome.detail}",
        "step": step,
        "raw_reply": outcome.raw_text,
        "attempts": outcome.attempts,
    }


def spent(*replies: ChatReply) -> dict[str, Any]:
    """What the replies of one unit cost together (``cached``: every one came from the cache)."""
    return {
        "prompt_tokens": sum(r.prompt_tokens for r in replies),
        "completion_tokens": sum(r.completion_tokens for r in replies),
        "attempts": sum(r.attempts for r in replies),
        "cached": all(r.cached for r in replies),
    }


def excluded_row(row: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    return {"unit_id": row["unit_id"], "review_id": row["review_id"], **fields}


def constrained(request: ChatRequest, grammar: str | None) -> ChatRequest:
    """``request`` with a GBNF grammar on its reply's form (servers without grammars ignore it)."""
    return request if grammar is None else replace(request, grammar=grammar)
