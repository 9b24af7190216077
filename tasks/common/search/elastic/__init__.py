"""Elasticsearch adapter for the search port, on the official ``elasticsearch`` client (8.x).

Why the 8.x client: an 8.x client talks to Elasticsearch 8.x and 9.x servers, a 9.x client
only to 9.x, because it always sends ``Accept: application/vnd.elasticsearch+json;
compatible-with=9`` and an 8.x server rejects that header
(https://github.com/elastic/elasticsearch-py#compatibility).
pyproject pins ``elasticsearch>=8,<9`` for that reason; servers older than 8.12 are refused
(``int8_hnsw`` and top-level ``knn`` inside ``msearch`` need it).

Modules: ``backend`` (:class:`~tasks.common.search.elastic.backend.ElasticsearchBackend`,
the port), ``dsl`` (request bodies, the mapping), ``connection`` (client, credentials and
server check from ``ES_URL`` etc.), ``indices`` (the index and its alias), ``bulk``
(loading), ``msearch`` (searching), ``errors``, ``options``
(:class:`~tasks.common.search.elastic.options.ElasticsearchOptions`).

No message or log line of this package carries a credential: server URLs are shown without
user info, 401 answers are reported without the server's text, and any message is scrubbed
of the configured secrets before it is raised.

The index
---------
A load goes into a new concrete index ``<prefix>-<fingerprint[:16]>`` (a random suffix when
no fingerprint is given); ``finish()`` moves the alias ``<prefix>`` to it in one
``_aliases`` request (remove + add), so readers of the alias switch atomically from the
previous build to this one. The backend itself always searches its concrete index.
``open_existing()`` searches an index built earlier (by alias or by fingerprint).

The mapping is explicit (:func:`~tasks.common.search.elastic.dsl.index_body`), ``"dynamic": "strict"``:

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
("tune for indexing speed"); ``finish()`` restores the configured values
(``refresh_interval`` back to the server default unless set, which keeps search-idle
shards), refreshes, and moves the alias. One shard by default: BM25 statistics are then
global, as in the embedded backend (several shards score with per-shard IDF).

Requests
--------
- Bulk (:mod:`~tasks.common.search.elastic.bulk`): ``streaming_bulk``; a rejected document
  is reported in ``IndexReport.failed`` with the server's reason, a whole request that
  fails is a :class:`SearchError`. ``429`` answers, per item or for the whole request, are
  retried with exponential backoff; the transport's own immediate retries are switched off
  for 429 on this adapter's calls, so that backoff is the only 429 policy. Rows are
  validated first (ids, dims, finite, non-zero: cosine rejects a zero vector); a bad row is
  reported, not sent.
- Search (:mod:`~tasks.common.search.elastic.msearch`): one ``msearch`` request per batch
  of queries (``search_batch``, default 100), one response item per query, re-sorted to the
  port's order (score descending, then passage id).

Scores are Elasticsearch's own: Lucene BM25, and ``(1 + cos) / 2`` for cosine kNN.
"""
