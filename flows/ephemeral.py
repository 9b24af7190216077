"""Prefect's temporary API server, tied to the life of the ``irforge`` process.

Without ``PREFECT_API_URL`` Prefect starts a temporary server as a child process on first
use and stops it at exit (``SubprocessASGIServer`` in ``prefect/server/api/server.py``);
a SIGKILLed run would leave it running (~200 MB each). We start that same server first
(a singleton: every Prefect client of this process reuses it), with a watchdog
(:mod:`flows.watchdog`) beside it that stops it when we die, however we die.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_API_URL

SERVER_MARKER = "prefect.server.api.server:create_app"
"""A substring of the temporary server's command line (``_run_uvicorn_command``)."""

_watchdogs: list[subprocess.Popen[bytes]] = []


def guard_temporary_server() -> int | None:
    """Start Prefect's temporary server now, guarded; its port, or None with a real server."""
    server = SubprocessASGIServer()
    if PREFECT_API_URL.value() or server.running:
        return None
    # Spawned from the main thread, which lives as long as the process: PR_SET_PDEATHSIG
    # fires when the forking *thread* exits. Started before the server, so there is no
    # moment when the server runs unguarded.
    watchdog = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("watchdog.py")), str(os.getpid()), SERVER_MARKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to our terminal's group must not stop it first
    )
    _watchdogs.append(watchdog)
    server.port = server.port or server.find_available_port()
    _announce(watchdog, server.port)
    server.start()
    _announce(watchdog, server.port)  # start() picks another port if this one was taken
    return server.port


def _announce(watchdog: subprocess.Popen[bytes], port: int | None) -> None:
    assert watchdog.stdin is not None
    watchdog.stdin.write(f"{port}\n".encode())
    watchdog.stdin.flush()
