"""An LLM as the translator port: one chat request per query, through any ChatModel adapter.

The laptop/CI default for query translation, through the same LLM port as the
judge: with the embedded llama.cpp server it proves the plumbing; with a vLLM or
OpenAI model it is a real alternative to DeepL.

- The prompt is ``prompts/common/translate_query.md`` (or a file of the caller's): a
  :class:`string.Template` with ``$source_language``, ``$target_language`` (English,
  French, Spanish) and ``$text``; a leading ``<!-- ... -->`` comment is documentation and
  is not sent. The rendered prompt is the only (user) message.
- Every request carries :data:`REPLY_SCHEMA` (``{"translation": "..."}``) for servers that
  constrain output, and every reply is checked by :func:`parse_translation`; the chat model
  re-asks for invalid or truncated replies. A translation identical to its source is
  accepted (drug and gene names often are), an empty one is not.
- A request that still fails is a :class:`~tasks.common.translate.port.TranslationError` naming
  the text's position in the call and the reason; ``cached_translate`` keeps what earlier
  chunks paid for. A chat model that cannot be used at all is a
  :class:`~tasks.common.translate.port.TranslatorUnavailable`.
- ``billed_characters`` is 0 (LLM usage is counted in tokens by the chat model's cache) and
  ``detected_source`` is None (the source language is given, not detected).
- :meth:`LLMTranslator.options` holds the chat model's engine, id and options, the sampling
  and the prompt file's sha256: everything that changes a translation, no URL or key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from irforge.errors import ConfigError
from tasks.common.llm.cache import ChatStats, ReplyCache, cached_chat
from tasks.common.llm.port import ChatFailure, ChatModel, ChatModelError, ChatRequest, ReplyInvalid, Sampling
from tasks.common.llm.prompt import PROMPTS_DIR, load_template
from tasks.common.llm.stage import json_reply
from tasks.common.translate.port import Translation, TranslationError, TranslatorUnavailable, check_pair

ENGINE = "llm"
DEFAULT_PROMPT = PROMPTS_DIR / "common" / "translate_query.md"
LANGUAGE_NAMES = {"en": "English", "fr": "French", "es": "Spanish"}
DEFAULT_SAMPLING = Sampling(temperature=0.0, top_p=1.0, max_tokens=256, seed=0)
MAX_TRANSLATION_CHARS = 400
"""Longest translation accepted. CURE's queries are at most 232 characters; the bound also
lets a grammar-constrained server (llama.cpp, vLLM) close the JSON string instead of
rambling until ``max_tokens`` cuts the reply."""
REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"translation": {"type": "string", "minLength": 1, "maxLength": MAX_TRANSLATION_CHARS}},
    "required": ["translation"],
    "additionalProperties": False,
}
_PLACEHOLDERS = frozenset({"source_language", "target_language", "text"})
_REQUIRED = frozenset({"target_language", "text"})
_SHOWN_CHARS = 80


def parse_translation(reply: str) -> str:
    """The translation in a reply ``{"translation": "..."}``, stripped; :class:`ReplyInvalid` otherwise.

    A reply wrapped in a Markdown code fence (```json ... ```) is accepted: models without
    constrained decoding often add one.
    """
    value = json_reply(reply)
    if not isinstance(value, dict):
        raise ReplyInvalid(f'not a JSON object {{"translation": ...}} but a {type(value).__name__}')
    extra = sorted(set(value) - {"translation"})
    if extra:
        raise ReplyInvalid(f"unexpected keys {extra}: only 'translation' is allowed")
    if "translation" not in value:
        raise ReplyInvalid("no 'translation' key")
    translation = value["translation"]
    if not isinstance(translation, str):
        raise ReplyInvalid(f"'translation' is a {type(translation).__name__}, not a string")
    if not translation.strip():
        raise ReplyInvalid("'translation' is empty")
    return translation.strip()


class LLMTranslator:
    """The :class:`~tasks.common.translate.port.Translator` port on a :class:`~tasks.common.llm.port.ChatModel`."""

    engine: str = ENGINE

    def __init__(
        self,
        model: ChatModel,
        *,
        prompt_path: Path | str | None = None,
        sampling: Sampling | None = None,
    ) -> None:
        path = Path(prompt_path) if prompt_path is not None else DEFAULT_PROMPT
        loaded = load_template(path, "translation prompt")
        self.model = model
        self.sampling = sampling or DEFAULT_SAMPLING
        self.prompt_path = path
        # Of what is sent (the header comment removed): a comment-only edit changes no
        # translation, so neither the cache keys nor the rows that store these options.
        self.template_sha256 = hashlib.sha256(loaded.template.template.encode("utf-8")).hexdigest()
        self.template = loaded.template
        self._check_template(path)

    # -- the port ---------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        return {
            "model_engine": self.model.engine,
            "model": self.model.model,
            "model_options": self.model.options(),
            "sampling": self.sampling.model_dump(),
            "template_sha256": self.template_sha256,
        }

    def translate_each(
        self, texts: Sequence[str], source: str, target: str, cache: ReplyCache | None = None
    ) -> tuple[list[Translation | ChatFailure], ChatStats]:
        """One outcome per text, in order: a translation, or the request's failure.

        With ``cache`` every request goes through the chat reply cache, so a rerun pays only
        for texts never answered (a stage uses this to quarantine failures one by one).
        """
        check_pair(source, target)
        texts = list(texts)
        requests = [
            ChatRequest(
                custom_id=str(i),
                messages=({"role": "user", "content": self.render(text, source, target)},),
                sampling=self.sampling,
                json_schema=REPLY_SCHEMA,
                schema_name="translation",
            )
            for i, text in enumerate(texts)
            if text.strip()  # nothing to translate: answered below without a request
        ]
        try:
            if cache is not None:
                outcomes, stats = cached_chat(self.model, cache, requests, parse_translation)
            else:
                outcomes = self.model.run(requests, parse_translation) if requests else []
                stats = ChatStats(sent=len(requests))
        except ChatModelError as exc:
            raise TranslatorUnavailable(
                f"the chat model behind the LLM translator ({self.model.engine}, {self.model.model}) "
                f"cannot be used: {exc}"
            ) from exc
        by_position: dict[int, Translation | ChatFailure] = {}
        for outcome in outcomes:
            if isinstance(outcome, ChatFailure):
                by_position[int(outcome.custom_id)] = outcome
            else:
                by_position[int(outcome.custom_id)] = Translation(
                    text=str(outcome.value), billed_characters=0, detected_source=None
                )
        lost = [int(r.custom_id) for r in requests if int(r.custom_id) not in by_position]
        if lost:
            raise TranslationError(
                f"the chat model {self.model.engine} returned no answer for text #{lost[0]} "
                f"({len(lost)} text(s) in all): its adapter is broken; report it"
            )
        empty = Translation(text="", billed_characters=0, detected_source=None)
        return [by_position.get(i, empty) for i in range(len(texts))], stats

    def translate(self, texts: Sequence[str], source: str, target: str) -> list[Translation]:
        texts = list(texts)
        outcomes, _ = self.translate_each(texts, source, target)
        failures = [(i, o) for i, o in enumerate(outcomes) if isinstance(o, ChatFailure)]
        if failures:
            i, failure = failures[0]
            others = (
                f" ({len(failures) - 1} more text(s) of this call failed too)" if len(failures) > 1 else ""
            )
            raw = f"; last reply: {_shown(failure.raw_text)}" if failure.raw_text is not None else ""
            raise TranslationError(
                f"LLM translation {source}->{target} of text #{i} ({_shown(texts[i])}) failed after "
                f"{failure.attempts} attempt(s): {failure.reason}: {failure.detail}{raw}{others}"
            )
        return [o for o in outcomes if isinstance(o, Translation)]

    # -- extras -----------------------------------------------------------------------

    def render(self, text: str, source: str, target: str) -> str:
        """The user message asking to translate ``text`` from ``source`` into ``target``."""
        return self.template.substitute(
            source_language=LANGUAGE_NAMES[source], target_language=LANGUAGE_NAMES[target], text=text
        )

    def __repr__(self) -> str:
        return f"LLMTranslator(model={self.model!r}, prompt={self.prompt_path.name!r})"

    # -- internals --------------------------------------------------------------------

    def _check_template(self, path: Path) -> None:
        names = set(self.template.get_identifiers())
        unknown, missing = sorted(names - _PLACEHOLDERS), sorted(_REQUIRED - names)
        if unknown:
            raise ConfigError(
                f"translation prompt {path}: unknown placeholder(s) {', '.join('$' + n for n in unknown)}; "
                f"use {', '.join('$' + n for n in sorted(_PLACEHOLDERS))}"
            )
        if missing:
            raise ConfigError(
                f"translation prompt {path}: missing placeholder(s) {', '.join('$' + n for n in missing)}"
            )


def _shown(text: str) -> str:
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= _SHOWN_CHARS else one_line[: _SHOWN_CHARS - 3] + "...")
