"""``irforge gc``: delete what no artifact needs under an artifact root; registered on
:data:`flows.cli.app` (as flows/cli_quality.py is).

On an object store root, the uploaded versions no commit marker names
(``ObjectArtifactStore.gc`` in irforge/object_store.py). In a folder (and in an object store's
local mirror), per ``<flow>/<stage>/`` (layout: irforge/artifacts.py), what a killed process
left while no run holds that fingerprint's lock (``ArtifactStore.lock``) and untouched for the
grace: ``.tmp-*`` (an assembly), ``.trash-*`` (a replace cut short), ``.work-*`` only where
the artifact was published (no run reads it again: ``run_stage`` in irforge/engine.py reuses the
artifact, or deletes it first when forced), ``.dl-*`` (a download) an hour old.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from flows.cli import DEFAULT_ARTIFACTS, ArtifactsOpt, _one_line_errors, app, err, out
from irforge.artifacts import MANIFEST, ArtifactStore
from irforge.errors import ArtifactError
from irforge.object_store import DEFAULT_GRACE_S, ObjectArtifactStore

_DOWNLOAD_S = 3600.0  # as ObjectArtifactStore.remove_leftovers: a download has no lock
_KINDS = {  # prefix -> what it is, in the table
    ".tmp-": "assembly left by a killed run",
    ".trash-": "copy a cut-short replace left",
    ".dl-": "download cut short",
    ".work-": "chunks of a published artifact",
}


@dataclass(frozen=True)
class Leftover:
    what: str
    where: str  # a local path or an object store URL
    path: Path | None = None  # the local one, to delete


@dataclass
class Sweep:
    removable: list[Leftover]
    locked: list[Path]  # leftovers of a fingerprint a live run holds


def _user_errors() -> tuple[type[Exception], ...]:
    """A bad bucket, credentials or endpoint (s3fs passes botocore's errors on)."""
    try:
        from botocore.exceptions import (  # type: ignore[import-untyped, unused-ignore]  # noqa: PLC0415
            BotoCoreError,
        )
    except ImportError:
        return (OSError,)
    return (OSError, BotoCoreError)


def remote_versions(store: ObjectArtifactStore, grace_s: float, dry_run: bool) -> list[Leftover]:
    """``store.gc``: its prefixes as URLs (``<flow>/<stage>/<fingerprint>/v-<uuid>``)."""
    try:
        prefixes = store.gc(grace_s, dry_run=dry_run)
    except _user_errors() as e:
        raise ArtifactError(f"cannot clean {store.url}: {type(e).__name__}: {e}") from None
    return [Leftover("unreferenced version", f"{store.url}/{'/'.join(p.split('/')[-4:])}") for p in prefixes]


@contextlib.contextmanager
def _free(directory: Path, fingerprint: str) -> Iterator[bool]:
    """Whether no process holds the run lock of ``fingerprint`` (it is ours meanwhile)."""
    lock = directory / f".lock-{fingerprint}"  # ArtifactStore.lock's file
    if not lock.is_file():
        yield True
        return
    with lock.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _split(name: str) -> tuple[str, str] | None:
    """(prefix, fingerprint) of a leftover's name; None for anything else."""
    for prefix in _KINDS:
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            return prefix, rest if prefix == ".work-" else rest.rpartition("-")[0]
    return None


def _stale(path: Path, prefix: str, grace_s: float) -> bool:
    try:
        info = path.stat()
    except OSError:
        return False
    age = time.time() - max(info.st_mtime, info.st_ctime)  # a rename sets the ctime
    if prefix == ".work-":
        return age >= grace_s and (path.parent / path.name[len(prefix) :] / MANIFEST).is_file()
    return age >= (max(grace_s, _DOWNLOAD_S) if prefix == ".dl-" else grace_s)


def sweep(root: Path, grace_s: float, dry_run: bool) -> Sweep:
    """The local leftovers under ``root``, deleted unless ``dry_run`` (see the module's docstring)."""
    found = Sweep([], [])
    stage_dirs = sorted(s for f in root.iterdir() if f.is_dir() for s in f.iterdir() if s.is_dir())
    for directory in stage_dirs:
        groups: dict[str, list[tuple[str, Path]]] = {}
        for path in sorted(directory.iterdir()):
            split = _split(path.name)
            if split is not None and path.is_dir():
                groups.setdefault(split[1], []).append((split[0], path))
        for fingerprint, leftovers in groups.items():
            with _free(directory, fingerprint) as free:
                if not free:
                    found.locked += [path for _, path in leftovers]
                    continue
                for prefix, path in leftovers:
                    if _stale(path, prefix, grace_s):
                        found.removable.append(Leftover(_KINDS[prefix], str(path), path))
                        if not dry_run:
                            shutil.rmtree(path, ignore_errors=True)
    return found


@app.command()
@_one_line_errors
def gc(
    grace_s: Annotated[
        float | None,
        typer.Option(
            "--grace-s",
            min=0,
            help=f"Keep what changed in the last seconds (default: the store's, {DEFAULT_GRACE_S:g}).",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be deleted.")] = False,
    artifacts: ArtifactsOpt = DEFAULT_ARTIFACTS,
) -> None:
    """Delete leftovers no artifact needs: uploads no marker names, folders of killed runs.

    On an object store: the versions no manifest.json names. In a folder (and a store's local
    mirror): .tmp-*, .trash-* and .dl-* folders killed runs left. A .work-* folder (the finished
    chunks a rerun resumes from) goes only once its artifact is published. Nothing of a
    fingerprint a running stage locks, nor younger than --grace-s, is touched."""
    store = ArtifactStore.open(artifacts)
    grace = grace_s if grace_s is not None else getattr(store, "grace_s", DEFAULT_GRACE_S)
    found: list[Leftover] = []
    if isinstance(store, ObjectArtifactStore):
        found += remote_versions(store, grace, dry_run)
    elif not store.root.is_dir():
        raise ArtifactError(f"no artifact folder {store.root} (--artifacts or IRFORGE_ARTIFACTS)")
    local = sweep(store.root, grace, dry_run) if store.root.is_dir() else Sweep([], [])
    found += local.removable
    verb = "would delete" if dry_run else "deleted"
    if found:
        table = Table(title=f"irforge gc {store.url}: {verb}", title_justify="left")
        table.add_column("what")
        table.add_column("where", overflow="fold")
        for leftover in found:
            table.add_row(leftover.what, leftover.where)
        out.print(table)
    for path in local.locked:
        err.print(f"kept {path}: a running stage holds its lock", highlight=False)
    out.print(f"{verb} {len(found)} leftover(s) under {store.url} (grace {grace:g}s)", highlight=False)
