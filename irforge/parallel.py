"""Where the chunks of a stage run: the seam between the engine and a task runner.

The engine (:mod:`irforge.engine`) hands a :class:`ChunkRunner` one call per unfinished
chunk and persists each result as it comes back, in whatever order; the artifact is
assembled in chunk order afterwards, so it is the same bytes whichever runner computed
it. :class:`InlineRunner` runs the calls one after another in this process (planning,
tests, one-chunk stages). ``flows/runners.py`` submits them as Prefect tasks to a process
pool or a Ray cluster (https://docs.prefect.io/v3/concepts/task-runners); nothing here
imports Prefect.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from irforge.artifacts import write_json_atomic


@dataclass(frozen=True)
class Resources:
    """What one chunk of a stage needs from the node that runs it.

    Ray places a chunk only where these are free (https://docs.ray.io/en/latest/ray-core/scheduling/resources.html):
    a chunk with ``num_gpus`` goes to a GPU node, one without never waits for a GPU.
    ``memory_mb`` reserves memory (a model held while the chunk runs). A local process pool
    only honours ``parallel``.
    """

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory_mb: int = 0
    parallel: bool = True  # False: chunks share state a worker cannot see; run them in the stage's process


CPU = Resources()


@dataclass(frozen=True)
class ChunkCall:
    """One chunk's work: ``fn(*args)`` under ``name`` (``<flow>.<stage>[<index>]``)."""

    index: int
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]


class ChunkRunner(Protocol):
    """Runs chunk calls, possibly in parallel, yielding ``(index, result)`` as each finishes."""

    @property
    def description(self) -> str: ...

    def run(self, calls: Iterable[ChunkCall], resources: Resources) -> Iterator[tuple[int, Any]]: ...


class InlineRunner:
    """One call after another, in this process."""

    description = "inline"

    def run(self, calls: Iterable[ChunkCall], resources: Resources) -> Iterator[tuple[int, Any]]:
        for call in calls:
            yield call.index, call.fn(*call.args)


INLINE = InlineRunner()


CHUNKS_PER_WORKER = 4
MAX_GROWTH = 16


def rows_per_chunk(configured: int, rows: int, workers: int) -> int:
    """The rows of each chunk of a stage of ``rows`` input rows on ``workers`` workers, given
    ``execution.chunk_rows`` (``configured``).

    Inline (one worker) that is ``configured``. On a pool a chunk costs ~35 ms of Prefect
    beyond its work (a task run: bench/bench_scale.py's empty chunk on 2 busy cores), which cheap
    stages pay every few hundred rows (CURE's filter: 500 rows, ~40 ms of work). So chunks grow,
    by whole multiples of ``configured``, towards ``rows / (workers × CHUNKS_PER_WORKER)`` (four
    a worker: the worker finishing last idles a quarter of its share at most), never beyond
    ``MAX_GROWTH × configured`` (what a killed run may lose); and fewer rows than a chunk a
    worker are split in one chunk a worker.
    """
    if workers <= 1 or rows <= configured:
        return configured
    if rows < configured * workers:
        return max(1, rows // workers)
    return configured * max(1, min(MAX_GROWTH, rows // (workers * CHUNKS_PER_WORKER * configured)))


def kept_rows_per_chunk(plan_file: Path, configured: int, rows: int, workers: int, started: bool) -> int:
    """:func:`rows_per_chunk`, kept in the stage's ``plan.json`` (irforge/engine.py): a resumed run
    keeps the chunks it began with, whatever its runner (``configured`` for a work dir that
    has finished chunks from before the size was kept)."""
    plan = json.loads(plan_file.read_text(encoding="utf-8"))
    if "rows_per_chunk" not in plan:
        plan["rows_per_chunk"] = configured if started else rows_per_chunk(configured, rows, workers)
        write_json_atomic(plan_file, plan)
    return int(plan["rows_per_chunk"])
