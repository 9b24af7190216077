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

from irforge.errors import IrforgeError

SERVER_MARKER = "prefect.server.api.server:create_app"
"""A substring of the temporary server's command line (``_run_uvicorn_command``)."""

TIMEOUT_VARIABLE = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
DEFAULT_TIMEOUT_S = 180

_watchdogs: list[subprocess.Popen[bytes]] = []


class ServerStartError(IrforgeError):
    """The temporary server did not start: the environment's to fix (one line, exit 2)."""


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
    timeout_s = startup_timeout_s()
    try:
        server.start(timeout=timeout_s)
    except RuntimeError as err:  # prefect's "Timed out while attempting to connect ..." and its output
        raise ServerStartError(
            f"Prefect's temporary server did not answer within {timeout_s} s ({str(err).splitlines()[0][:200]}): "
            f"on a busy machine raise {TIMEOUT_VARIABLE}, or start one server for every command with "
            "`irforge server start`"
        ) from None
    _announce(watchdog, server.port)  # start() picks another port if this one was taken
    return server.port


def startup_timeout_s() -> int:
    """Seconds to wait for the temporary server: ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``
    when set, else :data:`DEFAULT_TIMEOUT_S` (Prefect's 20 s was seen to run out on a loaded 2-core machine)."""
    value = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    try:
        return max(1, int(float(value))) if value else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ServerStartError(f"{TIMEOUT_VARIABLE}={value!r} is not a number of seconds") from None


def _announce(watchdog: subprocess.Popen[bytes], port: int | None) -> None:
    assert watchdog.stdin is not None
    watchdog.stdin.write(f"{port}\n".encode())
    watchdog.stdin.flush()
