"""Elasticsearch adapter for the search port, on the official ``elasticsearch`` client (8.x).

Why the 8.x client: an 8.x client talks to Elasticsearch 8.x and 9.x servers, a 9.x client
only to 9.x, because it always sends ``Accept: application/vnd.elasticsearch+json;
compatible-with=9`` and an 8.x server rejects that header
(https://github.com/elastic/elasticsearch-py#compatibility).
pyproject pins ``elasticsearch>=8,<9`` for that reason; servers older than 8.12 are refused
(``int8_hnsw`` and top-level ``knn`` inside ``msearch`` need it).

Configuration (:meth:`ElasticsearchBackend.from_env`):

- ``ES_URL`` — the server, e.g. ``http://localhost:9200`` (``infra/elasticsearch/start.sh``).
- ``ES_API_KEY`` — an API key (the base64 "encoded" form), **or**
  ``ES_USERNAME`` + ``ES_PASSWORD`` — basic auth. Credentials may also sit in the URL.
- ``ES_CA_CERTS`` — a CA bundle for a server with a self-signed certificate (ES 8's default
  security setup).

No message or log line of this module carries a credential: server URLs are shown without
user info, 401 answers are reported without the server's text, and any message is scrubbed
of the configured secrets before it is raised.

The index
---------
A load goes into a new concrete index ``<prefix>-<fingerprint[:16]>`` (a random suffix when
no fingerprint is given); :meth:`~ElasticsearchBackend.finish` moves the alias ``<prefix>`` to
it in one ``_aliases`` request (remove + add), so readers of the alias switch atomically from
the previous build to this one. The backend itself always searches its concrete index.
:meth:`~ElasticsearchBackend.open_existing` searches an index built earlier (by alias or by
fingerprint).

The mapping is explicit (:func:`index_body`), ``"dynamic": "strict"``:

- ``passage_id``, ``article_id``: ``keyword``. The document ``_id`` is the passage id, so
  adding a row again overwrites it: a retried or re-run load is idempotent.
- ``text``: ``text`` with the ``standard`` analyzer by default (lower-casing, no stemming):
  it is Elasticsearch's default for ``text`` (so most likely what CURE ran), it matches the
  embedded backend's unstemmed tokenizer, and fuzzy edits on stems would mean something else.
  ``english`` is the alternative. ``text`` fields index positions, which ``match_phrase`` needs.
- ``vector``: ``dense_vector`` with ``dims``, ``similarity: cosine``, ``index: true`` and
  ``index_options.type`` set explicitly (default ``int8_hnsw``): from 9.1 the server default
  for ``dims >= 384`` becomes 1-bit ``bbq_hnsw``, and BGE-small / MiniLM have exactly 384
  dimensions, so leaving it implicit would silently change recall with the server version.
  ``int8_hnsw`` is what 8.14–9.0 use by default and needs a quarter of ``hnsw``'s memory;
  choose ``hnsw`` for unquantised float vectors. Vectors are left out of ``_source`` (they
  are rebuilt from artifacts, never read back; "tune approximate kNN" in the ES docs).

During a load the index has ``refresh_interval: -1`` and ``number_of_replicas: 0``
("tune for indexing speed"); :meth:`~ElasticsearchBackend.finish` restores the configured
values (``refresh_interval`` back to the server default unless set, which keeps search-idle
shards), refreshes, and moves the alias. One shard by default: BM25 statistics are then
global, as in the embedded backend (several shards score with per-shard IDF).

Requests
--------
- Bulk: :func:`elasticsearch.helpers.streaming_bulk` with ``raise_on_error=False`` (a
  rejected document is reported in :class:`IndexReport.failed` with the server's reason,
  never dropped) and ``raise_on_exception=True`` (a whole request that fails — auth, a
  broken server, a body too large — is a :class:`SearchError`, not thousands of rows blamed
  for an outage). ``429`` answers, per item or for the whole request, are retried with
  exponential backoff (``max_retries`` > 0, ``retry_on_status=(429,)``); the transport's own
  immediate retries are switched off for 429 on this adapter's calls, so that backoff is the
  only 429 policy. Rows are validated first (ids, dims, finite, non-zero: cosine rejects a
  zero vector); a bad row is reported, not sent.
- Search: one ``msearch`` request per batch of queries (``search_batch``, default 100), one
  response item per query; an error item raises :class:`SearchError` naming the query's
  position and the server's reason; items answered 429 are retried with backoff.
  Results follow the port's order (score descending, then passage id): Elasticsearch breaks
  ties by internal doc id, so hits are re-sorted here. A tie straddling the ``k`` cut-off can
  still select a different passage than the embedded backend would.

Scores are Elasticsearch's own: Lucene BM25, and ``(1 + cos) / 2`` for cosine kNN.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from elasticsearch import (
    ApiError,
    AuthenticationException,
    Elasticsearch,
    NotFoundError,
    TransportError,
    UnsupportedProductError,
)
from elasticsearch.helpers import streaming_bulk

from tasks.common.search.port import (
    F32,
    PASSAGE_SCHEMA,
    Hit,
    IndexReport,
    SearchError,
    SearchUnavailable,
    ranked,
)
from tasks.common.urls import public_url

log = logging.getLogger(__name__)

VectorIndexType = Literal[
    "hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw", "flat", "int8_flat", "int4_flat", "bbq_flat"
]
Analyzer = Literal["standard", "english"]
Lexical = Literal["match", "phrase", "fuzzy"]

ENV_URL = "ES_URL"
ENV_API_KEY = "ES_API_KEY"
ENV_USERNAME = "ES_USERNAME"
ENV_PASSWORD = "ES_PASSWORD"
ENV_CA_CERTS = "ES_CA_CERTS"

TEXT_FIELD = "text"
VECTOR_FIELD = "vector"
MAX_NUM_CANDIDATES = 10_000  # the server's cap on knn num_candidates
MAX_RESULT_WINDOW = 10_000  # index.max_result_window default: size above it is refused
MAX_ID_BYTES = 512  # the server's limit on a document _id
MIN_SERVER = (8, 12)  # int8_hnsw; top-level knn in msearch
RRF_RANK_CONSTANT = 60
_INDEX_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_INDEX_NAME_MAX = 200  # leaves room for "-<16 hex>" under the server's 255-byte limit
_NO_429_RETRY = (502, 503, 504)  # the transport's other defaults; 429 gets backoff here instead


# -- request bodies (pure; https://www.elastic.co/docs/reference/query-languages/querydsl) ----


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


def _check_size(k: int) -> None:
    if not 1 <= k <= MAX_RESULT_WINDOW:
        raise ValueError(f"k must be between 1 and {MAX_RESULT_WINDOW} (index.max_result_window), got {k}")


def _lexical_body(query: dict[str, Any], k: int) -> dict[str, Any]:
    _check_size(k)
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
    _check_size(k)
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
    _check_size(size)
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


# -- configuration -----------------------------------------------------------------------------


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


def _secret_forms(url: str, api_key: str, username: str, password: str) -> tuple[str, ...]:
    """The secrets as given and as sent (a basic-auth header is base64 of ``user:password``)."""
    forms = [api_key, password]
    pairs = [(username, password)] if password else []
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password:
            url_user = urllib.parse.unquote(parts.username or "")
            url_password = urllib.parse.unquote(parts.password)
            forms += [parts.password, url_password]
            pairs.append((url_user, url_password))
    except ValueError:
        pass
    forms += [base64.b64encode(f"{u}:{p}".encode()).decode() for u, p in pairs]
    return tuple(sorted({f for f in forms if f}, key=len, reverse=True))


@dataclass(frozen=True)
class _Connection:
    client: Elasticsearch
    where: str
    secrets: tuple[str, ...]


def _connect_from_env() -> _Connection:
    url = os.environ.get(ENV_URL, "").strip()
    if not url:
        raise SearchUnavailable(
            f"{ENV_URL} is not set: export {ENV_URL}=http://localhost:9200 "
            "(infra/elasticsearch/start.sh starts a server), with "
            f"{ENV_API_KEY} or {ENV_USERNAME}/{ENV_PASSWORD} if security is on; "
            "or use the embedded search backend"
        )
    try:
        where = public_url(url)
    except ValueError:
        where = "<unparseable URL>"
    api_key = os.environ.get(ENV_API_KEY, "").strip()
    username = os.environ.get(ENV_USERNAME, "").strip()
    password = os.environ.get(ENV_PASSWORD, "")
    ca_certs = os.environ.get(ENV_CA_CERTS, "").strip()

    secrets = _secret_forms(url, api_key, username, password)
    kwargs: dict[str, Any] = {}
    if api_key and (username or password):
        raise SearchUnavailable(f"set either {ENV_API_KEY} or {ENV_USERNAME}/{ENV_PASSWORD}, not both")
    if api_key:
        kwargs["api_key"] = api_key
    elif username or password:
        if not (username and password):
            raise SearchUnavailable(f"{ENV_USERNAME} and {ENV_PASSWORD} must be set together")
        kwargs["basic_auth"] = (username, password)
    if ca_certs:
        if not Path(ca_certs).is_file():
            raise SearchUnavailable(f"{ENV_CA_CERTS} names {ca_certs!r}, which is not a file")
        kwargs["ca_certs"] = ca_certs
    try:
        client = Elasticsearch(url, **kwargs)
    except (ValueError, TypeError):
        # The client's message repeats the URL, credentials included.
        raise SearchUnavailable(
            f"{ENV_URL} ({where}) is not a usable URL: write it as scheme://host:port, e.g. http://localhost:9200"
        ) from None
    return _Connection(client, where, tuple(secrets))


def _server_version(conn: _Connection) -> str:
    """``info()`` as the reachability check; SearchUnavailable with the reason otherwise."""
    try:
        info = conn.client.info().body
    except AuthenticationException:
        raise SearchUnavailable(
            f"Elasticsearch at {conn.where} refused the credentials (401): "
            f"check {ENV_API_KEY} or {ENV_USERNAME}/{ENV_PASSWORD}"
        ) from None
    except UnsupportedProductError:
        raise SearchUnavailable(
            f"the server at {conn.where} is not Elasticsearch (no X-Elastic-Product header): check {ENV_URL}"
        ) from None
    except ApiError as err:
        reason = _scrub(_api_reason(err), conn.secrets)
        raise SearchUnavailable(
            f"Elasticsearch at {conn.where} answered {err.status_code}: {reason}"
        ) from None
    except TransportError as err:
        raise SearchUnavailable(
            f"the server at {conn.where} did not answer ({type(err).__name__}): is it running? "
            "infra/elasticsearch/start.sh starts one; check ES_URL (and ES_CA_CERTS for https)"
        ) from None
    number = str(info.get("version", {}).get("number", "0"))
    found = tuple(int(p) for p in re.findall(r"\d+", number)[:2]) or (0,)
    if found < MIN_SERVER:
        raise SearchUnavailable(
            f"Elasticsearch at {conn.where} is {number}; this backend needs "
            f"{MIN_SERVER[0]}.{MIN_SERVER[1]} or later (int8_hnsw, knn in msearch)"
        )
    return number


# -- errors --------------------------------------------------------------------------------------


def _scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _error_text(error: Any) -> str:
    """``type: reason`` of a server error object, with the root cause when it says more."""
    if not isinstance(error, Mapping):
        return str(error)
    text = f"{error.get('type', 'error')}: {error.get('reason', '')}".rstrip(": ")
    causes: list[Any] = list(error.get("root_cause") or [])
    caused_by = error.get("caused_by")
    if isinstance(caused_by, Mapping):
        causes.append(caused_by)
    for failed in error.get("failed_shards") or []:
        if isinstance(failed, Mapping) and isinstance(failed.get("reason"), Mapping):
            causes.append(failed["reason"])
    for cause in causes:
        if isinstance(cause, Mapping):
            extra = f"{cause.get('type', 'error')}: {cause.get('reason', '')}".rstrip(": ")
            if extra not in text:
                text = f"{text} ({extra})"
                break
    return text


def _api_reason(err: ApiError) -> str:
    body = err.body
    if isinstance(body, Mapping) and "error" in body:
        return _error_text(body["error"])
    return str(err.message)


def _is_licence_error(text: str) -> bool:
    lowered = text.lower()
    return "license" in lowered or "licence" in lowered


# -- the backend -----------------------------------------------------------------------------------


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
        self.alias = index_prefix
        if _existing_index is not None:
            self.index = _existing_index
        else:
            suffix = re.sub(r"[^a-z0-9]", "", (fingerprint or "").lower())[:16] or uuid.uuid4().hex[:16]
            self.index = f"{index_prefix}-{suffix}"
        self.where = where or _client_where(client)
        self.server_version = server_version
        self._owns_client = owns_client
        self._secrets: tuple[str, ...] = ()
        o = self.config
        # Our own backoff handles 429; the transport would retry it at once, with no pause.
        self._es = client.options(request_timeout=o.request_timeout, retry_on_status=_NO_429_RETRY)
        self._client = client
        self._created = _existing_index is not None
        self._loading = False

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
        """A new load on the server at ``ES_URL`` (credentials from the environment, see module doc).

        ``index_type`` and ``shards``, when given, override those fields of ``options``.
        Raises :class:`SearchUnavailable` saying which variable to set when ``ES_URL`` is unset,
        or why the server did not answer (checked with ``info()``)."""
        opts = options or ElasticsearchOptions()
        if index_type is not None:
            opts = replace(opts, index_type=index_type)
        if shards is not None:
            opts = replace(opts, shards=shards)
        conn = _connect_from_env()
        try:
            version = _server_version(conn)
        except SearchUnavailable:
            conn.client.close()
            raise
        backend = cls(
            conn.client,
            index_prefix,
            dims,
            fingerprint=fingerprint,
            options=opts,
            where=conn.where,
            owns_client=True,
            server_version=version,
        )
        backend._secrets = conn.secrets
        log.info("elasticsearch %s at %s: loading index %s", version, conn.where, backend.index)
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
        owns = client is None
        where: str | None = None
        secrets: tuple[str, ...] = ()
        version: str | None = None
        if client is None:
            conn = _connect_from_env()
            try:
                version = _server_version(conn)
            except SearchUnavailable:
                conn.client.close()
                raise
            client, where, secrets = conn.client, conn.where, conn.secrets
        probe = cls(client, name, dims, fingerprint=fingerprint, options=options, where=where)
        probe._secrets = secrets
        try:
            index, alias = probe._resolve(name, fingerprint)
            probe._check_mapping(index)
        except SearchError:
            if owns:
                client.close()
            raise
        backend = cls(
            client,
            alias,
            dims,
            options=options,
            where=where,
            owns_client=owns,
            server_version=version,
            _existing_index=index,
        )
        backend._secrets = secrets
        return backend

    @property
    def index_name(self) -> str:
        """The concrete index this backend loads and searches (``<prefix>-<suffix>``)."""
        return self.index

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
        report = IndexReport()
        self._begin_load()
        o = self.config
        try:
            for ok, item in streaming_bulk(
                self._es,
                self._actions(batches, report),
                chunk_size=o.chunk_size,
                max_chunk_bytes=o.max_chunk_bytes,
                raise_on_error=False,
                raise_on_exception=True,
                max_retries=o.bulk_retries,
                initial_backoff=o.initial_backoff,
                max_backoff=o.max_backoff,
                retry_on_status=(429,),
            ):
                if ok:
                    report.indexed += 1
                else:
                    _, info = next(iter(item.items()))
                    report.failed.append((str(info.get("_id", "")), _item_reason(info)))
        except (ApiError, TransportError) as err:
            raise self._error(
                f"bulk load into {self.index} stopped after {report.indexed} indexed and "
                f"{len(report.failed)} failed rows",
                err,
            ) from None
        if report.failed:
            log.warning(
                "%d of %d rows were not indexed into %s; first: %s",
                len(report.failed),
                report.indexed + len(report.failed),
                self.index,
                report.failed[0],
            )
        return report

    def finish(self) -> None:
        """Restore serving settings, refresh, optionally force-merge, and move the alias here."""
        o = self.config
        try:
            self._ensure_index()
            if self._loading:
                self._es.indices.put_settings(
                    index=self.index, settings=serving_settings(o.replicas, o.refresh_interval)
                )
                self._loading = False
            self._es.indices.refresh(index=self.index)
            if o.force_merge_segments is not None:
                self._es.indices.forcemerge(index=self.index, max_num_segments=o.force_merge_segments)
            previous = [i for i in self._alias_targets() if i != self.index]
            actions: list[Mapping[str, Any]] = [
                {"remove": {"index": i, "alias": self.alias}} for i in previous
            ]
            actions.append({"add": {"index": self.index, "alias": self.alias}})
            self._es.indices.update_aliases(actions=actions)
            log.info("alias %s -> %s (was %s)", self.alias, self.index, ", ".join(previous) or "unset")
            if o.drop_previous:
                for old in previous:
                    if old.startswith(f"{self.alias}-"):
                        self._es.indices.delete(index=old)
        except (ApiError, TransportError) as err:
            raise self._error(f"finishing the load of {self.index}", err) from None

    def count(self) -> int:
        if not self._created:
            return 0
        try:
            return int(self._es.count(index=self.index).body["count"])
        except (ApiError, TransportError) as err:
            raise self._error(f"counting {self.index}", err) from None

    def drop(self) -> None:
        """Delete this backend's index (its alias goes with it); a missing index is fine."""
        try:
            self._es.indices.delete(index=self.index, ignore_unavailable=True)
        except (ApiError, TransportError) as err:
            raise self._error(f"deleting {self.index}", err) from None
        self._created = False
        self._loading = False

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    # -- the port: retrievers ---------------------------------------------------------------------------

    def bm25(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        _check_size(k)
        return self._lexical("bm25", texts, k, lambda t: bm25_body(t, k))

    def phrase(self, texts: Sequence[str], slop: int, k: int) -> list[list[Hit]]:
        _check_size(k)
        if slop < 0:
            raise ValueError(f"slop must be >= 0, got {slop}")
        return self._lexical("phrase", texts, k, lambda t: phrase_body(t, slop, k))

    def fuzzy(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        _check_size(k)
        expansions = self.config.fuzzy_max_expansions
        return self._lexical("fuzzy", texts, k, lambda t: fuzzy_body(t, k, expansions))

    def knn(self, vectors: F32, k: int, num_candidates: int) -> list[list[Hit]]:
        check_knn(k, num_candidates)
        _check_size(k)
        rows = self._query_vectors(vectors)
        bodies = [(i, knn_body(row, k, num_candidates)) for i, row in enumerate(rows)]
        answers = self._msearch("knn", bodies)
        return [self._hits(answers[i], k) for i in range(len(rows))]

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
        window = k if rank_window_size is None else rank_window_size
        rows = self._query_vectors(vectors)
        if len(rows) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(rows)} vectors")
        check_knn(window, num_candidates)
        bodies: list[tuple[int, dict[str, Any]]] = []
        knn_only: set[int] = set()
        for i, (text, row) in enumerate(zip(texts, rows, strict=True)):
            if not text.strip():
                knn_only.add(i)
                bodies.append((i, knn_body(row, k, num_candidates)))
                continue
            if lexical == "phrase":
                query = phrase_query(text, slop)
            elif lexical == "fuzzy":
                query = fuzzy_query(text, self.config.fuzzy_max_expansions)
            else:
                query = match_query(text)
            retrievers = [standard_retriever(query), knn_retriever(row, window, num_candidates)]
            bodies.append((i, rrf_body(retrievers, k, rank_window_size=window, rank_constant=rank_constant)))
        answers = self._msearch("rrf", bodies)
        out: list[list[Hit]] = []
        for i in range(len(rows)):
            hits = self._hits(answers[i], k)
            if i in knn_only:
                hits = [Hit(h.rank, h.passage_id, 1.0 / (rank_constant + h.rank)) for h in hits]
            out.append(hits)
        return out

    # -- internals -----------------------------------------------------------------------------------------

    def _error(self, doing: str, err: ApiError | TransportError) -> SearchError:
        if isinstance(err, ApiError):
            if err.status_code == 401:
                detail = "401: the server refused the credentials"
            else:
                detail = f"{err.status_code} {_api_reason(err)}"
        else:
            detail = f"no answer ({type(err).__name__}: {err.message})"
        return SearchError(_scrub(f"Elasticsearch at {self.where}: {doing}: {detail}", self._secrets))

    def _resolve(self, name: str, fingerprint: str | None) -> tuple[str, str]:
        """(index, alias) for :meth:`open_existing`."""
        if fingerprint:
            return self.index, name
        try:
            targets = self._alias_targets()
            if len(targets) == 1:
                return targets[0], name
            if targets:
                raise SearchError(
                    f"alias {name!r} on Elasticsearch at {self.where} points at {len(targets)} indices "
                    f"({', '.join(targets)}): open one of them by name"
                )
            if self._es.indices.exists(index=name):
                built = re.fullmatch(r"(.+)-[a-z0-9]{16}", name)
                return name, built.group(1) if built else name
        except (ApiError, TransportError) as err:
            raise self._error(f"looking up {name}", err) from None
        raise SearchError(
            f"Elasticsearch at {self.where} has no index or alias {name!r}: build the index first"
        )

    def _alias_targets(self) -> list[str]:
        try:
            return sorted(self._es.indices.get_alias(name=self.alias).body)
        except NotFoundError:
            return []

    def _check_mapping(self, index: str) -> None:
        try:
            body = self._es.indices.get_mapping(index=index).body
        except NotFoundError:
            raise SearchError(
                f"Elasticsearch at {self.where} has no index {index!r}: build it first (a load with this "
                "fingerprint), or open the alias"
            ) from None
        except (ApiError, TransportError) as err:
            raise self._error(f"reading the mapping of {index}", err) from None
        entry: Mapping[str, Any] = next(iter(body.values()), {})
        vector: Mapping[str, Any] = entry.get("mappings", {}).get("properties", {}).get(VECTOR_FIELD, {})
        if vector.get("type") != "dense_vector" or vector.get("dims") != self.dims:
            raise SearchError(
                f"index {index!r} on Elasticsearch at {self.where} has no {VECTOR_FIELD!r} dense_vector "
                f"of {self.dims} dims (found {vector.get('type')!r} with dims {vector.get('dims')!r}): "
                "it was built with another encoder"
            )

    def _ensure_index(self) -> None:
        if self._created:
            return
        o = self.config
        if self._es.indices.exists(index=self.index):
            log.warning(
                "index %s exists from an earlier load with this fingerprint: rebuilding it", self.index
            )
            self._es.indices.delete(index=self.index)
        body = index_body(
            self.dims, o.index_type, o.shards, analyzer=o.analyzer, vectors_in_source=o.vectors_in_source
        )
        self._es.indices.create(index=self.index, settings=body["settings"], mappings=body["mappings"])
        self._created = True
        self._loading = True
        log.info("created index %s (%s, %d dims, %d shards)", self.index, o.index_type, self.dims, o.shards)

    def _begin_load(self) -> None:
        try:
            if not self._created:
                self._ensure_index()
            elif not self._loading:
                self._es.indices.put_settings(index=self.index, settings=load_settings())
                self._loading = True
        except (ApiError, TransportError) as err:
            raise self._error(f"preparing {self.index} for a bulk load", err) from None

    def _actions(self, batches: Iterable[pa.RecordBatch], report: IndexReport) -> Iterator[dict[str, Any]]:
        """Bulk actions for the valid rows; invalid rows go straight to ``report.failed``."""
        seen = 0
        for batch in batches:
            missing = [n for n in PASSAGE_SCHEMA.names if n not in batch.schema.names]
            if missing:
                raise ValueError(f"passage batch lacks column(s) {missing}; expected {PASSAGE_SCHEMA.names}")
            columns = {n: batch.column(n).to_pylist() for n in PASSAGE_SCHEMA.names}
            for pid, aid, text, vector in zip(
                columns["passage_id"], columns["article_id"], columns["text"], columns["vector"], strict=True
            ):
                seen += 1
                key = pid if isinstance(pid, str) and pid else f"<row {seen}>"
                reason = self._row_problem(pid, aid, text, vector)
                if reason is not None:
                    report.failed.append((key, reason))
                    continue
                yield {
                    "_op_type": "index",
                    "_index": self.index,
                    "_id": pid,
                    "_source": {"passage_id": pid, "article_id": aid, TEXT_FIELD: text, VECTOR_FIELD: vector},
                }

    def _row_problem(self, pid: Any, aid: Any, text: Any, vector: Any) -> str | None:
        if not isinstance(pid, str) or not pid:
            return "passage_id is null or empty"
        if len(pid.encode("utf-8")) > MAX_ID_BYTES:
            return f"passage_id is over {MAX_ID_BYTES} bytes (Elasticsearch's _id limit)"
        if not isinstance(aid, str):
            return "article_id is null"
        if not isinstance(text, str):
            return "text is null"
        if vector is None:
            return "vector is null"
        if len(vector) != self.dims:
            return f"vector has {len(vector)} dims, the index has {self.dims}"
        values = np.asarray([math.nan if x is None else x for x in vector], dtype=np.float64)
        if not np.isfinite(values).all():
            return "vector has NaN, infinite or null values"
        if not values.any():
            return "vector is all zeros (cosine similarity is undefined for it)"
        return None

    def _query_vectors(self, vectors: F32) -> F32:
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim == 1 and rows.size == 0:
            rows = rows.reshape(0, self.dims)
        if rows.ndim != 2 or rows.shape[1] != self.dims:
            raise ValueError(f"query vectors must have shape (n, {self.dims}), got {rows.shape}")
        finite = np.isfinite(rows).all(axis=1)
        nonzero = np.abs(rows).sum(axis=1) > 0
        bad = np.flatnonzero(~(finite & nonzero))
        if bad.size:
            raise ValueError(f"query vector #{int(bad[0])} is not finite or is all zeros")
        return rows

    def _lexical(
        self, kind: str, texts: Sequence[str], k: int, body: Callable[[str], dict[str, Any]]
    ) -> list[list[Hit]]:
        bodies = [(i, body(t)) for i, t in enumerate(texts) if t.strip()]
        answers = self._msearch(kind, bodies)
        return [self._hits(answers[i], k) if i in answers else [] for i in range(len(texts))]

    def _msearch(
        self, kind: str, bodies: Sequence[tuple[int, dict[str, Any]]]
    ) -> dict[int, Mapping[str, Any]]:
        """One ``msearch`` request per ``search_batch`` bodies; the response item of each query."""
        o = self.config
        out: dict[int, Mapping[str, Any]] = {}
        for start in range(0, len(bodies), o.search_batch):
            pending = list(bodies[start : start + o.search_batch])
            for attempt in range(o.search_retries + 1):
                if attempt:
                    time.sleep(min(o.max_backoff, o.initial_backoff * 2 ** (attempt - 1)))
                searches: list[Mapping[str, Any]] = []
                for _, b in pending:
                    searches.extend(({}, b))
                try:
                    items = self._es.msearch(index=self.index, searches=searches).body["responses"]
                except ApiError as err:
                    if err.status_code == 429 and attempt < o.search_retries:
                        continue
                    raise self._error(f"{kind} search on {self.index}", err) from None
                except TransportError as err:
                    raise self._error(f"{kind} search on {self.index}", err) from None
                if len(items) != len(pending):
                    raise SearchError(
                        f"Elasticsearch at {self.where} answered {len(items)} items to an msearch of {len(pending)}"
                    )
                retry: list[tuple[int, dict[str, Any]]] = []
                for (qi, b), item in zip(pending, items, strict=True):
                    status = int(item.get("status", 500 if "error" in item else 200))
                    if "error" not in item and status < 300:
                        out[qi] = item
                    elif status == 429 and attempt < o.search_retries:
                        retry.append((qi, b))
                    else:
                        raise self._item_error(kind, qi, status, item.get("error"))
                if not retry:
                    break
                pending = retry
        return out

    def _item_error(self, kind: str, qi: int, status: int, error: Any) -> SearchError:
        reason = _error_text(error)
        if kind == "rrf" and _is_licence_error(reason):
            return SearchError(
                _scrub(
                    f"Elasticsearch at {self.where} refused the server-side rrf retriever for query #{qi}: "
                    f"{reason}. It needs an Enterprise or trial licence (Elasticsearch 8.16+); use "
                    "client-side RRF instead (tasks.common.search.fusion), which works on every licence",
                    self._secrets,
                )
            )
        return SearchError(
            _scrub(
                f"Elasticsearch at {self.where} rejected {kind} query #{qi} on {self.index} ({status}): {reason}",
                self._secrets,
            )
        )

    @staticmethod
    def _hits(item: Mapping[str, Any], k: int) -> list[Hit]:
        hits = item.get("hits", {}).get("hits", [])
        ids = [str(h["_id"]) for h in hits]
        scores = [float(h["_score"]) if h.get("_score") is not None else 0.0 for h in hits]
        return ranked(ids, scores, k)


def _item_reason(info: Mapping[str, Any]) -> str:
    status = info.get("status", "?")
    error = info.get("error")
    return f"{status} {_error_text(error)}" if error is not None else f"{status} (no reason given)"


def _client_where(client: Elasticsearch) -> str:
    try:
        nodes = client.transport.node_pool.all()
    except AttributeError:
        return "<client>"
    return ", ".join(sorted(public_url(n.base_url) for n in nodes)) or "<client>"
