"""Stop Prefect's temporary API server when the process that started this watchdog dies.

Run by path with the standard library only: ``python watchdog.py PARENT MARKER``.
:mod:`flows.ephemeral` starts it *before* Prefect's temporary server (a plain child that
Prefect spawns, ``SubprocessASGIServer`` in ``prefect/server/api/server.py``, and that a
SIGKILLed ``irforge`` would leave running) and writes each port the server is started
on to our stdin, one per line; the victims are the processes whose command line
contains MARKER and ``--port <a port we were told>``, so nothing else is ever signalled.

Two independent triggers, as in ``tasks/common/llm/server_guard.py``: on Linux
``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (man 2 PR_SET_PDEATHSIG), and everywhere the end of
file on stdin, a pipe whose only writer is the parent.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1
GRACE_S = 3.0


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit("usage: watchdog.py PARENT MARKER")
    parent, marker = int(argv[0]), argv[1]
    ports: set[str] = set()
    signal.signal(signal.SIGTERM, lambda *_: _stop(marker, ports))
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        _stop(marker, ports)
    pending = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(0, 4096):
            *lines, pending = (pending + chunk).split(b"\n")
            ports.update(line.decode().strip() for line in lines if line.strip())
    _stop(marker, ports)


def _stop(marker: str, ports: set[str]) -> None:
    needles = [f"--port {port} " for port in ports]
    victims = [pid for pid, cmd in _processes() if marker in cmd and any(n in cmd for n in needles)]
    for pid in victims:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and (alive := [p for p in victims if _alive(p)]):
        victims = alive
        time.sleep(0.05)
    for pid in victims:
        _signal(pid, signal.SIGKILL)
    os._exit(0)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _processes() -> list[tuple[int, str]]:
    """(pid, command line + " ") of every process we can see."""
    proc = Path("/proc")
    if (proc / "self" / "cmdline").exists():
        found = []
        for entry in proc.iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found.append((int(entry.name), cmd.rstrip() + " "))
        return found
    ps = subprocess.run(["ps", "-A", "-o", "pid=,command="], check=False, capture_output=True, text=True)
    rows = (line.strip().split(" ", 1) for line in ps.stdout.splitlines() if line.strip())
    return [(int(row[0]), row[1] + " ") for row in rows if len(row) == 2]


if __name__ == "__main__":
    main(sys.argv[1:])
