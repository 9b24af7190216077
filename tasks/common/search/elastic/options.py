"""The tunables of the Elasticsearch backend (:class:`ElasticsearchOptions`)."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.common.search.elastic.dsl import Analyzer, VectorIndexType


@dataclass(frozen=True)
class ElasticsearchOptions:
    """Tunables of :class:`ElasticsearchBackend`; defaults suit a single-node server."""

    index_type: VectorIndexType = "int8_hnsw"
    analyzer: Analyzer = "standard"
    shards: int = 1
    replicas: int = 0  # after the load; the index is rebuilt from artifacts, not precious
    refresh_interval: str | None = None  # after the load; None: the server default (1s, search-idle)
    vectors_in_source: bool = False
    chunk_size: int = 500  # documents per bulk request
    max_chunk_bytes: int = 10 * 1024 * 1024  # per bulk request; the server takes up to 100 MiB
    bulk_retries: int = 5  # 429 retries per chunk (streaming_bulk max_retries)
    initial_backoff: float = 2.0  # seconds; doubles per retry
    max_backoff: float = 60.0
    search_batch: int = 100  # queries per msearch request
    search_retries: int = 3  # 429 retries of an msearch request or item
    request_timeout: float = 120.0  # the client's default of 10 s is short for bulk and msearch
    fuzzy_max_expansions: int | None = None  # None: the server default (50)
    drop_previous: bool = False  # delete the indices the alias pointed at before finish()
    force_merge_segments: int | None = None  # e.g. 1: fewer HNSW graphs to search, slower finish

    def __post_init__(self) -> None:
        if self.chunk_size < 1 or self.search_batch < 1:
            raise ValueError("chunk_size and search_batch must be >= 1")
        if self.bulk_retries < 1:
            raise ValueError("bulk_retries must be >= 1: without it a 429 loses documents")
        if self.search_retries < 0 or self.replicas < 0:
            raise ValueError("search_retries and replicas must be >= 0")
