"""Stage ``ingest``: find article files and record what each one is.

Input: folders (searched recursively) or glob patterns from the config, relative to the
config file. Every matching file's content digest enters the fingerprint, so adding,
removing or editing an article makes this stage (and everything after it) stale.

Output columns (one row per article file taken in):

- ``article_id``: stable id — ``PMC…`` when the file names a PMCID, else ``doi:<doi>``,
  else ``file:<digest prefix>``
- ``source_path``: the path as discovered, relative to the config file's folder
- ``digest`` (blake2b-128 of the bytes), ``size_bytes``, ``format`` (``jats`` | ``html``),
  ``encoding``
- ``title``, ``journal``, ``pmid``, ``pmcid``, ``doi``, ``language``, ``article_type``
- ``license`` (normalised, e.g. ``CC-BY-4.0``; ``unknown`` when the file says nothing we
  recognise), ``license_url``, ``license_known`` (False = kept but flagged)

Excluded (``reason``): ``unreadable``, ``empty_file``, ``binary_content``, ``undecodable``,
``unsupported_format``, ``too_large``, ``malformed_xml`` / ``not_jats`` /
``malformed_html`` (the metadata could not be read), ``duplicate_content`` (same bytes as
an earlier file), ``duplicate_article`` (same article id as an earlier file; JATS wins
over HTML, then the first path).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import digest_file
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.text.document import ArticleMeta, InputRejected
from tasks.text.reading import read_metadata
from tasks.text.sniff import sniff


class IngestConfig(StrictModel):
    sources: tuple[str, ...] = Field(
        min_length=1,
        description="Folders (searched recursively) or glob patterns, relative to the config file.",
    )
    extensions: tuple[str, ...] = Field(
        (".xml", ".nxml", ".html", ".htm"),
        description="File name endings taken from folders (not from globs).",
    )
    max_bytes: int = Field(50_000_000, ge=1, description="Larger files are excluded as too_large.")


SCHEMA = pa.schema(
    [
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("source_path", pa.string(), nullable=False),
        pa.field("digest", pa.string(), nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("format", pa.string(), nullable=False),
        pa.field("encoding", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("journal", pa.string()),
        pa.field("pmid", pa.string()),
        pa.field("pmcid", pa.string()),
        pa.field("doi", pa.string()),
        pa.field("language", pa.string()),
        pa.field("article_type", pa.string()),
        pa.field("license", pa.string(), nullable=False),
        pa.field("license_url", pa.string()),
        pa.field("license_known", pa.bool_(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("source_path", pa.string(), nullable=False),
    pa.field("digest", pa.string()),
)
_SOURCE_SCHEMA = pa.schema(
    [
        pa.field("source_path", pa.string()),
        pa.field("digest", pa.string()),
        pa.field("duplicate_of", pa.string()),
    ]
)
UNREADABLE = "unreadable:"


def discover(config: IngestConfig, base_dir: Path) -> list[str]:
    """Matching files as display paths (relative to ``base_dir`` when below it), sorted."""
    found: set[Path] = set()
    for index, pattern in enumerate(config.sources):
        path = (base_dir / pattern).resolve() if not glob.has_magic(pattern) else None
        if path is not None and path.is_dir():
            matches = [
                p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(config.extensions)
            ]
        elif path is not None and path.is_file():
            matches = [path]
        else:
            # glob.glob, not Path.glob: patterns may be absolute or climb out with "..".
            matches = [Path(p).resolve() for p in glob.glob(str(base_dir / pattern), recursive=True)]  # noqa: PTH207
            matches = [p for p in matches if p.is_file()]
        if not matches:
            raise ConfigError(
                f"stages.ingest.sources[{index}]: no such folder, or no file matches: {pattern!r} "
                f"(resolved against {base_dir})"
            )
        found.update(matches)
    return sorted(_display(p, base_dir) for p in found)


def _display(path: Path, base_dir: Path) -> str:
    # Relative even outside base_dir ("../../data/x.xml"): fingerprints and artifacts stay
    # the same in every checkout of the same config.
    return os.path.relpath(path, base_dir.resolve())


def _digest(path: Path) -> str:
    try:
        return digest_file(path)
    except OSError as err:
        # Unreadable files still enter the fingerprint (so fixing them makes the stage
        # stale) and are excluded with the OS's reason when processed.
        return f"{UNREADABLE}{err.strerror}"


def inputs(ctx: StageContext[IngestConfig]) -> dict[str, Any]:
    files = discover(ctx.config, ctx.base_dir)
    return {"files": {f: _digest(ctx.base_dir / f) for f in files}}


def source(ctx: StageContext[IngestConfig], material: dict[str, Any]) -> TableSource:
    first_with_digest: dict[str, str] = {}
    rows = []
    for path, digest in sorted(material["files"].items()):
        duplicate_of = None if digest.startswith(UNREADABLE) else first_with_digest.setdefault(digest, path)
        rows.append(
            {
                "source_path": path,
                "digest": digest,
                "duplicate_of": None if duplicate_of == path else duplicate_of,
            }
        )
    return TableSource(pa.Table.from_pylist(rows, schema=_SOURCE_SCHEMA))


def article_id(meta: ArticleMeta, digest: str) -> str:
    if meta.pmcid:
        return meta.pmcid
    if meta.doi:
        return f"doi:{meta.doi}"
    return f"file:{digest[:16]}"


def _ingest_one(path: str, digest: str, ctx: StageContext[IngestConfig]) -> dict[str, Any]:
    if digest.startswith(UNREADABLE):
        raise InputRejected("unreadable", digest.removeprefix(UNREADABLE))
    file = ctx.base_dir / path
    size = file.stat().st_size
    if size > ctx.config.max_bytes:
        raise InputRejected("too_large", f"{size} bytes > max_bytes {ctx.config.max_bytes}")
    try:
        data = file.read_bytes()
    except OSError as err:
        raise InputRejected("unreadable", str(err.strerror)) from None
    sniffed = sniff(path, data)
    meta = read_metadata(data, sniffed)
    return {
        "article_id": article_id(meta, digest),
        "source_path": path,
        "digest": digest,
        "size_bytes": size,
        "format": sniffed.format,
        "encoding": sniffed.encoding,
        "title": meta.title,
        "journal": meta.journal,
        "pmid": meta.pmid,
        "pmcid": meta.pmcid,
        "doi": meta.doi,
        "language": meta.language,
        "article_type": meta.article_type,
        "license": meta.license or "unknown",
        "license_url": meta.license_url,
        "license_known": meta.license is not None,
    }


def process(chunk: pa.Table, ctx: StageContext[IngestConfig]) -> ChunkResult:
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for row in chunk.to_pylist():
        path, digest = row["source_path"], row["digest"]
        if row["duplicate_of"]:
            excluded.append(
                _excluded("duplicate_content", f"same bytes as {row['duplicate_of']}", path, digest)
            )
            continue
        try:
            kept.append(_ingest_one(path, digest, ctx))
        except InputRejected as err:
            excluded.append(_excluded(err.reason, err.detail, path, digest))
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


def finalize(kept: pa.Table, _ctx: StageContext[IngestConfig]) -> ChunkResult:
    """One file per article id: JATS before HTML, then the first path; the rest excluded."""
    rows = sorted(kept.to_pylist(), key=lambda r: (r["article_id"], r["format"] != "jats", r["source_path"]))
    winners: dict[str, str] = {}
    keep, drop = [], []
    for row in rows:
        first = winners.setdefault(row["article_id"], row["source_path"])
        if first == row["source_path"]:
            keep.append(row)
        else:
            detail = f"article {row['article_id']} is already taken in from {first}"
            drop.append(_excluded("duplicate_article", detail, row["source_path"], row["digest"]))
    keep.sort(key=lambda r: r["source_path"])
    return ChunkResult(rows_to_table(keep, SCHEMA), rows_to_table(drop, EXCLUDED_SCHEMA))


def _excluded(reason: str, detail: str, path: str, digest: str | None) -> dict[str, Any]:
    return {"reason": reason, "detail": detail, "source_path": path, "digest": digest}


SPEC: StageSpec[IngestConfig] = StageSpec(
    name="ingest",
    version=1,
    config_type=IngestConfig,
    upstream=(),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("source_path",),
    inputs=inputs,
    source=source,
    process=process,
    finalize=finalize,
    description="Discover article files; record ids, format, encoding, licence; exclude unreadable ones.",
)
