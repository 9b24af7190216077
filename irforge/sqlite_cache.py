"""Values by key in one SQLite table: the common ground of the caches of paid requests.

The reply cache (:class:`tasks.common.llm.cache.ReplyCache`) and the translation cache
(:class:`tasks.common.translate.port.TranslationCache`) differ only in their table and in how a value
maps to a row; opening the file (WAL, ``synchronous=FULL``, schema), the thread lock, chunked
lookups and first-write-wins inserts are here, once.

Claims keep workers (threads, processes, hosts) from paying twice for one missing key: a worker
claims the keys it will send in one ``BEGIN IMMEDIATE`` transaction (table ``<table>_claims``:
key, owner = host:pid:random, lease end); a key stored or claimed by another live owner is waited
for (:meth:`SqliteCache.wait_for`) instead. Storing a value drops its claim in the same transaction;
a failed request releases it; a lease renewed by a heartbeat thread lets a dead owner's claim lapse.
See https://www.sqlite.org/lang_transaction.html (IMMEDIATE) and https://www.sqlite.org/wal.html.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

V = TypeVar("V")

_SQL_VARS = 500  # well under SQLite's bound-parameter limit on every build
DEFAULT_LEASE_S = 600.0
"""How long a claim holds without a heartbeat: a killed worker blocks its keys at most this long."""


def _parts(keys: list[str]) -> Iterator[tuple[list[str], str]]:
    """``keys`` in chunks of at most ``_SQL_VARS``, each with its ``?,?,…`` placeholders."""
    for i in range(0, len(keys), _SQL_VARS):
        part = keys[i : i + _SQL_VARS]
        yield part, ",".join("?" * len(part))


class SqliteCache(Generic[V]):
    """Values by key, in one SQLite file (WAL: one writer, many readers).

    A subclass names its ``table``, its value ``columns`` (name -> SQLite declaration, in row
    order), what it is (``what``, for messages) and the ``error`` raised when the file cannot
    serve as a cache, and converts values to rows (:meth:`_row`) and back (:meth:`_value`).
    The table also has ``key TEXT PRIMARY KEY`` and ``created_at`` (Unix time of the insert).

    ``put_many`` commits before it returns (``synchronous=FULL``), so a value that was paid
    for survives a crash of the process right after. The first value stored for a key is kept
    (a later one for the same key is ignored): reruns are stable. Safe to share between
    threads of one process; several processes may open the same file. :meth:`fill` sends each
    missing key once across all of them (module docstring); ``claims=False`` turns that off
    (each caller sends its own misses), ``lease_s`` sets the claims' lease. Open the cache in the
    worker (after a fork), not before: the instance is the claims' owner.
    """

    table: ClassVar[str]
    columns: ClassVar[Mapping[str, str]]
    what: ClassVar[str]
    error: ClassVar[type[Exception]]

    def __init__(
        self,
        path: Path | str,
        *,
        timeout_s: float = 30.0,
        lease_s: float = DEFAULT_LEASE_S,
        claims: bool = True,
        poll_s: float = 0.02,
    ) -> None:
        if lease_s <= 0 or poll_s <= 0:
            raise ValueError("lease_s and poll_s must be positive")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lease_s, self.claims, self.poll_s = lease_s, claims, poll_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(8)}"
        self._claims = f"{self.table}_claims"
        self._held: set[str] = set()  # keys this instance has claimed and not yet stored or released
        self._beat: threading.Thread | None = None
        self._idle = threading.Event()  # set when the last held claim goes: the heartbeat ends
        self._closed = False
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            self._open(timeout_s)
        except BaseException:
            self._conn.close()
            raise

    def _open(self, timeout_s: float) -> None:
        mode = self._wal(timeout_s)
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
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._claims} (key TEXT PRIMARY KEY, owner TEXT NOT NULL, "
            "expires_at REAL NOT NULL) WITHOUT ROWID"
        )

    def _wal(self, timeout_s: float) -> str:
        """``PRAGMA journal_mode=WAL``, retried for up to ``timeout_s``: switching a new file's
        mode needs it alone, and SQLite answers "database is locked" at once, without its busy
        wait, while another process opens the same file (https://sqlite.org/wal.html#sometimes_queries_return_sqlite_busy_in_wal_mode)."""
        deadline, delay = time.monotonic() + timeout_s, 0.01
        while True:
            try:
                return str(self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _row(self, value: V) -> tuple[Any, ...]:
        """The column values of ``value``, in the order of :attr:`columns`."""
        raise NotImplementedError

    def _value(self, row: tuple[Any, ...]) -> V:
        """The value stored as ``row`` (column values in the order of :attr:`columns`)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """The connection inside one transaction (caller holds ``_lock``), committed on success."""
        self._conn.execute(begin)
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _select(self, part: list[str], marks: str) -> dict[str, V]:
        names = ", ".join(self.columns)
        rows = self._conn.execute(f"SELECT key, {names} FROM {self.table} WHERE key IN ({marks})", part)
        return {key: self._value(tuple(fields)) for key, *fields in rows}

    def get_many(self, keys: Iterable[str]) -> dict[str, V]:
        """The stored values of those ``keys`` that have one."""
        found: dict[str, V] = {}
        with self._lock:
            for part, marks in _parts(list(dict.fromkeys(keys))):
                found.update(self._select(part, marks))
        return found

    def put_many(self, items: Mapping[str, V] | Iterable[tuple[str, V]]) -> None:
        """Store the values of keys not stored yet and drop their claims, in one committed transaction."""
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        if not pairs:
            return
        now = time.time()
        rows = [(key, *self._row(value), now) for key, value in pairs]
        names = ", ".join(self.columns)
        marks = ", ".join("?" * (len(self.columns) + 2))
        with self._lock, self._transaction() as conn:
            conn.executemany(
                f"INSERT INTO {self.table} (key, {names}, created_at) "
                f"VALUES ({marks}) ON CONFLICT(key) DO NOTHING",
                rows,
            )
            conn.executemany(f"DELETE FROM {self._claims} WHERE key = ?", [(key,) for key, _ in pairs])
            self._let_go(key for key, _ in pairs)

    # -- claims ----------------------------------------------------------------------

    def claim_missing(self, keys: Iterable[str]) -> tuple[list[str], list[str]]:
        """``(mine, others)``: the keys now claimed by this instance (send them, then store or
        :meth:`release` them), and those stored or claimed by another live owner (including
        another thread of this instance): :meth:`wait_for` them. One transaction for all keys."""
        wanted = list(dict.fromkeys(keys))
        if not self.claims or not wanted:
            return wanted, []
        mine: list[str] = []
        with self._lock, self._transaction() as conn:
            now = time.time()
            for part, marks in _parts(wanted):
                taken = {
                    k for (k,) in conn.execute(f"SELECT key FROM {self.table} WHERE key IN ({marks})", part)
                }
                taken.update(
                    k
                    for (k,) in conn.execute(
                        f"SELECT key FROM {self._claims} WHERE key IN ({marks}) AND expires_at > ?",
                        [*part, now],
                    )
                )
                free = [k for k in part if k not in taken]
                conn.executemany(
                    f"INSERT OR REPLACE INTO {self._claims} (key, owner, expires_at) VALUES (?, ?, ?)",
                    [(k, self.owner, now + self.lease_s) for k in free],
                )
                mine.extend(free)
            self._held.update(mine)
            if mine and self._beat is None:
                self._idle.clear()
                self._beat = threading.Thread(
                    target=self._heartbeat, name=f"{self._claims}-lease", daemon=True
                )
                self._beat.start()
        chosen = set(mine)
        return mine, [k for k in wanted if k not in chosen]

    def release(self, keys: Iterable[str]) -> None:
        """Give up this instance's claims on ``keys`` (their requests failed); no-op for others."""
        with self._lock:
            held = [k for k in dict.fromkeys(keys) if k in self._held]
            if not held or self._closed:
                return
            with self._transaction() as conn:
                conn.executemany(
                    f"DELETE FROM {self._claims} WHERE key = ? AND owner = ?", [(k, self.owner) for k in held]
                )
            self._let_go(held)

    @contextlib.contextmanager
    def claimed(self, keys: Iterable[str]) -> Iterator[tuple[list[str], list[str]]]:
        """:meth:`claim_missing` whose claims not stored by the end of the block are released."""
        mine, others = self.claim_missing(keys)
        try:
            yield mine, others
        finally:
            self.release(mine)

    def wait_for(self, keys: Iterable[str]) -> tuple[dict[str, V], list[str]]:
        """Wait until each key has a value or no live claim; ``(values, free keys)``. Polls from
        ``poll_s`` up to 1 s apart; a free key's owner failed or died: claim it again."""
        waiting = list(dict.fromkeys(keys))
        found: dict[str, V] = {}
        free: list[str] = []
        delay = self.poll_s
        while waiting:
            values, live = self._peek(waiting)
            found.update(values)
            free.extend(k for k in waiting if k not in values and k not in live)
            waiting = [k for k in waiting if k not in values and k in live]
            if waiting:
                time.sleep(delay)
                delay = min(delay * 1.5, 1.0)
        return found, free

    def _peek(self, keys: list[str]) -> tuple[dict[str, V], set[str]]:
        """Stored values and live claims of ``keys``, read in one snapshot."""
        values: dict[str, V] = {}
        live: set[str] = set()
        with self._lock, self._transaction("BEGIN") as conn:
            now = time.time()
            for part, marks in _parts(keys):
                values.update(self._select(part, marks))
                rows = conn.execute(
                    f"SELECT key FROM {self._claims} WHERE key IN ({marks}) AND expires_at > ?", [*part, now]
                )
                live.update(k for (k,) in rows)
        return values, live

    def fill(
        self, keys: Sequence[str], send: Callable[[list[str]], object], *, unclaimed: Sequence[str] = ()
    ) -> dict[str, V]:
        """Have every key of ``keys`` sent once across all workers; the values others stored.

        ``send(batch)`` sends the keys this worker claimed and stores the answers it gets with
        :meth:`put_many`; what it does not store is released after it returns or raises. The
        keys claimed by others are waited for; those whose owner gave up are claimed again.
        ``unclaimed`` keys go in the first ``send`` without a claim (stored values the caller
        refuses: the cache keeps the first value, so they are never waited for).
        """
        pending, extra = list(keys), list(unclaimed)
        got: dict[str, V] = {}
        while pending or extra:
            with self.claimed(pending) as (mine, others):
                if mine or extra:
                    send(extra + mine)
            extra = []
            found, pending = self.wait_for(others)
            got.update(found)
        return got

    def _let_go(self, keys: Iterable[str]) -> None:
        """Forget held claims (caller holds ``_lock``); the heartbeat ends with the last one."""
        self._held.difference_update(keys)
        if not self._held:
            self._idle.set()

    def _heartbeat(self) -> None:
        """Renew this owner's claims every quarter lease while it holds any (thread body)."""
        while True:
            self._idle.wait(self.lease_s / 4)
            with self._lock:
                if self._closed or not self._held:
                    self._beat = None
                    return
                self._idle.clear()
                with contextlib.suppress(sqlite3.Error):  # busy past the timeout: try again next beat
                    self._conn.execute(
                        f"UPDATE {self._claims} SET expires_at = ? WHERE owner = ?",
                        (time.time() + self.lease_s, self.owner),
                    )

    def __len__(self) -> int:
        with self._lock:
            count: int = self._conn.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]
        return count

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self._held:  # a caller that bypassed claimed(): let others have the keys now
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute(f"DELETE FROM {self._claims} WHERE owner = ?", (self.owner,))
            self._closed = True
            self._let_go(list(self._held))
            self._idle.set()
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
