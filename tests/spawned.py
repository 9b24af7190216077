"""Workers in spawned processes that start together: each gets ``(name, *args, barrier, queue)``,
waits on the barrier (so their requests overlap) and puts ``(name, *result)`` on the queue."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Mapping
from typing import Any

CTX = multiprocessing.get_context("spawn")
WAIT_S = 120.0  # for a child process (spawn imports the project afresh)


def race(
    target: Callable[..., None], args_by_name: Mapping[str, tuple[Any, ...]]
) -> dict[str, tuple[Any, ...]]:
    """Run ``target`` once per name in its own process; the results by name (each exits 0)."""
    barrier, out = CTX.Barrier(len(args_by_name)), CTX.Queue()
    procs = [
        CTX.Process(target=target, args=(name, *args, barrier, out)) for name, args in args_by_name.items()
    ]
    for p in procs:
        p.start()
    try:
        results = {}
        for _ in procs:
            name, *rest = out.get(timeout=WAIT_S)
            results[name] = tuple(rest)
    finally:
        for p in procs:
            p.join(WAIT_S)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    return results
