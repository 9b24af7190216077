"""Local server processes that die with the run that started them, and the records that let
a later run stop one that did not (issue 14, item 6).

- :func:`spawn` starts ``python server_guard.py --parent <us> --instance <id> -- <module> ...``
  (:mod:`tasks.common.llm.server_guard`) in its own process group: Linux's parent-death signal,
  plus a stdin pipe whose end-of-file kills it anywhere. The fork happens on one long-lived
  thread (:class:`_Spawner`), because that signal fires when the forking *thread* exits
  (man 2 PR_SET_PDEATHSIG), and stages call in from short-lived worker threads.
- :class:`ServerRecord` is ``<runtime_dir>/<instance>.json``: pid, port, model, log, and
  the owner's pid and start time. :func:`stop_stale` stops the server of a record whose
  owner is gone, once the server's command line proves it is that instance, and deletes
  the record. A stale server is stopped, never adopted: it would not die with its new owner.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from irforge.artifacts import write_json_atomic
from tasks.common.llm import server_guard

log = logging.getLogger("irforge")

GUARD = Path(server_guard.__file__).resolve()
KEEP_LOGS = 20  # logs of stopped servers kept in a runtime dir (the newest)
_POLL_S = 0.05


@dataclass(frozen=True)
class ServerRecord:
    """What a later run needs to recognise and stop a server this process started."""

    instance: str
    pid: int
    port: int
    model: str
    log: str
    owner_pid: int
    owner_start: str | None
    started_at: float

    @classmethod
    def mine(cls, instance: str, pid: int, port: int, model: Path, log_path: Path) -> ServerRecord:
        owner = os.getpid()
        return cls(instance, pid, port, str(model), str(log_path), owner, process_start(owner), time.time())

    def write(self, runtime_dir: Path) -> None:
        runtime_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(record_path(runtime_dir, self.instance), asdict(self))

    def owner_alive(self) -> bool:
        return process_start(self.owner_pid) == self.owner_start and pid_exists(self.owner_pid)


def record_path(runtime_dir: Path, instance: str) -> Path:
    return runtime_dir / f"{instance}.json"


def guarded_argv(python: str, instance: str, module: str, args: Sequence[str]) -> list[str]:
    return [python, str(GUARD), "--parent", str(os.getpid()), "--instance", instance, "--", module, *args]


def spawn(argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``Popen(argv)`` from the spawner thread, in a new session, stdin a pipe only we write."""
    return _SPAWNER.popen(argv, stdin=subprocess.PIPE, start_new_session=True, **popen)


class _Spawner:
    """Runs every ``Popen`` on one daemon thread that lives as long as the process."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[list[str], dict[str, Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        future: Future[subprocess.Popen[bytes]] = Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # first use, or a forked child
                self._thread = threading.Thread(target=self._serve, name="irforge-spawner", daemon=True)
                self._thread.start()
        self._jobs.put((argv, kwargs, future))
        try:
            return future.result()
        except BaseException:  # interrupted while it started: stop it when it is there
            future.add_done_callback(_kill_started)
            raise

    def _serve(self) -> None:
        while True:
            argv, kwargs, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(subprocess.Popen(argv, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)


_SPAWNER = _Spawner()


def _kill_started(future: Future[subprocess.Popen[bytes]]) -> None:
    if future.exception() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(future.result().pid, signal.SIGKILL)


def stop_stale(runtime_dir: Path, grace_s: float) -> list[ServerRecord]:
    """Stop the servers of records in ``runtime_dir`` whose owner is gone; return those records."""
    stopped = []
    for path in sorted(runtime_dir.glob("*.json")):
        try:
            record = ServerRecord(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            log.warning("ignoring %s: not a server record", path)
            continue
        if record.owner_alive():
            continue  # a live run's server
        if is_instance(record.pid, record.instance):
            log.warning(
                "stopping llama.cpp server pid %d (port %d, log %s): the run that started it "
                "(pid %d) ended without stopping it",
                record.pid,
                record.port,
                record.log,
                record.owner_pid,
            )
            _stop_instance(record.pid, record.instance, grace_s)
        path.unlink(missing_ok=True)
        stopped.append(record)
    _prune_logs(runtime_dir)
    return stopped


def _stop_instance(pid: int, instance: str, grace_s: float) -> None:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)  # the server leads its process group
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not is_instance(pid, instance):
                return
            time.sleep(_POLL_S)


def _prune_logs(runtime_dir: Path) -> None:
    live = {p.stem for p in runtime_dir.glob("*.json")}
    logs = sorted(
        (p for p in runtime_dir.glob("*.log") if p.stem not in live), key=lambda p: p.stat().st_mtime
    )
    for path in logs[:-KEEP_LOGS]:
        path.unlink(missing_ok=True)


def is_instance(pid: int, instance: str) -> bool:
    """Whether ``pid`` runs the guard with ``--instance instance`` (a zombie does not)."""
    line = cmdline(pid)
    return line is not None and GUARD.name in line and f"--instance {instance} " in f"{line} "


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start(pid: int) -> str | None:
    """When ``pid`` started (tells a process from a later one with its pid), None if it is not running."""
    if sys.platform.startswith("linux"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else fields[19]  # state; starttime (field 22, man 5 proc)
    return _ps(pid, "lstart=")


def cmdline(pid: int) -> str | None:
    if sys.platform.startswith("linux"):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip() or None
    return _ps(pid, "command=")


def _ps(pid: int, field: str) -> str | None:
    try:
        out = subprocess.run(
            ["ps", "-ww", "-o", field, "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
