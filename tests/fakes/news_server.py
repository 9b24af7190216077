"""A loopback news site for tests: RSS 2.0 and Atom 1.0 feeds, HTML pages, robots.txt.

It speaks plain HTTP/1.1 as a news site does (built on ``tests/fakes/loopback.py``):

- ``GET /robots.txt``: ``robots`` as ``text/plain`` (404 when None; ``robots_status`` sends
  another status, e.g. 503);
- ``GET <feed path>``: an RSS 2.0 (https://www.rssboard.org/rss-specification) or Atom 1.0
  (RFC 4287) document listing the feed's entries, their links absolute on this server;
- ``GET <page path>``: the page's bytes with its Content-Type;
- a redirect path answers 301 with ``Location``; a slow path waits ``delay_s`` before it
  answers (a client's timeout fires first); any other path is 404;
- ``inject(status, times, after, path)`` makes requests answer ``status`` (429/500/503 …,
  with ``Retry-After: 0``) before the real answer.

Every request is recorded (method, path, User-Agent, the server's monotonic time).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from xml.sax.saxutils import escape, quoteattr

import pytest

from tests.fakes.loopback import FaultQueue, LoopbackServer, QuietHandler, RecordingService


@dataclass(frozen=True)
class NewsRequest:
    method: str
    path: str
    user_agent: str
    at: float


@dataclass(frozen=True)
class Entry:
    title: str
    path: str  # where the entry links, on this server (or an absolute URL)
    published: datetime = datetime(2024, 5, 1, 8, 0, tzinfo=UTC)


@dataclass
class _Feed:
    kind: str  # "rss" | "atom"
    entries: list[Entry] = field(default_factory=list)


class _Handler(QuietHandler):
    server: _Server

    def _handle(self) -> None:
        fake = self.server.fake
        path = self.path.split("?", 1)[0]
        fake._record(
            NewsRequest(self.command, self.path, self.headers.get("User-Agent", ""), time.monotonic())
        )
        fault = fake.faults.take(path)
        if fault is not None:
            self._send(fault, b"fault", "text/plain", {"Retry-After": "0"})
            return
        if path in fake.slow:
            fake.stopping.wait(fake.slow[path])
            if fake.stopping.is_set():
                return
        status, body, content_type, headers = fake.answer(path)
        self._send(status, body, content_type, headers)

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str]) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:  # the client gave up (a timeout): nothing to answer
            self.close_connection = True


class _Server(LoopbackServer):
    service = "news site"
    fake: NewsServer


class NewsServer(RecordingService[NewsRequest]):
    """The site's state: pages, feeds, robots.txt, redirects, slow paths, faults (module doc)."""

    thread_name = "fake-news-site"

    def __init__(self) -> None:
        super().__init__()
        self.pages: dict[str, tuple[bytes, str]] = {}
        self.feeds: dict[str, _Feed] = {}
        self.redirects: dict[str, str] = {}
        self.slow: dict[str, float] = {}
        self.robots: str | None = ""
        self.robots_status = 200
        self.faults: FaultQueue[int] = FaultQueue()
        self._listen(_Server, _Handler)

    def page(self, path: str, body: str | bytes, content_type: str = "text/html; charset=utf-8") -> str:
        """Serve ``body`` at ``path``; returns its absolute URL."""
        self.pages[path] = (body.encode("utf-8") if isinstance(body, str) else body, content_type)
        return self.url + path

    def feed(self, path: str, entries: list[Entry], kind: str = "rss") -> str:
        self.feeds[path] = _Feed(kind, list(entries))
        return self.url + path

    def inject(self, status: int, times: int = 1, after: int = 0, path: str | None = None) -> None:
        self.faults.add(status, times, after, path)

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def answer(self, path: str) -> tuple[int, bytes, str, dict[str, str]]:
        if path == "/robots.txt":
            if self.robots is None:
                return 404, b"not found", "text/plain", {}
            return self.robots_status, self.robots.encode("utf-8"), "text/plain; charset=utf-8", {}
        if path in self.redirects:
            return 301, b"", "text/plain", {"Location": self.redirects[path]}
        if path in self.feeds:
            feed = self.feeds[path]
            body = self._atom(path, feed) if feed.kind == "atom" else self._rss(path, feed)
            kind = "application/atom+xml" if feed.kind == "atom" else "application/rss+xml"
            return 200, body.encode("utf-8"), f"{kind}; charset=utf-8", {}
        if path in self.pages:
            page, content_type = self.pages[path]
            return 200, page, content_type, {}
        return 404, b"<html><body><h1>Not found</h1></body></html>", "text/html", {}

    def _link(self, entry: Entry) -> str:
        return entry.path if "://" in entry.path else self.url + entry.path

    def _rss(self, path: str, feed: _Feed) -> str:
        items = "".join(
            f"<item><title>{escape(e.title)}</title><link>{escape(self._link(e))}</link>"
            f"<guid>{escape(self._link(e))}</guid><pubDate>{format_datetime(e.published)}</pubDate></item>"
            for e in feed.entries
        )
        return (
            '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel>'
            f"<title>Fake health news</title><link>{escape(self.url)}/</link>"
            f"<description>Feed {escape(path)}</description>{items}</channel></rss>"
        )

    def _atom(self, path: str, feed: _Feed) -> str:
        entries = "".join(
            f'<entry><title>{escape(e.title)}</title><link rel="alternate" href={quoteattr(self._link(e))}/>'
            f"<id>{escape(self._link(e))}</id><updated>{e.published.isoformat()}</updated></entry>"
            for e in feed.entries
        )
        return (
            '<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">'
            f"<title>Fake health news</title><id>{escape(self.url + path)}</id>"
            f"<updated>2024-05-01T08:00:00+00:00</updated>{entries}</feed>"
        )


@pytest.fixture
def news_server() -> Iterator[NewsServer]:
    with NewsServer() as server:
        yield server
