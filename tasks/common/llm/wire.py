"""What the chat adapters put on the wire and which failures they retry
(:mod:`tasks.common.llm.openai_chat`, :mod:`tasks.common.llm.vllm_batch`).

A request that carries a JSON schema has it sent in the field ``structured_output`` names
(:func:`schema_fields`; https://docs.vllm.ai/en/latest/features/structured_outputs.html):

- ``"json_schema"``: ``{"response_format": {"type": "json_schema", "json_schema": {"name",
  "schema", "strict": true}}}``, as vLLM and OpenAI read it;
- ``"json_object"``: ``{"response_format": {"type": "json_object", "schema": schema}}``, as
  llama-cpp-python's server reads it (0.3.x ``ChatCompletionRequestResponseFormat``: it
  turns ``schema`` into a grammar; vLLM answers any JSON);
- ``"structured_outputs"``: ``{"structured_outputs": {"json": schema}}``, vLLM's own field
  from 0.11 (batch files only);
- ``"none"``: nothing (servers without constrained decoding).

A request that carries a GBNF grammar has it sent in the field ``grammar_field`` names
(:func:`grammar_fields`; no server shares one, and OpenAI's API has none): ``"grammar"``
(llama-cpp-python's ``CreateChatCompletionRequest.grammar``), ``"guided_grammar"`` (vLLM
before 0.11, removed in 0.12), ``"structured_outputs"`` (``{"structured_outputs":
{"grammar": g}}``, vLLM from 0.11) or ``"none"`` (nothing; the validator still holds
replies to the format). Servers ignore fields they do not know, so every reply is validated
whatever the mode.

HTTP 408, 409, 429 and 5xx are worth sending again (:data:`RETRIED_4XX`), after the wait a
429/503 asks for (:func:`retry_after_s`) or an exponential backoff (:func:`backoff_s`);
another 4xx would be refused again. Errors show server text :func:`scrub`-bed of the key;
a :class:`Gate` bounds the requests in flight and spaces their starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

from tasks.common.llm.cache import plain
from tasks.common.llm.port import ChatModelError, ChatRequest

GrammarField = Literal["grammar", "guided_grammar", "structured_outputs", "none"]
GRAMMAR_FIELDS: tuple[GrammarField, ...] = ("grammar", "guided_grammar", "structured_outputs", "none")
RETRIED_4XX = frozenset({408, 409, 429})


def schema_fields(structured_output: str, request: ChatRequest) -> dict[str, Any]:
    """The request-body fields that carry ``request``'s JSON schema in mode ``structured_output``
    (empty for no schema or ``"none"``)."""
    if request.json_schema is None or structured_output == "none":
        return {}
    schema = plain(request.json_schema)
    if structured_output == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    if structured_output == "structured_outputs":
        return {"structured_outputs": {"json": schema}}
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": request.schema_name, "schema": schema, "strict": True},
        }
    }


def grammar_fields(grammar_field: GrammarField, grammar: str | None) -> dict[str, Any]:
    """The request-body fields that carry ``grammar`` to a server read by ``grammar_field``
    (empty for no grammar or ``"none"``)."""
    if grammar is None or grammar_field == "none":
        return {}
    if grammar_field == "structured_outputs":
        return {"structured_outputs": {"grammar": grammar}}
    return {grammar_field: grammar}


def merge_fields(body: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Add ``fields`` to ``body``, merging (one level deep) where both hold a dict under one
    key: vLLM's ``structured_outputs`` gathers several constraints in one object."""
    for key, value in fields.items():
        current = body.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            body[key] = {**current, **value}
        else:
            body[key] = value


def request_fields(
    structured_output: str, grammar_field: GrammarField, request: ChatRequest
) -> dict[str, Any]:
    """The fields beside model, messages and sampling: the schema's and the grammar's."""
    body = schema_fields(structured_output, request)
    merge_fields(body, grammar_fields(grammar_field, request.grammar))
    return body


def reply_options(structured_output: str, grammar_field: GrammarField, **more: Any) -> dict[str, Any]:
    """An adapter's ``options()``: what changes its replies. ``grammar_field`` changes only requests
    that carry a grammar; the reply cache's key leaves it out for the others
    (:func:`tasks.common.llm.cache.request_key`)."""
    return {"structured_output": structured_output, "grammar_field": grammar_field, **more}


def check_settings(
    structured_output: str,
    allowed: Sequence[str],
    grammar_field: str,
    max_attempts: int,
    max_invalid_retries: int,
) -> None:
    """Refuse (:class:`~tasks.common.llm.port.ChatModelError`) settings no adapter can act on."""
    if structured_output not in allowed:
        raise ChatModelError(f"structured_output {structured_output!r}: use one of {', '.join(allowed)}")
    if grammar_field not in GRAMMAR_FIELDS:
        raise ChatModelError(f"grammar_field {grammar_field!r}: use one of {', '.join(GRAMMAR_FIELDS)}")
    if max_attempts < 1:
        raise ChatModelError(f"max_attempts must be at least 1, got {max_attempts}")
    if max_invalid_retries < 0:
        raise ChatModelError(f"max_invalid_retries must be >= 0, got {max_invalid_retries}")


def check_requests(requests: Sequence[ChatRequest]) -> None:
    """Raise ValueError for requests no server could answer: duplicate ids, no messages, or a
    message that is not ``{"role": str, "content": str}``."""
    seen: set[str] = set()
    for request in requests:
        if request.custom_id in seen:
            raise ValueError(f"custom_id {request.custom_id!r} is given twice: ids must be unique per call")
        seen.add(request.custom_id)
        if not request.messages:
            raise ValueError(f"request {request.custom_id!r} has no messages")
        for i, message in enumerate(request.messages):
            if set(message) != {"role", "content"} or not all(isinstance(v, str) for v in message.values()):
                raise ValueError(
                    f"request {request.custom_id!r} message #{i} must be {{'role': str, 'content': str}}, "
                    f"got keys {sorted(message)}"
                )


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks to wait (``retry-after-ms``, or ``Retry-After`` as seconds or
    an HTTP date), or None when it says nothing usable."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        with contextlib.suppress(ValueError):
            value = float(raw_ms) / 1000
            if math.isfinite(value) and value >= 0:
                return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())
    return value if math.isfinite(value) and value >= 0 else None


def backoff_s(retry: int, asked_wait: float | None, base_s: float, max_s: float) -> float:
    """The wait before send ``retry + 1``: the server's ask (capped), else exponential with jitter."""
    if asked_wait is not None:
        return min(asked_wait, max_s)
    ceiling = min(max_s, base_s * 2.0 ** (retry - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def scrub(text: str, secret: str | None) -> str:
    """``text`` on one line, without the key, cut to 300 characters."""
    one_line = " ".join(text.split())
    if secret is not None:
        one_line = one_line.replace(secret, "<api key>")
    return one_line if len(one_line) <= 300 else one_line[:297] + "..."


class Gate:
    """At most ``max_concurrency`` requests in flight; starts spaced by ``1 / requests_per_second``."""

    def __init__(self, max_concurrency: int, requests_per_second: float | None) -> None:
        self._slots = asyncio.Semaphore(max_concurrency)
        self._interval = 1.0 / requests_per_second if requests_per_second else 0.0
        self._next_start = 0.0

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self._slots:
            if self._interval:
                now = asyncio.get_running_loop().time()
                start = max(now, self._next_start)
                self._next_start = start + self._interval
                if start > now:
                    await asyncio.sleep(start - now)
            yield
