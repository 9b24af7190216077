"""The encoder port on an OpenAI-compatible ``/v1/embeddings`` endpoint, with the ``openai`` client.

This is how vLLM serves BGE on the GPU host (``vllm serve BAAI/bge-small-en-v1.5``); any
server speaking the protocol works. What is sent: ``POST {base_url}/embeddings`` with
``{"model", "input": [...], "encoding_format": "float"}`` (plus ``truncate_prompt_tokens``
when configured) and ``Authorization: Bearer <key>``. ``base_url`` is the API root, usually
ending in ``/v1``.

- The key is read from the environment variable named by ``api_key_env`` (default
  ``OPENAI_API_KEY``) when the encoder is built. When it is unset, ``"EMPTY"`` is sent: a
  vLLM started without ``--api-key`` accepts any key, and ``EMPTY`` is vLLM's documented
  placeholder. The key never appears in an error message, in :meth:`describe`, or in a
  chained exception whose text carries it.
- 408, 409, 429, 5xx, timeouts and dropped connections are retried here, as the ``openai``
  client would (``max_retries``, exponential backoff from 0.5 s up to 8 s, or the server's
  ``retry-after``). Several servers (``base_url`` given as a list): each request goes to the
  one with the fewest in flight; a dropped connection, timeout or 5xx takes a server out for
  ``server_cooldown_s`` and the request goes at once to another (:mod:`tasks.common.endpoints`);
  an answered request is never sent again. What still fails is mapped: a rejected key (401/403), an unknown model (404) or a refused request (400) is an
  :class:`~tasks.common.embed.port.EncoderError`; an unreachable or still failing server an
  :class:`~tasks.common.embed.port.EncoderUnavailable`.
- Responses are checked, not trusted: one vector per input, ``index`` a permutation of the
  inputs (rows are put back in input order by ``index``), one length for every vector,
  equal to ``dims``. Vectors are normalised again here (in float64, then stored as
  float32): vLLM normalises embedding models by default, other servers may not.
- ``dims`` is the expected vector length, checked on every response; it is not sent (the
  ``dimensions`` request field only works for Matryoshka models). Left unset, it is
  learnt from the first response, and reading :attr:`OpenAIEmbeddingsEncoder.dims` (or
  :meth:`~OpenAIEmbeddingsEncoder.describe`) before any request asks the server once.
  Configure it to compute a fingerprint without a server.
- ``truncate_prompt_tokens`` (vLLM only; OpenAI rejects it) truncates inputs to that many
  tokens server-side. Without it vLLM answers 400 for a text longer than the model's
  context (512 tokens for BGE), where sentence-transformers would truncate silently.
- Prefixes (see :mod:`tasks.common.embed.port`) are prepended here: the server applies none.

:meth:`~OpenAIEmbeddingsEncoder.describe` leaves out ``base_url``: it says where the model
runs, not what it computes, so moving the server does not invalidate artifacts. Name the
served model after what it is (vLLM's ``--served-model-name``) and set ``revision`` to the
model's commit so that the fingerprint pins the weights; the server does not report them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import httpx
import numpy as np
import openai
from openai.types import CreateEmbeddingResponse

from tasks.common.embed.port import F32, EncoderBase, EncoderError, EncoderUnavailable, normalise_rows
from tasks.common.endpoints import DEFAULT_COOLDOWN_S, EndpointPool, Lease, not_http, url_list
from tasks.common.llm.wire import RETRIED_4XX, backoff_s, retry_after_s
from tasks.common.models.secrets import chained, scrub

ENGINE = "openai-embeddings"
PLACEHOLDER_KEY = "EMPTY"
MAX_INPUTS_PER_REQUEST = 2048  # OpenAI's limit on the length of ``input``
_T = TypeVar("_T")


class OpenAIEmbeddingsEncoder(EncoderBase):
    """The :class:`~tasks.common.embed.port.Encoder` port on an OpenAI-compatible embeddings endpoint.

    Requests carry at most ``batch_size`` texts and are sent one after another;
    ``on_batch`` is called after each. Safe to share between threads.
    """

    name: str = ENGINE

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        batch_size: int = 128,
        dims: int | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        revision: str | None = None,
        truncate_prompt_tokens: int | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        server_cooldown_s: float = DEFAULT_COOLDOWN_S,
    ) -> None:
        urls = url_list(base_url)
        if (bad := not_http(urls)) is not None:
            raise EncoderError(
                f"embeddings base_url {bad!r} is not an http(s) URL: give the API root, "
                "e.g. http://gpu-host:8000/v1"
            )
        if not server_cooldown_s > 0:
            raise EncoderError(f"server_cooldown_s must be positive, got {server_cooldown_s}")
        if not model.strip():
            raise EncoderError("no embeddings model given: use the model name the server serves")
        if not 1 <= batch_size <= MAX_INPUTS_PER_REQUEST:
            raise EncoderError(f"batch_size must be between 1 and {MAX_INPUTS_PER_REQUEST}, got {batch_size}")
        if dims is not None and dims < 1:
            raise EncoderError(f"dims must be at least 1, got {dims}")
        if truncate_prompt_tokens is not None and truncate_prompt_tokens < 1:
            raise EncoderError(f"truncate_prompt_tokens must be at least 1, got {truncate_prompt_tokens}")
        if timeout_s <= 0:
            raise EncoderError(f"timeout_s must be positive, got {timeout_s}")
        if max_retries < 0:
            raise EncoderError(f"max_retries must be >= 0, got {max_retries}")

        self._pool = EndpointPool(urls, cooldown_s=server_cooldown_s, service="embeddings server")
        self.base_url = self._pool.names
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.truncate_prompt_tokens = truncate_prompt_tokens
        self.model_id = model.strip()
        self.revision = revision
        self._dims = dims
        self._dims_lock = threading.Lock()
        self._api_key_env = api_key_env
        self._timeout_s = timeout_s
        self._retries = max_retries

        key = os.environ.get(api_key_env, "").strip()
        self._key_is_set = bool(key)
        # The placeholder is public knowledge and a common word: scrubbing it would garble messages.
        self._secret = key if key and key != PLACEHOLDER_KEY else None
        self._clients = [  # retries are made here (_call), so that a failing server can be left out
            openai.OpenAI(api_key=key or PLACEHOLDER_KEY, base_url=e.url, timeout=timeout_s, max_retries=0)
            for e in self._pool.endpoints
        ]

    # -- the port ---------------------------------------------------------------------

    @property
    def dims(self) -> int:
        if self._dims is None:
            self._embed(["dimension probe"])  # learns the length from the answer
        assert self._dims is not None
        return self._dims

    @property
    def max_seq_length(self) -> int | None:
        return self.truncate_prompt_tokens

    # -- extras -----------------------------------------------------------------------

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def __enter__(self) -> OpenAIEmbeddingsEncoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"OpenAIEmbeddingsEncoder(base_url={self.base_url!r}, model={self.model_id!r}, dims={self._dims})"
        )

    # -- internals --------------------------------------------------------------------

    def _encode_batch(self, texts: list[str], prefix: str) -> F32:
        return self._embed([prefix + text for text in texts])

    def _embed(self, inputs: list[str]) -> F32:
        extra = (
            {"truncate_prompt_tokens": self.truncate_prompt_tokens} if self.truncate_prompt_tokens else None
        )
        response = self._call(
            lambda client: client.embeddings.create(
                model=self.model_id, input=inputs, encoding_format="float", extra_body=extra
            )
        )
        return self._vectors(response, len(inputs))

    def _vectors(self, response: CreateEmbeddingResponse, n: int) -> F32:
        where = f"{self.base_url} (model {self.model_id})"
        data = list(getattr(response, "data", None) or [])
        if len(data) != n:
            raise EncoderError(
                f"{where} returned {len(data)} embeddings for {_inputs(n)}: the server is not "
                "speaking the OpenAI embeddings protocol; check base_url"
            )
        indices = [getattr(item, "index", None) for item in data]
        if sorted(i for i in indices if isinstance(i, int)) != list(range(n)):
            raise EncoderError(
                f"{where} returned embeddings whose 'index' values are not 0..{n - 1} once each "
                f"({indices[:10]}{'...' if n > 10 else ''}): cannot tell which vector belongs to which text"
            )
        rows: list[Any] = [None] * n
        for item in data:
            rows[item.index] = item.embedding
        not_numbers = EncoderError(
            f"{where} returned embeddings that are not lists of numbers: the server ignored "
            "encoding_format='float'"
        )
        if not all(isinstance(row, list) for row in rows):
            raise not_numbers
        lengths = {len(row) for row in rows}
        if len(lengths) != 1:
            raise EncoderError(
                f"{where} returned vectors of different lengths {sorted(lengths)} in one answer"
            )
        try:
            matrix = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError):
            raise not_numbers from None
        width = lengths.pop()
        with self._dims_lock:
            if self._dims is None:
                self._dims = width
        if width != self._dims:
            raise EncoderError(
                f"{where} returned {width}-dimensional vectors, expected {self._dims}: the served model "
                "changed, or dims is misconfigured; vectors of different models must not be mixed"
            )
        return normalise_rows(matrix, source=where)

    def _call(self, fn: Callable[[openai.OpenAI], _T]) -> _T:
        """Run one client call on the pool's choice of server, retrying what is worth it; map
        what still fails.

        The mapped error is raised outside the ``except`` block so that the client's exception
        is attached (as ``__cause__``) only when no exception in its chain carries the key.
        """
        retry = failovers = 0
        while True:
            with self._pool.lease() as lease:
                try:
                    return fn(self._clients[lease.endpoint.index])
                except openai.OpenAIError as exc:
                    error = exc
                    status = getattr(exc, "status_code", None)
                    down = isinstance(exc, openai.APIConnectionError) or (status or 0) >= 500
                    if down:
                        lease.failed(self._why(exc, lease))
            if down and self._pool.free_failover(failovers):
                failovers += 1
                continue
            if retry >= self._retries or not (down or status in RETRIED_4XX):
                break
            retry += 1
            response = getattr(error, "response", None)
            asked = retry_after_s(response.headers) if isinstance(response, httpx.Response) else None
            wait = backoff_s(retry, asked, 0.5, 8.0)  # the openai client's own schedule
            time.sleep(self._pool.retry_delay(wait) if down else wait)
        raise self._map_error(error)

    def _why(self, exc: openai.OpenAIError, lease: Lease) -> str:
        """A failed send, for the pool's log line: the server's public URL, never the key."""
        detail = scrub(getattr(exc, "message", None) or str(exc), self._secret)
        return f"{type(exc).__name__} from {lease.endpoint.public}: {detail}"

    def _map_error(self, exc: openai.OpenAIError) -> EncoderError:
        status = getattr(exc, "status_code", None)
        unset = (
            "" if self._key_is_set else f" ({self._api_key_env} is unset, so {PLACEHOLDER_KEY!r} was sent)"
        )
        values = {"where": self.base_url, "model": self.model_id, "status": status, "unset": unset,
                  "key": self._api_key_env, "timeout": f"{self._timeout_s:g}",
                  "retries": f"{self._retries} retr{'y' if self._retries == 1 else 'ies'}",
                  "detail": scrub(getattr(exc, "message", None) or str(exc), self._secret),
                  "kind": type(exc).__name__}  # fmt: skip
        kind, message = next((k, m) for test, k, m in _ERRORS if test(exc, status))
        return chained(kind(message.format(**values)), exc, self._secret)


def _is(*kinds: type[openai.OpenAIError]) -> Callable[[openai.OpenAIError, int | None], bool]:
    return lambda exc, _status: isinstance(exc, kinds)


_ERRORS: tuple[tuple[Callable[[openai.OpenAIError, int | None], bool], type[EncoderError], str], ...] = (
    (_is(openai.AuthenticationError, openai.PermissionDeniedError), EncoderError, "{where} rejected the API key (HTTP {status}){unset}: set {key} to a key this server accepts (vLLM: the value of its --api-key)"),
    (_is(openai.NotFoundError), EncoderError, "{where} answered 404 for model {model!r} ({detail}): use a model name the server serves (GET {where}/models lists them; vLLM: --served-model-name), and a base_url that ends in /v1"),
    (_is(openai.RateLimitError), EncoderUnavailable, "{where} still answered 429 Too Many Requests after {retries}: run fewer embedding jobs at once or raise max_retries, then rerun"),
    (_is(openai.APITimeoutError), EncoderUnavailable, "{where} did not answer within {timeout} s, {retries} included: raise timeout_s or lower batch_size, then rerun"),
    (_is(openai.APIConnectionError), EncoderUnavailable, "cannot reach the embeddings server at {where} after {retries} ({detail}): is it running? check base_url, then rerun"),
    (lambda exc, _: isinstance(exc, openai.APIStatusError) and exc.status_code >= 500, EncoderUnavailable, "{where} kept failing with HTTP {status} after {retries} ({detail}): the server is having trouble; check its log, rerun later"),
    (_is(openai.BadRequestError), EncoderError, "{where} refused the request for model {model!r} (HTTP 400: {detail}): a text longer than the model's context? set truncate_prompt_tokens (vLLM) or shorten the passages"),
    (_is(openai.APIStatusError), EncoderError, "{where} refused the request for model {model!r} (HTTP {status}: {detail})"),
    (lambda _exc, _status: True, EncoderError, "embeddings request to {where} failed: {kind}: {detail}"),
)  # fmt: skip
"""(test, error class, message) in order: the first whose test holds maps the failure."""


def _inputs(n: int) -> str:
    return f"{n} input{'' if n == 1 else 's'}"
