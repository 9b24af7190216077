"""Titles turned into questions by an LLM (prompt ``prompts/spanish_sr/question.md``, JSON reply;
sent through :class:`tasks.common.llm.stage.LLMCalls`), for the ``questions`` stage's mode ``llm``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from irforge.stage import StageContext
from tasks.common.llm.config import LLMConfig
from tasks.common.llm.port import ChatReply, ChatRequest, ReplyInvalid
from tasks.common.llm.prompt import PromptTemplate, find_prompt
from tasks.common.llm.stage import LLMCalls, json_object

DEFAULT_PROMPT = "spanish_sr/question.md"
PLACEHOLDERS = frozenset({"language", "title"})
MAX_CHARS = 320  # the longest demo title is 281 characters; a bound the grammar closes the string at
REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"question": {"type": "string", "minLength": 3, "maxLength": MAX_CHARS}},
    "required": ["question"],
    "additionalProperties": False,
}


def load_prompt(base_dir: Path, name: str) -> PromptTemplate:
    """The prompt ``name`` (next to the config or in ``prompts/``), with exactly :data:`PLACEHOLDERS`."""
    return find_prompt(base_dir, name, "question prompt", PLACEHOLDERS)


def parse_reply(text: str) -> str:
    """``{"question": str}`` (a Markdown code fence allowed) → the question on one line; ReplyInvalid otherwise."""
    value = json_object(text, frozenset({"question"}))
    question = value["question"]
    if not isinstance(question, str) or not any(c.isalnum() for c in question):
        raise ReplyInvalid("'question' is not a string with words")
    question = " ".join(question.split())
    if len(question) > MAX_CHARS:
        raise ReplyInvalid(f"'question' is longer than {MAX_CHARS} characters")
    return question


def ask_llm(
    ctx: StageContext[Any], llm: LLMConfig, language: str, rows: list[dict[str, Any]], calls: LLMCalls
) -> list[dict[str, Any]]:
    """``rows`` with ``question`` and ``model`` set from valid replies (failures go to ``calls.excluded``)."""
    prompt = load_prompt(ctx.base_dir, ctx.config.prompt)

    def request(row: dict[str, Any]) -> ChatRequest:
        return ChatRequest(
            custom_id=row["record_id"],
            messages=(
                {
                    "role": "user",
                    "content": prompt.template.substitute(language=language, title=row["title"]),
                },
            ),
            sampling=llm.sampling,
            json_schema=REPLY_SCHEMA,
            schema_name="question",
        )

    def note_model(row: dict[str, Any], reply: ChatReply) -> None:
        row["model"] = reply.model

    return calls.step(None, rows, request, parse_reply, into="question", check=note_model)
