"""What a stage is: a typed config, its inputs, a chunk function, explicit schemas.

A stage never touches the artifact store itself. It says where its input rows come from
(:class:`Source`) and how one chunk of them becomes rows kept and rows excluded
(``process``); the engine (:mod:`irforge.engine`) fingerprints, chunks, persists,
resumes, checks the row accounting and publishes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from irforge.artifacts import Artifact
from irforge.parallel import CPU, Resources

C = TypeVar("C", bound=BaseModel)

# Every exclusion table starts with these columns, then the stage's own.
EXCLUSION_FIELDS = (pa.field("reason", pa.string(), nullable=False), pa.field("detail", pa.string()))


@dataclass(frozen=True)
class ChunkResult:
    kept: pa.Table
    excluded: pa.Table
    # Named side outputs (e.g. a cluster map beside the rows): ``<name>.parquet`` in the artifact.
    tables: Mapping[str, pa.Table] = field(default_factory=dict)
    # What the chunk cost (billed characters, requests, tokens, cache hits): summed into the manifest.
    cost: Mapping[str, float] = field(default_factory=dict)


class Source(Protocol):
    """The rows a stage consumes, in a deterministic order."""

    def num_rows(self) -> int: ...

    def batches(self, rows: int) -> Iterator[pa.Table]: ...


@dataclass(frozen=True)
class StageContext(Generic[C]):
    """What a stage function may use: its config, the config's folder, upstream artifacts.

    ``upstream`` is empty while a run is only being planned (fingerprints, ``status``).
    """

    config: C
    base_dir: Path  # relative paths in the config are relative to the config file
    upstream: Mapping[str, Artifact] = field(default_factory=dict)
    # Where request caches of paid calls live (shared by runs and fingerprints: a cached
    # answer is reused whatever else changed); None while only planning.
    cache_dir: Path | None = None
    # Where a stage writes files that are part of its artifact besides Parquet (a search
    # index): they are published with it under ``<artifact>/files/`` (Artifact.files).
    # Set only while the stage runs; kept across a resumed run like finished chunks.
    files_dir: Path | None = None
    # Where chunks keep what they build once and share on this host (an index they all
    # search): kept across a resumed run, deleted when the artifact is published. A worker on
    # another host finds the path empty and builds its own. Set only while the stage runs.
    scratch_dir: Path | None = None
    fingerprint: str | None = None  # this stage's, while it runs (names external resources)


@dataclass(frozen=True)
class ArtifactSource:
    """Rows of an upstream artifact; ``group_by`` keeps rows of one group in one chunk."""

    artifact: Artifact
    group_by: str | None = None
    columns: list[str] | None = None
    table: str | None = None  # a named side table instead of the main rows

    def num_rows(self) -> int:
        return self.artifact.count_rows(self.table)

    def batches(self, rows: int) -> Iterator[pa.Table]:
        pending = self.artifact.schema(self.columns, self.table).empty_table()
        for batch in self.artifact.iter_batches(rows, self.columns, self.table):
            pending = pa.concat_tables([pending, pa.Table.from_batches([batch])])
            # Strictly more rows than a chunk: only then can we see where the last group ends.
            while pending.num_rows > rows:
                cut = _group_cut(pending, self.group_by, rows)
                if cut is None:
                    break  # the group at the cut goes on past what is buffered: read more
                yield pending.slice(0, cut)
                pending = pending.slice(cut)
        if pending.num_rows:
            yield pending


@dataclass(frozen=True)
class TableSource:
    """Rows already in memory (e.g. a file listing), cut into chunks in order; ``group_by``
    keeps the (consecutive) rows of one group in one chunk."""

    table: pa.Table
    group_by: str | None = None

    def num_rows(self) -> int:
        return int(self.table.num_rows)

    def batches(self, rows: int) -> Iterator[pa.Table]:
        pending = self.table
        while pending.num_rows > rows:
            cut = _group_cut(pending, self.group_by, rows) or pending.num_rows  # None: to the end
            yield pending.slice(0, cut)
            pending = pending.slice(cut)
        if pending.num_rows:
            yield pending


def rows_to_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Python rows to a table of exactly ``schema`` (a missing nullable column is an error too)."""
    return pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()


def _group_cut(table: pa.Table, group_by: str | None, rows: int) -> int | None:
    """Where to end a chunk of at least ``rows`` rows without splitting a group (None: not yet known)."""
    if group_by is None:
        return rows
    keys = table.column(group_by)
    differs = pc.not_equal(keys.slice(rows), keys[rows - 1])
    idx = int(pc.index(differs, True).as_py())
    return None if idx < 0 else rows + idx


def key_set(table: pa.Table, key: tuple[str, ...]) -> set[tuple[Any, ...]]:
    columns = [table.column(k).to_pylist() for k in key]
    return set(zip(*columns, strict=True))


@dataclass(frozen=True)
class StageSpec(Generic[C]):
    """One stage of a flow.

    ``key`` names the input columns that identify one accounting unit (an article, a
    passage): every unit of the input must end up in exactly one of kept / excluded.
    ``kept_keys`` maps kept rows back to the units they came from when that is not just
    the same columns (e.g. a passage merged from several paragraphs).

    ``tables`` declares named side outputs with their schemas. ``whole_input`` stages get
    their whole input as one chunk.

    ``finalize`` sees all kept rows at once, for rules no chunk can check alone (e.g. one
    row per article id); it may move rows to the excluded ones, never add or drop any. The
    side tables it returns replace those of the chunks (figures over every row: a recall).

    ``resources`` (:class:`irforge.parallel.Resources`) says what a chunk needs from the
    worker that runs it; chunks of one stage may run in parallel, in any order, in other
    processes or on other machines, so ``process`` must depend on its chunk and context only.

    ``inputs`` describes external inputs (file digests, prompt texts, model ids) for the
    fingerprint; it runs at planning time. ``source`` builds the input rows at run time
    and receives what ``inputs`` returned, so nothing is read twice.
    """

    name: str
    version: int
    config_type: type[C]
    upstream: tuple[str, ...]
    schema: pa.Schema
    excluded_schema: pa.Schema
    key: tuple[str, ...]
    source: Callable[[StageContext[C], dict[str, Any]], Source]
    process: Callable[[pa.Table, StageContext[C]], ChunkResult]
    kept_keys: Callable[[pa.Table], set[tuple[Any, ...]]] | None = None
    tables: Mapping[str, pa.Schema] = field(default_factory=dict)
    whole_input: bool = False  # one chunk: for rules over all rows at once (clustering, dedup)
    # Rows a chunk, whatever ``execution.chunk_rows`` says: for rows each worth a worker
    # (one seed's fine-tuning), or groups of a grouped source (one seed's queries).
    chunk_rows: int | None = None
    finalize: Callable[[pa.Table, StageContext[C]], ChunkResult] | None = None
    inputs: Callable[[StageContext[C]], dict[str, Any]] = field(default=lambda _ctx: {})
    description: str = ""
    # What one chunk needs where it runs (GPU, memory), or that chunks must stay in one
    # process; a function of the config where that depends on it (a local model or a server).
    resources: Resources | Callable[[C], Resources] = CPU

    def resources_for(self, config: C) -> Resources:
        return self.resources(config) if callable(self.resources) else self.resources

    def units_kept(self, kept: pa.Table) -> set[tuple[Any, ...]]:
        return self.kept_keys(kept) if self.kept_keys else key_set(kept, self.key)


def exclusion_schema(*fields: pa.Field) -> pa.Schema:
    return pa.schema([*EXCLUSION_FIELDS, *fields])


def upstream_source(
    name: str, group_by: str | None = None
) -> Callable[[StageContext[Any], dict[str, Any]], Source]:
    """The usual source: the rows of one upstream artifact, in its order."""

    def build(ctx: StageContext[Any], _inputs: dict[str, Any]) -> Source:
        return ArtifactSource(ctx.upstream[name], group_by=group_by)

    return build
