"""Several servers of one kind behind one client: least outstanding requests, take-out, cooldown.

Several vLLM replicas behind one client (README "Run at scale"), balanced the way a load
balancer's "least outstanding requests" does it
(https://docs.aws.amazon.com/elasticloadbalancing/latest/application/load-balancer-target-groups.html#modify-routing-algorithm). Shared by the adapters of OpenAI-compatible servers (``tasks/common/llm/openai_chat.py``,
``tasks/common/embed/remote.py``, ``tasks/common/rerank/vllm_score.py``), whose configs take
``base_url`` or ``base_urls`` (:func:`configured_urls`).

- Choice (:meth:`EndpointPool.lease`): a server whose cooldown has ended is probed first (one
  request at a time: half-open); else the live server with the fewest requests in flight, ties
  going round robin from the server after the last one chosen.
- A send that fails for the server's sake (no connection, timeout, HTTP 5xx) takes the server
  out for ``cooldown_s`` (:meth:`Lease.failed`); the adapter re-sends the request at once to
  another live server without spending an attempt (:meth:`EndpointPool.free_failover`, at most
  one per other server and request). A probe that is answered brings the server back; one that
  fails takes it out again. Only unanswered sends are re-sent: an answer ends the request.
- When every server is out a retry waits for the soonest end of a cooldown, at most the
  adapter's own backoff (:meth:`EndpointPool.retry_delay`), then goes to the server back
  soonest: the adapter's attempts bound it and its failure path reports.
- A single server is never taken out: the adapter's retries act alone, as before.

Take-outs and returns are logged (logger ``irforge``, WARNING) with the public URL only
(``tasks/common/urls.py``). Thread-safe: the chat adapter sends from an event loop, the others
from worker threads, and adapters are shared between threads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from tasks.common.urls import public_url

logger = logging.getLogger("irforge")
DEFAULT_COOLDOWN_S = 30.0


def configured_urls(base_url: str | None, base_urls: Sequence[str] | None) -> tuple[str, ...]:
    """The server list of a config: ``(base_url,)`` or ``base_urls`` (``()`` when neither is set).

    ValueError (naming the key, never a URL, which may hold credentials) when both are set, when
    ``base_urls`` is empty or lists one server twice.
    """
    if base_url is not None and base_urls is not None:
        raise ValueError("give base_url or base_urls, not both (base_url: X is base_urls: [X])")
    if base_urls is None:
        return (base_url,) if base_url else ()
    urls = tuple(url.strip() for url in base_urls)
    if not urls or not all(urls):
        raise ValueError("base_urls must list at least one server URL, none empty")
    for i, url in enumerate(urls):
        if url in urls[:i]:
            raise ValueError(f"base_urls lists one server twice (#{urls.index(url) + 1} and #{i + 1})")
    return urls


def url_list(base_url: str | Sequence[str]) -> list[str]:
    """An adapter's ``base_url`` argument (one URL or several) as a list of stripped URLs."""
    return [u.strip() for u in ([base_url] if isinstance(base_url, str) else base_url)]


def not_http(urls: Sequence[str]) -> str | None:
    """The public form of the first URL that is not ``http(s)://host...`` ("" for no URL at all)."""
    for url in urls or [""]:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return public_url(url)
    return None


@dataclass(frozen=True)
class Endpoint:
    """One server: ``url`` as configured (it may carry credentials: never show it), ``public`` as shown."""

    index: int
    url: str
    public: str


@dataclass(eq=False)
class Lease:
    """One send to ``endpoint``. Call :meth:`failed` when the server failed the send; a lease left
    normally counts as answered, one left by an exception (cancelled, ...) as neither."""

    endpoint: Endpoint
    probe: bool
    verdict: bool | None = None
    why: str = ""

    def failed(self, why: str) -> None:
        """The server failed this send (no connection, timeout, 5xx): ``why`` is logged, so scrub it."""
        self.verdict, self.why = False, why


class EndpointPool:
    """The servers of one adapter, with their requests in flight and cooldowns (see module doc)."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        service: str = "server",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not urls:
            raise ValueError("no server URL given")
        if not cooldown_s > 0:
            raise ValueError(f"server_cooldown_s must be positive, got {cooldown_s}")
        self.endpoints = tuple(Endpoint(i, u.strip(), public_url(u.strip())) for i, u in enumerate(urls))
        self.cooldown_s = cooldown_s
        self.service = service
        self._clock = clock
        self._lock = threading.Lock()
        n = len(self.endpoints)
        self._outstanding = [0] * n
        self._out_until: list[float | None] = [None] * n  # when its cooldown ends; None: live
        self._probes = [0] * n  # probes in flight
        self._next = 0  # where the round robin over ties starts

    def __len__(self) -> int:
        return len(self.endpoints)

    @property
    def names(self) -> str:
        """The servers' public URLs, comma-separated (what messages name)."""
        return ", ".join(e.public for e in self.endpoints)

    def outstanding(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(self._outstanding)

    def out(self) -> tuple[bool, ...]:
        """Which servers are out (cooling down, or due for a probe)."""
        with self._lock:
            return tuple(until is not None for until in self._out_until)

    @contextlib.contextmanager
    def lease(self) -> Iterator[Lease]:
        """The server for the next send, counted in flight until the block ends."""
        lease = self._acquire()
        ok = False
        try:
            yield lease
            ok = True
        finally:
            self._release(lease, lease.verdict if lease.verdict is not None or not ok else True)

    def free_failover(self, used: int) -> bool:
        """Whether a request whose server just failed may go at once to another server without
        spending an attempt: there is one live or due for its probe, and the request has had fewer
        than ``len(pool) - 1`` such failovers."""
        if used >= len(self.endpoints) - 1:
            return False
        with self._lock:
            return self._available(self._clock())

    def retry_delay(self, backoff_s: float) -> float:
        """Seconds before a retry after a server failure: none while a server is live or due for
        its probe, else until the soonest cooldown ends but at most ``backoff_s``; a single server
        waits ``backoff_s``."""
        if len(self.endpoints) == 1:
            return backoff_s
        with self._lock:
            now = self._clock()
            if self._available(now):
                return 0.0
            soonest = min(until for until in self._out_until if until is not None)
        return max(0.0, min(backoff_s, soonest - now))

    # -- internals (called with the lock held, except _acquire and _release) -----------

    def _available(self, now: float) -> bool:
        return any(self._is_live(i) or self._is_due(i, now) for i in range(len(self.endpoints)))

    def _is_live(self, i: int) -> bool:
        return self._out_until[i] is None

    def _is_due(self, i: int, now: float) -> bool:
        until = self._out_until[i]
        return until is not None and until <= now and self._probes[i] == 0

    def _acquire(self) -> Lease:
        n = len(self.endpoints)
        with self._lock:
            now = self._clock()
            order = [(self._next + k) % n for k in range(n)]
            due = [i for i in order if self._is_due(i, now)]
            live = [i for i in order if self._is_live(i)]
            if due:
                chosen = due[0]
            elif live:
                chosen = min(live, key=lambda i: self._outstanding[i])  # the first of equals: round robin
            else:  # all out: the retry schedule says send now, to the server back soonest
                chosen = min(order, key=lambda i: (self._out_until[i] or 0.0, i))
            probe = not self._is_live(chosen)
            self._outstanding[chosen] += 1
            self._probes[chosen] += probe
            self._next = (chosen + 1) % n
        return Lease(self.endpoints[chosen], probe)

    def _release(self, lease: Lease, answered: bool | None) -> None:
        i, public, n = lease.endpoint.index, lease.endpoint.public, len(self.endpoints)
        with self._lock:
            self._outstanding[i] -= 1
            self._probes[i] -= lease.probe
            if n == 1 or answered is None:
                return
            was_out = self._out_until[i] is not None
            if answered:
                self._out_until[i] = None
            elif not was_out or lease.probe:
                self._out_until[i] = self._clock() + self.cooldown_s
            live = sum(until is None for until in self._out_until)
        if answered and was_out:
            logger.warning("%s %s is back: it answered; %d of %d servers live", self.service, public, live, n)
        elif answered is False and (not was_out or lease.probe):
            again = " again" if was_out else ""
            logger.warning(
                "%s %s taken out%s for %g s (%s); %d of %d servers live",
                self.service, public, again, self.cooldown_s, lease.why, live, n,
            )  # fmt: skip
