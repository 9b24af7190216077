"""Spacing the starts of requests, per key (a host, an API), across threads: the one rate
limiter of the shared parts and flows (NCBI's 3 or 10 requests/s, a news host's pace)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class HostPacer:
    """Spaces the starts of requests to one host by at least an interval (thread-safe).

    ``clock`` and ``sleep`` are injectable so the pace can be checked without waiting.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait(self, host: str, interval: float) -> float:
        """Block until a request to ``host`` may start; returns how long it waited."""
        with self._lock:
            now = self._clock()
            start = max(now, self._next.get(host, now))
            self._next[host] = start + interval
        delay = start - now
        if delay > 0:
            self._sleep(delay)
        return delay
