"""Stage ``index``: the passages and their vectors in a search engine (CURE §2.3).

Two backends behind one port (:mod:`tasks.common.search.port`):

- ``embedded`` (default): tantivy for BM25 / phrase / fuzzy and exact cosine kNN over the
  stored vectors with numpy. The index is written inside this stage's artifact
  (``files/embedded/``), so a rerun with the same fingerprint reuses it as is.
- ``elasticsearch``: Elasticsearch 8.x through the official client (``ES_URL`` and
  credentials from the environment; ``infra/elasticsearch/`` starts a server). The index
  is named from the alias prefix and this stage's fingerprint, and the alias is moved to
  it once the load is complete.

One chunk (the whole input): a bulk load is only searchable once finished, and both
backends make a repeated load idempotent (documents keyed by passage id), so a crashed
load simply runs again. Output: one row per indexed passage (``passage_id``,
``article_id``, ``backend``); a passage the engine refused is excluded as
``refused_by_engine``, the engine's own reason (bad vector, mapping error, ...) in
``detail``. Side table ``index_info``: backend, index
name, alias, dims, passages.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from irforge.artifacts import Artifact
from irforge.config import StrictModel
from irforge.fingerprint import Transport
from irforge.stage import ChunkResult, StageContext, StageSpec, exclusion_schema, upstream_source
from tasks.common.search.elastic import ElasticsearchBackend
from tasks.common.search.embedded import EmbeddedBackend
from tasks.common.search.port import PASSAGE_SCHEMA, SearchBackend, SearchError


class IndexConfig(StrictModel):
    backend: Literal["embedded", "elasticsearch"] = "embedded"
    alias: str = Field("irforge-cure", description="Elasticsearch: alias (and index name prefix).")
    index_type: Literal["hnsw", "int8_hnsw", "flat", "int8_flat"] = Field(
        "hnsw", description="Elasticsearch dense_vector index_options.type, set explicitly."
    )
    shards: int = Field(1, ge=1, description="Elasticsearch: primary shards.")
    batch_rows: Transport[int] = Field(2000, ge=1, description="Passages sent per bulk batch.")


SCHEMA = pa.schema(
    [
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("backend", pa.string(), nullable=False),
    ]
)
INFO_SCHEMA = pa.schema(
    [
        pa.field("backend", pa.string(), nullable=False),
        pa.field("index_name", pa.string()),
        pa.field("alias", pa.string()),
        pa.field("dims", pa.int32(), nullable=False),
        pa.field("passages", pa.int64(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("passage_id", pa.string(), nullable=False))
EMBEDDED_DIR = "embedded"


def _dims(table: pa.Table) -> int:
    """The vectors' dimensions (the longest; a row of another length is the engine's to refuse)."""
    longest = pc.max(pc.list_value_length(table.column("vector"))).as_py()
    return int(longest or 0)


def _batches(table: pa.Table, rows: int) -> Iterator[pa.RecordBatch]:
    yield from table.select(PASSAGE_SCHEMA.names).cast(PASSAGE_SCHEMA).to_batches(max_chunksize=rows)


def process(chunk: pa.Table, ctx: StageContext[IndexConfig]) -> ChunkResult:
    config = ctx.config
    dims = _dims(chunk)
    backend: SearchBackend
    index_name: str | None = None
    if config.backend == "embedded":
        assert ctx.files_dir is not None, "the engine sets files_dir while a stage runs"
        directory = ctx.files_dir / EMBEDDED_DIR
        shutil.rmtree(directory, ignore_errors=True)  # a crashed load starts over
        backend = EmbeddedBackend.create(directory, dims)
    else:
        es = ElasticsearchBackend.from_env(
            index_prefix=config.alias,
            dims=dims,
            fingerprint=ctx.fingerprint,
            index_type=config.index_type,
            shards=config.shards,
        )
        backend, index_name = es, es.index_name
    try:
        report = backend.add(_batches(chunk, config.batch_rows))
        backend.finish()
    finally:
        backend.close()
    failed = dict(report.failed)
    ok = pa.array([pid not in failed for pid in chunk.column("passage_id").to_pylist()])
    indexed = chunk.filter(ok)
    refused = chunk.filter(pc.invert(ok))
    kept = pa.table(
        {
            "passage_id": indexed.column("passage_id"),
            "article_id": indexed.column("article_id"),
            "backend": pa.array([config.backend] * indexed.num_rows, pa.string()),
        },
        schema=SCHEMA,
    )
    reasons = [failed[pid] for pid in refused.column("passage_id").to_pylist()]
    excluded = pa.table(
        {
            "reason": pa.array(["refused_by_engine"] * refused.num_rows, pa.string()),
            "detail": pa.array(reasons, pa.string()),
            "passage_id": refused.column("passage_id"),
        },
        schema=EXCLUDED_SCHEMA,
    )
    info = pa.table(
        {
            "backend": [config.backend],
            "index_name": [index_name],
            "alias": [config.alias if config.backend == "elasticsearch" else None],
            "dims": [dims],
            "passages": [indexed.num_rows],
        },
        schema=INFO_SCHEMA,
    )
    return ChunkResult(kept, excluded, {"index_info": info})


def open_index(artifact: Artifact) -> SearchBackend:
    """The search backend an ``index`` artifact describes, opened for searching."""
    info = artifact.read(table="index_info").to_pylist()
    if not info:
        raise SearchError(f"{artifact.path}: no index_info table")
    row = info[0]
    if row["backend"] == "embedded":
        return EmbeddedBackend.open(Path(artifact.files) / EMBEDDED_DIR)
    return ElasticsearchBackend.open_existing(row["index_name"], dims=int(row["dims"]))


SPEC: StageSpec[IndexConfig] = StageSpec(
    name="index",
    version=1,
    config_type=IndexConfig,
    upstream=("embed",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("passage_id",),
    source=upstream_source("embed"),
    process=process,
    tables={"index_info": INFO_SCHEMA},
    whole_input=True,
    description="Passages and vectors in Elasticsearch or the embedded tantivy + numpy engine.",
)
