"""Stage ``index``: the passages and their vectors in a search engine (CURE §2.3).

The backends (``embedded`` by default, or ``elasticsearch``) and how an index is created,
described and reopened: :mod:`tasks.common.search.config`.

One chunk (the whole input): a bulk load is only searchable once finished, and both
backends make a repeated load idempotent (documents keyed by passage id), so a crashed
load simply runs again. Output: one row per indexed passage (``passage_id``,
``article_id``, ``backend``); a passage the engine refused is excluded as
``refused_by_engine``, the engine's own reason (bad vector, mapping error, ...) in
``detail``. Side table ``index_info``: backend, index name, alias, dims, passages.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from irforge.fingerprint import Transport
from irforge.stage import ChunkResult, StageContext, StageSpec, exclusion_schema, upstream_source
from tasks.common.search.config import INFO_SCHEMA, INFO_TABLE, SearchConfig, create_index, describe
from tasks.common.search.port import PASSAGE_SCHEMA


class IndexConfig(SearchConfig):
    alias: str = Field("irforge-cure", description="Elasticsearch: alias (and index name prefix).")
    batch_rows: Transport[int] = Field(2000, ge=1, description="Passages sent per bulk batch.")


SCHEMA = pa.schema(
    [
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("backend", pa.string(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("passage_id", pa.string(), nullable=False))


def _dims(table: pa.Table) -> int:
    """The vectors' dimensions (the longest; a row of another length is the engine's to refuse)."""
    longest = pc.max(pc.list_value_length(table.column("vector"))).as_py()
    return int(longest or 0)


def _batches(table: pa.Table, rows: int) -> Iterator[pa.RecordBatch]:
    yield from table.select(PASSAGE_SCHEMA.names).cast(PASSAGE_SCHEMA).to_batches(max_chunksize=rows)


def process(chunk: pa.Table, ctx: StageContext[IndexConfig]) -> ChunkResult:
    config = ctx.config
    dims = _dims(chunk)
    backend = create_index(config, ctx.files_dir, dims, ctx.fingerprint)
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
    info = describe(config, backend, dims, indexed.num_rows)
    return ChunkResult(kept, excluded, {INFO_TABLE: info})


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
    tables={INFO_TABLE: INFO_SCHEMA},
    whole_input=True,
    description="Passages and vectors in Elasticsearch or the embedded tantivy + numpy engine.",
)
