"""Elasticsearch request bodies and index settings, pure functions (no client, no I/O).

Query DSL: https://www.elastic.co/docs/reference/query-languages/querydsl. The mapping
(:func:`index_body`) and why each setting is set explicitly: the package docstring,
``tasks/common/search/elastic/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from tasks.common.search.port import F32

VectorIndexType = Literal[
    "hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw", "flat", "int8_flat", "int4_flat", "bbq_flat"
]
Analyzer = Literal["standard", "english", "whitespace"]  # whitespace: text analysed before indexing
Lexical = Literal["match", "phrase", "fuzzy"]

TEXT_FIELD = "text"
VECTOR_FIELD = "vector"
MAX_NUM_CANDIDATES = 10_000  # the server's cap on knn num_candidates
MAX_RESULT_WINDOW = 10_000  # index.max_result_window default: size above it is refused
RRF_RANK_CONSTANT = 60


def match_query(text: str) -> dict[str, Any]:
    """BM25 ``match``: any analysed term of ``text`` (OR). ``match`` has no ``slop``."""
    return {"match": {TEXT_FIELD: {"query": text}}}


def phrase_query(text: str, slop: int) -> dict[str, Any]:
    """``match_phrase`` with ``slop``: terms in order, ``slop`` position moves allowed (a swap costs 2).
    ``match_phrase`` has no ``fuzziness``."""
    if slop < 0:
        raise ValueError(f"slop must be >= 0, got {slop}")
    return {"match_phrase": {TEXT_FIELD: {"query": text, "slop": slop}}}


def fuzzy_query(text: str, max_expansions: int | None = None) -> dict[str, Any]:
    """``match`` with ``fuzziness: AUTO`` (``AUTO:3,6``: exact up to 2 chars, 1 edit up to 5, else 2).

    ``max_expansions`` (server default 50) bounds the terms each word expands to; a whole
    passage as a fuzzy query can otherwise reach the server's clause limit."""
    inner: dict[str, Any] = {"query": text, "fuzziness": "AUTO"}
    if max_expansions is not None:
        inner["max_expansions"] = max_expansions
    return {"match": {TEXT_FIELD: inner}}


def check_size(k: int) -> None:
    if not 1 <= k <= MAX_RESULT_WINDOW:
        raise ValueError(f"k must be between 1 and {MAX_RESULT_WINDOW} (index.max_result_window), got {k}")


def _lexical_body(query: dict[str, Any], k: int) -> dict[str, Any]:
    check_size(k)
    # The passage id is the document _id, so no _source is fetched. Exact hit counts are never
    # read; not tracking them lets Lucene skip non-competitive documents (block-max WAND).
    return {"query": query, "size": k, "_source": False, "track_total_hits": False}


def bm25_body(text: str, k: int) -> dict[str, Any]:
    """The search body of :meth:`ElasticsearchBackend.bm25`."""
    return _lexical_body(match_query(text), k)


def phrase_body(text: str, slop: int, k: int) -> dict[str, Any]:
    """The search body of :meth:`ElasticsearchBackend.phrase`."""
    return _lexical_body(phrase_query(text, slop), k)


def fuzzy_body(text: str, k: int, max_expansions: int | None = None) -> dict[str, Any]:
    """The search body of :meth:`ElasticsearchBackend.fuzzy`."""
    return _lexical_body(fuzzy_query(text, max_expansions), k)


def check_knn(k: int, num_candidates: int) -> None:
    """The server's rules: ``1 <= k <= num_candidates <= 10000`` (num_candidates is per shard)."""
    if k < 1:
        raise ValueError(f"knn k must be >= 1, got {k}")
    if num_candidates < k:
        raise ValueError(f"knn num_candidates ({num_candidates}) must be >= k ({k})")
    if num_candidates > MAX_NUM_CANDIDATES:
        raise ValueError(f"knn num_candidates must be <= {MAX_NUM_CANDIDATES}, got {num_candidates}")


def knn_section(vector: Sequence[float] | F32, k: int, num_candidates: int) -> dict[str, Any]:
    """A ``knn`` search section / retriever body on the ``vector`` field."""
    check_knn(k, num_candidates)
    values = vector.tolist() if isinstance(vector, np.ndarray) else [float(x) for x in vector]
    return {"field": VECTOR_FIELD, "query_vector": values, "k": k, "num_candidates": num_candidates}


def knn_body(vector: Sequence[float] | F32, k: int, num_candidates: int) -> dict[str, Any]:
    """The search body of :meth:`ElasticsearchBackend.knn`: a top-level ``knn`` section.

    ``size`` must be given too: it defaults to 10 whatever ``k`` is."""
    section = knn_section(vector, k, num_candidates)
    check_size(k)
    return {"knn": section, "size": k, "_source": False}


def standard_retriever(query: Mapping[str, Any]) -> dict[str, Any]:
    return {"standard": {"query": dict(query)}}


def knn_retriever(vector: Sequence[float] | F32, k: int, num_candidates: int) -> dict[str, Any]:
    return {"knn": knn_section(vector, k, num_candidates)}


def rrf_body(
    retrievers: Sequence[Mapping[str, Any]],
    size: int,
    *,
    rank_window_size: int | None = None,
    rank_constant: int = RRF_RANK_CONSTANT,
) -> dict[str, Any]:
    """A server-side ``rrf`` retriever search (Enterprise or trial licence from 8.16).

    ``rank_window_size`` (default ``size``) is how deep each child list is fused; the server
    requires ``rank_window_size >= size`` and ``rank_constant >= 1``."""
    check_size(size)
    window = size if rank_window_size is None else rank_window_size
    if window < size:
        raise ValueError(f"rank_window_size ({window}) must be >= size ({size})")
    if rank_constant < 1:
        raise ValueError(f"rank_constant must be >= 1, got {rank_constant}")
    if not retrievers:
        raise ValueError("rrf needs at least one child retriever")
    return {
        "retriever": {
            "rrf": {
                "retrievers": [dict(r) for r in retrievers],
                "rank_constant": rank_constant,
                "rank_window_size": window,
            }
        },
        "size": size,
        "_source": False,
    }


def index_body(
    dims: int,
    index_type: VectorIndexType = "int8_hnsw",
    shards: int = 1,
    *,
    analyzer: Analyzer = "standard",
    vectors_in_source: bool = False,
) -> dict[str, Any]:
    """The create-index body: settings for the bulk load (no refresh, no replicas) and the mapping."""
    if not 1 <= dims <= 4096:
        raise ValueError(f"dense_vector dims must be between 1 and 4096, got {dims}")
    if index_type.startswith("bbq") and dims <= 64:
        raise ValueError(f"{index_type} needs dims > 64, got {dims}")
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    mappings: dict[str, Any] = {
        "dynamic": "strict",
        "properties": {
            "passage_id": {"type": "keyword"},
            "article_id": {"type": "keyword"},
            TEXT_FIELD: {"type": "text", "analyzer": analyzer},
            VECTOR_FIELD: {
                "type": "dense_vector",
                "dims": dims,
                "index": True,
                "similarity": "cosine",
                "index_options": {"type": index_type},
            },
        },
    }
    if not vectors_in_source:
        mappings["_source"] = {"excludes": [VECTOR_FIELD]}
    return {"settings": load_settings(shards), "mappings": mappings}


def load_settings(shards: int | None = None) -> dict[str, Any]:
    """Index settings while a bulk load runs. ``shards`` only at creation (it is static)."""
    index: dict[str, Any] = {}
    if shards is not None:
        index["number_of_shards"] = shards
    index.update({"number_of_replicas": 0, "refresh_interval": "-1"})
    return {"index": index}


def serving_settings(replicas: int, refresh_interval: str | None) -> dict[str, Any]:
    """Settings after the load; ``refresh_interval`` None resets it to the server default."""
    return {"index": {"number_of_replicas": replicas, "refresh_interval": refresh_interval}}
