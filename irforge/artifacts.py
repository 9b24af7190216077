"""The artifact store: ``<root>/<flow>/<stage>/<fingerprint>/``.

An artifact directory holds ``part-NNNNN.parquet`` (the rows kept, at least one part even
when empty so the schema is always readable), ``excluded.parquet`` (rows dropped, with a
``reason`` column) and ``manifest.json``. It becomes visible in one ``rename`` of a fully
written sibling directory, so a reader either sees the whole artifact or nothing. A forced
rerun swaps the new directory with the old one in one step (:func:`exchange_dirs`), so a
reader sees the old artifact or the new one, never none; the old one is deleted a few
seconds later, so a reader that listed its parts just before the swap can still open them.

Work in progress lives beside it in ``.work-<fingerprint>/`` (finished chunks of a long
stage, kept across crashes) and ``.tmp-*`` directories (being assembled).

:meth:`ArtifactStore.open` also takes an object store URL (``s3://bucket/prefix``): then
:mod:`irforge.object_store` keeps this layout in a local mirror (issue 19).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fcntl
import functools
import json
import os
import re
import shutil
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from irforge.errors import ArtifactError

MANIFEST = "manifest.json"
FILES = "files"  # non-Parquet files published with an artifact (a search index)
EXCLUDED = "excluded.parquet"
PARQUET_COMPRESSION = "zstd"
_REPLACE_WAIT_S = 1.0
_OLD_VERSION_GRACE_S = 2.0
# renameat2(2) flag (Linux >= 3.15) and renamex_np(2) flag (macOS >= 10.12): swap two paths.
_RENAME_EXCHANGE = 2
_RENAME_SWAP = 2
_AT_FDCWD = -100
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_COLLAPSED_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/[^/]")  # Path("s3://b/p") == Path("s3:/b/p")
# An artifact mirrored from an object store: (store URL, version prefix "v-<uuid>" or None).
Origin = tuple[str, str | None]


@dataclass(frozen=True)
class Artifact:
    """A published, immutable artifact; ``origin`` is set when it mirrors an object store's
    (:mod:`irforge.object_store`): unpickled on a host without ``path``, it is downloaded there."""

    path: Path
    origin: Origin | None = field(default=None, compare=False, repr=False)

    def __reduce__(self) -> tuple[Any, ...]:
        if self.origin is None:
            return (Artifact, (self.path,))
        return (restore_artifact, (self.path, *self.origin))

    @cached_property
    def manifest(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
        return data

    @property
    def fingerprint(self) -> str:
        return self.path.name

    @property
    def stage(self) -> str:
        return self.path.parent.name

    @property
    def files(self) -> Path:
        """Folder of the artifact's non-Parquet files (may not exist: a stage writes none)."""
        return self.path / FILES

    @property
    def parts(self) -> list[Path]:
        return sorted(self.path.glob("part-*.parquet"))

    @property
    def table_names(self) -> list[str]:
        """Named side tables (beside the main rows and the excluded ones)."""
        skip = {EXCLUDED}
        return sorted(
            p.stem
            for p in self.path.glob("*.parquet")
            if p.name not in skip and not p.name.startswith("part-")
        )

    def _files(self, table: str | None) -> list[Path]:
        if table is None:
            return self.parts
        path = self.path / f"{table}.parquet"
        if not path.is_file():
            raise ArtifactError(
                f"{self.stage} {self.fingerprint} has no table {table!r} (tables: {self.table_names})"
            )
        return [path]

    def schema(self, columns: list[str] | None = None, table: str | None = None) -> pa.Schema:
        schema = pq.read_schema(self._files(table)[0])
        return pa.schema([schema.field(c) for c in columns]) if columns else schema

    @property
    def num_rows(self) -> int:
        return self.count_rows()

    def count_rows(self, table: str | None = None) -> int:
        return sum(pq.ParquetFile(p).metadata.num_rows for p in self._files(table))

    def read(
        self, columns: list[str] | None = None, table: str | None = None, filters: Any = None
    ) -> pa.Table:
        """The rows (or a side table); ``filters`` (pyarrow's DNF) skips what they exclude while reading."""
        tables = [pq.read_table(p, columns=columns, filters=filters) for p in self._files(table)]
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def iter_batches(
        self, rows: int, columns: list[str] | None = None, table: str | None = None
    ) -> Iterator[pa.RecordBatch]:
        for part in self._files(table):
            yield from pq.ParquetFile(part).iter_batches(batch_size=rows, columns=columns)

    def excluded(self) -> pa.Table:
        return pq.read_table(self.path / EXCLUDED)


class ArtifactStore:
    """Artifacts under a local (or shared) folder ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def open(root: str | os.PathLike[str], mirror: Path | None = None) -> ArtifactStore:
        """The store for ``root``: a folder or ``file://`` URL, or an fsspec URL (``s3://bucket/prefix``,
        ``gs://...``, ``memory://...``) mirrored into ``mirror`` (default: a per-URL cache folder)."""
        text = os.fspath(root)
        if _COLLAPSED_URL.match(text):
            raise ArtifactError(
                f"artifact root {text!r}: a URL that went through Path lost a '/': pass it as str"
            )
        if _URL.match(text) and not text.lower().startswith("file://"):
            from irforge.object_store import ObjectArtifactStore  # noqa: PLC0415 -- it imports this module

            return ObjectArtifactStore(text, mirror)
        if _URL.match(text):
            text = urllib.parse.unquote(urllib.parse.urlsplit(text).path)
        return ArtifactStore(Path(text).expanduser().resolve())

    @property
    def url(self) -> str:
        """Where the artifacts are, for messages."""
        return str(self.root)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def stage_dir(self, flow: str, stage: str) -> Path:
        return self.root / flow / stage

    def location(self, flow: str, stage: str, fingerprint: str) -> str:
        """Where that artifact is (or would be), for messages: its folder, or an object store's URL."""
        return str(self.stage_dir(flow, stage) / fingerprint)

    def find(self, flow: str, stage: str, fingerprint: str) -> Artifact | None:
        path = self.stage_dir(flow, stage) / fingerprint
        # The manifest is written last inside the temporary directory, and the directory is
        # renamed into place only after that, so a final-named directory is always complete.
        if (path / MANIFEST).is_file():
            return Artifact(path)
        # Where directories cannot be exchanged, a forced rerun leaves a short gap between
        # renaming the old artifact away and the new one in: wait for the new one.
        deadline = time.monotonic() + _REPLACE_WAIT_S
        while _being_replaced(path) and time.monotonic() < deadline:
            time.sleep(0.01)
            if (path / MANIFEST).is_file():
                return Artifact(path)
        return None

    def get(self, flow: str, stage: str, fingerprint: str) -> Artifact:
        found = self.find(flow, stage, fingerprint)
        if found is None:
            raise ArtifactError(f"no artifact {flow}/{stage}/{fingerprint} under {self.url}")
        return found

    def manifest(self, flow: str, stage: str, fingerprint: str) -> dict[str, Any] | None:
        """The artifact's manifest, without fetching its data (an object store's find downloads it)."""
        found = self.find(flow, stage, fingerprint)
        return found.manifest if found is not None else None

    def work_dir(self, flow: str, stage: str, fingerprint: str) -> Path:
        return self.stage_dir(flow, stage) / f".work-{fingerprint}"

    def new_tmp_dir(self, flow: str, stage: str, fingerprint: str) -> Path:
        path = self.stage_dir(flow, stage) / f".tmp-{fingerprint}-{uuid.uuid4().hex[:8]}"
        path.mkdir(parents=True)
        return path

    def remove_leftovers(self, flow: str, stage: str, fingerprint: str) -> None:
        """Delete half-assembled or half-replaced copies a killed run left behind.

        Call only while holding :meth:`lock` for this fingerprint: then no live run owns them.
        """
        directory = self.stage_dir(flow, stage)
        for pattern in (f".tmp-{fingerprint}-*", f".trash-{fingerprint}-*"):
            for path in directory.glob(pattern):
                shutil.rmtree(path, ignore_errors=True)

    def publish(self, tmp: Path, flow: str, stage: str, fingerprint: str) -> Artifact:
        """Atomically make ``tmp`` the artifact; an existing one (a forced rerun) is replaced.

        The old version stays whole until the new one has taken its place: the two
        directories are exchanged in one step, and the old one (now at ``tmp``) is deleted.
        """
        final = self.stage_dir(flow, stage) / fingerprint
        _fsync_dir(tmp)
        if not final.exists():
            tmp.rename(final)
        elif exchange_dirs(tmp, final):
            _fsync_dir(final.parent)
            _remove_later(tmp)  # the old version; a killed run's copy goes with remove_leftovers
        else:  # no atomic exchange on this filesystem: ``find`` waits out the gap
            trash = final.with_name(f".trash-{fingerprint}-{uuid.uuid4().hex[:8]}")
            final.rename(trash)
            tmp.rename(final)
            shutil.rmtree(trash, ignore_errors=True)
        _fsync_dir(final.parent)
        return Artifact(final)

    @contextlib.contextmanager
    def lock(self, flow: str, stage: str, fingerprint: str) -> Iterator[None]:
        """Serialise two runs computing the same artifact (the second then reuses it)."""
        directory = self.stage_dir(flow, stage)
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / f".lock-{fingerprint}").open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def fingerprints(self, flow: str, stage: str) -> list[str]:
        directory = self.stage_dir(flow, stage)
        if not directory.is_dir():
            return []
        return sorted(p.name for p in directory.iterdir() if not p.name.startswith(".") and p.is_dir())

    def write_record(self, relative: str, data: Any) -> Path:
        """Write a JSON record (a run record, ``latest.json``) at ``root/relative``."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, data)
        return path

    def read_record(self, relative: str) -> Any:
        """A record :meth:`write_record` wrote; None when there is none (or it is unreadable)."""
        try:
            return json.loads((self.root / relative).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None


def restore_artifact(path: Path, url: str | None = None, version: str | None = None) -> Artifact:
    """``path`` as an artifact, downloaded from the object store at ``url`` into this host's
    mirror when this host has no copy of it (of ``version``, when given; unpickling calls this)."""
    if url is None:
        return Artifact(path)
    if version is None and (path / MANIFEST).is_file():
        return Artifact(path, (url, version))
    from irforge.object_store import materialise  # noqa: PLC0415 -- it imports this module

    return materialise(path, url, version)


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def write_parquet_atomic(path: Path, table: pa.Table) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    pq.write_table(table, tmp, compression=PARQUET_COMPRESSION)
    tmp.replace(path)


_old_versions: set[Path] = set()
_old_versions_lock = threading.Lock()


def _remove_later(path: Path) -> None:
    """Delete ``path`` after a grace period (or at exit, whichever comes first)."""
    with _old_versions_lock:
        _old_versions.add(path)
    timer = threading.Timer(_OLD_VERSION_GRACE_S, _remove_now, (path,))
    timer.daemon = True
    timer.start()


def _remove_now(path: Path) -> None:
    with _old_versions_lock:
        if path not in _old_versions:
            return
        _old_versions.discard(path)
    shutil.rmtree(path, ignore_errors=True)


@atexit.register
def _remove_old_versions() -> None:
    for path in list(_old_versions):
        _remove_now(path)


def _being_replaced(path: Path) -> bool:
    """Whether ``path`` was renamed away moments ago (a rename sets the ctime), not by a
    run killed long ago between the two renames."""
    now = time.time()
    for trash in path.parent.glob(f".trash-{path.name}-*"):
        with contextlib.suppress(OSError):
            if now - trash.stat().st_ctime < _REPLACE_WAIT_S:
                return True
    return False


def exchange_dirs(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step; False where the system cannot.

    Linux: ``renameat2(..., RENAME_EXCHANGE)`` (man 2 rename); macOS: ``renamex_np(...,
    RENAME_SWAP)``. Filesystems without it answer EINVAL (or ENOSYS, ENOTSUP): then False,
    nothing changed. Any other failure raises ``OSError``.
    """
    libc = _libc()
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        result = libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        result = libc.renamex_np(os.fsencode(a), os.fsencode(b), _RENAME_SWAP)
    else:
        return False
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, f"cannot exchange {a} and {b}: {os.strerror(code)}")


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lineage(upstream: dict[str, Artifact]) -> dict[str, Artifact]:
    """Every artifact ``upstream`` depends on (and they themselves), found through the manifests' upstream fingerprints."""
    found: dict[str, Artifact] = {}
    todo = list(upstream.values())
    while todo:
        artifact = todo.pop()
        if artifact.stage in found:
            continue
        found[artifact.stage] = artifact
        flow_dir = artifact.path.parent.parent
        url = artifact.origin[0] if artifact.origin else None
        for stage, fingerprint in artifact.manifest["material"]["upstream"].items():
            if stage not in found:
                todo.append(restore_artifact(flow_dir / stage / fingerprint, url))
    return dict(sorted(found.items()))
