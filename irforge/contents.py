"""Early cut-off (issue 29): a stage recomputed with a new fingerprint whose output is
byte-identical to an earlier artifact's leaves every downstream stage fresh.

Each published artifact's manifest carries ``content``, a digest of every file in it but the
manifest (:func:`content_digest`); ``<stage>/.contents/<digest>`` names the first fingerprint
that held that content (:func:`register`). Downstream stages take their upstream's
:func:`canonical` fingerprint in their own fingerprint: the same upstream content, the same
downstream fingerprint, whichever config produced it (the "early cutoff" of Mokhov, Mitchell
and Peyton Jones, "Build systems à la carte", ICFP 2018). A store's first fingerprint of a
content stays its canonical one, so artifacts built before a prompt edit are found again after it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from irforge.artifacts import FILES, MANIFEST, ArtifactStore

CONTENTS = ".contents"
_BLOCK = 1 << 20
ACCOUNTING = {b"irforge": b"accounting"}


def accounting(field: pa.Field) -> pa.Field:
    """``field`` marked as saying how this run got a row (an LLM reply's ``attempts``,
    ``cached``), not what it is: left out of the content digest, so a rerun served from a
    reply cache cuts off early as one that asked again would."""
    return field.with_metadata(ACCOUNTING)


def content_digest(folder: Path) -> str:
    """sha256 over every file under ``folder`` but its manifest: relative path, size and bytes,
    in path order (the side tables and ``files/`` included). A table of the artifact (a Parquet
    file outside ``files/``) with :func:`accounting` columns counts as its other columns instead
    (Arrow IPC stream)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        relative = path.relative_to(folder).as_posix()
        table = _without_accounting(path) if _is_table(relative) else None
        if table is not None:
            digest.update(f"{relative}\0columns\0".encode())
            digest.update(_ipc_bytes(table))
            continue
        digest.update(f"{relative}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as fh:
            while block := fh.read(_BLOCK):
                digest.update(block)
    return digest.hexdigest()


def _is_table(relative: str) -> bool:
    """One of the artifact's own Parquet tables (not a file a stage wrote into ``files/``)."""
    return relative.endswith(".parquet") and not relative.startswith(f"{FILES}/")


def _without_accounting(path: Path) -> pa.Table | None:
    """The Parquet file's table less its accounting columns; None when it has none (or is no
    Parquet file after all: then its bytes count)."""
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError):
        return None
    names = [f.name for f in schema if not ACCOUNTING.items() <= (f.metadata or {}).items()]
    if len(names) == len(schema.names):
        return None
    return pq.read_table(path, columns=names).combine_chunks()


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def canonical(store: ArtifactStore, flow: str, stage: str, fingerprint: str) -> str:
    """The first fingerprint of ``stage`` whose artifact holds the content of ``fingerprint``'s,
    else ``fingerprint``: also when its artifact has no digest (built before early cut-off) or
    the first holder is gone (``irforge gc``)."""
    manifest = store.manifest(flow, stage, fingerprint)
    digest = manifest.get("content") if manifest else None
    if not isinstance(digest, str):
        return fingerprint
    try:
        first = (store.stage_dir(flow, stage) / CONTENTS / digest).read_text(encoding="utf-8").strip()
    except OSError:
        return fingerprint
    if not first or first == fingerprint or store.manifest(flow, stage, first) is None:
        return fingerprint
    return first


def register(store: ArtifactStore, flow: str, stage: str, fingerprint: str, digest: str) -> None:
    """Name ``fingerprint`` the holder of ``digest``, unless an artifact that still exists
    holds it already (the first kept: :func:`canonical`)."""
    index = store.stage_dir(flow, stage) / CONTENTS
    index.mkdir(parents=True, exist_ok=True)
    path = index / digest
    try:
        held = path.read_text(encoding="utf-8").strip()
    except OSError:
        held = ""
    if held and (held == fingerprint or store.manifest(flow, stage, held) is not None):
        return
    tmp = path.with_name(f".{digest}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(fingerprint + "\n", encoding="utf-8")
    tmp.replace(path)


def resolver(store: ArtifactStore, flow: str) -> Callable[[str, str], str]:
    """``Pipeline.plan``'s ``resolve`` over ``store``: each upstream at its canonical fingerprint."""
    return lambda stage, fingerprint: canonical(store, flow, stage, fingerprint)
