"""Sending requests to NCBI politely: a shared rate limit, retries, and the key kept secret.

NCBI allows 3 requests per second without an API key and 10 with one
(https://www.ncbi.nlm.nih.gov/books/NBK25497/#chapter2.Usage_Guidelines_and_Requiremen):
every :class:`NcbiHttp` of one process that talks to the same host at the same rate shares
one :class:`RateLimiter` (thread-safe), so two stages or threads cannot add up past it.

A request that times out, loses its connection, or is answered 429 or 5xx is sent again, up
to ``max_attempts`` sends in all, after the wait a 429/503 asks for (``Retry-After``, capped)
or an exponential backoff with jitter (:mod:`tasks.common.llm.wire`); then, or at once for
another status, a one-line :class:`~tasks.common.pubmed.port.PubmedError` naming the URL.

The API key goes in the POST body (E-utilities take their parameters as a form too), never in
a URL: URLs are what ``httpx`` logs. Messages show the URL without its query and server text
with the key masked; no ``httpx`` exception (whose request holds the key) is chained.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import httpx

from irforge.errors import ConfigError
from tasks.common.llm.wire import backoff_s, retry_after_s
from tasks.common.models.secrets import scrub
from tasks.common.pacing import HostPacer
from tasks.common.pubmed.port import PubmedError
from tasks.common.urls import public_url

log = logging.getLogger(__name__)

_RETRIED = frozenset({408, 429})


class RateLimiter:
    """Request starts spaced at least ``1 / per_second`` apart, across threads."""

    def __init__(
        self,
        per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not per_second > 0:
            raise ValueError(f"requests per second must be positive, got {per_second}")
        self.per_second = per_second
        self._pacer = HostPacer(clock, sleep)

    def wait(self) -> None:
        """Block until this caller may start a request (its slot is reserved under the lock)."""
        self._pacer.wait("", 1.0 / self.per_second)


_LIMITERS: dict[tuple[str, float], RateLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def shared_limiter(url: str, per_second: float) -> RateLimiter:
    """The process-wide limiter of ``url``'s host at that rate."""
    key = (urlsplit(url).netloc.lower(), float(per_second))
    with _LIMITERS_LOCK:
        return _LIMITERS.setdefault(key, RateLimiter(per_second))


class NcbiHttp:
    """GET (no key) and POST (with ``api_key``) with NCBI's ``tool``/``email`` identification."""

    def __init__(
        self,
        *,
        api_key: str | None,
        tool: str,
        email: str | None,
        limiter: RateLimiter,
        timeout_s: float,
        max_attempts: int,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_attempts < 1:
            raise ConfigError(f"pubmed.eutils.max_attempts must be at least 1, got {max_attempts}")
        self._key = api_key
        self._identity = {"tool": tool, **({"email": email} if email else {})}
        self._limiter = limiter
        self._timeout_s = timeout_s
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=True)
        self._sent = 0
        self._sent_lock = threading.Lock()

    @property
    def sent(self) -> int:
        """Requests sent so far (each attempt counts)."""
        return self._sent

    def get(self, url: str, params: Mapping[str, str]) -> str:
        return self._send("GET", url, {**params, **self._identity}, as_form=False)

    def post(self, url: str, params: Mapping[str, str]) -> str:
        key = {"api_key": self._key} if self._key else {}
        return self._send("POST", url, {**params, **self._identity, **key}, as_form=True)

    def close(self) -> None:
        self._client.close()

    def _send(self, method: str, url: str, params: dict[str, str], *, as_form: bool) -> str:
        where = public_url(url)
        for attempt in range(1, self._max_attempts + 1):
            self._limiter.wait()
            with self._sent_lock:
                self._sent += 1
            asked: float | None = None
            try:
                if as_form:
                    response = self._client.request(method, url, data=params)
                else:
                    response = self._client.request(method, url, params=params)
            except httpx.TimeoutException:
                failure = f"no answer within {self._timeout_s:g} s"
            except httpx.TransportError as exc:
                failure = f"connection failed ({type(exc).__name__})"
            else:
                status = response.status_code
                if status == 200:
                    return response.text
                if status not in _RETRIED and status < 500:
                    detail = scrub(response.text or response.reason_phrase, self._key, limit=200)
                    raise PubmedError(f"{where} refused the request (HTTP {status}: {detail})")
                failure = f"HTTP {status}"
                asked = retry_after_s(response.headers)
            if attempt == self._max_attempts:
                raise PubmedError(
                    f"{where} still failing after {attempt} attempts ({failure}): is NCBI reachable? "
                    "rerun later (answers so far are cached), or raise pubmed.eutils.max_attempts"
                ) from None
            delay = backoff_s(attempt, asked, self._backoff_s, self._max_backoff_s)
            log.warning(
                "%s: %s; attempt %d of %d in %.2f s", where, failure, attempt + 1, self._max_attempts, delay
            )
            self._sleep(delay)
        raise AssertionError("unreachable")
