"""Run a Python module as a server that dies with the process that started it.

Run by path, with the standard library only (the server's interpreter may not import
irforge): ``python server_guard.py --parent PID --instance ID -- MODULE ARGS...``.

Two independent guards, so a SIGKILLed parent never leaves the server behind:

- Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (man 2 PR_SET_PDEATHSIG). The kernel signals
  when the *thread* that forked us exits, so the parent forks from a thread that lives as
  long as it does (``tasks.common.llm.llama_server._Spawner``). If the parent died before the
  call, ``getppid()`` no longer names it and we stop at once.
- Everywhere: our stdin is a pipe whose only writer is the parent; the parent's death
  closes it, a reader thread sees end-of-file and kills our process group.

``--instance`` only marks the command line, so a later run can prove a leftover server
is one of ours (``llama_server._stop_stale``) before it signals it.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    """``--parent PID --instance ID -- MODULE ARGS...``: ARGS go to MODULE untouched."""
    if len(argv) < 6 or argv[0] != "--parent" or argv[2] != "--instance" or argv[4] != "--":
        sys.exit("usage: server_guard.py --parent PID --instance ID -- MODULE ARGS...")
    _die_with_parent(int(argv[1]))
    sys.argv = argv[5:]
    runpy.run_module(argv[5], run_name="__main__", alter_sys=True)


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the signal was armed
        _kill_group()
    threading.Thread(target=_watch_stdin, name="parent-watch", daemon=True).start()


def _watch_stdin() -> None:
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    _kill_group()  # end of file: the parent (the pipe's only writer) is gone


def _kill_group() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
