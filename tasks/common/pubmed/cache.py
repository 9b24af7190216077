"""The reply cache of the E-utilities adapter: one answer per request, in SQLite.

Keys name a single-identifier request without credentials (``efetch.fcgi?db=pubmed&id=…``,
an ID-converter or ``esearch`` request for one identifier); values are the answer (a
record's XML, a PMID) or NULL for "PubMed has none", so an absent record is not asked for
again either. Built on :class:`irforge.sqlite_cache.SqliteCache` (each batch is committed
as it is answered: a crash loses nothing already answered; its claims make workers sharing the
file send each missing request once, see :meth:`~irforge.sqlite_cache.SqliteCache.fill`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from irforge.sqlite_cache import SqliteCache
from tasks.common.pubmed.port import PubmedError


class Answers(Protocol):
    def get_many(self, keys: Iterable[str]) -> dict[str, str | None]: ...

    def put_many(self, items: Mapping[str, str | None]) -> None: ...

    def fill(self, keys: Sequence[str], send: Callable[[list[str]], object]) -> dict[str, str | None]: ...

    def close(self) -> None: ...


class ReplyCache(SqliteCache[str | None]):
    table: ClassVar[str] = "pubmed_replies"
    columns: ClassVar[Mapping[str, str]] = {"answer": "TEXT"}
    what: ClassVar[str] = "PubMed reply cache"
    error: ClassVar[type[Exception]] = PubmedError

    def _row(self, value: str | None) -> tuple[Any, ...]:
        return (value,)

    def _value(self, row: tuple[Any, ...]) -> str | None:
        answer = row[0]
        return None if answer is None else str(answer)


class MemoryAnswers:
    """Answers kept for the life of one source (no cache folder: a stage being planned)."""

    def __init__(self) -> None:
        self._answers: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def get_many(self, keys: Iterable[str]) -> dict[str, str | None]:
        with self._lock:
            return {k: self._answers[k] for k in keys if k in self._answers}

    def put_many(self, items: Mapping[str, str | None]) -> None:
        with self._lock:
            for key, value in items.items():
                self._answers.setdefault(key, value)

    def fill(self, keys: Sequence[str], send: Callable[[list[str]], object]) -> dict[str, str | None]:
        """``send`` every key (one source alone: no other worker to wait for); their stored answers."""
        wanted = list(dict.fromkeys(keys))
        if wanted:
            send(wanted)
        return self.get_many(wanted)

    def close(self) -> None:
        pass
