"""Polite HTTP for news feeds and pages: a per-host pace, robots.txt, retries, a response cache.

Used by ``tasks/crossgenre/stages/ingest.py`` (through ``tasks/crossgenre/pages.py``).

- **Pace**: at most ``requests_per_second`` requests start per host, and no faster than the
  host's robots.txt ``Crawl-delay``; :data:`PACER` is shared by every fetcher of the process,
  so chunks that follow one another keep the pace too.
- **robots.txt** (RFC 9309, https://www.rfc-editor.org/rfc/rfc9309): read with protego for the
  configured user agent before the first request to a host, and checked for every URL,
  redirects included. 4xx: no rules, everything allowed; 5xx or unreachable: everything
  disallowed (§2.3.1.3-4), read once per scheme, host and port. A refused URL raises
  :class:`FetchFailed` ``robots_disallowed``.
- **Internal addresses** (:mod:`tasks.common.address_guard`): before every connection,
  redirects included, the host is resolved and refused when it is loopback, private,
  link-local, multicast or otherwise not public, unless ``allow_hosts`` / ``allow_networks``
  name it: :class:`FetchFailed` ``blocked_address``. A malformed URL is ``fetch_failed``.
- **Retries**: a timeout, a lost connection, 429 or 5xx is retried up to ``max_attempts``
  times, after ``backoff_s`` doubling each time, or after the server's ``Retry-After``.
- **Cache** (:class:`ResponseCache`, ``<cache_dir>/news_http.sqlite``): every final answer
  (2xx, and 4xx other than 429) is stored under its URL and the *fetch day* (UTC, or the
  configured ``day``), so a rerun on that day sends nothing; robots.txt answers too. What
  still failed after its retries is not stored: a rerun asks again.
"""

from __future__ import annotations

import email.utils
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from typing import Any, ClassVar
from urllib.parse import urljoin, urlsplit

import httpx
from protego import Protego
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.fingerprint import Transport
from irforge.sqlite_cache import SqliteCache
from tasks.common.address_guard import AddressGuard, BlockedAddress, Resolver, system_resolver
from tasks.common.pacing import HostPacer
from tasks.common.text.document import InputRejected

log = logging.getLogger(__name__)

_RETRIED = frozenset({408, 429, 500, 502, 503, 504})
_MAX_REDIRECTS = 10
_MAX_RETRY_AFTER_S = 120.0
_DISALLOW_ALL = "User-agent: *\nDisallow: /\n"


class FetchConfig(StrictModel):
    user_agent: str = Field(
        "irforge-crossgenre/1 (research crawler)",
        description="Sent with every request; robots.txt rules for it apply.",
    )
    requests_per_second: Transport[float] = Field(
        1.0, gt=0, description="Requests started per host and second."
    )
    respect_robots: bool = Field(True, description="Read and obey each host's robots.txt (RFC 9309).")
    timeout_s: Transport[float] = Field(20.0, gt=0, description="Per request (connect, read).")
    max_attempts: Transport[int] = Field(
        3, ge=1, description="Tries of a request that times out or gets 429/5xx."
    )
    backoff_s: Transport[float] = Field(1.0, ge=0, description="First wait between tries; doubles each time.")
    max_items_per_feed: int | None = Field(None, ge=1, description="Only the first N items of each feed.")
    max_bytes: int = Field(10_000_000, ge=1, description="Larger responses are a fetch failure.")
    allow_hosts: list[str] = Field(
        [], description="Hosts fetched although they resolve to internal addresses (tests, intranet feeds)."
    )
    allow_networks: list[str] = Field(
        [], description="Internal networks (CIDR) fetched all the same, e.g. 10.20.0.0/16 for an intranet."
    )
    day: str | None = Field(
        None,
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="The fetch day whose cached responses are used (UTC today when None); "
        "responses missing from the cache are fetched and stored under it.",
    )


@dataclass(frozen=True)
class Response:
    url: str  # where the answer came from, after redirects
    status: int
    content_type: str
    body: bytes
    fetched_at: str  # ISO 8601 UTC

    @property
    def charset(self) -> str | None:
        return charset_of(self.content_type)


def charset_of(content_type: str) -> str | None:
    """The ``charset`` parameter of a Content-Type header value, if any."""
    message = Message()
    message["content-type"] = content_type
    found = message.get_param("charset")
    return found.strip() if isinstance(found, str) and found.strip() else None


@dataclass(frozen=True)
class _Reply:
    response: Response
    location: str | None  # where a redirect points (None: a final answer)
    retry_after: str | None  # the server's Retry-After header, as sent


class FetchFailed(InputRejected):
    """A URL that could not be fetched: ``reason`` is ``fetch_failed`` or ``robots_disallowed``."""


class ResponseCache(SqliteCache[Response]):
    """Final HTTP answers by ``"<day> <url>"`` (module doc)."""

    table = "responses"
    columns: ClassVar[dict[str, str]] = {
        "url": "TEXT NOT NULL",
        "status": "INTEGER NOT NULL",
        "content_type": "TEXT NOT NULL",
        "body": "BLOB NOT NULL",
        "fetched_at": "TEXT NOT NULL",
    }
    what = "news response cache"
    error = IrforgeError

    def _row(self, value: Response) -> tuple[Any, ...]:
        return (value.url, value.status, value.content_type, value.body, value.fetched_at)

    def _value(self, row: tuple[Any, ...]) -> Response:
        return Response(str(row[0]), int(row[1]), str(row[2]), bytes(row[3]), str(row[4]))


PACER = HostPacer()


def today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PoliteFetcher:
    """GETs through the cache, robots.txt and the per-host pace (module doc). Close it after use."""

    def __init__(
        self,
        config: FetchConfig,
        cache: ResponseCache | None,
        *,
        pacer: HostPacer = PACER,
        transport: httpx.BaseTransport | None = None,
        resolver: Resolver = system_resolver,
    ) -> None:
        self.config, self.cache, self.pacer = config, cache, pacer
        self.guard = AddressGuard(config.allow_hosts, config.allow_networks, resolver)
        self.day = config.day or today()
        self.requests = 0  # sent over the network (cache hits not counted)
        self._robots: dict[str, Protego] = {}
        self._client = httpx.Client(
            headers={"User-Agent": config.user_agent},
            timeout=config.timeout_s,
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def get(self, url: str) -> Response:
        """The final answer for ``url`` (redirects followed); :class:`FetchFailed` otherwise."""
        response = self._cached_or_fetched(url, robots=True)
        if response.status >= 400:
            raise FetchFailed("fetch_failed", f"HTTP {response.status} from {response.url}")
        return response

    def _cached_or_fetched(self, url: str, *, robots: bool) -> Response:
        key = f"{self.day} {url}"
        if self.cache is not None:
            hit = self.cache.get_many([key]).get(key)
            if hit is not None:
                return hit
        response = self._follow(url, robots=robots)
        if self.cache is not None and response.status not in _RETRIED and response.status < 500:
            self.cache.put_many({key: response})
        return response

    def _follow(self, url: str, *, robots: bool) -> Response:
        current = url
        for _ in range(_MAX_REDIRECTS + 1):
            try:
                parts = urlsplit(current)
                parts.port  # noqa: B018 -- a bad port raises here, not later
            except ValueError as err:  # "http://[::1/x": Invalid IPv6 URL, a port out of range
                raise FetchFailed("fetch_failed", f"{current}: malformed URL ({err})") from None
            if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
                raise FetchFailed("fetch_failed", f"{current}: not an http(s) URL")
            try:
                self.guard.check(
                    parts.hostname, parts.port or (443 if parts.scheme.lower() == "https" else 80)
                )
            except BlockedAddress as err:
                raise FetchFailed("blocked_address", f"{current}: {err}") from None
            if robots:
                self._check_robots(current)
            reply = self._request(current)
            if reply.location is None:
                return reply.response
            current = urljoin(current, reply.location)
        raise FetchFailed("fetch_failed", f"more than {_MAX_REDIRECTS} redirects from {url}")

    def _request(self, url: str) -> _Reply:
        """One URL, retried (module doc): its final answer or a redirect."""
        host = (urlsplit(url).hostname or "").lower()
        problem = ""
        for attempt in range(self.config.max_attempts):
            self.pacer.wait(host, self._interval(url))
            self.requests += 1
            try:
                reply = self._send(url)
            except httpx.InvalidURL as err:
                raise FetchFailed("fetch_failed", f"{url}: {err}") from None
            except httpx.HTTPError as err:  # timeouts, refused or dropped connections
                problem = f"{type(err).__name__} ({err})" if str(err) else type(err).__name__
                self._back_off(attempt, None)
                continue
            if reply.response.status not in _RETRIED:
                return reply
            problem = f"HTTP {reply.response.status}"
            self._back_off(attempt, reply.retry_after)
        raise FetchFailed("fetch_failed", f"{problem} from {url} after {self.config.max_attempts} attempt(s)")

    def _send(self, url: str) -> _Reply:
        with self._client.stream("GET", url) as reply:
            body = bytearray()
            for block in reply.iter_bytes():
                body += block
                if len(body) > self.config.max_bytes:
                    raise FetchFailed(
                        "fetch_failed", f"{url}: more than max_bytes {self.config.max_bytes} bytes"
                    )
            status, headers = reply.status_code, reply.headers
        response = Response(url, status, headers.get("content-type", ""), bytes(body), _now())
        location = headers.get("location") if 300 <= status < 400 else None
        return _Reply(response, location, headers.get("retry-after"))

    def _back_off(self, attempt: int, retry_after: str | None) -> None:
        if attempt + 1 < self.config.max_attempts:
            time.sleep(_retry_after(retry_after, self.config.backoff_s * 2**attempt))

    def _interval(self, url: str) -> float:
        interval = 1.0 / self.config.requests_per_second
        parts = urlsplit(url)
        rules = self._robots.get(f"{parts.scheme.lower()}://{parts.netloc.lower()}")
        delay = rules.crawl_delay(self.config.user_agent) if rules is not None else None
        return max(interval, float(delay or 0.0))

    def _check_robots(self, url: str) -> None:
        if not self.config.respect_robots:
            return
        parts = urlsplit(url)
        origin = f"{parts.scheme.lower()}://{parts.netloc.lower()}"  # RFC 9309 §2.3: per scheme, host, port
        if origin not in self._robots:
            self._robots[origin] = self._read_robots(f"{origin}/robots.txt")
        if not self._robots[origin].can_fetch(url, self.config.user_agent):
            raise FetchFailed(
                "robots_disallowed", f"{url} is disallowed for {self.config.user_agent!r} by robots.txt"
            )

    def _read_robots(self, robots_url: str) -> Protego:
        try:
            response = self._cached_or_fetched(robots_url, robots=False)
        except FetchFailed as err:  # unreachable: complete disallow (RFC 9309 §2.3.1.4)
            log.warning("robots.txt unreachable, host treated as disallowed: %s", err.detail)
            return Protego.parse(_DISALLOW_ALL)
        if response.status >= 500:
            return Protego.parse(_DISALLOW_ALL)
        if response.status >= 400:
            return Protego.parse("")
        return Protego.parse(response.body.decode(response.charset or "utf-8", errors="replace"))


def _retry_after(header: str | None, default: float) -> float:
    """Seconds from a ``Retry-After`` header (seconds or an HTTP date), capped; ``default`` without one."""
    if not header:
        return default
    try:
        return min(max(float(header), 0.0), _MAX_RETRY_AFTER_S)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return default
    return min(max((when - datetime.now(UTC)).total_seconds(), 0.0), _MAX_RETRY_AFTER_S)
