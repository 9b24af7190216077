"""Which search backend an index stage loads, as a typed config, and the one place backends are built.

Backends (:mod:`tasks.common.search.port`):

- ``embedded`` (default): tantivy for BM25 / phrase / fuzzy and exact cosine kNN over the
  stored vectors with numpy (:mod:`tasks.common.search.embedded`). The index is written
  inside the stage's artifact (``files/embedded/``), so a rerun with the same fingerprint
  reuses it as is.
- ``elasticsearch``: Elasticsearch 8.x through the official client
  (:mod:`tasks.common.search.elastic`; ``ES_URL`` and credentials from the environment,
  ``infra/elasticsearch/`` starts a server). The index is named from the alias prefix and
  the stage's fingerprint, and the alias is moved to it once the load is complete.

:func:`create_index` starts a load; :func:`describe` is the ``index_info`` table an index
artifact carries, which :func:`open_index` reads back to search it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Literal

import pyarrow as pa
from pydantic import Field

from irforge.artifacts import Artifact
from irforge.config import StrictModel
from tasks.common.search.port import SearchBackend, SearchError

INFO_TABLE = "index_info"
INFO_SCHEMA = pa.schema(
    [
        pa.field("backend", pa.string(), nullable=False),
        pa.field("index_name", pa.string()),
        pa.field("alias", pa.string()),
        pa.field("dims", pa.int32(), nullable=False),
        pa.field("passages", pa.int64(), nullable=False),
    ]
)
"""The side table of an index artifact: which backend holds the passages, and where."""
EMBEDDED_DIR = "embedded"
"""The embedded index's directory inside the artifact's ``files``."""


class SearchConfig(StrictModel):
    """The search backend of an index and, for Elasticsearch, how its index is built."""

    backend: Literal["embedded", "elasticsearch"] = "embedded"
    alias: str = Field("irforge", description="Elasticsearch: alias (and index name prefix).")
    index_type: Literal["hnsw", "int8_hnsw", "flat", "int8_flat"] = Field(
        "hnsw", description="Elasticsearch dense_vector index_options.type, set explicitly."
    )
    shards: int = Field(1, ge=1, description="Elasticsearch: primary shards.")


def create_index(
    config: SearchConfig, files_dir: Path | None, dims: int, fingerprint: str | None
) -> SearchBackend:
    """A new, empty index for a load: embedded under ``files_dir`` (anything left there by a
    crashed load is removed), or on the Elasticsearch server of ``ES_URL``, named from
    ``fingerprint``."""
    # Each backend imports its engine (tantivy, the elasticsearch client) when first used.
    from tasks.common.search.elastic.backend import ElasticsearchBackend  # noqa: PLC0415
    from tasks.common.search.embedded.backend import EmbeddedBackend  # noqa: PLC0415

    if config.backend == "embedded":
        assert files_dir is not None, "the engine sets files_dir while a stage runs"
        directory = files_dir / EMBEDDED_DIR
        shutil.rmtree(directory, ignore_errors=True)  # a crashed load starts over
        return EmbeddedBackend.create(directory, dims)
    return ElasticsearchBackend.from_env(
        index_prefix=config.alias,
        dims=dims,
        fingerprint=fingerprint,
        index_type=config.index_type,
        shards=config.shards,
    )


def describe(config: SearchConfig, backend: SearchBackend, dims: int, passages: int) -> pa.Table:
    """The ``index_info`` table (:data:`INFO_SCHEMA`) of a finished load of ``backend``."""
    index_name = getattr(backend, "index_name", None) if config.backend == "elasticsearch" else None
    return pa.table(
        {
            "backend": [config.backend],
            "index_name": [index_name],
            "alias": [config.alias if config.backend == "elasticsearch" else None],
            "dims": [dims],
            "passages": [passages],
        },
        schema=INFO_SCHEMA,
    )


def open_index(artifact: Artifact) -> SearchBackend:
    """The search backend an index artifact describes (its ``index_info``), opened for searching."""
    info = artifact.read(table=INFO_TABLE).to_pylist()
    if not info:
        raise SearchError(f"{artifact.path}: no index_info table")
    from tasks.common.search.elastic.backend import ElasticsearchBackend  # noqa: PLC0415
    from tasks.common.search.embedded.backend import EmbeddedBackend  # noqa: PLC0415

    row = info[0]
    if row["backend"] == "embedded":
        return EmbeddedBackend.open(Path(artifact.files) / EMBEDDED_DIR)
    return ElasticsearchBackend.open_existing(row["index_name"], dims=int(row["dims"]))
