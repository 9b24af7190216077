"""One local Prefect server for many commands: ``irforge server start`` / ``status`` / ``stop``.

Without ``PREFECT_API_URL`` each ``irforge run`` that computes starts Prefect's temporary
server and stops it at exit (:mod:`flows.ephemeral`): seconds to tens of seconds a command.
``irforge server start`` starts ``prefect server start`` (https://docs.prefect.io/v3/concepts/server)
in the background on the loopback address, over the same database under ``PREFECT_HOME``,
and records its URL and process in ``$PREFECT_HOME/irforge-server.json``; every later
``irforge run`` without ``PREFECT_API_URL`` uses it while it answers ``/api/health``. A
server that died (a reboot) is ignored and its record removed. Importing this does not
import Prefect: the server runs in its own process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from irforge.errors import IrforgeError
from tasks.common.llm.server_process import pid_exists

STATE_FILE = "irforge-server.json"
HOST = "127.0.0.1"
DEFAULT_PORT = 4200  # Prefect's own default (PREFECT_SERVER_API_PORT)


@dataclass(frozen=True)
class LocalServer:
    url: str  # the API URL: http://127.0.0.1:<port>/api
    pid: int
    log: str


def prefect_home() -> Path:
    """``PREFECT_HOME`` as Prefect reads it (default ``~/.prefect``), without importing Prefect."""
    return Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()


def _state_path() -> Path:
    return prefect_home() / STATE_FILE


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """Whether the Prefect API at ``url`` answers its health check."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _recorded() -> LocalServer | None:
    """The server ``start`` recorded (None: no record, or one that cannot be read)."""
    try:
        state = json.loads(_state_path().read_text(encoding="utf-8"))
        return LocalServer(str(state["url"]), int(state["pid"]), str(state.get("log", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running() -> LocalServer | None:
    """The server ``irforge server start`` left running, if it still answers; a stale record is removed."""
    server = _recorded()
    if server is None:
        return None
    if _alive(server.pid) and healthy(server.url):
        return server
    if not _alive(server.pid):
        _state_path().unlink(missing_ok=True)
    return None


def use_running_server() -> str | None:
    """Point this process (and the workers it starts) at the running local server, unless
    ``PREFECT_API_URL`` names a server already; the URL used, or None."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    server = running()
    if server is None:
        return None
    os.environ["PREFECT_API_URL"] = server.url
    return server.url


def start(port: int | None = None, timeout_s: float = 180.0) -> LocalServer:
    """Start ``prefect server start`` in the background (or return the one running)."""
    found = running()
    if found is not None:
        return found
    chosen = port or (DEFAULT_PORT if _free(DEFAULT_PORT) else _any_free_port())
    home = prefect_home()
    home.mkdir(parents=True, exist_ok=True)
    log = home / "irforge-server.log"
    prefect = Path(sys.executable).with_name("prefect")
    command = [str(prefect), "server", "start", "--host", HOST, "--port", str(chosen), "--analytics-off"]
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
        )
    server = LocalServer(f"http://{HOST}:{chosen}/api", process.pid, str(log))
    deadline = time.monotonic() + timeout_s
    while not healthy(server.url, timeout_s=1.0):
        if process.poll() is not None:
            raise IrforgeError(f"the Prefect server exited with code {process.returncode}: see {log}")
        if time.monotonic() > deadline:
            _terminate(process.pid)
            raise IrforgeError(f"the Prefect server did not answer within {timeout_s:.0f} s: see {log}")
        time.sleep(0.2)
    _state_path().write_text(json.dumps(server.__dict__), encoding="utf-8")
    return server


def stop() -> LocalServer | None:
    """Stop the server ``start`` left running (its whole process group); None if there was none."""
    server = _recorded()
    if server is None:
        return None
    if _alive(server.pid):
        _terminate(server.pid)
    _state_path().unlink(missing_ok=True)
    return server


def _terminate(pid: int, grace_s: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    if not pid_exists(pid):
        return False
    # A child we started and that exited stays a zombie until reaped: not alive.
    with contextlib.suppress(ChildProcessError):
        done, _status = os.waitpid(pid, os.WNOHANG)
        return done == 0
    return True


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _any_free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


HEARTBEAT_VARIABLE = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"


def heartbeat_settings(ours: bool) -> contextlib.AbstractContextManager[object]:
    """Flow-run heartbeats off on a server of our own (the temporary one, or ``irforge server
    start``'s), unless ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` asks for them.

    A heartbeat lets a server mark a dead run crashed, through an automation that a local
    server does not have; joining Prefect's heartbeat thread costs each run up to 1 s at its end
    (``_send_heartbeats`` in ``prefect/flow_engine.py`` sleeps in 1 s steps; issue 26). A server
    named by ``PREFECT_API_URL`` or a profile keeps Prefect's setting.
    """
    if not ours or HEARTBEAT_VARIABLE in os.environ:
        return contextlib.nullcontext()
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings  # noqa: PLC0415

    return temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})
