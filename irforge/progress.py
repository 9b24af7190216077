"""Progress reporting for long stages: a protocol, a silent default, a rich bar for a
terminal and, anywhere else (a file, a Prefect worker's log), a log line every ~30 s.

Rows count as their chunk ends; inside a long chunk, stage code counts its own units (LLM
requests, training steps, queries) on a :func:`meter`, shown beside the rows (issue 29 §3).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichBar


class Progress(Protocol):
    def start(self, stage: str, total_rows: int) -> None: ...

    def advance(self, rows: int) -> None: ...

    def units(self, unit: str, done: int, total: int) -> None:
        """``done`` of ``total`` ``unit`` (e.g. "LLM requests") of the chunk running now."""

    def finish(self) -> None: ...


class NullProgress:
    def start(self, stage: str, total_rows: int) -> None:
        pass

    def advance(self, rows: int) -> None:
        pass

    def units(self, unit: str, done: int, total: int) -> None:
        pass

    def finish(self) -> None:
        pass


# -- units inside a chunk ------------------------------------------------------------------

Sink = Callable[[str, int, int], None]
_SINK: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("irforge_progress_sink", default=None)


class Meter:
    """Units of work of one chunk; :meth:`advance` may be called from any thread."""

    def __init__(self, unit: str, total: int, sink: Sink | None) -> None:
        self.unit, self.total, self.done = unit, total, 0
        self._sink = sink
        self._lock = threading.Lock()
        if sink is not None:
            sink(unit, 0, total)

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            done = self.done
        if self._sink is not None:
            self._sink(self.unit, done, self.total)


def meter(unit: str, total: int) -> Meter:
    """A meter for ``total`` ``unit`` of the chunk this thread computes. It reaches the stage's
    progress when the chunk runs in the command's own process (inline); in a pool worker it
    only counts (the rows still advance as chunks end). Create it in the chunk's thread."""
    return Meter(unit, total, _SINK.get())


@contextlib.contextmanager
def reporting(progress: Progress) -> Iterator[None]:
    """Meters created in this thread (and in contexts copied from it) report to ``progress``,
    which is finished on the way out, error or not."""
    token = _SINK.set(progress.units)
    try:
        yield
    finally:
        _SINK.reset(token)
        progress.finish()


class RichProgress:
    """One bar per stage on stderr, and under it one for the units of the chunk running now;
    rich draws nothing when stderr is not a terminal."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._bar: RichBar | None = None
        self._task: TaskID | None = None
        self._units: TaskID | None = None
        self._unit = ""

    def start(self, stage: str, total_rows: int) -> None:
        self._bar = RichBar(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self._console,
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task(stage, total=total_rows, unit="rows")

    def advance(self, rows: int) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, rows)

    def units(self, unit: str, done: int, total: int) -> None:
        if self._bar is None:
            return
        if self._units is None or unit != self._unit or done == 0:
            if self._units is not None:
                self._bar.remove_task(self._units)
            self._units, self._unit = self._bar.add_task("  this chunk", total=total, unit=unit), unit
        self._bar.update(self._units, completed=done, total=total)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        self._bar, self._task, self._units = None, None, None


class LogProgress:
    """Where no bar can be drawn: every ``interval_s`` while a stage runs, one ``irforge`` log
    line (INFO: it reaches Prefect's task-run logs too) with rows done of the total, share,
    rate and time left, also while a long chunk has not finished yet (issue 29 §3)."""

    def __init__(self, interval_s: float = 30.0, log: logging.Logger | None = None) -> None:
        self._interval_s = interval_s
        self._log = log or logging.getLogger("irforge")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stage, self._total, self._done, self._started = "", 0, 0, 0.0
        self._unit: tuple[str, int, int, float] | None = None  # unit, done, total, since

    def start(self, stage: str, total_rows: int) -> None:
        with self._lock:
            self._stage, self._total, self._done, self._started = stage, total_rows, 0, time.monotonic()
            self._unit = None
        self._stop.clear()
        threading.Thread(target=self._tick, name=f"progress-{stage}", daemon=True).start()

    def advance(self, rows: int) -> None:
        with self._lock:
            self._done += rows

    def units(self, unit: str, done: int, total: int) -> None:
        with self._lock:
            same = self._unit is not None and self._unit[0] == unit and done > 0
            since = self._unit[3] if same and self._unit is not None else time.monotonic()
            self._unit = (unit, done, total, since)

    def finish(self) -> None:
        self._stop.set()

    def line(self) -> str:
        """``<stage>: done/total rows (share), rate rows/s, elapsed, left``, then the units of
        the chunk running now (``; this chunk: done/total <unit> …``) when it counts any."""
        with self._lock:
            stage, total, done, unit, now = self._stage, self._total, self._done, self._unit, time.monotonic()
            elapsed = now - self._started
        text = f"{stage}: {_count(done, total, 'rows', elapsed)}, {_duration(elapsed)} elapsed"
        if unit is not None and unit[1] < unit[2]:
            text += f"; this chunk: {_count(unit[1], unit[2], unit[0], now - unit[3])}"
        return text

    def _tick(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._log.info("%s", self.line())


def _count(done: int, total: int, unit: str, elapsed: float) -> str:
    """``done/total unit (share), rate unit/s, about … left``."""
    rate = done / elapsed if elapsed > 0 else 0.0
    share = f"{100 * done / total:.0f} %" if total else "-"
    left = (
        f"about {_duration((total - done) / rate)} left"
        if rate > 0 and total >= done
        else "time left unknown"
    )
    speed = f"{rate:,.1f}" if rate >= 1 or rate == 0 else f"{rate:.2g}"  # 0.033, not 0.0
    return f"{done:,}/{total:,} {unit} ({share}), {speed} {unit}/s, {left}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def stage_progress(console: Console | None = None) -> Progress:
    """A bar when stderr is a terminal, log lines otherwise."""
    console = console or Console(stderr=True)
    return RichProgress(console) if console.is_terminal else LogProgress()
