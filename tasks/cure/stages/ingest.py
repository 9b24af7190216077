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

Excluded (``reason``): ``unreadable``, ``outside_source_root`` (a link out of the source
folder; ``follow_links_outside`` takes it), ``dangling_link``, ``symlink_loop``,
``not_a_regular_file`` (a folder, FIFO, ... with an article's name; see
:mod:`tasks.common.text.discovery`), ``empty_file``, ``binary_content``, ``undecodable``,
``unsupported_format``, ``too_large`` (the file, or one text node over the XML parser's
limit), ``changed_since_discovery``, ``malformed_xml`` / ``not_jats`` /
``malformed_html`` (the metadata could not be read), ``duplicate_content`` (same bytes as
an earlier file), ``duplicate_article`` (same article id as an earlier file; JATS wins
over HTML, then the first path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.parallel import CPU
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.text.discovery import discover as discover_files
from tasks.common.text.discovery import read_input, refusal
from tasks.common.text.document import InputRejected
from tasks.common.text.reading import read_metadata
from tasks.common.text.sniff import sniff


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
    # Not in the fingerprint itself: what it changes (the links' digests instead of
    # outside_source_root) is in the stage's material.
    follow_links_outside: bool = Field(
        False,
        exclude=True,
        description="Take symbolic links whose target is outside the source folder (default: excluded).",
    )


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


def discover(config: IngestConfig, base_dir: Path) -> dict[str, str]:
    """Display path (relative to ``base_dir``) → content digest, or ``reason:detail`` of a refusal."""
    return discover_files(
        config.sources,
        config.extensions,
        base_dir,
        "stages.ingest.sources",
        follow_links_outside=config.follow_links_outside,
    )


def inputs(ctx: StageContext[IngestConfig]) -> dict[str, Any]:
    # Refused files enter the fingerprint too, so fixing one makes the stage stale.
    return {"files": discover(ctx.config, ctx.base_dir)}


def source(ctx: StageContext[IngestConfig], material: dict[str, Any]) -> TableSource:
    first_with_digest: dict[str, str] = {}
    rows = []
    for path, digest in sorted(material["files"].items()):
        duplicate_of = None if refusal(digest) else first_with_digest.setdefault(digest, path)
        rows.append(
            {
                "source_path": path,
                "digest": digest,
                "duplicate_of": None if duplicate_of == path else duplicate_of,
            }
        )
    return TableSource(pa.Table.from_pylist(rows, schema=_SOURCE_SCHEMA))


def _ingest_one(path: str, digest: str, ctx: StageContext[IngestConfig]) -> dict[str, Any]:
    data = read_input(ctx.base_dir / path, digest, ctx.config.max_bytes)
    size = len(data)
    sniffed = sniff(path, data)
    meta = read_metadata(data, sniffed)
    return {
        "article_id": meta.article_id(digest),
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
            excluded.append(_excluded(err.reason, err.detail, path, None if refusal(digest) else digest))
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
    resources=CPU,
    finalize=finalize,
    description="Discover article files; record ids, format, encoding, licence; exclude unreadable ones.",
)
