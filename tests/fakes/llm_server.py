"""A local server speaking the OpenAI chat protocol (``POST /v1/chat/completions``), for tests.

The official ``openai`` client talks to it unchanged, as it talks to vLLM or llama.cpp's
server. It serves 127.0.0.1 only, on an ephemeral port, from a thread; the fixture stops it.

- Replies are computed by ``answer(body)`` (default :func:`judge_answer`: a judge-like
  ``{"explanation", "score": 2}`` naming the last user message); a dict is sent as JSON
  text. ``usage`` counts whitespace-separated words (``usage=False`` leaves it out).
  Each request waits ``latency_s`` before answering, so concurrent requests overlap and
  :attr:`FakeChat.max_in_flight` shows how many the client had open at once.
- ``response_format`` is checked the way vLLM and llama.cpp read it (``json_schema`` needs
  ``json_schema.schema``; ``json_object`` may carry ``schema``); the server otherwise
  ignores it, as servers without constrained decoding do. An unknown model is 404.
- Faults: ``inject(fault, times, when=X)`` makes the first ``times`` requests whose last
  user message contains ``X`` (any request when X is None) answer with ``fault``
  instead. Matching on content keeps tests deterministic under concurrency. Faults:
  ``429`` (with ``Retry-After: <retry_after>``, or ``retry-after-ms`` when that is set),
  ``500``, ``400`` (not retryable), ``"slow"`` (answer after ``slow_s``, past the client's
  timeout), ``"drop"`` (close the connection unanswered), ``"bad_json"`` (200, text not
  JSON), ``"out_of_range"`` (200, score 7), ``"truncated"`` (200, text cut in half,
  ``finish_reason: "length"``), ``"no_content"`` (200, ``content: null``).
- ``api_key``: when set, a wrong ``Authorization: Bearer`` gets 401 with OpenAI's message,
  which *echoes the presented key*, so tests can prove the adapter never passes it on.
- Every request is recorded as it arrives (method, path, headers, parsed body), then its
  status and fault once answered.
- ``die_after(n)``: once ``n`` chat requests have been answered the server stops (its socket
  and open connections closed); requests in flight then are dropped unanswered (status None).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from tests.fakes.loopback import (
    LoopbackServer,
    QuietHandler,
    RecordingService,
    Reply,
    check_openai_key,
    openai_error,
)

Fault = Literal[400, 429, 500, "slow", "drop", "bad_json", "out_of_range", "truncated", "no_content"]
DEFAULT_MODEL = "judge-7b"
Answer = Callable[[dict[str, Any]], dict[str, Any] | str]


def last_user_text(body: Any) -> str:
    """The content of the last ``user`` message of a chat request body ("" when none)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    for message in reversed(messages or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content", ""))
    return ""


def judge_answer(body: dict[str, Any]) -> dict[str, Any]:
    return {"explanation": f"judged: {last_user_text(body)}", "score": 2}


def words(text: str) -> int:
    return len(text.split())


class DieAfter:
    """What ``die_after(n)`` of the fakes does (chat, embeddings, /score): ``n`` more answers go
    out, then the service stops (socket and open connections closed); a request that would be
    answered later is dropped unanswered. The stop waits until every counted answer is written,
    so an answer counted is an answer received."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self._stop = stop
        self._left: int | None = None
        self._unsent = 0
        self._lock = threading.Lock()

    def arm(self, answers: int) -> None:
        with self._lock:
            self._left = answers

    def claim(self) -> bool | None:
        """None: not armed, answer; True: answer, then call :meth:`sent`; False: drop the request."""
        with self._lock:
            if self._left is None:
                return None
            if self._left <= 0:
                return False
            self._left -= 1
            self._unsent += 1
            return True

    def sent(self) -> None:
        with self._lock:
            self._unsent -= 1
            dies = self._left == 0 and self._unsent == 0
        if dies:
            threading.Thread(target=self._stop, name="fake-dies", daemon=True).start()


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int | None  # None: not answered (yet, or the connection was dropped)
    fault: Fault | None

    @property
    def user_text(self) -> str:
        return last_user_text(self.body)


@dataclass
class _Rule:
    fault: Fault
    times: int
    when: str | None
    delay_s: float


class _Reply(Reply):
    """A reply that says which injected fault it answers."""

    def __init__(
        self,
        status: int,
        payload: Any = None,
        headers: dict[str, str] | None = None,
        fault: Fault | None = None,
    ) -> None:
        super().__init__(status, payload, headers)
        self.fault = fault


class FakeChat(RecordingService[RecordedRequest]):
    """The fake server. ``base_url`` is what an OpenAI client takes (``.../v1``)."""

    thread_name = "fake-chat"

    def __init__(
        self,
        *,
        answer: Answer = judge_answer,
        models: tuple[str, ...] = (DEFAULT_MODEL,),
        api_key: str | None = None,
        latency_s: float = 0.0,
        slow_s: float = 3.0,
        retry_after: str | None = "0",
        retry_after_ms: int | None = None,
        usage: bool = True,
    ) -> None:
        super().__init__()
        self.answer = answer
        self.models = models
        self.api_key = api_key
        self.latency_s = latency_s
        self.slow_s = slow_s
        self.retry_after = retry_after
        self.retry_after_ms = retry_after_ms
        self.usage = usage
        self._rules: list[_Rule] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._serial = 0
        self._lock = threading.Lock()
        self.mortality = DieAfter(self.stop)
        self._listen(_Server, _Handler)
        self.base_url = f"{self.url}/v1"

    # -- controls for tests -----------------------------------------------------------

    def inject(self, fault: Fault, times: int = 1, *, when: str | None = None) -> None:
        """The first ``times`` chat requests whose last user message contains ``when`` (any
        request when None) answer with ``fault``. Rules are tried in the order injected."""
        if times < 1:
            raise ValueError("times must be at least 1")
        with self._lock:
            self._rules.append(_Rule(fault, times, when, self.slow_s))

    def die_after(self, answers: int) -> None:
        """Stop once ``answers`` more chat requests have been answered (a replica that dies mid-run)."""
        self.mortality.arm(answers)

    def answered(self) -> list[RecordedRequest]:
        """Chat requests answered 200."""
        return [r for r in self.chats() if r.status == 200]

    def chats(self) -> list[RecordedRequest]:
        """Every ``POST /v1/chat/completions`` received, answered or not."""
        return [r for r in self.requests if r.method == "POST" and r.path == "/v1/chat/completions"]

    def asked(self) -> list[str]:
        """The last user message of every chat request received, in arrival order."""
        return [r.user_text for r in self.chats()]

    @property
    def max_in_flight(self) -> int:
        with self._lock:
            return self._max_in_flight

    def clear(self) -> None:
        super().clear()
        with self._lock:
            self._max_in_flight = 0

    # -- request handling (called from the handler threads) ---------------------------

    def _ended(self, index: int, status: int | None, fault: Fault | None) -> None:
        self._rewrite(index, lambda r: dataclasses.replace(r, status=status, fault=fault))

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _take_fault(self, body: Any) -> tuple[Fault, float] | None:
        text = last_user_text(body)
        with self._lock:
            for rule in self._rules:
                if rule.times > 0 and (rule.when is None or rule.when in text):
                    rule.times -= 1
                    return rule.fault, rule.delay_s
        return None

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self.stopping.wait(seconds)  # woken when the server stops

    def _models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": m, "object": "model", "owned_by": "fake", "created": 0} for m in self.models],
        }

    def _check_chat(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise _Reply(400, openai_error("Invalid request body", "BadRequestError", 400))
        if body.get("model") not in self.models:
            raise _Reply(
                404, openai_error(f"The model `{body.get('model')}` does not exist.", "NotFoundError", 404)
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _Reply(400, openai_error("'messages' must be a non-empty list", "BadRequestError", 400))
        fmt = body.get("response_format")
        if fmt is None:
            return
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict) or not spec.get("name"):
                raise _Reply(
                    400, openai_error("json_schema needs 'name' and 'schema'", "BadRequestError", 400)
                )
        elif kind == "json_object":
            if "schema" in fmt and not isinstance(fmt["schema"], dict):
                raise _Reply(
                    400, openai_error("json_object 'schema' must be an object", "BadRequestError", 400)
                )
        elif kind != "text":
            raise _Reply(400, openai_error(f"unknown response_format type {kind!r}", "BadRequestError", 400))

    def _completion(self, body: dict[str, Any], fault: Fault | None) -> dict[str, Any]:
        answer = self.answer(body)
        if fault == "out_of_range" and isinstance(answer, dict):
            answer = {**answer, "score": 7}
        text: str | None = answer if isinstance(answer, str) else json.dumps(answer)
        finish_reason = "stop"
        if fault == "bad_json":
            text = "Sure! The passage is relevant, score 2."
        elif fault == "truncated":
            assert text is not None
            text, finish_reason = text[: len(text) // 2], "length"
        elif fault == "no_content":
            text = None
        with self._lock:
            self._serial += 1
            serial = self._serial
        prompt = sum(words(str(m.get("content", ""))) for m in body["messages"] if isinstance(m, dict))
        completion = words(text or "")
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{serial}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
        }
        if self.usage:
            payload["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        return payload

    def _route(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[Any, Fault | None]:
        check_openai_key(headers, self.api_key)
        if method == "GET" and path == "/v1/models":
            return self._models(), None
        if method == "POST" and path == "/v1/chat/completions":
            self._check_chat(body)
            taken = self._take_fault(body)
            fault, delay = taken if taken is not None else (None, 0.0)
            self._wait(self.latency_s)
            if fault in (400, 429, 500):
                extra: dict[str, str] = {}
                if fault == 429 and self.retry_after_ms is not None:
                    extra["retry-after-ms"] = str(self.retry_after_ms)
                elif fault == 429 and self.retry_after is not None:
                    extra["retry-after"] = self.retry_after
                raise _Reply(
                    int(fault), openai_error(f"injected fault {fault}", "injected", fault), extra, fault
                )
            if fault == "slow":
                self._wait(delay)
            return self._completion(body, fault), fault
        raise _Reply(404, openai_error(f"Not found: {method} {path}", "NotFoundError", 404))


class _Server(LoopbackServer):
    service = "fake chat"
    fake: FakeChat


class _Handler(QuietHandler):
    server: _Server

    def _handle(self) -> None:
        fake = self.server.fake
        path, headers, body = self.read_json()

        index = fake._record(RecordedRequest(self.command, path, headers, body, None, None))
        fake._enter()
        try:
            self._answer(fake, index, path, headers, body)
        finally:
            fake._leave()

    def _answer(self, fake: FakeChat, index: int, path: str, headers: dict[str, str], body: Any) -> None:
        fault: Fault | None = None
        extra_headers: dict[str, str] = {}
        try:
            payload, fault = fake._route(self.command, path, headers, body)
            status = 200
        except Reply as reply:
            status, payload, extra_headers = reply.status, reply.payload, reply.headers
            fault = reply.fault if isinstance(reply, _Reply) else None
        claim = fake.mortality.claim() if path == "/v1/chat/completions" else None
        if claim is False or fault == "drop" or (fault == "slow" and fake.stopping.is_set()):
            fake._ended(index, None, fault)
            self.drop_connection()
            return
        fake._ended(index, status, fault)
        # A client that timed out has closed its end: writing may fail, which is fine.
        with contextlib.suppress(OSError):
            self.send_json(status, payload, extra_headers)
        if claim:
            fake.mortality.sent()


@pytest.fixture
def llm_server() -> Iterator[FakeChat]:
    """A running fake chat server (any key accepted, judge-like answers); stopped after the test."""
    with FakeChat() as server:
        yield server
