"""How :mod:`tasks.common.translate.deepl` sends requests: cut to DeepL's limits, retried
within a deadline, failures mapped to the translator port's errors.

Size. Requests are cut to ≤ 50 texts and ≤ ``max_request_bytes`` of JSON body (default
120 KiB: DeepL's "total request size" limit, 128 KiB, counts the request line and headers
too, https://developers.deepl.com/docs/resources/usage-limits). A text over the limit on
its own is a :class:`~tasks.common.translate.port.RequestTooLarge` and is never sent.

Retries and time. The library's own retry loop (``deepl.http_client.max_network_retries``,
each try waiting at least ``min_connection_timeout``, 10 s: ~70 s before a hung server
fails) cannot be bounded in total, so it is switched off (0 retries) and each call is
retried here on what the library would retry (429, 5xx, dropped or timed-out connections),
with its backoff (1 s, x1.6, +-23 % jitter), at most ``max_network_retries`` times and
never past ``timeout_s`` from the call's start: each try gets ``min_connection_timeout`` =
the time left (the library waits at least ~1 s whatever it is set to). Both settings are
process-wide module attributes of the library (its documented way to set them), so calls
are serialised by a lock while they are set and in flight, and put back after each call.

A mapped error never carries the key, and the library's exception is attached as its
``__cause__`` only when no exception of its chain carries the key.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import deepl
import deepl.http_client

from tasks.common.models.secrets import chained, scrub
from tasks.common.translate.port import (
    AuthorizationFailed,
    QuotaExceeded,
    RateLimited,
    RequestTooLarge,
    TranslationError,
    TranslatorUnavailable,
    json_size,
    plan_batches,
)

_T = TypeVar("_T")

ENV_KEY = "DEEPL_AUTH_KEY"
ENV_URL = "DEEPL_SERVER_URL"
MAX_TEXTS_PER_REQUEST = 50
DEEPL_REQUEST_LIMIT = 128 * 1024
"""DeepL's "total request size" (request line, headers and body)."""
MAX_REQUEST_BYTES = DEEPL_REQUEST_LIMIT - 2 * 1024
"""The largest ``max_request_bytes`` accepted: 2 KiB stay for the request line and headers."""
DEFAULT_REQUEST_BYTES = 120 * 1024
DEFAULT_TIMEOUT_S = 30.0
BODY_MARGIN = 1024  # room for fields a future client version might add to the body
_BACKOFF_INITIAL_S, _BACKOFF_MULTIPLIER, _BACKOFF_JITTER = 1.0, 1.6, 0.23  # deepl.http_client._BackoffTimer
_CLIENT_SETTINGS = threading.RLock()  # deepl.http_client's module settings are process-wide


def json_size_of(value: Any) -> int:
    """Bytes of ``value`` as JSON the way ``requests`` encodes a ``json=`` body (ASCII escapes)."""
    return len(json.dumps(value))


def request_batches(
    texts: list[str], todo: list[int], fields: Mapping[str, Any], max_texts: int, max_bytes: int
) -> list[list[int]]:
    """The positions ``todo`` of ``texts`` cut into requests of at most ``max_texts`` texts and
    ``max_bytes`` of JSON body (``fields``, the texts and ``show_billed_characters``)."""
    overhead = json_size_of({**fields, "text": [], "show_billed_characters": True})
    budget = max_bytes - overhead - BODY_MARGIN
    sizes = [json_size(texts[i]) for i in todo]
    for i, size in zip(todo, sizes, strict=True):
        if size + 2 > budget:
            which = f"text #{i}" if len(texts) > 1 else "the text"
            raise RequestTooLarge(
                f"{which} is {size} bytes as JSON, over the {max_bytes} bytes a DeepL request may "
                "have (deepl.max_request_bytes): split it into smaller passages before translating"
            )
    return [todo[batch.start : batch.stop] for batch in plan_batches(sizes, max_texts, budget)]


@dataclass
class Caller:
    """Runs client calls for one translator: ``retries`` and ``timeout_s`` bound each call."""

    where: str  # the server as it may be shown: "DeepL free API" or its public URL
    secret: str
    retries: int
    timeout_s: float
    jitter: random.Random = field(default_factory=random.Random)

    def __call__(self, fn: Callable[[], _T], doing: str = "translating") -> _T:
        """Run one client call, retried (module docstring) within ``timeout_s``; map what still fails."""
        deadline = time.monotonic() + self.timeout_s
        retries = 0
        while True:
            with _CLIENT_SETTINGS:
                saved = deepl.http_client.max_network_retries, deepl.http_client.min_connection_timeout
                deepl.http_client.max_network_retries = 0
                deepl.http_client.min_connection_timeout = max(deadline - time.monotonic(), 0.01)
                try:
                    return fn()
                except deepl.DeepLException as exc:
                    failure = exc
                finally:  # the library's settings are process-wide: leave them as found
                    deepl.http_client.max_network_retries, deepl.http_client.min_connection_timeout = saved
            retryable = (
                failure.should_retry
                or isinstance(failure, deepl.TooManyRequestsException)
                or (failure.http_status_code is not None and failure.http_status_code >= 500)
            )
            delay = _BACKOFF_INITIAL_S * _BACKOFF_MULTIPLIER**retries
            delay *= 1 + _BACKOFF_JITTER * self.jitter.uniform(-1, 1)
            out_of_time = time.monotonic() + delay >= deadline
            if not retryable or retries >= self.retries or out_of_time:
                raise self.map_error(failure, doing, retries, out_of_time and retryable)
            time.sleep(delay)
            retries += 1

    def map_error(
        self, exc: deepl.DeepLException, doing: str, tried: int, out_of_time: bool
    ) -> TranslationError:
        retries = f"{tried} retr{'y' if tried == 1 else 'ies'}"
        if out_of_time:
            retries += f" (timeout_s {self.timeout_s:g} s: no time for another)"
        status = exc.http_status_code
        values = {"doing": doing, "retries": retries, "where": self.where, "status": status,
                  "detail": scrub(str(exc), self.secret, "<auth key>"), "key": ENV_KEY, "url": ENV_URL,
                  "http": f"HTTP {status}: " if status is not None else ""}  # fmt: skip
        kind, message = next((k, m) for test, k, m in _ERRORS if test(exc, status))
        return chained(kind(message.format(**values)), exc, self.secret)


_ERRORS: tuple[tuple[Callable[[deepl.DeepLException, int | None], bool], type[TranslationError], str], ...] = (
    (lambda e, _: isinstance(e, deepl.QuotaExceededException), QuotaExceeded,
     "DeepL character quota for this billing period is used up (HTTP 456) while {doing}: "
     "rerun after it resets or raise the account's limit; results already paid for stay cached"),
    (lambda e, _: isinstance(e, deepl.AuthorizationException), AuthorizationFailed,
     "DeepL rejected the auth key (HTTP 403) at {where}: check {key}; Free keys end in ':fx' and need no {url}"),
    (lambda e, _: isinstance(e, deepl.TooManyRequestsException), RateLimited,
     "DeepL still answered 429 Too Many Requests after {retries} while {doing}: "
     "run fewer translation jobs at once or raise max_network_retries, then rerun"),
    (lambda e, _: isinstance(e, deepl.ConnectionException), TranslatorUnavailable,
     "cannot reach {where} after {retries} while {doing} ({detail}): check the network and {url}, then rerun"),
    (lambda _, status: status == 413, RequestTooLarge,
     "{where} refused the request as too large (HTTP 413) while {doing}: "
     "lower deepl.max_request_bytes, or split the text into smaller passages"),
    (lambda _, status: status is not None and status >= 500, TranslatorUnavailable,
     "{where} kept failing with HTTP {status} after {retries} while {doing}: "
     "the service is having trouble; rerun later"),
    (lambda _e, _s: True, TranslationError,
     "DeepL refused the request while {doing} ({http}{detail}): check the translation config"),
)  # fmt: skip
"""(test, error class, message) in order: the first whose test holds maps the failure."""
