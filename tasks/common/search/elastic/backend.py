"""The Elasticsearch search backend: the port on a :class:`ManagedIndex` and a :class:`Searcher`."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from elasticsearch import Elasticsearch

from tasks.common.search.elastic.bulk import bulk_load
from tasks.common.search.elastic.connection import Connection, client_where, connect
from tasks.common.search.elastic.dsl import (
    RRF_RANK_CONSTANT,
    Lexical,
    VectorIndexType,
    bm25_body,
    check_knn,
    check_size,
    fuzzy_body,
    phrase_body,
)
from tasks.common.search.elastic.errors import Server
from tasks.common.search.elastic.indices import ManagedIndex
from tasks.common.search.elastic.msearch import Searcher
from tasks.common.search.elastic.options import ElasticsearchOptions
from tasks.common.search.port import F32, Hit, IndexReport, SearchError

log = logging.getLogger(__name__)

_INDEX_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_INDEX_NAME_MAX = 200  # leaves room for "-<16 hex>" under the server's 255-byte limit
_NO_429_RETRY = (502, 503, 504)  # the transport's other defaults; 429 gets backoff here instead


class ElasticsearchBackend:
    """The :class:`~tasks.common.search.port.SearchBackend` port on an Elasticsearch 8.x/9.x server.

    Build with :meth:`from_env` (ES_URL etc.), :meth:`open_existing` (search an index built
    earlier), or the constructor with an ``Elasticsearch`` client of your own (it is not
    closed by :meth:`close`). The constructor sends nothing; the index is created on the
    first :meth:`add` (or :meth:`finish`). An index of the same name left by an earlier load
    (same fingerprint) is deleted and rebuilt.
    """

    name = "elasticsearch"

    def __init__(
        self,
        client: Elasticsearch,
        index_prefix: str,
        dims: int,
        *,
        fingerprint: str | None = None,
        options: ElasticsearchOptions | None = None,
        where: str | None = None,
        owns_client: bool = False,
        server_version: str | None = None,
        _existing_index: str | None = None,
        _conn: Connection | None = None,
    ) -> None:
        if not (_INDEX_NAME.fullmatch(index_prefix) and len(index_prefix) <= _INDEX_NAME_MAX):
            raise ValueError(
                f"index prefix {index_prefix!r}: use lower-case letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        if not 1 <= dims <= 4096:
            raise ValueError(f"dims must be between 1 and 4096, got {dims}")
        self.config = options or ElasticsearchOptions()
        self.dims = dims
        if _existing_index is not None:
            index = _existing_index
        else:
            suffix = re.sub(r"[^a-z0-9]", "", (fingerprint or "").lower())[:16] or uuid.uuid4().hex[:16]
            index = f"{index_prefix}-{suffix}"
        if _conn is not None:  # from the environment: where, version and secrets come with it
            where, owns_client, server_version = _conn.where, True, _conn.version
        self.where = where or client_where(client)
        self.server_version = server_version
        self._owns_client = owns_client
        self._client = client
        # Our own backoff handles 429; the transport would retry it at once, with no pause.
        es = client.options(request_timeout=self.config.request_timeout, retry_on_status=_NO_429_RETRY)
        self._server = Server(es, self.where, _conn.secrets if _conn is not None else ())
        self._target = ManagedIndex(
            self._server, index, index_prefix, dims, self.config, created=_existing_index is not None
        )
        self._searcher = Searcher(self._server, index, dims, self.config)

    # -- construction ----------------------------------------------------------------------------

    @classmethod
    def from_env(
        cls,
        index_prefix: str,
        dims: int,
        *,
        fingerprint: str | None = None,
        options: ElasticsearchOptions | None = None,
        index_type: VectorIndexType | None = None,
        shards: int | None = None,
    ) -> ElasticsearchBackend:
        """A new load on the server at ``ES_URL`` (credentials from the environment:
        :mod:`tasks.common.search.elastic.connection`).

        ``index_type`` and ``shards``, when given, override those fields of ``options``.
        Raises :class:`SearchUnavailable` saying which variable to set when ``ES_URL`` is unset,
        or why the server did not answer (checked with ``info()``)."""
        opts = options or ElasticsearchOptions()
        if index_type is not None:
            opts = replace(opts, index_type=index_type)
        if shards is not None:
            opts = replace(opts, shards=shards)
        conn = connect()
        backend = cls(conn.client, index_prefix, dims, fingerprint=fingerprint, options=opts, _conn=conn)
        log.info("elasticsearch %s at %s: loading index %s", conn.version, conn.where, backend.index)
        return backend

    @classmethod
    def open_existing(
        cls,
        name: str,
        dims: int,
        *,
        fingerprint: str | None = None,
        client: Elasticsearch | None = None,
        options: ElasticsearchOptions | None = None,
    ) -> ElasticsearchBackend:
        """Search an index built earlier. ``name`` is an alias (``<prefix>``: the index it points
        at), a concrete index (``<prefix>-<16 chars>``, as :attr:`index_name` reported), or, with
        ``fingerprint``, the prefix of ``<prefix>-<fingerprint[:16]>``. The client comes from the
        environment unless given (a given client is not closed by :meth:`close`).
        Raises :class:`SearchError` when there is no such index or its vectors have other dims."""
        conn: Connection | None = None
        if client is None:
            conn = connect()
            client = conn.client
        probe = cls(client, name, dims, fingerprint=fingerprint, options=options, _conn=conn)
        try:
            index, alias = probe._target.resolve(name, fingerprint)
            probe._target.check_mapping(index)
        except SearchError:
            if conn is not None:
                client.close()
            raise
        return cls(client, alias, dims, options=options, _existing_index=index, _conn=conn)

    @property
    def index(self) -> str:
        """The concrete index this backend loads and searches (``<prefix>-<suffix>``)."""
        return self._target.index

    @property
    def index_name(self) -> str:
        """:attr:`index`, the name the port's users read."""
        return self._target.index

    @property
    def alias(self) -> str:
        """The alias :meth:`finish` moves to :attr:`index` (the index name prefix)."""
        return self._target.alias

    def options(self) -> dict[str, Any]:
        """What to record in an artifact about this index (no credentials)."""
        o = self.config
        return {
            "engine": self.name,
            "server": self.where,
            "server_version": self.server_version,
            "index": self.index,
            "alias": self.alias,
            "dims": self.dims,
            "similarity": "cosine",
            "index_type": o.index_type,
            "analyzer": o.analyzer,
            "shards": o.shards,
        }

    # -- the port: loading ---------------------------------------------------------------------------

    def add(self, batches: Iterable[pa.RecordBatch]) -> IndexReport:
        return bulk_load(self._target, batches)

    def finish(self) -> None:
        """Restore serving settings, refresh, optionally force-merge, and move the alias here."""
        self._target.finish()

    def count(self) -> int:
        return self._target.count()

    def drop(self) -> None:
        """Delete this backend's index (its alias goes with it); a missing index is fine."""
        self._target.drop()

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    # -- the port: retrievers ---------------------------------------------------------------------------

    def bm25(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        check_size(k)
        return self._searcher.lexical("bm25", texts, k, lambda t: bm25_body(t, k))

    def phrase(self, texts: Sequence[str], slop: int, k: int) -> list[list[Hit]]:
        check_size(k)
        if slop < 0:
            raise ValueError(f"slop must be >= 0, got {slop}")
        return self._searcher.lexical("phrase", texts, k, lambda t: phrase_body(t, slop, k))

    def fuzzy(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        check_size(k)
        expansions = self.config.fuzzy_max_expansions
        return self._searcher.lexical("fuzzy", texts, k, lambda t: fuzzy_body(t, k, expansions))

    def knn(self, vectors: F32, k: int, num_candidates: int) -> list[list[Hit]]:
        check_knn(k, num_candidates)
        check_size(k)
        return self._searcher.knn(vectors, k, num_candidates)

    def rrf_search(
        self,
        texts: Sequence[str],
        vectors: F32,
        k: int,
        *,
        num_candidates: int,
        lexical: Lexical = "match",
        slop: int = 2,
        rank_window_size: int | None = None,
        rank_constant: int = RRF_RANK_CONSTANT,
    ) -> list[list[Hit]]:
        """Server-side RRF of a lexical retriever and kNN per query (one ``rrf`` retriever each).

        Needs an Enterprise or trial licence (the ``rrf`` retriever is GA from 8.16 and an
        Enterprise feature since then); on a Basic licence the server refuses it and this raises
        :class:`SearchError` pointing to client-side fusion (:mod:`tasks.common.search.fusion`), which
        gives the same formula on every licence. A query with empty text fuses kNN alone: its
        scores are ``1 / (rank_constant + rank)``, what RRF gives a single list."""
        return self._searcher.rrf(
            texts, vectors, k, num_candidates, lexical, slop, rank_window_size, rank_constant
        )
