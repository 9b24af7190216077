"""What the fake HTTP services of the tests share: a loopback-only threaded server whose
open keep-alive connections can be cut, and a quiet HTTP/1.1 request handler that reads
JSON requests and writes JSON answers."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self


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

    def read_json(self) -> tuple[str, dict[str, str], Any]:
        """The request's path (query dropped), its headers (lower-case names) and its body:
        parsed JSON, the text itself when it is not JSON, None when empty."""
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        return path, headers, body

    def send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        """Answer ``status`` with ``payload`` as a JSON body, plus ``headers``."""
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

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
    """Lifecycle of a fake service: listen on an ephemeral loopback port, serve from a thread."""

    thread_name = "fake-service"
    url: str

    def _listen(
        self, server: type[LoopbackServer], handler: type[http.server.BaseHTTPRequestHandler]
    ) -> None:
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
