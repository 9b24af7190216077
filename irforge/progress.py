"""Progress reporting for long stages: a protocol, a silent default, a rich bar for a
terminal and, anywhere else (a file, a Prefect worker's log), a log line every ~30 s."""

from __future__ import annotations

import logging
import threading
import time
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

    def finish(self) -> None: ...


class NullProgress:
    def start(self, stage: str, total_rows: int) -> None:
        pass

    def advance(self, rows: int) -> None:
        pass

    def finish(self) -> None:
        pass


class RichProgress:
    """One bar per stage on stderr; rich draws nothing when stderr is not a terminal."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._bar: RichBar | None = None
        self._task: TaskID | None = None

    def start(self, stage: str, total_rows: int) -> None:
        self._bar = RichBar(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("rows"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self._console,
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task(stage, total=total_rows)

    def advance(self, rows: int) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, rows)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        self._bar, self._task = None, None


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

    def start(self, stage: str, total_rows: int) -> None:
        with self._lock:
            self._stage, self._total, self._done, self._started = stage, total_rows, 0, time.monotonic()
        self._stop.clear()
        threading.Thread(target=self._tick, name=f"progress-{stage}", daemon=True).start()

    def advance(self, rows: int) -> None:
        with self._lock:
            self._done += rows

    def finish(self) -> None:
        self._stop.set()

    def line(self) -> str:
        """``<stage>: done/total rows (share), rate rows/s, elapsed, left``."""
        with self._lock:
            stage, total, done, elapsed = (
                self._stage,
                self._total,
                self._done,
                time.monotonic() - self._started,
            )
        rate = done / elapsed if elapsed > 0 else 0.0
        share = f"{100 * done / total:.0f} %" if total else "-"
        left = (
            f"about {_duration((total - done) / rate)} left"
            if rate > 0 and total >= done
            else "time left unknown"
        )
        return f"{stage}: {done:,}/{total:,} rows ({share}), {rate:,.1f} rows/s, {_duration(elapsed)} elapsed, {left}"

    def _tick(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._log.info("%s", self.line())


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def stage_progress(console: Console | None = None) -> Progress:
    """A bar when stderr is a terminal, log lines otherwise."""
    console = console or Console(stderr=True)
    return RichProgress(console) if console.is_terminal else LogProgress()
