"""Progress reporting for long stages: a protocol, a silent default and a rich bar."""

from __future__ import annotations

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
