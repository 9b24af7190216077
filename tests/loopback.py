"""What the fake HTTP services of the tests share: a loopback-only threaded server whose
open keep-alive connections can be cut, and a quiet HTTP/1.1 request handler."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from typing import Any


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
