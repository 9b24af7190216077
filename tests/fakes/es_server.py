"""A local server speaking enough of Elasticsearch 8's REST API for the official client, for tests.

``Elasticsearch(url)`` (elasticsearch-py 8.x) talks to it unchanged. It serves 127.0.0.1
only, on an ephemeral port, from a thread; the fixture stops it. It is for protocol and
plumbing tests: what the adapter sends, how it reads answers, retries and failures.
Ranking quality is the conformance suite's job against a real server.

What the client needs from a server, and the fake does:

- Every response carries ``X-Elastic-Product: Elasticsearch`` (the client refuses a 2xx
  answer without it: ``UnsupportedProductError``) and, when the request asked for the
  compatibility media type, ``Content-Type: application/vnd.elasticsearch+json;
  compatible-with=8``. A request asking for ``compatible-with=9`` (what a 9.x client sends)
  gets 400 ``media_type_header_exception``, as from a real 8.x server.
- ``GET /`` (info, version 8.19.3 by default).
- Indices: ``HEAD``/``PUT``/``DELETE /{index}``, ``GET /{index}/_mapping``,
  ``GET``/``PUT /{index}/_settings`` (a ``null`` value resets a setting),
  ``POST /{index}/_refresh``, ``POST /{index}/_forcemerge``, ``GET|POST /{index}/_count``.
- Aliases: ``POST /_aliases`` (``add``/``remove`` actions, applied together),
  ``GET /_alias/{name}``; a search or count on an alias reaches its indices.
- ``POST /_bulk`` (NDJSON ``index`` actions). Documents are checked against the mapping
  (``dynamic: strict`` fields, ``dense_vector`` dims, zero vectors under cosine). Only a
  refresh makes them visible to ``_count`` and searches, as on a real index.
- ``POST /{index}/_msearch`` (NDJSON header/body pairs), one response item per search, with
  the parser's real refusals: ``match`` with ``slop``, ``match_phrase`` with ``fuzziness``,
  ``knn`` with ``k > num_candidates`` or ``num_candidates > 10000`` or other dims, ``rrf``
  with ``rank_window_size < size``; the ``rrf`` retriever needs ``license="trial"`` (or
  ``"enterprise"``), else 403 ``security_exception`` as on a Basic licence.
  Scoring is simple and deterministic, not BM25: ``match`` scores the number of distinct
  query terms a passage has (``fuzziness: AUTO`` lets a term match within 0/1/2 edits),
  ``match_phrase`` scores ``1 / (1 + gaps)`` for the terms in order within ``slop`` extra
  positions, ``knn`` is exact cosine with ``_score = (1 + cos) / 2``. Ties are returned in
  *descending* id order (``tie_order``), so a client that does not re-sort is caught.

Controls: credentials (``api_key`` or ``basic_auth``; a wrong one gets 401 whose reason
*echoes the presented Authorization header*, on purpose, so tests prove the adapter never
passes it on); ``inject(fault, times, after, path)`` for whole-request faults (429, 500,
503 or a dropped connection); ``reject_item(id, ...)`` for per-document bulk failures
(``times`` attempts, or always); ``fail_query(text, ...)`` for per-item msearch errors.
Every request is recorded (method, path, query, headers, parsed body, status).

The index, alias and bulk APIs are in ``tests/fakes/es_indices.py``, the search side in
``tests/fakes/es_search.py``.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from tests.fakes.es_indices import FakeIndex, ItemFault, es_reply
from tests.fakes.es_search import SearchApi
from tests.fakes.loopback import (
    FaultQueue,
    LoopbackServer,
    QuietHandler,
    RecordingService,
    answer_of,
    presented_auth,
)

Fault = Literal[429, 500, 503, "drop"]

_FAULT_ERRORS = {
    429: ("es_rejected_execution_exception", "rejected execution of coordinating operation"),
    500: ("internal_server_error", "injected fault"),
    503: ("cluster_block_exception", "blocked by: [SERVICE_UNAVAILABLE/1/state not recovered]"),
}


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any  # JSON: the parsed value; NDJSON: the list of parsed lines
    status: int | None  # None: the connection was dropped without an answer

    @property
    def searches(self) -> list[dict[str, Any]]:
        """The search bodies of an ``_msearch`` request (every second NDJSON line)."""
        return list(self.body[1::2]) if isinstance(self.body, list) else []


class FakeElasticsearch(RecordingService[RecordedRequest], SearchApi):
    """The server's state and controls; ``url`` is the base to give ``Elasticsearch``."""

    thread_name = "fake-es"

    def __init__(
        self,
        *,
        version: str = "8.19.3",
        license: str = "basic",
        api_key: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        tie_order: Literal["asc", "desc"] = "desc",
    ) -> None:
        super().__init__()
        self.version = version
        self.license = license
        self.api_key = api_key
        self.basic_auth = basic_auth
        self.tie_order = tie_order
        self.indices: dict[str, FakeIndex] = {}
        self.aliases: dict[str, set[str]] = {}
        self._faults = FaultQueue[Fault](str.endswith)
        self._item_faults: dict[str, ItemFault] = {}
        self._query_faults: dict[str, ItemFault] = {}
        self._lock = threading.RLock()
        self._listen(_Server, _Handler)

    # -- controls for tests -----------------------------------------------------------

    def inject(self, fault: Fault, times: int = 1, *, after: int = 0, path: str | None = "/_bulk") -> None:
        """The next ``times`` requests whose path ends with ``path`` (any if None), after ``after``
        served normally, answer ``fault`` (an HTTP status, or ``"drop"``: no answer at all)."""
        self._faults.add(fault, times, after, path)

    def reject_item(
        self,
        doc_id: str,
        status: int = 400,
        error_type: str = "mapper_parsing_exception",
        reason: str = "failed to parse field [text] of type [text]",
        *,
        times: int | None = None,
    ) -> None:
        """Bulk items for ``doc_id`` fail with this status and error (the first ``times``, or all)."""
        with self._lock:
            self._item_faults[doc_id] = ItemFault(status, error_type, reason, times)

    def fail_query(
        self,
        text: str,
        status: int = 400,
        error_type: str = "query_shard_exception",
        reason: str = "failed to create query",
        *,
        times: int | None = None,
    ) -> None:
        """msearch items whose lexical query text is ``text`` answer this error."""
        with self._lock:
            self._query_faults[text] = ItemFault(status, error_type, reason, times)

    def requests_to(self, suffix: str, method: str | None = None) -> list[RecordedRequest]:
        """Recorded requests whose path ends with ``suffix`` (e.g. ``"/_msearch"``)."""
        return [
            r for r in self.requests if r.path.endswith(suffix) and (method is None or r.method == method)
        ]

    # -- request handling (called from the handler threads) ---------------------------

    def _check_auth(self, headers: dict[str, str]) -> None:
        expected: str | None = None
        if self.api_key is not None:
            expected = f"ApiKey {self.api_key}"
        elif self.basic_auth is not None:
            expected = "Basic " + base64.b64encode(":".join(self.basic_auth).encode()).decode()
        presented = presented_auth(headers, expected)
        if presented is not None:
            raise es_reply(401, "security_exception", f"unable to authenticate with header [{presented}]")

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
        with self._lock:
            if not parts and method in ("GET", "HEAD"):
                return self._info()
            if parts == ["_aliases"] and method == "POST":
                return self._update_aliases(body)
            if len(parts) == 2 and parts[0] == "_alias" and method == "GET":
                return self._get_alias(parts[1])
            if parts and parts[-1] == "_bulk" and method in ("POST", "PUT"):
                return self._bulk(parts[0] if len(parts) == 2 else None, body)
            if parts and parts[-1] == "_msearch" and method in ("GET", "POST"):
                return self._msearch(parts[0] if len(parts) == 2 else None, body)
            if len(parts) == 1:
                return self._index_op(method, parts[0], query, body)
            if len(parts) == 2:
                return self._index_api(method, parts[0], parts[1], body)
        raise es_reply(400, "illegal_argument_exception", f"no handler for {method} {path}")

    def _info(self) -> Any:
        return {
            "name": "fake-node",
            "cluster_name": "irforge-fake",
            "cluster_uuid": "fake-uuid",
            "version": {
                "number": self.version,
                "build_flavor": "default",
                "lucene_version": "9.12.0",
                "minimum_wire_compatibility_version": "7.17.0",
                "minimum_index_compatibility_version": "7.0.0",
            },
            "tagline": "You Know, for Search",
        }


class _Server(LoopbackServer):
    service = "fake Elasticsearch"
    fake: FakeElasticsearch


def _check_media_types(headers: dict[str, str]) -> None:
    for name in ("accept", "content-type"):
        found = re.search(r"compatible-with=(\d+)", headers.get(name, ""))
        if found and found.group(1) not in ("7", "8"):
            raise es_reply(
                400,
                "media_type_header_exception",
                f"Invalid media-type value on headers [{name.title()}]",
                caused_by={
                    "type": "status_exception",
                    "reason": f"{name.title()} version must be either version 8 or 7, "
                    f"but found {found.group(1)}. {name.title()}={headers[name]}",
                },
            )


def _parse_body(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    text = raw.decode("utf-8")
    if "ndjson" in content_type:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


class _Handler(QuietHandler):
    server: _Server

    def _handle(self) -> None:
        fake = self.server.fake
        path, query = self.split_url()
        headers, raw = self.read_raw()
        compat = "compatible-with=" in headers.get("accept", "") + headers.get("content-type", "")
        body: Any = None

        fault = fake._faults.take(path)
        if fault == "drop":
            fake._record(RecordedRequest(self.command, path, query, headers, body, None))
            self.drop_connection()
            return

        def route() -> Any:
            nonlocal body
            body = _parse_body(raw, headers.get("content-type", ""))
            _check_media_types(headers)
            fake._check_auth(headers)
            if fault is not None:
                error_type, reason = _FAULT_ERRORS[fault]
                raise es_reply(fault, error_type, reason)
            return fake._route(self.command, path, query, body)

        reply = answer_of(
            route,
            (KeyError, TypeError, ValueError, AttributeError),
            lambda err: es_reply(400, "parsing_exception", f"bad request: {err!r}"),
        )
        fake._record(RecordedRequest(self.command, path, query, headers, body, reply.status))
        mime = "application/vnd.elasticsearch+json;compatible-with=8" if compat else "application/json"
        self.send_json(
            reply.status,
            reply.payload,
            {"X-Elastic-Product": "Elasticsearch"},
            content_type=mime,
            empty=reply.payload is None or self.command == "HEAD",
        )


@pytest.fixture
def es_server() -> Iterator[FakeElasticsearch]:
    """A running fake Elasticsearch 8 server; stopped after the test."""
    with FakeElasticsearch() as server:
        yield server
