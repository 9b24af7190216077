"""What the fake HTTP services of the tests share: a loopback-only threaded server whose
open keep-alive connections can be cut, a quiet HTTP/1.1 request handler that reads
requests and writes JSON answers, the replies, fault queues, request logs and
credential checks the fakes build their protocols from."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

F = TypeVar("F")  # a fake's kinds of fault (statuses, "drop", ...)
R = TypeVar("R")  # a fake's recorded request

MALFORMED = (KeyError, TypeError, ValueError)  # what a malformed request body makes routing raise


class Reply(Exception):
    """An answer raised from a fake's routing: ``status``, a JSON ``payload`` (None: none)
    and extra response ``headers``."""

    def __init__(self, status: int, payload: Any = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.payload = payload
        self.headers = dict(headers or {})


def answer_of(
    route: Callable[[], Any],
    malformed: tuple[type[Exception], ...] = (),
    bad_request: Callable[[Exception], Reply] | None = None,
) -> Reply:
    """What ``route`` answers: its result as a 200, or the :class:`Reply` it raised; an error of
    a ``malformed`` type becomes ``bad_request(error)`` (any other propagates)."""
    try:
        return Reply(200, route())
    except Reply as reply:
        return reply
    except malformed as err:
        assert bad_request is not None
        return bad_request(err)


def openai_error(message: str, type_: str, code: str | int | None = None) -> dict[str, Any]:
    """An error body in the shape OpenAI (and vLLM) send."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def presented_auth(headers: Mapping[str, str], expected: str | None) -> str | None:
    """The request's ``Authorization`` header ("" when absent) when ``expected`` is set and the
    header differs from it, so the fake refuses the request; None when it passes."""
    if expected is None:
        return None
    presented = headers.get("authorization", "")
    return None if presented == expected else presented


def check_openai_key(headers: Mapping[str, str], api_key: str | None) -> None:
    """A wrong ``Authorization: Bearer`` gets 401 with OpenAI's message, which *echoes the
    presented key* (so tests can prove an adapter never passes a key on); None accepts any."""
    presented = presented_auth(headers, None if api_key is None else f"Bearer {api_key}")
    if presented is not None:
        key = presented.removeprefix("Bearer ")
        raise Reply(
            401,
            openai_error(f"Incorrect API key provided: {key}.", "invalid_request_error", "invalid_api_key"),
        )


@dataclass(eq=False)
class _Fault(Generic[F]):
    fault: F
    times: int
    after: int
    path: str | None


class FaultQueue(Generic[F]):
    """Injected faults in the order queued. The first fault whose path matches the request's
    (any path when its path is None) lets ``after`` requests through, then answers ``times``."""

    def __init__(self, matches: Callable[[str, str], bool] = str.__eq__) -> None:
        self._faults: list[_Fault[F]] = []
        self._matches = matches  # (request path, fault path) -> whether the fault applies
        self._lock = threading.Lock()

    def add(self, fault: F, times: int, after: int, path: str | None = None) -> None:
        with self._lock:
            self._faults.append(_Fault(fault, times, after, path))

    def take(self, path: str = "") -> F | None:
        """The fault this request gets, if any (counting it)."""
        with self._lock:
            for f in self._faults:
                if f.path is not None and not self._matches(path, f.path):
                    continue
                if f.after > 0:
                    f.after -= 1
                    return None
                f.times -= 1
                if f.times <= 0:
                    self._faults.remove(f)
                return f.fault
            return None


class LoopbackServer(http.server.ThreadingHTTPServer):
    """Serves 127.0.0.1 only; ``fake`` is the service state the handler answers from."""

    daemon_threads = True
    block_on_close = False
    service = "fake"  # named in the loopback error

    def __init__(
        self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler], fake: Any
    ) -> None:
        if address[0] != "127.0.0.1":
            raise ValueError(f"the {self.service} server only serves loopback")
        self.fake = fake
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_all(self) -> None:
        # Keep-alive connections of a client would otherwise outlive the server.
        with self._open_lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive, no Nagle delay, no access log on stderr."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    timeout = 10  # an idle keep-alive connection is closed after this

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def split_url(self) -> tuple[str, dict[str, list[str]]]:
        """The request's path and its parsed query string."""
        url = urllib.parse.urlsplit(self.path)
        return url.path, urllib.parse.parse_qs(url.query)

    def read_raw(self) -> tuple[dict[str, str], bytes]:
        """The request's headers (lower-case names) and its body's bytes."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return {k.lower(): v for k, v in self.headers.items()}, raw

    def read_json(self) -> tuple[str, dict[str, str], Any]:
        """The request's path (query dropped), its headers (lower-case names) and its body:
        parsed JSON, the text itself when it is not JSON, None when empty."""
        path = self.path.split("?", 1)[0]
        headers, raw = self.read_raw()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        return path, headers, body

    def send_json(
        self,
        status: int,
        payload: Any,
        headers: Mapping[str, str] | None = None,
        *,
        content_type: str = "application/json",
        empty: bool = False,
    ) -> None:
        """Answer ``status`` with ``payload`` as a JSON body (none at all when ``empty``: no
        Content-Type then), plus ``headers``."""
        data = b"" if empty else json.dumps(payload).encode("utf-8")
        self.send_response(status)
        if data:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if data:
            self.wfile.write(data)

    def send_reply(self, reply: Reply) -> None:
        self.send_json(reply.status, reply.payload, reply.headers)

    def drop_connection(self) -> None:
        """Close the connection without an answer (a fault: the client sees it cut)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _handle(self) -> None:
        """Answer the request, whatever its method (each fake routes on method and path)."""
        raise NotImplementedError

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()


class LoopbackService:
    """Lifecycle of a fake service: listen on an ephemeral loopback port, serve from a thread.
    ``stopping`` is set when it stops (handlers holding a request wait on it)."""

    thread_name = "fake-service"
    url: str

    def _listen(
        self, server: type[LoopbackServer], handler: type[http.server.BaseHTTPRequestHandler]
    ) -> None:
        self.stopping = threading.Event()
        self._httpd = server(("127.0.0.1", 0), handler, self)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=self.thread_name,
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.close_all()
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class RecordingService(LoopbackService, Generic[R]):
    """A fake service that records every request it receives, in arrival order."""

    def __init__(self) -> None:
        self._requests: list[R] = []
        self._log_lock = threading.Lock()

    @property
    def requests(self) -> list[R]:
        with self._log_lock:
            return list(self._requests)

    def clear(self) -> None:
        with self._log_lock:
            self._requests.clear()

    def _record(self, request: R) -> int:
        """Record ``request``; returns its place in the log."""
        with self._log_lock:
            self._requests.append(request)
            return len(self._requests) - 1

    def _rewrite(self, index: int, change: Callable[[R], R]) -> None:
        """Replace the request recorded at ``index`` (gone if the log was cleared meanwhile)."""
        with self._log_lock:
            if index < len(self._requests):
                self._requests[index] = change(self._requests[index])
