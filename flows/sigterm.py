"""SIGTERM for the ``irforge`` command: unwind the run like Ctrl-C does, then leave for sure.

Used by :func:`flows.cli.main`, the console script. Exit status 128 + 15 = 143.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time


class Terminated(SystemExit):
    """SystemExit raised by the SIGTERM handler."""


TERM_GRACE_S = (
    4.5  # SIGTERM to exit at most, with room under the 5 s promised (Docker waits 10 s before SIGKILL)
)
EXIT_S = 1.5  # of it, for the atexit handlers (servers stopped); the rest for unwinding the run
_leaving = threading.Lock()
_term_at: list[float] = []  # when the first SIGTERM arrived (monotonic): every exit path keeps its deadline


def _received() -> None:
    if not _term_at:
        _term_at.append(time.monotonic())


def exit_on_sigterm(grace_s: float = TERM_GRACE_S) -> None:
    """Turn SIGTERM (``kill``, a scheduler's cancel) into SystemExit, as Ctrl-C is turned into
    KeyboardInterrupt: ``finally`` blocks and atexit handlers run, so the embedded LLM server
    a run started is stopped instead of being left orphaned.

    During a flow run Prefect's own handler is installed instead (it raises
    ``TerminationSignal``, which unwinds the run the same way), and Prefect's task runner
    then waits for the stage still running in its worker thread. So a watcher thread, told
    of every signal through :func:`signal.set_wakeup_fd` whichever handler is installed,
    ends the process ``grace_s`` after a SIGTERM at the latest: ``grace_s - EXIT_S`` for the
    run to unwind, then the atexit handlers, cut short at ``EXIT_S``. Pool workers follow
    their driver within half a second (``flows/runners.py`` ``die_with_parent``)."""

    def handler(signum: int, _frame: object) -> None:
        _received()
        signal.signal(signum, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    threading.Thread(target=_watch, args=(read_end, grace_s), name="irforge-sigterm", daemon=True).start()


def _watch(read_end: int, grace_s: float) -> None:
    while signal.SIGTERM not in (signals := os.read(read_end, 64)):
        if not signals:
            return
    _received()
    exit_s = min(EXIT_S, grace_s / 2)
    time.sleep(max(_term_at[0] + grace_s - exit_s - time.monotonic(), 0.0))
    leave(128 + signal.SIGTERM, exit_s)


def leave(code: int, grace_s: float = TERM_GRACE_S) -> None:
    """Run the atexit handlers (they stop child servers) and exit without joining threads;
    exit anyway if the handlers take longer than ``grace_s``, or past :data:`TERM_GRACE_S`
    after a SIGTERM, whichever comes first."""
    if _term_at:
        grace_s = min(grace_s, max(_term_at[0] + TERM_GRACE_S - time.monotonic(), 0.05))
    with _leaving:
        last_resort = threading.Timer(grace_s, os._exit, (code,))
        last_resort.daemon = True
        last_resort.start()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
