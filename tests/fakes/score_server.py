"""A local server speaking vLLM's ``/score`` protocol (cross-encoder scoring), for tests.

It serves 127.0.0.1 only, on an ephemeral port, from a thread; the fixture stops it.

- Request: ``POST /score`` or ``/v1/score`` with ``{"model", <first field>, <second field>,
  "use_activation"?, "truncate_prompt_tokens"?}`` (vLLM's ``ScoreRequest``:
  https://docs.vllm.ai/en/v0.13.0/api/vllm/entrypoints/pooling/score/protocol/); the field pair is ``fields`` (default
  ``queries``/``documents``, as current vLLM; set it to ``("data_1", "data_2")`` or
  ``("text_1", "text_2")`` to play an older server, which answers 400 to the other names as
  vLLM's request validation does). Each side is a string or a list of strings; lengths must be
  1:1, 1:N or N:N (vLLM's rule), else 400. An unknown model gets 404 with vLLM's wording.
- Tokens are words (:data:`WORD`). As in vLLM, a pair longer than ``max_model_len`` tokens is
  refused (400) unless the request truncates it: ``truncate_prompt_tokens`` k (an int >= -1;
  -1 means ``max_model_len``; above ``max_model_len`` it is a 400) cuts the pair to k tokens
  the way a tokenizer's ``longest_first`` truncation does (:func:`truncate_pair`), and the
  score is computed on what is left.
- Response: ``{"id", "object": "list", "created", "model", "data": [{"index", "object": "score",
  "score"}], "usage"}``. Scores are fake and deterministic, from :func:`fake_logit` (word overlap
  of the query with the passage, after truncation); like vLLM, the sigmoid of that logit is sent unless the
  request says ``"use_activation": false``. ``shuffle=True`` sends ``data`` in reverse order;
  ``mutate`` rewrites each response payload (to drop, duplicate or break items).
- ``api_key``: when set, ``Authorization: Bearer <key>`` is checked and a wrong key gets 401
  with a message that *echoes the presented key*, on purpose, so tests can prove the adapter
  never passes a key on. When None, any or no key is accepted (vLLM without ``--api-key``).
- Fault injection: ``inject(fault, times, after=k)`` makes the next ``times`` scoring requests
  (after ``k`` good ones) answer 400, 401, 404, 429, 500 or 503, drop the connection
  (``"drop"``), or hold it ``stall_s`` seconds and then drop it (``"stall"``, for client
  timeouts). Both are recorded on arrival with status None.
  Faults carry ``Retry-After: <retry_after>`` when that is not None.
- ``hold_s`` delays every scoring answer, so that concurrent requests overlap; the most
  requests ever in flight at once is :attr:`FakeScore.max_in_flight`.
- Every request is recorded (method, path, headers, parsed body, status).
- ``die_after(n)``: once ``n`` scoring requests have been answered the server stops (its socket
  and open connections closed); requests in flight then are dropped unanswered (status None).
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from tests.fakes.llm_server import DieAfter
from tests.fakes.loopback import (
    FaultQueue,
    LoopbackServer,
    QuietHandler,
    RecordingService,
    Reply,
    answer_of,
    openai_error,
    presented_auth,
)

Fault = Literal[400, 401, 404, 429, 500, 503, "drop", "stall"]
WORD = re.compile(r"\w+", re.UNICODE)
DEFAULT_MODEL = "gte-multilingual-reranker-base"


def fake_logit(query: str, passage: str, truncate: int | None = None) -> float:
    """``8 * overlap - 4``, where overlap is the share of the query's distinct lowercase words
    that occur in the passage: -4 for no shared word, +4 when the passage has them all. With
    ``truncate``, on the words :func:`truncate_pair` keeps."""
    q_words, p_words = truncate_pair(query, passage, truncate)
    q, p = set(q_words), set(p_words)
    overlap = len(q & p) / len(q) if q else 0.0
    return 8.0 * overlap - 4.0


def truncate_pair(query: str, passage: str, truncate: int | None) -> tuple[list[str], list[str]]:
    """The pair's lowercase words, cut to ``truncate`` in all (None: uncut) the way Hugging Face
    tokenizers' ``longest_first`` strategy does: one word at a time from the end of the longer
    side (the passage on a tie)."""
    q, p = WORD.findall(query.lower()), WORD.findall(passage.lower())
    if truncate is not None:
        while len(q) + len(p) > truncate:
            (p if len(p) >= len(q) else q).pop()
    return q, p


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int | None  # None: the connection was dropped (or stalled, then dropped) without an answer

    def side(self, name: str) -> list[str]:
        value = self.body.get(name, []) if isinstance(self.body, dict) else []
        return [value] if isinstance(value, str) else list(value)


class FakeScore(RecordingService[RecordedRequest]):
    """The fake server. ``url`` is the server root (what the adapter takes as ``base_url``)."""

    thread_name = "fake-score"

    def __init__(
        self,
        *,
        models: tuple[str, ...] = (DEFAULT_MODEL,),
        fields: tuple[str, str] = ("queries", "documents"),
        api_key: str | None = None,
        shuffle: bool = False,
        retry_after: float | None = 0.001,
        stall_s: float = 1.0,
        hold_s: float = 0.0,
        max_model_len: int = 512,
    ) -> None:
        super().__init__()
        self.models = models
        self.fields = fields
        self.api_key = api_key
        self.shuffle = shuffle
        self.retry_after = retry_after
        self.stall_s = stall_s
        self.hold_s = hold_s
        self.max_model_len = max_model_len
        self.mutate: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.max_in_flight = 0
        self._in_flight = 0
        self._faults = FaultQueue[Fault]()
        self._lock = threading.Lock()
        self.mortality = DieAfter(self.stop)
        self._listen(_Server, _Handler)

    # -- controls for tests -----------------------------------------------------------

    def inject(self, fault: Fault, times: int = 1, *, after: int = 0) -> None:
        """The next ``times`` scoring requests, after ``after`` served normally, answer with
        ``fault``. Faults queue in the order injected."""
        self._faults.add(fault, times, after)

    def die_after(self, answers: int) -> None:
        """Stop once ``answers`` more scoring requests have been answered (a replica that dies mid-run)."""
        self.mortality.arm(answers)

    def scored(self) -> list[RecordedRequest]:
        """Scoring requests that were answered 200."""
        return [r for r in self.requests if r.path.endswith("/score") and r.status == 200]

    # -- request handling (called from the handler threads) ---------------------------

    @contextlib.contextmanager
    def _serving(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.hold_s:
                time.sleep(self.hold_s)
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def _route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Any:
        presented = presented_auth(headers, None if self.api_key is None else f"Bearer {self.api_key}")
        if presented is not None:
            key = presented.removeprefix("Bearer ")
            raise Reply(401, openai_error(f"Unauthorized: invalid API key {key}", "Unauthorized", 401))
        if method == "GET" and path == "/v1/models":
            return {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
        if method == "POST" and path in ("/score", "/v1/score"):
            with self._serving():
                return self._score(body)
        raise Reply(404, {"detail": "Not Found"})

    def _score(self, body: Any) -> Any:
        if not isinstance(body, dict):
            raise Reply(400, openai_error("Invalid request body", "BadRequestError", 400))
        first, second = self.fields
        missing = [name for name in (first, second) if name not in body]
        if missing:
            raise Reply(
                400, openai_error(f"1 validation error: Field required: {missing[0]}", "BadRequestError", 400)
            )
        model = body.get("model")
        if model not in self.models:
            raise Reply(404, openai_error(f"The model `{model}` does not exist.", "NotFoundError", 404))
        sides = [body[first], body[second]]
        sides = [[side] if isinstance(side, str) else side for side in sides]
        if not all(isinstance(side, list) and all(isinstance(t, str) for t in side) for side in sides):
            raise Reply(
                400, openai_error("inputs must be strings or lists of strings", "BadRequestError", 400)
            )
        queries, passages = sides
        if not queries or not passages or (len(queries) > 1 and len(queries) != len(passages)):
            raise Reply(
                400, openai_error("Input lengths must be either 1:1, 1:N or N:N", "BadRequestError", 400)
            )
        if len(queries) == 1:
            queries = queries * len(passages)
        truncate = self._truncation(body.get("truncate_prompt_tokens"))
        activate = body.get("use_activation") is not False  # vLLM: activation on unless switched off
        items = []
        tokens = 0
        for i, (q, p) in enumerate(zip(queries, passages, strict=True)):
            kept = sum(map(len, truncate_pair(q, p, truncate)))
            if kept > self.max_model_len:
                raise Reply(400, openai_error(
                    f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                    f"requested {kept} tokens in the input for score. Please reduce the length of the input.",
                    "BadRequestError", 400))  # fmt: skip
            tokens += kept
            logit = fake_logit(q, p, truncate)
            items.append({"index": i, "object": "score", "score": sigmoid(logit) if activate else logit})
        if self.shuffle:
            items.reverse()
        payload: dict[str, Any] = {
            "id": f"score-{len(self._requests)}",
            "object": "list",
            "created": 0,
            "model": model,
            "data": items,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
        }
        return self.mutate(payload) if self.mutate is not None else payload

    def _truncation(self, value: Any) -> int | None:
        """vLLM's check of ``truncate_prompt_tokens`` (an int >= -1, -1: the model's length)."""
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < -1:
            raise Reply(400, openai_error(
                f"1 validation error: truncate_prompt_tokens: Input should be an integer >= -1 (got {value!r})",
                "BadRequestError", 400))  # fmt: skip
        if value > self.max_model_len:
            raise Reply(400, openai_error(
                f"truncate_prompt_tokens value ({value}) is greater than max_model_len ({self.max_model_len}). "
                "Please, select a smaller truncation size.", "BadRequestError", 400))  # fmt: skip
        return self.max_model_len if value == -1 else value


class _Server(LoopbackServer):
    service = "fake vLLM score"
    fake: FakeScore


class _Handler(QuietHandler):
    server: _Server

    def _handle(self) -> None:
        fake = self.server.fake
        path, headers, body = self.read_json()

        def record(status: int | None) -> None:
            fake._record(RecordedRequest(self.command, path, headers, body, status))

        fault = fake._faults.take() if path.endswith("/score") else None
        if fault in ("drop", "stall"):
            record(None)  # recorded on arrival: a stalled request's client is gone before its end
            if fault == "stall":
                time.sleep(fake.stall_s)
            self.drop_connection()
            return

        def route() -> Any:
            if isinstance(fault, int):
                retry = {} if fake.retry_after is None else {"Retry-After": f"{fake.retry_after:g}"}
                raise Reply(fault, openai_error(f"injected fault {fault}", "injected", fault), retry)
            return fake._route(self.command, path, headers, body)

        reply = answer_of(route)
        claim = fake.mortality.claim() if path.endswith("/score") else None
        if claim is False:  # died while this request was in flight
            record(None)
            self.drop_connection()
            return
        record(reply.status)
        try:
            self.send_reply(reply)
        finally:
            if claim:
                fake.mortality.sent()


@pytest.fixture
def score_server() -> Iterator[FakeScore]:
    """A running fake vLLM /score server (any key accepted); stopped after the test."""
    with FakeScore() as server:
        yield server
