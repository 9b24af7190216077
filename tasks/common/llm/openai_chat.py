"""The chat-model port on any OpenAI-compatible server, with the official ``openai`` client.

vLLM (``vllm serve``), OpenAI itself and llama.cpp's ``python -m llama_cpp.server`` all
answer ``POST {base_url}/chat/completions``. What is sent per request: ``model``,
``messages``, ``temperature``, ``top_p``, ``max_tokens`` (the field all three servers read),
``seed`` only when the sampling sets one, and the fields that carry a request's JSON schema
(``structured_output``: ``"json_schema"``, ``"json_object"`` — llama-cpp-python's server
answers ``"json_schema"`` with HTTP 500, retried like any 5xx, then ``request_failed``: use
this mode for it — or ``"none"``) or GBNF grammar (``grammar_field``), as
:mod:`tasks.common.llm.wire` describes them. Every reply goes through the caller's validator;
a reply that fails it, or stops at ``max_tokens`` (``finish_reason == "length"``), is asked
again up to ``max_invalid_retries`` times, then ends as a
:class:`~tasks.common.llm.port.ChatFailure` with its raw text.

Transport: the client is built with ``max_retries=0`` so every retry is made and counted
here. 408, 409, 429, 5xx, timeouts (``timeout_s`` for the whole request) and failed
connections are retried up to ``max_attempts`` sends per ask, after an exponential backoff
with jitter (``backoff_base_s`` doubling up to ``backoff_max_s``) or, on a 429/503 that
says so, after the server's ``retry-after-ms`` / ``Retry-After`` (capped at
``backoff_max_s``). 401 and 403 (the key is wrong for every request) raise
:class:`~tasks.common.llm.port.ChatModelError` and stop the run; other 4xx are not retried:
the request ends as ``request_failed`` with the server's message. At most
``max_concurrency`` requests are in flight (over all servers), and with
``requests_per_second`` their starts are spaced evenly.

Several servers (``base_url`` given as a list): sends go to the one with the fewest requests
in flight; a failed connection, timeout or 5xx takes a server out for ``server_cooldown_s``
and the request goes at once to another (:mod:`tasks.common.endpoints`). A request that got
an answer is never sent again.

The key (``api_key``; the caller reads it from the environment, ``None`` sends vLLM's
placeholder ``"EMPTY"``) never appears in :meth:`OpenAIChatModel.options`, a failure's
detail or ``repr``; nor does ``base_url``, which says where the model runs, not what it
computes, so moving the server keeps cached replies. ``progress(done, total)``, given to
the constructor, is called from the calling thread as each request of a run ends.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from tasks.common.endpoints import DEFAULT_COOLDOWN_S, EndpointPool, not_http, url_list
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
from tasks.common.llm.wire import (
    RETRIED_4XX,
    Gate,
    GrammarField,
    backoff_s,
    check_requests,
    check_settings,
    reply_options,
    request_fields,
    retry_after_s,
    scrub,
)

StructuredOutput = Literal["json_schema", "json_object", "none"]
STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("json_schema", "json_object", "none")
SERVER_KIND = "openai-compatible"
PLACEHOLDER_KEY = "EMPTY"
_WINDOW_PER_SLOT = 2  # requests kept scheduled per concurrency slot, so backoff sleeps do not idle slots

Progress = Callable[[int, int], None]


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


class OpenAIChatModel:
    """The :class:`~tasks.common.llm.port.ChatModel` port on an OpenAI-compatible chat endpoint.

    ``run`` is synchronous: it runs its own event loop (``asyncio.run``) in the calling
    thread, so call it from a worker thread when the caller already runs a loop.
    """

    engine: str = "openai"

    def __init__(
        self,
        *,
        base_url: str | Sequence[str],
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
        server_cooldown_s: float = DEFAULT_COOLDOWN_S,
    ) -> None:
        urls = url_list(base_url)
        if (bad := not_http(urls)) is not None:
            raise ChatModelError(
                f"chat base_url {bad!r} is not an http(s) URL: give the API root, e.g. http://gpu-host:8000/v1"
            )
        if not server_cooldown_s > 0:
            raise ChatModelError(f"server_cooldown_s must be positive, got {server_cooldown_s}")
        if not model.strip():
            raise ChatModelError("no chat model given: use the model name the server serves")
        check_settings(
            structured_output, STRUCTURED_OUTPUTS, grammar_field, max_attempts, max_invalid_retries
        )
        if max_concurrency < 1:
            raise ChatModelError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if requests_per_second is not None and not (
            requests_per_second > 0 and math.isfinite(requests_per_second)
        ):
            raise ChatModelError(f"requests_per_second must be positive (or None), got {requests_per_second}")
        if not timeout_s > 0:
            raise ChatModelError(f"timeout_s must be positive, got {timeout_s}")
        if not 0 <= backoff_base_s <= backoff_max_s:
            raise ChatModelError(
                f"need 0 <= backoff_base_s <= backoff_max_s, got {backoff_base_s} and {backoff_max_s}"
            )

        self.model = model.strip()
        self._pool = EndpointPool(urls, cooldown_s=server_cooldown_s, service="chat server")
        self.base_url = self._pool.names
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
        key = (api_key or "").strip()
        self._key = key or PLACEHOLDER_KEY
        # The placeholder is public and a common word: scrubbing it would garble messages.
        self._secret = key if key and key != PLACEHOLDER_KEY else None

    # -- the port ---------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        return reply_options(self.structured_output, self.grammar_field, server=SERVER_KIND)

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
        gate = Gate(self.max_concurrency, self.requests_per_second)
        clients = [
            openai.AsyncOpenAI(api_key=self._key, base_url=e.url, timeout=self.timeout_s, max_retries=0)
            for e in self._pool.endpoints
        ]
        outcomes: list[ChatOutcome | None] = [None] * len(requests)
        todo: Iterator[int] = iter(range(len(requests)))
        window = self.max_concurrency * _WINDOW_PER_SLOT
        pending: dict[asyncio.Task[ChatOutcome], int] = {}
        done_count = 0
        try:
            while True:
                for i in todo:
                    pending[asyncio.create_task(self._obtain(clients, gate, requests[i], validate))] = i
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
            await asyncio.gather(*(client.close() for client in clients))
        return [o for o in outcomes if o is not None]

    async def _obtain(
        self, clients: list[openai.AsyncOpenAI], gate: Gate, request: ChatRequest, validate: Validator
    ) -> ChatOutcome:
        """Ask until a reply validates, the re-asks are used up or the transport gives up."""
        sends = prompt_tokens = completion_tokens = 0
        for ask in range(self.max_invalid_retries + 1):
            answer = await self._send(clients, gate, request)
            sends += answer.sends
            if isinstance(answer, _Unanswered):
                tokens = (prompt_tokens, completion_tokens)
                return ChatFailure(request.custom_id, "request_failed", answer.detail, None, sends, *tokens)
            prompt_tokens += answer.prompt_tokens
            completion_tokens += answer.completion_tokens
            reason, detail, value = check_answer(answer, request, validate)
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
                detail = f"{detail} (last of {ask + 1} ask{'s' if ask else ''})"
                tokens = (prompt_tokens, completion_tokens)
                return ChatFailure(request.custom_id, reason, detail, answer.text, sends, *tokens)
        raise AssertionError("unreachable: the loop returns on its last ask")

    async def _send(
        self, clients: list[openai.AsyncOpenAI], gate: Gate, request: ChatRequest
    ) -> _Answer | _Unanswered:
        """One ask: send until a server answers 200 or the attempts are used up; a send a server
        failed goes at once to another, attempt unspent (tasks/common/endpoints.py)."""
        why = ""
        attempt = sends = failovers = 0
        while attempt < self.max_attempts:
            asked_wait: float | None = None
            down = False
            async with gate.slot():
                with self._pool.lease() as lease:
                    where = lease.endpoint.public
                    sends += 1
                    try:
                        async with asyncio.timeout(self.timeout_s):
                            completion = await self._create(clients[lease.endpoint.index], request)
                        return read_completion(completion, sends, self.model)
                    except openai.APIStatusError as exc:
                        status = exc.status_code
                        why = f"HTTP {status}: {server_message(exc, self._secret)}"
                        if status in (401, 403):
                            # Wrong or missing credentials fail every request alike: stop the
                            # run now instead of recording a failure per request.
                            raise ChatModelError(
                                f"{where} refused the credentials ({why}); check the API key variable"
                            ) from None
                        if not (status in RETRIED_4XX or status >= 500):
                            return _Unanswered(f"{where} refused the request ({why}); not retried", sends)
                        asked_wait = retry_after_s(exc.response.headers)
                        down = status >= 500
                    except (openai.APITimeoutError, TimeoutError):
                        why, down = f"no complete answer from {where} within timeout_s={self.timeout_s}", True
                    except openai.APIConnectionError as exc:
                        why = f"cannot reach {where}: {scrub(str(exc.__cause__ or exc), self._secret)}"
                        down = True
                    if down:
                        lease.failed(why)
            if down and self._pool.free_failover(failovers):
                failovers += 1
                continue
            attempt += 1
            if attempt < self.max_attempts:
                wait = backoff_s(attempt, asked_wait, self.backoff_base_s, self.backoff_max_s)
                await asyncio.sleep(self._pool.retry_delay(wait) if down else wait)
        times = f"{self.max_attempts} attempt{'s' if self.max_attempts > 1 else ''}"
        servers = f" on {self.base_url}" if len(self._pool) > 1 else ""
        return _Unanswered(f"gave up after {times}{servers}; last: {why}", sends)

    async def _create(self, client: openai.AsyncOpenAI, request: ChatRequest) -> ChatCompletion:
        sampling = request.sampling
        # Sent as raw fields: llama.cpp's response_format is not in the client's typed union.
        extra = request_fields(self.structured_output, self.grammar_field, request)
        return await client.chat.completions.create(
            model=self.model,
            messages=cast("list[ChatCompletionMessageParam]", [dict(m) for m in request.messages]),
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed if sampling.seed is not None else openai.omit,
            extra_body=extra or None,
        )


def check_answer(
    answer: _Answer, request: ChatRequest, validate: Validator
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
        return "invalid_reply", f"the reply carries no text (finish_reason={answer.finish_reason!r})", None
    try:
        value = validate(answer.text)
    except ReplyInvalid as err:
        return "invalid_reply", f"the reply does not validate: {err}", None
    return None, "", value


def read_completion(completion: ChatCompletion, sends: int, model: str) -> _Answer:
    """What a 200 reply says. Servers differ in what they fill in: read defensively, count what is missing as 0."""
    choices = getattr(completion, "choices", None) or []
    choice = choices[0] if choices else None
    message = getattr(choice, "message", None)
    text = getattr(message, "content", None)
    usage = getattr(completion, "usage", None)
    return _Answer(
        text=text if isinstance(text, str) else None,
        finish_reason=str(getattr(choice, "finish_reason", None) or "unknown"),
        model=str(getattr(completion, "model", None) or model),
        prompt_tokens=int(getattr(usage, "prompt_tokens", None) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", None) or 0),
        sends=sends,
    )


def server_message(exc: openai.APIStatusError, secret: str | None) -> str:
    """The error message of a refused request, as the server wrote it, scrubbed."""
    body = exc.body
    message: Any = None
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        message = message if message is not None else body.get("detail")
    return scrub(str(message) if message is not None else exc.message, secret)
