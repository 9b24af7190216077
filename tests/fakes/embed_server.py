"""A local server speaking the OpenAI embeddings protocol (``POST /v1/embeddings``), for tests.

The official ``openai`` client talks to it unchanged (``OpenAI(base_url=server.base_url)``),
as it talks to vLLM. It serves 127.0.0.1 only, on an ephemeral port, from a thread; the
fixture stops it.

- Request: ``{"model", "input": str | list[str], "encoding_format": "float" | "base64",
  ...}``; response: ``{"object": "list", "data": [{"object": "embedding", "index",
  "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}``. ``base64`` is
  little-endian float32, as OpenAI and vLLM send it. An empty string, a model the server
  does not serve (404, vLLM's wording) or a malformed body is refused.
- Embeddings are fake and deterministic, computed by :func:`fake_embedding`: a hashed bag
  of lowercase words, so texts sharing words are close and texts sharing none are
  orthogonal-ish. ``normalize=False`` sends them unnormalised (scaled by ``scale``);
  ``shuffle=True`` sends ``data`` in reverse order (``index`` still says which is which);
  ``dims`` may be changed between requests; ``mutate`` rewrites each response payload
  (to send a broken one).
- ``api_key``: when set, ``Authorization: Bearer <key>`` is checked and a wrong key gets 401
  with OpenAI's message, which *echoes the presented key*, on purpose, so tests can prove
  the adapter never passes a key on. When None, any key is accepted (vLLM without
  ``--api-key``).
- Fault injection: ``inject(fault, times, after=k)`` makes the next ``times`` requests (after
  ``k`` good ones) answer 400, 401, 403, 404, 429, 500 or 503, or drop the connection
  unanswered. Fault answers carry ``retry-after-ms: <retry_after_ms>`` (when not None) so
  the client's retries do not sleep for its default backoff.
- Every request is recorded (method, path, headers, parsed body, status).
- ``die_after(n)``: once ``n`` embeddings requests have been answered the server stops (its
  socket and open connections closed); a request arriving meanwhile is dropped unanswered.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
import threading
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
    check_openai_key,
    openai_error,
)

Fault = Literal[400, 401, 403, 404, 429, 500, 503, "drop"]
WORD = re.compile(r"\w+", re.UNICODE)
DEFAULT_MODEL = "bge-small-en-v1.5"


def fake_embedding(text: str, dims: int) -> list[float]:
    """Hashed bag of words: each lowercase word adds ±1 to one of ``dims`` buckets (blake2b),
    then the vector is scaled to unit length. A text without words gets a fixed unit vector."""
    vector = [0.0] * dims
    for word in WORD.findall(text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "big")
        vector[h % dims] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        vector[0], norm = 1.0, 1.0
    return [x / norm for x in vector]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int | None  # None: the connection was dropped without an answer

    @property
    def inputs(self) -> list[str]:
        value = self.body.get("input", []) if isinstance(self.body, dict) else []
        return [value] if isinstance(value, str) else list(value)


class FakeEmbeddings(RecordingService[RecordedRequest]):
    """The fake server. ``base_url`` is what an OpenAI client takes (``.../v1``)."""

    thread_name = "fake-embeddings"

    def __init__(
        self,
        *,
        dims: int = 64,
        models: tuple[str, ...] = (DEFAULT_MODEL,),
        api_key: str | None = None,
        normalize: bool = True,
        scale: float = 3.0,
        shuffle: bool = False,
        retry_after_ms: int | None = 1,
    ) -> None:
        super().__init__()
        self.dims = dims
        self.models = models
        self.api_key = api_key
        self.normalize = normalize
        self.scale = scale
        self.shuffle = shuffle
        self.retry_after_ms = retry_after_ms
        self.mutate: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self._faults = FaultQueue[Fault]()
        self._lock = threading.Lock()
        self.mortality = DieAfter(self.stop)
        self._listen(_Server, _Handler)
        self.base_url = f"{self.url}/v1"

    # -- controls for tests -----------------------------------------------------------

    def inject(self, fault: Fault, times: int = 1, *, after: int = 0) -> None:
        """The next ``times`` requests, after ``after`` requests served normally, answer with
        ``fault`` (an HTTP status, or ``"drop"``). Faults queue in the order injected."""
        self._faults.add(fault, times, after)

    def die_after(self, answers: int) -> None:
        """Stop once ``answers`` more embeddings requests have been answered (a replica that dies mid-run)."""
        self.mortality.arm(answers)

    def embedded(self) -> list[RecordedRequest]:
        """``/v1/embeddings`` requests that were answered 200."""
        return [r for r in self.requests if r.path == "/v1/embeddings" and r.status == 200]

    # -- request handling (called from the handler threads) ---------------------------

    def _route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Any:
        check_openai_key(headers, self.api_key)
        if method == "GET" and path == "/v1/models":
            return {
                "object": "list",
                "data": [{"id": m, "object": "model", "owned_by": "fake"} for m in self.models],
            }
        if method == "POST" and path == "/v1/embeddings":
            return self._embeddings(body)
        raise Reply(404, openai_error(f"Not found: {method} {path}", "NotFoundError", 404))

    def _embeddings(self, body: Any) -> Any:
        if not isinstance(body, dict):
            raise Reply(400, openai_error("Invalid request body", "BadRequestError", 400))
        model = body.get("model")
        if model not in self.models:
            raise Reply(404, openai_error(f"The model `{model}` does not exist.", "NotFoundError", 404))
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not inputs or not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs):
            raise Reply(
                400,
                openai_error("'input' must be a string or a non-empty list of strings", "BadRequestError"),
            )
        if any(t == "" for t in inputs):
            raise Reply(400, openai_error("'input' cannot contain an empty string", "invalid_request_error"))
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise Reply(400, openai_error(f"Unknown encoding_format {encoding!r}", "BadRequestError"))
        with self._lock:
            dims, normalize, scale, shuffle = self.dims, self.normalize, self.scale, self.shuffle
        items: list[dict[str, Any]] = []
        for i, text in enumerate(inputs):
            vector = fake_embedding(text, dims)
            if not normalize:
                vector = [x * scale * (1 + i) for x in vector]
            value: Any = vector
            if encoding == "base64":
                value = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode("ascii")
            items.append({"object": "embedding", "index": i, "embedding": value})
        if shuffle:
            items.reverse()
        tokens = sum(len(WORD.findall(t)) for t in inputs)
        payload: dict[str, Any] = {
            "object": "list",
            "data": items,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return self.mutate(payload) if self.mutate is not None else payload


class _Server(LoopbackServer):
    service = "fake embeddings"
    fake: FakeEmbeddings


class _Handler(QuietHandler):
    server: _Server

    def _handle(self) -> None:
        fake = self.server.fake
        path, headers, body = self.read_json()

        def record(status: int | None) -> None:
            fake._record(RecordedRequest(self.command, path, headers, body, status))

        fault = fake._faults.take() if path == "/v1/embeddings" else None
        claim = fake.mortality.claim() if path == "/v1/embeddings" else None
        if fault == "drop" or claim is False:
            record(None)
            self.drop_connection()
            return

        def route() -> Any:
            if fault is not None:
                retry = {} if fake.retry_after_ms is None else {"retry-after-ms": str(fake.retry_after_ms)}
                raise Reply(int(fault), openai_error(f"injected fault {fault}", "injected", fault), retry)
            return fake._route(self.command, path, headers, body)

        reply = answer_of(route)
        record(reply.status)
        try:
            self.send_reply(reply)
        finally:
            if claim:
                fake.mortality.sent()


@pytest.fixture
def embed_server() -> Iterator[FakeEmbeddings]:
    """A running fake embeddings server (64 dims, any key accepted); stopped after the test."""
    with FakeEmbeddings() as server:
        yield server
