"""The chat-model port on any OpenAI-compatible server, with the official ``openai`` client.

vLLM (``vllm serve``), OpenAI itself and llama.cpp's ``python -m llama_cpp.server`` all
answer ``POST {base_url}/chat/completions``. What is sent per request: ``model``,
``messages``, ``temperature``, ``top_p``, ``max_tokens`` (the field all three servers read),
``seed`` only when the sampling sets one, and a ``response_format`` chosen by
``structured_output`` when the request carries a JSON schema:

- ``"json_schema"``: ``{"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}``,
  as vLLM and OpenAI read it (https://docs.vllm.ai/en/latest/features/structured_outputs.html);
- ``"json_object"``: ``{"type": "json_object", "schema": schema}``, as llama-cpp-python's
  server reads it (0.3.x ``ChatCompletionRequestResponseFormat``: it turns ``schema`` into a
  grammar; it answers ``"json_schema"`` with HTTP 500 and a validation error, which is
  retried like any 5xx, then ends as ``request_failed``: use this mode for it);
- ``"none"``: nothing (servers without constrained decoding).

A request that carries a GBNF grammar has it sent under the field ``grammar_field`` names
(no server shares one, and OpenAI's API has none):

- ``"grammar"``: ``{"grammar": g}``, llama-cpp-python's server (``CreateChatCompletionRequest.grammar``);
- ``"guided_grammar"``: ``{"guided_grammar": g}``, vLLM before 0.11 (removed in 0.12);
- ``"structured_outputs"``: ``{"structured_outputs": {"grammar": g}}``, vLLM from 0.11;
- ``"none"`` (the default): nothing; OpenAI refuses unknown fields, and the validator
  still holds replies to the format.

Servers silently ignore fields they do not know, so every reply goes through the caller's
validator whatever the mode. A reply that fails it, or stops at ``max_tokens``
(``finish_reason == "length"``), is asked again up to ``max_invalid_retries`` times, then
ends as a :class:`~tasks.common.llm.port.ChatFailure` with its raw text.

Transport: the client is built with ``max_retries=0`` so every retry is made and counted
here. 408, 409, 429, 5xx, timeouts (``timeout_s`` for the whole request) and failed
connections are retried up to ``max_attempts`` sends per ask, after an exponential backoff
with jitter (``backoff_base_s`` doubling up to ``backoff_max_s``) or, on a 429/503 that
says so, after the server's ``retry-after-ms`` / ``Retry-After`` (capped at
``backoff_max_s`` so a confused server cannot park the run). 401 and 403 (the key is
wrong for every request) raise :class:`~tasks.common.llm.port.ChatModelError` and stop the run;
other 4xx are not retried: the request ends as ``request_failed`` with the server's message. At most ``max_concurrency``
requests are in flight, and with ``requests_per_second`` their starts are spaced evenly.

The key (``api_key``; the caller reads it from the environment, ``None`` sends vLLM's
placeholder ``"EMPTY"``) never appears in :meth:`OpenAIChatModel.options`, a failure's
detail or ``repr``; nor does ``base_url``, which says where the model runs, not what it
computes, and is left out of :meth:`~OpenAIChatModel.options` so moving the server keeps
cached replies.

``progress``, given to the constructor, is called as ``progress(done, total)`` from the
calling thread each time a request of a :meth:`~OpenAIChatModel.run` call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import random
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from tasks.common.llm.port import (
    ChatFailure,
    ChatModelError,
    ChatOutcome,
    ChatReply,
    ChatRequest,
    FailureReason,
    OnOutcome,
    ReplyInvalid,
    Validator,
)
from tasks.common.urls import public_url

StructuredOutput = Literal["json_schema", "json_object", "none"]
STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("json_schema", "json_object", "none")
GrammarField = Literal["grammar", "guided_grammar", "structured_outputs", "none"]
GRAMMAR_FIELDS: tuple[GrammarField, ...] = ("grammar", "guided_grammar", "structured_outputs", "none")
SERVER_KIND = "openai-compatible"
PLACEHOLDER_KEY = "EMPTY"
RETRIED_4XX = frozenset({408, 409, 429})
_WINDOW_PER_SLOT = 2  # requests kept scheduled per concurrency slot, so backoff sleeps do not idle slots

Progress = Callable[[int, int], None]


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


def check_grammar_field(grammar_field: str) -> None:
    if grammar_field not in GRAMMAR_FIELDS:
        raise ChatModelError(f"grammar_field {grammar_field!r}: use one of {', '.join(GRAMMAR_FIELDS)}")


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


@dataclass(frozen=True)
class _Answer:
    """One HTTP 200 reply, before validation."""

    text: str | None
    finish_reason: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    sends: int


@dataclass(frozen=True)
class _Unanswered:
    """The transport gave up: the detail says why, ``sends`` how many requests went out."""

    detail: str
    sends: int


class _Gate:
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


class OpenAIChatModel:
    """The :class:`~tasks.common.llm.port.ChatModel` port on an OpenAI-compatible chat endpoint.

    ``run`` is synchronous: it runs its own event loop (``asyncio.run``) in the calling
    thread, so call it from a worker thread when the caller already runs a loop.
    """

    engine: str = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        structured_output: StructuredOutput = "json_schema",
        grammar_field: GrammarField = "none",
        max_concurrency: int = 8,
        requests_per_second: float | None = None,
        timeout_s: float = 120.0,
        max_attempts: int = 5,
        max_invalid_retries: int = 2,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        progress: Progress | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ChatModelError(
                f"chat base_url {public_url(base_url)!r} is not an http(s) URL: give the API root, "
                "e.g. http://gpu-host:8000/v1"
            )
        if not model.strip():
            raise ChatModelError("no chat model given: use the model name the server serves")
        if structured_output not in STRUCTURED_OUTPUTS:
            raise ChatModelError(
                f"structured_output {structured_output!r}: use one of {', '.join(STRUCTURED_OUTPUTS)}"
            )
        check_grammar_field(grammar_field)
        if max_concurrency < 1:
            raise ChatModelError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if requests_per_second is not None and not (
            requests_per_second > 0 and math.isfinite(requests_per_second)
        ):
            raise ChatModelError(f"requests_per_second must be positive (or None), got {requests_per_second}")
        if not timeout_s > 0:
            raise ChatModelError(f"timeout_s must be positive, got {timeout_s}")
        if max_attempts < 1:
            raise ChatModelError(f"max_attempts must be at least 1, got {max_attempts}")
        if max_invalid_retries < 0:
            raise ChatModelError(f"max_invalid_retries must be >= 0, got {max_invalid_retries}")
        if not 0 <= backoff_base_s <= backoff_max_s:
            raise ChatModelError(
                f"need 0 <= backoff_base_s <= backoff_max_s, got {backoff_base_s} and {backoff_max_s}"
            )

        self.model = model.strip()
        self.base_url = public_url(base_url.strip())
        self.structured_output: StructuredOutput = structured_output
        self.grammar_field: GrammarField = grammar_field
        self.max_concurrency = max_concurrency
        self.requests_per_second = requests_per_second
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.max_invalid_retries = max_invalid_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.progress = progress
        self._endpoint = base_url.strip()
        key = (api_key or "").strip()
        self._key = key or PLACEHOLDER_KEY
        # The placeholder is public and a common word: scrubbing it would garble messages.
        self._secret = key if key and key != PLACEHOLDER_KEY else None

    # -- the port ---------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        # grammar_field changes only requests that carry a grammar; the reply cache's key
        # leaves it out for the others (tasks.common.llm.cache.request_key).
        return {
            "structured_output": self.structured_output,
            "grammar_field": self.grammar_field,
            "server": SERVER_KIND,
        }

    def run(
        self,
        requests: Sequence[ChatRequest],
        validate: Validator,
        on_outcome: OnOutcome | None = None,
    ) -> list[ChatOutcome]:
        check_requests(requests)
        if not requests:
            return []
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # no loop in this thread: asyncio.run may start one
        else:
            raise ChatModelError(
                "OpenAIChatModel.run was called from inside a running asyncio event loop; it runs its own "
                "loop: call it from a worker thread (e.g. await asyncio.to_thread(model.run, ...))"
            )
        return asyncio.run(self._run_all(list(requests), validate, on_outcome))

    def __repr__(self) -> str:
        return (
            f"OpenAIChatModel(base_url={self.base_url!r}, model={self.model!r}, options={self.options()!r})"
        )

    # -- internals --------------------------------------------------------------------

    async def _run_all(
        self, requests: list[ChatRequest], validate: Validator, on_outcome: OnOutcome | None
    ) -> list[ChatOutcome]:
        """Keep a bounded window of request tasks (not one task per request: lists are long)
        and hand each outcome on as it ends; an exception cancels the rest and propagates."""
        gate = _Gate(self.max_concurrency, self.requests_per_second)
        client = openai.AsyncOpenAI(
            api_key=self._key, base_url=self._endpoint, timeout=self.timeout_s, max_retries=0
        )
        outcomes: list[ChatOutcome | None] = [None] * len(requests)
        todo: Iterator[int] = iter(range(len(requests)))
        window = self.max_concurrency * _WINDOW_PER_SLOT
        pending: dict[asyncio.Task[ChatOutcome], int] = {}
        done_count = 0
        try:
            while True:
                for i in todo:
                    pending[asyncio.create_task(self._obtain(client, gate, requests[i], validate))] = i
                    if len(pending) >= window:
                        break
                if not pending:
                    break
                finished, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                # Hand on every outcome that ended before raising one task's error: they are paid for.
                error: BaseException | None = None
                for task in sorted(finished, key=pending.__getitem__):
                    i = pending.pop(task)
                    if task.exception() is not None:
                        error = error or task.exception()
                        continue
                    outcome = outcomes[i] = task.result()
                    done_count += 1
                    if on_outcome is not None:
                        on_outcome(outcome)
                    if self.progress is not None:
                        self.progress(done_count, len(requests))
                if error is not None:
                    raise error
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await client.close()
        return [o for o in outcomes if o is not None]

    async def _obtain(
        self, client: openai.AsyncOpenAI, gate: _Gate, request: ChatRequest, validate: Validator
    ) -> ChatOutcome:
        """Ask until a reply validates, the re-asks are used up or the transport gives up."""
        sends = prompt_tokens = completion_tokens = 0
        for ask in range(self.max_invalid_retries + 1):
            answer = await self._send(client, gate, request)
            sends += answer.sends
            if isinstance(answer, _Unanswered):
                return ChatFailure(
                    request.custom_id,
                    "request_failed",
                    answer.detail,
                    None,
                    sends,
                    prompt_tokens,
                    completion_tokens,
                )
            prompt_tokens += answer.prompt_tokens
            completion_tokens += answer.completion_tokens
            reason, detail, value = self._check(answer, request, validate)
            if reason is None:
                assert answer.text is not None
                return ChatReply(
                    custom_id=request.custom_id,
                    text=answer.text,
                    value=value,
                    model=answer.model,
                    finish_reason=answer.finish_reason,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    attempts=sends,
                )
            if ask == self.max_invalid_retries:
                asks = ask + 1
                return ChatFailure(
                    request.custom_id,
                    reason,
                    f"{detail} (last of {asks} ask{'s' if asks > 1 else ''})",
                    answer.text,
                    sends,
                    prompt_tokens,
                    completion_tokens,
                )
        raise AssertionError("unreachable: the loop returns on its last ask")

    def _check(
        self, answer: _Answer, request: ChatRequest, validate: Validator
    ) -> tuple[FailureReason | None, str, Any]:
        """(None, "", value) for an acceptable reply, else (reason, why, None).

        Only :class:`ReplyInvalid` means "ask again": any other exception from the validator
        is a bug and propagates.
        """
        if answer.finish_reason == "length":
            return (
                "truncated",
                f"the reply stopped at max_tokens={request.sampling.max_tokens}: "
                "raise sampling.max_tokens or ask for a shorter answer",
                None,
            )
        if answer.text is None:
            return (
                "invalid_reply",
                f"the reply carries no text (finish_reason={answer.finish_reason!r})",
                None,
            )
        try:
            value = validate(answer.text)
        except ReplyInvalid as err:
            return "invalid_reply", f"the reply does not validate: {err}", None
        return None, "", value

    async def _send(
        self, client: openai.AsyncOpenAI, gate: _Gate, request: ChatRequest
    ) -> _Answer | _Unanswered:
        """One ask: send until the server answers 200 or the attempts are used up."""
        why = ""
        for attempt in range(1, self.max_attempts + 1):
            asked_wait: float | None = None
            async with gate.slot():
                try:
                    async with asyncio.timeout(self.timeout_s):
                        completion = await self._create(client, request)
                    return self._answer(completion, attempt)
                except openai.APIStatusError as exc:
                    status = exc.status_code
                    why = f"HTTP {status}: {self._server_message(exc)}"
                    if status in (401, 403):
                        # Wrong or missing credentials fail every request alike: stop the
                        # run now instead of recording a failure per request.
                        raise ChatModelError(
                            f"{self.base_url} refused the credentials ({why}); check the API key variable"
                        ) from None
                    if not (status in RETRIED_4XX or status >= 500):
                        return _Unanswered(
                            f"{self.base_url} refused the request ({why}); not retried", attempt
                        )
                    asked_wait = retry_after_s(exc.response.headers)
                except (openai.APITimeoutError, TimeoutError):
                    why = f"no complete answer within timeout_s={self.timeout_s}"
                except openai.APIConnectionError as exc:
                    why = f"cannot reach {self.base_url}: {self._scrub(str(exc.__cause__ or exc))}"
            if attempt < self.max_attempts:
                await asyncio.sleep(self._backoff(attempt, asked_wait))
        times = f"{self.max_attempts} attempt{'s' if self.max_attempts > 1 else ''}"
        return _Unanswered(f"gave up after {times}; last: {why}", self.max_attempts)

    async def _create(self, client: openai.AsyncOpenAI, request: ChatRequest) -> ChatCompletion:
        sampling = request.sampling
        extra: dict[str, Any] = {}
        response_format = self._response_format(request)
        if response_format is not None:
            # Sent as a raw field: llama.cpp's variant is not in the client's typed union.
            extra["response_format"] = response_format
        merge_fields(extra, grammar_fields(self.grammar_field, request.grammar))
        return await client.chat.completions.create(
            model=self.model,
            messages=cast("list[ChatCompletionMessageParam]", [dict(m) for m in request.messages]),
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed if sampling.seed is not None else openai.omit,
            extra_body=extra or None,
        )

    def _response_format(self, request: ChatRequest) -> dict[str, Any] | None:
        schema = request.json_schema
        if schema is None or self.structured_output == "none":
            return None
        if self.structured_output == "json_object":
            return {"type": "json_object", "schema": dict(schema)}
        return {
            "type": "json_schema",
            "json_schema": {"name": request.schema_name, "schema": dict(schema), "strict": True},
        }

    def _answer(self, completion: ChatCompletion, sends: int) -> _Answer:
        # Servers differ in what they fill in: read defensively, count what is missing as 0.
        choices = getattr(completion, "choices", None) or []
        choice = choices[0] if choices else None
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None)
        usage = getattr(completion, "usage", None)
        return _Answer(
            text=text if isinstance(text, str) else None,
            finish_reason=str(getattr(choice, "finish_reason", None) or "unknown"),
            model=str(getattr(completion, "model", None) or self.model),
            prompt_tokens=int(getattr(usage, "prompt_tokens", None) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", None) or 0),
            sends=sends,
        )

    def _backoff(self, retry: int, asked_wait: float | None) -> float:
        if asked_wait is not None:
            return min(asked_wait, self.backoff_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (retry - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def _server_message(self, exc: openai.APIStatusError) -> str:
        body = exc.body
        message: Any = None
        if isinstance(body, dict):
            error = body.get("error", body)
            message = error.get("message") if isinstance(error, dict) else error
            message = message if message is not None else body.get("detail")
        return self._scrub(str(message) if message is not None else exc.message)

    def _scrub(self, text: str) -> str:
        one_line = " ".join(text.split())
        if self._secret is not None:
            one_line = one_line.replace(self._secret, "<api key>")
        return one_line if len(one_line) <= 300 else one_line[:297] + "..."
