"""Pool workers die with their driver however it dies (issue 30 §1): flows.runners.die_with_parent,
which every pool worker starts (flows/runners.py ``_start_worker``), on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

# The "driver": starts a "worker" that watches it, prints the worker's pid, then sleeps.
DRIVER = """
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", WORKER, str(os.getpid())], stdout=subprocess.PIPE, text=True)
assert worker.stdout.readline().strip() == "armed"
print(worker.pid, flush=True)
time.sleep(600)
"""
WORKER = """
import sys, time
from flows.runners import die_with_parent
die_with_parent(int(sys.argv[1]))
print("armed", flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")  # a zombie is dead


def test_a_worker_exits_when_its_driver_is_killed_with_sigkill() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    source = f"WORKER = {WORKER!r}\n{DRIVER}"
    driver = subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True, env=env)
    assert driver.stdout is not None
    worker = int(driver.stdout.readline())  # printed once the worker's watch is armed
    assert _alive(worker)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the worker outlived its SIGKILLed driver"


def test_a_new_pool_stops_workers_whose_driver_is_gone() -> None:
    """A worker left by a run that died before workers watched their driver is stopped when
    the next run makes its pool; a worker whose driver lives is left alone."""
    from flows.runners import DRIVER_PID, stop_stale_workers

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has now
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    stale = subprocess.Popen(sleep, env={**os.environ, DRIVER_PID: str(gone.pid)})
    ours = subprocess.Popen(sleep, env={**os.environ, DRIVER_PID: str(os.getpid())})
    try:
        time.sleep(0.3)  # both have exec'd: their environment is the one given
        stopped = stop_stale_workers()
        assert stale.pid in stopped and ours.pid not in stopped
        assert stale.wait(timeout=10) == -signal.SIGKILL
        assert ours.poll() is None
    finally:
        for proc in (stale, ours):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
