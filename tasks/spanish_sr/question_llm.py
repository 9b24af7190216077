"""Titles turned into questions by an LLM (prompt ``prompts/spanish_sr/question.md``, JSON reply;
sent through :class:`tasks.common.llm.stage.LLMCalls`), for the ``questions`` stage's mode ``llm``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from irforge.errors import ConfigError
from irforge.stage import StageContext
from tasks.common.llm.config import LLMConfig
from tasks.common.llm.port import ChatReply, ChatRequest, ReplyInvalid
from tasks.common.llm.prompt import PROMPTS_DIR, PromptTemplate, load_template
from tasks.common.llm.stage import LLMCalls

DEFAULT_PROMPT = "spanish_sr/question.md"
PLACEHOLDERS = frozenset({"language", "title"})
MAX_CHARS = 500
REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"question": {"type": "string", "minLength": 3, "maxLength": MAX_CHARS}},
    "required": ["question"],
    "additionalProperties": False,
}
_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)


def _prompt_path(base_dir: Path, name: str) -> Path:
    for path in (base_dir / name, PROMPTS_DIR / name):
        if path.is_file():
            return path
    raise ConfigError(f"questions: no prompt file {name!r} next to the config or in {PROMPTS_DIR}")


def load_prompt(base_dir: Path, name: str) -> PromptTemplate:
    """The question prompt, which must use exactly :data:`PLACEHOLDERS` (a ConfigError otherwise)."""
    loaded = load_template(_prompt_path(base_dir, name), "question prompt")
    used = set(loaded.template.get_identifiers())
    if used != PLACEHOLDERS:
        raise ConfigError(
            f"question prompt {loaded.path}: placeholders must be exactly {sorted(PLACEHOLDERS)}, got {sorted(used)}"
        )
    return loaded


def parse_reply(text: str) -> str:
    """``{"question": str}`` (a Markdown code fence allowed) → the question on one line; ReplyInvalid otherwise."""
    body = text.strip()
    fenced = _FENCE.match(body)
    try:
        value = json.loads(fenced.group(1) if fenced else body)
    except json.JSONDecodeError as exc:
        raise ReplyInvalid(f"not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(value, dict) or set(value) != {"question"}:
        raise ReplyInvalid('not the JSON object {"question": ...}')
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
