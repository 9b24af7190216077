"""The LLM's say on pages the single-study rules leave undecided (prompt
``prompts/crossgenre/single_study.md``, JSON reply; sent through :class:`tasks.common.llm.stage.LLMCalls`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from irforge.stage import StageContext
from tasks.common.llm.config import LLMConfig
from tasks.common.llm.port import ChatReply, ChatRequest, ReplyInvalid
from tasks.common.llm.prompt import PromptTemplate, find_prompt
from tasks.common.llm.stage import LLMCalls, json_object

DEFAULT_PROMPT = "crossgenre/single_study.md"
PLACEHOLDERS = frozenset({"headline", "site", "works", "text"})
REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "single_study": {"type": "boolean"},
        "reason": {"type": "string", "minLength": 1, "maxLength": 300},
    },
    "required": ["single_study", "reason"],
    "additionalProperties": False,
}


def load_prompt(base_dir: Path, name: str) -> PromptTemplate:
    """The prompt ``name`` (next to the config or in ``prompts/``), with exactly :data:`PLACEHOLDERS`."""
    return find_prompt(base_dir, name, "single-study prompt", PLACEHOLDERS)


def parse_reply(text: str) -> tuple[bool, str]:
    """``{"single_study": bool, "reason": str}`` (a Markdown code fence allowed); ReplyInvalid otherwise."""
    value = json_object(text, frozenset({"single_study", "reason"}))
    if not isinstance(value["single_study"], bool):
        raise ReplyInvalid("'single_study' is not true or false")
    if not isinstance(value["reason"], str) or not value["reason"].strip():
        raise ReplyInvalid("'reason' is not a non-empty string")
    return value["single_study"], value["reason"].strip()


def ask_llm(
    ctx: StageContext[Any], llm: LLMConfig, rows: list[dict[str, Any]], calls: LLMCalls
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The undecided ``rows`` the LLM keeps, and those it calls multiple studies (failures: ``calls``)."""
    prompt = load_prompt(ctx.base_dir, ctx.config.prompt)

    def request(row: dict[str, Any]) -> ChatRequest:
        text = prompt.template.substitute(
            headline=row["headline"],
            site=row["site"],
            works=row["_works_text"],
            text=row["main_text"][: ctx.config.max_text_chars],
        )
        return ChatRequest(
            custom_id=row["page_id"],
            messages=({"role": "user", "content": text},),
            sampling=llm.sampling,
            json_schema=REPLY_SCHEMA,
            schema_name="single_study",
        )

    def note_model(row: dict[str, Any], reply: ChatReply) -> None:
        row["_model"] = reply.model  # the model that answered, for the decision text

    kept, refused = [], []
    for row in calls.step(None, rows, request, parse_reply, into="_reply", check=note_model):
        single, reason = row["_reply"]
        model = row["_model"]
        if single:
            kept.append({**row, "decision": f"LLM ({model}): {reason}"})
        else:
            refused.append({**row, "reason": "multiple_studies", "detail": f"LLM ({model}): {reason}"})
    return kept, refused
