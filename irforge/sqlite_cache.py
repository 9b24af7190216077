"""Values by key in one SQLite table: the common ground of the caches of paid requests.

The reply cache (:class:`tasks.common.llm.cache.ReplyCache`) and the translation cache
(:class:`tasks.common.translate.port.TranslationCache`) differ only in their table and in how a value
maps to a row; opening the file (WAL, ``synchronous=FULL``, schema), the thread lock, chunked
lookups and first-write-wins inserts are here, once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

V = TypeVar("V")

_SQL_VARS = 500  # well under SQLite's bound-parameter limit on every build


class SqliteCache(Generic[V]):
    """Values by key, in one SQLite file (WAL: one writer, many readers).

    A subclass names its ``table``, its value ``columns`` (name -> SQLite declaration, in row
    order), what it is (``what``, for messages) and the ``error`` raised when the file cannot
    serve as a cache, and converts values to rows (:meth:`_row`) and back (:meth:`_value`).
    The table also has ``key TEXT PRIMARY KEY`` and ``created_at`` (Unix time of the insert).

    ``put_many`` commits before it returns (``synchronous=FULL``), so a value that was paid
    for survives a crash of the process right after. The first value stored for a key is kept
    (a later one for the same key is ignored): reruns are stable. Safe to share between
    threads of one process; several processes may open the same file.
    """

    table: ClassVar[str]
    columns: ClassVar[Mapping[str, str]]
    what: ClassVar[str]
    error: ClassVar[type[Exception]]

    def __init__(self, path: Path | str, *, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise self.error(
                    f"{self.what} {self.path}: SQLite refused WAL mode ({mode}); "
                    "put the cache on a local file system"
                )
            self._conn.execute("PRAGMA synchronous=FULL")
            declared = "".join(f"    {name} {decl},\n" for name, decl in self.columns.items())
            self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} (\n    key TEXT PRIMARY KEY,\n{declared}"
                "    created_at REAL NOT NULL\n) WITHOUT ROWID"
            )
        except BaseException:
            self._conn.close()
            raise

    def _row(self, value: V) -> tuple[Any, ...]:
        """The column values of ``value``, in the order of :attr:`columns`."""
        raise NotImplementedError

    def _value(self, row: tuple[Any, ...]) -> V:
        """The value stored as ``row`` (column values in the order of :attr:`columns`)."""
        raise NotImplementedError

    def get_many(self, keys: Iterable[str]) -> dict[str, V]:
        """The stored values of those ``keys`` that have one."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, V] = {}
        names = ", ".join(self.columns)
        with self._lock:
            for i in range(0, len(wanted), _SQL_VARS):
                part = wanted[i : i + _SQL_VARS]
                marks = ",".join("?" * len(part))
                rows = self._conn.execute(
                    f"SELECT key, {names} FROM {self.table} WHERE key IN ({marks})", part
                )
                for key, *fields in rows:
                    found[key] = self._value(tuple(fields))
        return found

    def put_many(self, items: Mapping[str, V] | Iterable[tuple[str, V]]) -> None:
        """Store the values of keys not stored yet, in one committed transaction."""
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        if not pairs:
            return
        now = time.time()
        rows = [(key, *self._row(value), now) for key, value in pairs]
        names = ", ".join(self.columns)
        marks = ", ".join("?" * (len(self.columns) + 2))
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    f"INSERT INTO {self.table} (key, {names}, created_at) "
                    f"VALUES ({marks}) ON CONFLICT(key) DO NOTHING",
                    rows,
                )
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def __len__(self) -> int:
        with self._lock:
            count: int = self._conn.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]
        return count

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
