"""The reranker port on vLLM's ``/score`` endpoint (a cross-encoder served on the GPU host), with ``httpx``.

Serve the production reranker with, e.g.::

    vllm serve Alibaba-NLP/gte-multilingual-reranker-base --runner pooling \\
        --hf-overrides '{"architectures": ["GteNewForSequenceClassification"]}'

What is sent: ``POST {base_url}/score`` with ``{"model", <queries field>: [...],
<documents field>: [...], "use_activation": false}`` (plus ``truncate_prompt_tokens`` when
configured). Both lists have one length, so vLLM scores them pairwise (its "N:N" mode), and
``use_activation: false`` makes it return the raw logit instead of the sigmoid it applies by
default. ``base_url`` is the server root (``http://gpu-host:8000``;
vLLM also serves ``/v1/score``, so a root ending in ``/v1`` works too).

vLLM version. This targets the current ``/score`` protocol (vLLM main, 2026): the pair is sent
as ``queries``/``documents`` and the activation switch is ``use_activation``. The field names
changed across versions (``text_1``/``text_2``, then ``data_1``/``data_2`` (vLLM #20260), then
``queries``/``documents``; current servers still accept all three); pass ``fields`` to talk to
an older server. A server older than ``use_activation`` ignores it (vLLM ignores unknown
fields) and returns sigmoids: pin the server's version (``infra/``).

- Requests carry at most ``batch_size`` pairs; up to ``max_concurrency`` requests are in flight
  at once (vLLM batches concurrent requests on the GPU itself); ``progress`` is called in the
  caller's thread as each request completes.
- Several servers (``base_url`` given as a list): each request goes to the one with the fewest
  in flight; a timeout, lost connection or 5xx takes a server out for ``server_cooldown_s`` and
  the request goes at once to another (:mod:`tasks.common.endpoints`); an answered request is
  never sent again.
- A request that times out, loses its connection or is answered 408, 429 or 5xx is retried up
  to ``max_retries`` times, after ``backoff_s`` doubling per retry (capped at ``max_backoff_s``,
  with jitter), or after the server's ``Retry-After``; what still fails is a
  :class:`~tasks.common.rerank.port.RerankerUnavailable`. A rejected key (401/403), an unknown model
  or path (404) or a refused request (400, 422) is a :class:`~tasks.common.rerank.port.RerankerError`
  at once: retrying cannot fix it.
- Responses are checked, not trusted: ``data`` holds one ``{index, score}`` per pair, each index
  once; scores are put back in input order by ``index``; a missing pair is an error naming it.
- The API key is read from the environment variable named by ``api_key_env`` (default
  ``VLLM_API_KEY``, which is also what ``vllm serve`` reads for ``--api-key``) when the
  reranker is built, and sent as ``Authorization: Bearer``; unset, no header is sent. The key
  never appears in a message, a log line or :meth:`VLLMScoreReranker.describe`, and no
  ``httpx`` exception (whose request carries the header) is chained to the errors raised here.

:meth:`~VLLMScoreReranker.describe` leaves out ``base_url``: it says where the model runs, not
what it computes. Name the served model after what it is (``--served-model-name``) and set
``revision`` to its commit so the fingerprint pins the weights; the server does not report them.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

import httpx
import numpy as np

from tasks.common.endpoints import DEFAULT_COOLDOWN_S, EndpointPool, not_http, url_list
from tasks.common.models.secrets import scrub
from tasks.common.rerank.port import F64, ProgressFn, RerankerBase, RerankerError, RerankerUnavailable

logger = logging.getLogger(__name__)

ENGINE = "vllm-score"
DEFAULT_FIELDS = ("queries", "documents")
KNOWN_FIELDS = (DEFAULT_FIELDS, ("data_1", "data_2"), ("text_1", "text_2"))
RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class VLLMScoreReranker(RerankerBase):
    """The :class:`~tasks.common.rerank.port.Reranker` port on a vLLM ``/score`` endpoint. Safe to share
    between threads; close it (or use it as a context manager) to release its connections."""

    engine: str = ENGINE

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key_env: str = "VLLM_API_KEY",
        fields: tuple[str, str] = DEFAULT_FIELDS,
        batch_size: int = 64,
        max_concurrency: int = 4,
        timeout_s: float = 120.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        revision: str | None = None,
        truncate_prompt_tokens: int | None = None,
        server_cooldown_s: float = DEFAULT_COOLDOWN_S,
    ) -> None:
        urls = url_list(base_url)
        if (bad := not_http(urls)) is not None:
            raise RerankerError(
                f"score base_url {bad!r} is not an http(s) URL: give the vLLM server's root, e.g. http://gpu-host:8000"
            )
        if not model.strip():
            raise RerankerError("no reranker model given: use the model name the vLLM server serves")
        if tuple(fields) not in KNOWN_FIELDS:
            raise RerankerError(
                f"unknown /score field pair {fields!r}: vLLM has used {', '.join(map(str, KNOWN_FIELDS))}"
            )
        checks = {
            "batch_size": (batch_size, batch_size >= 1),
            "max_concurrency": (max_concurrency, max_concurrency >= 1),
            "timeout_s": (timeout_s, timeout_s > 0),
            "max_retries": (max_retries, max_retries >= 0),
            "backoff_s": (backoff_s, backoff_s >= 0),
            "max_backoff_s": (max_backoff_s, max_backoff_s >= backoff_s),
            "server_cooldown_s": (server_cooldown_s, server_cooldown_s > 0),
        }
        for name, (value, ok) in checks.items():
            if not ok:
                raise RerankerError(f"{name} is out of range: {value}")
        if truncate_prompt_tokens is not None and truncate_prompt_tokens < 1:
            raise RerankerError(f"truncate_prompt_tokens must be at least 1, got {truncate_prompt_tokens}")

        self._pool = EndpointPool(urls, cooldown_s=server_cooldown_s, service="score server")
        self.base_url = self._pool.names
        self.fields = (fields[0], fields[1])
        self.batch_size = batch_size
        self.max_concurrency = max_concurrency
        self.truncate_prompt_tokens = truncate_prompt_tokens
        self.model = model.strip()
        self.revision = revision
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._api_key_env = api_key_env
        key = os.environ.get(api_key_env, "").strip()
        self._secret = key or None
        self._clients = [
            httpx.Client(
                base_url=e.url.rstrip("/"),
                headers={"Authorization": f"Bearer {key}"} if key else None,
                timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
                limits=httpx.Limits(
                    max_connections=max_concurrency, max_keepalive_connections=max_concurrency
                ),
            )
            for e in self._pool.endpoints
        ]
        self._jitter = random.Random()
        self._jitter_lock = threading.Lock()

    # -- the port ---------------------------------------------------------------------

    def _logits(self, qs: list[str], ps: list[str], progress: ProgressFn | None) -> F64:
        n = len(qs)
        logits = np.empty(n, dtype=np.float64)
        starts = range(0, n, self.batch_size)
        if self.max_concurrency == 1 or len(starts) <= 1:
            for start in starts:
                stop = min(start + self.batch_size, n)
                logits[start:stop] = self._score_batch(qs[start:stop], ps[start:stop], start)
                if progress is not None:
                    progress(stop, n)
            return logits
        done = 0
        with ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="vllm-score") as pool:
            pending: dict[Future[F64], slice] = {}
            for start in starts:
                part = slice(start, min(start + self.batch_size, n))
                pending[pool.submit(self._score_batch, qs[part], ps[part], start)] = part
            try:
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_EXCEPTION)
                    for future in finished:
                        part = pending.pop(future)
                        logits[part] = future.result()  # raises the batch's error
                        done += part.stop - part.start
                        if progress is not None:
                            progress(done, n)
            finally:
                for future in pending:
                    future.cancel()  # an error: do not start the batches still queued
        return logits

    def _source(self) -> str:
        return self.base_url

    def _described(self) -> dict[str, Any]:
        return {"max_length": self.truncate_prompt_tokens}

    # -- extras -----------------------------------------------------------------------

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def __enter__(self) -> VLLMScoreReranker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VLLMScoreReranker(base_url={self.base_url!r}, model={self.model!r})"

    # -- internals --------------------------------------------------------------------

    def _score_batch(self, queries: list[str], passages: list[str], offset: int) -> F64:
        body: dict[str, Any] = {
            "model": self.model,
            self.fields[0]: queries,
            self.fields[1]: passages,
            "use_activation": False,
        }
        if self.truncate_prompt_tokens is not None:
            body["truncate_prompt_tokens"] = self.truncate_prompt_tokens
        return self._scores(self._post(body), len(queries), offset)

    def _post(self, body: dict[str, Any]) -> Any:
        """POST /score on the pool's choice of server, with retries; the parsed JSON of the 200 answer."""
        attempt = failovers = 0
        while True:
            retry_after: float | None = None
            with self._pool.lease() as lease:
                endpoint = f"{lease.endpoint.public}/score"
                try:
                    response = self._clients[lease.endpoint.index].post("/score", json=body)
                except httpx.TimeoutException:
                    failure, down = f"no answer within {self._timeout_s:g} s", True
                except httpx.TransportError as exc:
                    failure, down = f"connection failed ({type(exc).__name__})", True
                else:
                    if response.status_code == 200:
                        try:
                            return response.json()
                        except ValueError:
                            raise RerankerError(
                                f"{endpoint} answered 200 with a body that is not JSON: is base_url a vLLM server?"
                            ) from None
                    if response.status_code not in RETRIED_STATUSES:
                        raise self._refused(response, endpoint)
                    failure, down = f"HTTP {response.status_code}", response.status_code >= 500
                    retry_after = _retry_after(response)
                if down:
                    lease.failed(f"{endpoint}: {failure}")
            if down and self._pool.free_failover(failovers):
                failovers += 1
                logger.info("%s: %s; sent to another server", endpoint, failure)
                continue
            if attempt >= self._max_retries:
                where = f"{self.base_url} (/score)" if len(self._pool) > 1 else endpoint
                raise RerankerUnavailable(
                    f"{where} still failing after {self._max_retries} retries ({failure}): is the vLLM "
                    "server up and not overloaded? lower max_concurrency or raise timeout_s, then rerun"
                )
            attempt += 1
            delay = self._delay(attempt, retry_after)
            delay = self._pool.retry_delay(delay) if down else delay
            logger.warning(
                "%s: %s; retry %d of %d in %.2f s", endpoint, failure, attempt, self._max_retries, delay
            )
            time.sleep(delay)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._max_backoff_s)
        with self._jitter_lock:
            jitter = self._jitter.uniform(0.5, 1.0)  # spreads the retries of concurrent requests
        return float(min(self._backoff_s * 2.0 ** (attempt - 1), self._max_backoff_s) * jitter)

    def _refused(self, response: httpx.Response, endpoint: str) -> RerankerError:
        status = response.status_code
        detail = scrub(_error_detail(response), self._secret)
        if status in (401, 403):
            unset = "" if self._secret else f" ({self._api_key_env} is unset, so no key was sent)"
            return RerankerError(
                f"{endpoint} rejected the API key (HTTP {status}){unset}: set {self._api_key_env} to the "
                "server's --api-key"
            )
        if status == 404:
            return RerankerError(
                f"{endpoint} answered 404 ({detail}): use a model name the server serves (GET /v1/models "
                "lists them; vLLM: --served-model-name), and a server started with --runner pooling"
            )
        return RerankerError(
            f"{endpoint} refused the request for model {self.model!r} (HTTP {status}: {detail}): a vLLM "
            f"that expects other field names than {self.fields}? (set fields), or a pair longer than the "
            "model's context (set truncate_prompt_tokens)"
        )

    def _scores(self, payload: Any, n: int, offset: int) -> F64:
        where = f"{self.base_url}/score (model {self.model})"
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise RerankerError(f"{where} answered without a 'data' list: not vLLM's /score protocol")
        out = np.full(n, np.nan, dtype=np.float64)
        seen = np.zeros(n, dtype=bool)
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            score = item.get("score") if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
                raise RerankerError(f"{where} returned an item with index {index!r} for {n} pairs")
            if seen[index]:
                raise RerankerError(f"{where} returned pair #{offset + index} twice")
            if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
                raise RerankerError(f"{where} returned the score {score!r} for pair #{offset + index}")
            out[index], seen[index] = float(score), True
        if not seen.all():
            missing = [offset + int(i) for i in np.flatnonzero(~seen)]
            shown = ", ".join(f"#{i}" for i in missing[:5]) + (", ..." if len(missing) > 5 else "")
            raise RerankerError(
                f"{where} returned {int(seen.sum())} scores for {n} pairs; missing pair {shown}: rerun"
            )
        return out


def _retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds, when it is a number (the date form is not used by vLLM)."""
    value = response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 and math.isfinite(seconds) else None


def _error_detail(response: httpx.Response) -> str:
    """vLLM's error message (``{"error": {"message"}}`` or ``{"message"}``), else the body's start."""
    try:
        payload = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(payload, dict):
        error = payload.get("error")
        message = error.get("message") if isinstance(error, dict) else payload.get("message")
        if isinstance(message, str):
            return message
    return json.dumps(payload)[:300]
