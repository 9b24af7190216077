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
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from tests.fakes.loopback import LoopbackServer, LoopbackService, QuietHandler

Fault = Literal[429, 500, 503, "drop"]

MAX_NUM_CANDIDATES = 10_000
_SEARCH_KEYS = {"query", "knn", "retriever", "size", "from", "_source", "track_total_hits"}
_MATCH_PARAMS = {
    "query",
    "fuzziness",
    "operator",
    "max_expansions",
    "prefix_length",
    "minimum_should_match",
    "analyzer",
}
_PHRASE_PARAMS = {"query", "slop", "analyzer"}
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


@dataclass
class _Fault:
    fault: Fault
    times: int
    after: int
    path: str | None


@dataclass
class _ItemFault:
    status: int
    error_type: str
    reason: str
    times: int | None  # None: every attempt


@dataclass
class FakeIndex:
    name: str
    settings: dict[str, Any]  # flat keys without the "index." prefix
    mappings: dict[str, Any]
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    visible: dict[str, dict[str, Any]] = field(default_factory=dict)  # as of the last refresh
    refreshes: int = 0
    force_merges: int = 0

    @property
    def properties(self) -> dict[str, Any]:
        props = self.mappings.get("properties", {})
        return props if isinstance(props, dict) else {}


class _Reply(Exception):
    def __init__(self, status: int, payload: Any = None) -> None:
        super().__init__(status)
        self.status = status
        self.payload = payload


def es_error(status: int, error_type: str, reason: str, **extra: Any) -> dict[str, Any]:
    """An error body in the server's shape."""
    cause = {"type": error_type, "reason": reason, **extra}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def _flatten_settings(body: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        else:
            out[prefix.removeprefix("index.")] = value

    walk("", body or {})
    return out


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens: a stand-in for the ``standard`` analyzer."""
    return re.findall(r"\w+", text.lower())


def _within(term: str, doc_terms: set[str], edits: int) -> bool:
    """Whether some term of the document is at most ``edits`` edits from ``term``."""
    if term in doc_terms:
        return True
    found = process.extractOne(term, doc_terms, scorer=Levenshtein.distance, score_cutoff=edits)
    return edits > 0 and found is not None


def _auto_edits(term: str) -> int:
    return 0 if len(term) <= 2 else 1 if len(term) <= 5 else 2


def _phrase_gaps(query: list[str], doc: list[str], slop: int) -> int | None:
    """The fewest extra positions between the query terms found in order in ``doc``, if ≤ slop."""
    best: int | None = None
    positions = [[i for i, t in enumerate(doc) if t == q] for q in query]

    def walk(k: int, last: int, gaps: int) -> None:
        nonlocal best
        if gaps > slop or (best is not None and gaps >= best):
            return
        if k == len(query):
            best = gaps
            return
        for p in positions[k]:
            if p > last:
                walk(k + 1, p, gaps + (p - last - 1 if k else 0))

    if query and all(positions):
        walk(0, -1, 0)
    return best


class FakeElasticsearch(LoopbackService):
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
        self.version = version
        self.license = license
        self.api_key = api_key
        self.basic_auth = basic_auth
        self.tie_order = tie_order
        self.indices: dict[str, FakeIndex] = {}
        self.aliases: dict[str, set[str]] = {}
        self._faults: list[_Fault] = []
        self._item_faults: dict[str, _ItemFault] = {}
        self._query_faults: dict[str, _ItemFault] = {}
        self._requests: list[RecordedRequest] = []
        self._lock = threading.RLock()
        self._listen(_Server, _Handler)

    # -- controls for tests -----------------------------------------------------------

    def inject(self, fault: Fault, times: int = 1, *, after: int = 0, path: str | None = "/_bulk") -> None:
        """The next ``times`` requests whose path ends with ``path`` (any if None), after ``after``
        served normally, answer ``fault`` (an HTTP status, or ``"drop"``: no answer at all)."""
        with self._lock:
            self._faults.append(_Fault(fault, times, after, path))

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
            self._item_faults[doc_id] = _ItemFault(status, error_type, reason, times)

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
            self._query_faults[text] = _ItemFault(status, error_type, reason, times)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_to(self, suffix: str, method: str | None = None) -> list[RecordedRequest]:
        """Recorded requests whose path ends with ``suffix`` (e.g. ``"/_msearch"``)."""
        return [
            r for r in self.requests if r.path.endswith(suffix) and (method is None or r.method == method)
        ]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    def resolve(self, name: str) -> list[FakeIndex]:
        with self._lock:
            if name in self.indices:
                return [self.indices[name]]
            return [self.indices[i] for i in sorted(self.aliases.get(name, ()))]

    # -- request handling (called from the handler threads) ---------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            for f in self._faults:
                if f.path is not None and not path.endswith(f.path):
                    continue
                if f.after > 0:
                    f.after -= 1
                    return None
                f.times -= 1
                if f.times <= 0:
                    self._faults.remove(f)
                return f.fault
            return None

    @staticmethod
    def _take(faults: dict[str, _ItemFault], key: str) -> _ItemFault | None:
        fault = faults.get(key)
        if fault is None:
            return None
        if fault.times is not None:
            fault.times -= 1
            if fault.times <= 0:
                del faults[key]
        return fault

    def _check_auth(self, headers: dict[str, str]) -> None:
        expected: str | None = None
        if self.api_key is not None:
            expected = f"ApiKey {self.api_key}"
        elif self.basic_auth is not None:
            expected = "Basic " + base64.b64encode(":".join(self.basic_auth).encode()).decode()
        if expected is None:
            return
        presented = headers.get("authorization", "")
        if presented != expected:
            raise _Reply(
                401,
                es_error(401, "security_exception", f"unable to authenticate with header [{presented}]"),
            )

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
        raise _Reply(400, es_error(400, "illegal_argument_exception", f"no handler for {method} {path}"))

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

    def _missing(self, name: str) -> _Reply:
        return _Reply(
            404,
            es_error(404, "index_not_found_exception", f"no such index [{name}]", index=name),
        )

    def _index_op(self, method: str, name: str, query: dict[str, list[str]], body: Any) -> Any:
        if method == "HEAD":
            if not self.resolve(name):
                raise _Reply(404)
            return None
        if method == "PUT":
            if name in self.indices or name in self.aliases:
                raise _Reply(
                    400,
                    es_error(400, "resource_already_exists_exception", f"index [{name}] already exists"),
                )
            body = body or {}
            settings = _flatten_settings(body.get("settings"))
            self.indices[name] = FakeIndex(name, settings, body.get("mappings") or {})
            return {"acknowledged": True, "shards_acknowledged": True, "index": name}
        if method == "DELETE":
            if name not in self.indices:
                if query.get("ignore_unavailable") == ["true"]:
                    return {"acknowledged": True}
                raise self._missing(name)
            del self.indices[name]
            self.aliases = {a: m - {name} for a, m in self.aliases.items() if m - {name}}
            return {"acknowledged": True}
        raise _Reply(405, es_error(405, "illegal_argument_exception", f"{method} /{name} not allowed"))

    def _index_api(self, method: str, name: str, api: str, body: Any) -> Any:
        targets = self.resolve(name)
        if not targets:
            raise self._missing(name)
        if api == "_settings" and method == "PUT":
            for index in targets:
                for key, value in _flatten_settings(body).items():
                    if value is None:
                        index.settings.pop(key, None)
                    else:
                        index.settings[key] = value
            return {"acknowledged": True}
        if api == "_settings" and method == "GET":
            return {i.name: {"settings": {"index": dict(i.settings)}} for i in targets}
        if api == "_mapping" and method == "GET":
            return {i.name: {"mappings": i.mappings} for i in targets}
        if api == "_refresh" and method in ("POST", "GET"):
            for index in targets:
                index.visible = dict(index.docs)
                index.refreshes += 1
            return {"_shards": {"total": len(targets), "successful": len(targets), "failed": 0}}
        if api == "_forcemerge" and method == "POST":
            for index in targets:
                index.force_merges += 1
            return {"_shards": {"total": len(targets), "successful": len(targets), "failed": 0}}
        if api == "_count" and method in ("GET", "POST"):
            return {"count": sum(len(i.visible) for i in targets), "_shards": {"total": len(targets)}}
        raise _Reply(400, es_error(400, "illegal_argument_exception", f"no handler for {method} {api}"))

    def _get_alias(self, alias: str) -> Any:
        members = sorted(self.aliases.get(alias, ()))
        if not members:
            raise _Reply(404, {"error": f"alias [{alias}] missing", "status": 404})
        return {m: {"aliases": {alias: {}}} for m in members}

    def _update_aliases(self, body: Any) -> Any:
        actions = (body or {}).get("actions") or []
        staged = {a: set(m) for a, m in self.aliases.items()}
        for action in actions:
            (verb, spec), *_ = action.items()
            index, alias = spec["index"], spec["alias"]
            if index not in self.indices:
                raise self._missing(index)
            if verb == "add":
                if alias in self.indices:
                    raise _Reply(
                        400,
                        es_error(
                            400,
                            "invalid_alias_name_exception",
                            f"Invalid alias name [{alias}]: an index or data stream exists with the same name",
                        ),
                    )
                staged.setdefault(alias, set()).add(index)
            elif verb == "remove":
                if index not in staged.get(alias, set()):
                    raise _Reply(
                        404, es_error(404, "aliases_not_found_exception", f"aliases [{alias}] missing")
                    )
                staged[alias].discard(index)
            else:
                raise _Reply(400, es_error(400, "illegal_argument_exception", f"unknown action [{verb}]"))
        self.aliases = {a: m for a, m in staged.items() if m}  # all actions apply together, or none
        return {"acknowledged": True, "errors": False}

    # -- bulk -------------------------------------------------------------------------

    def _bulk(self, default_index: str | None, lines: Any) -> Any:
        if not isinstance(lines, list) or len(lines) % 2:
            raise _Reply(400, es_error(400, "illegal_argument_exception", "malformed bulk body"))
        items = []
        for action, source in zip(lines[0::2], lines[1::2], strict=True):
            (op, meta), *_ = action.items()
            name = meta.get("_index", default_index)
            doc_id = str(meta.get("_id"))
            result = self._bulk_item(op, name, doc_id, source)
            items.append({op: {"_index": name, "_id": doc_id, **result}})
        errors = any(next(iter(i.values()))["status"] >= 300 for i in items)
        return {"took": 1, "errors": errors, "items": items}

    def _bulk_item(self, op: str, name: str | None, doc_id: str, source: Any) -> dict[str, Any]:
        def fail(status: int, error_type: str, reason: str, **extra: Any) -> dict[str, Any]:
            return {"status": status, "error": {"type": error_type, "reason": reason, **extra}}

        fault = self._take(self._item_faults, doc_id)
        if fault is not None:
            return fail(fault.status, fault.error_type, fault.reason)
        if op != "index":
            return fail(400, "illegal_argument_exception", f"the fake supports only index, not [{op}]")
        index = self.indices.get(name or "")
        if index is None:
            return fail(404, "index_not_found_exception", f"no such index [{name}]")
        props = index.properties
        if index.mappings.get("dynamic") == "strict":
            for key in source:
                if key not in props:
                    return fail(
                        400,
                        "strict_dynamic_mapping_exception",
                        f"[1:2] mapping set to strict, dynamic introduction of [{key}] within [_doc] is not allowed",
                    )
        for key, spec in props.items():
            if spec.get("type") != "dense_vector" or key not in source:
                continue
            vector = source[key]
            if len(vector) != spec.get("dims"):
                return fail(
                    400,
                    "document_parsing_exception",
                    f"[1:1] failed to parse field [{key}] of type [dense_vector] in document with id '{doc_id}'",
                    caused_by={
                        "type": "illegal_argument_exception",
                        "reason": f"The [dense_vector] field [{key}] in doc [{doc_id}] has a different number "
                        f"of dimensions [{len(vector)}] than defined in the mapping [{spec.get('dims')}]",
                    },
                )
            if spec.get("similarity") == "cosine" and not any(vector):
                return fail(
                    400,
                    "document_parsing_exception",
                    f"[1:1] failed to parse field [{key}] of type [dense_vector]",
                    caused_by={
                        "type": "illegal_argument_exception",
                        "reason": "The [cosine] similarity does not support vectors with zero magnitude.",
                    },
                )
        created = doc_id not in index.docs
        index.docs[doc_id] = dict(source)
        return {
            "status": 201 if created else 200,
            "result": "created" if created else "updated",
            "_version": 1,
        }

    # -- search -----------------------------------------------------------------------

    def _msearch(self, default_index: str | None, lines: Any) -> Any:
        if not isinstance(lines, list) or len(lines) % 2:
            raise _Reply(400, es_error(400, "illegal_argument_exception", "malformed msearch body"))
        responses = []
        for header, body in zip(lines[0::2], lines[1::2], strict=True):
            name = header.get("index", default_index)
            try:
                responses.append(self._search(name, body))
            except _Reply as reply:
                responses.append(reply.payload)
        return {"took": 1, "responses": responses}

    def _search(self, name: str | None, body: Any) -> dict[str, Any]:
        targets = self.resolve(name or "")
        if not targets:
            raise _Reply(404, es_error(404, "index_not_found_exception", f"no such index [{name}]"))
        unknown = set(body) - _SEARCH_KEYS
        if unknown:
            raise _Reply(
                400,
                es_error(
                    400, "parsing_exception", f"Unknown key for a START_OBJECT in [{sorted(unknown)[0]}]."
                ),
            )
        size = int(body.get("size", 10))
        if "retriever" in body:
            scored = self._retriever(targets, body["retriever"], size)
        elif "knn" in body:
            scored = self._knn(targets, body["knn"])
        else:
            scored = self._query(targets, body.get("query", {"match_all": {}}))
        order = sorted(scored.items(), key=lambda kv: kv[0], reverse=self.tie_order == "desc")
        order.sort(key=lambda kv: -kv[1][1])  # stable: ties keep the id order chosen above
        hits = []
        for doc_id, (index, score) in order[:size]:
            hit: dict[str, Any] = {"_index": index.name, "_id": doc_id, "_score": score}
            if body.get("_source", True) is not False:
                hit["_source"] = index.visible[doc_id]
            hits.append(hit)
        out: dict[str, Any] = {
            "took": 1,
            "timed_out": False,
            "_shards": {"total": len(targets), "successful": len(targets), "skipped": 0, "failed": 0},
            "hits": {"max_score": hits[0]["_score"] if hits else None, "hits": hits},
            "status": 200,
        }
        if body.get("track_total_hits", True) is not False:
            out["hits"]["total"] = {"value": len(scored), "relation": "eq"}
        return out

    def _query(self, targets: list[FakeIndex], query: Any) -> dict[str, tuple[FakeIndex, float]]:
        (kind, spec), *_ = query.items()
        if kind == "match_all":
            return {d: (i, 1.0) for i in targets for d in i.visible}
        if kind not in ("match", "match_phrase"):
            raise _Reply(400, es_error(400, "parsing_exception", f"unknown query [{kind}]"))
        (fieldname, params), *_ = spec.items()
        params = params if isinstance(params, dict) else {"query": params}
        allowed = _MATCH_PARAMS if kind == "match" else _PHRASE_PARAMS
        for key in params:
            if key not in allowed:
                raise _Reply(
                    400, es_error(400, "parsing_exception", f"[{kind}] query does not support [{key}]")
                )
        text = str(params["query"])
        fault = self._take(self._query_faults, text)
        if fault is not None:
            raise _Reply(fault.status, es_error(fault.status, fault.error_type, fault.reason))
        terms = tokens(text)
        out: dict[str, tuple[FakeIndex, float]] = {}
        for index in targets:
            for doc_id, source in index.visible.items():
                doc = tokens(str(source.get(fieldname, "")))
                if kind == "match_phrase":
                    gaps = _phrase_gaps(terms, doc, int(params.get("slop", 0)))
                    score = 0.0 if gaps is None else 1.0 / (1 + gaps)
                elif params.get("fuzziness") == "AUTO":
                    vocabulary = set(doc)
                    score = float(sum(_within(q, vocabulary, _auto_edits(q)) for q in set(terms)))
                else:
                    score = float(len(set(terms) & set(doc)))
                if score > 0:
                    out[doc_id] = (index, score)
        return out

    def _knn(self, targets: list[FakeIndex], knn: Any) -> dict[str, tuple[FakeIndex, float]]:
        k, candidates = int(knn["k"]), int(knn.get("num_candidates", min(int(1.5 * int(knn["k"])), 10_000)))
        if candidates < k:
            raise _Reply(
                400, es_error(400, "illegal_argument_exception", "[num_candidates] cannot be less than [k]")
            )
        if candidates > MAX_NUM_CANDIDATES:
            raise _Reply(
                400,
                es_error(
                    400,
                    "illegal_argument_exception",
                    f"[num_candidates] cannot exceed [{MAX_NUM_CANDIDATES}]",
                ),
            )
        query = [float(x) for x in knn["query_vector"]]
        scored: list[tuple[float, str, FakeIndex]] = []
        for index in targets:
            spec = index.properties.get(knn["field"], {})
            if spec.get("type") != "dense_vector":
                raise _Reply(
                    400,
                    es_error(
                        400,
                        "illegal_argument_exception",
                        "[knn] queries are only supported on [dense_vector] fields",
                    ),
                )
            if len(query) != spec.get("dims"):
                raise _Reply(
                    400,
                    es_error(
                        400,
                        "illegal_argument_exception",
                        f"the query vector has a different number of dimensions [{len(query)}] than the index "
                        f"vectors [{spec.get('dims')}]",
                    ),
                )
            qn = math.sqrt(sum(x * x for x in query))
            for doc_id, source in index.visible.items():
                vector = source[knn["field"]]
                dn = math.sqrt(sum(x * x for x in vector))
                cos = sum(a * b for a, b in zip(query, vector, strict=True)) / (qn * dn)
                scored.append(((1 + cos) / 2, doc_id, index))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return {doc_id: (index, score) for score, doc_id, index in scored[:k]}

    def _retriever(
        self, targets: list[FakeIndex], retriever: Any, size: int
    ) -> dict[str, tuple[FakeIndex, float]]:
        (kind, spec), *_ = retriever.items()
        if kind == "standard":
            return self._query(targets, spec["query"])
        if kind == "knn":
            return self._knn(targets, spec)
        if kind != "rrf":
            raise _Reply(400, es_error(400, "parsing_exception", f"unknown retriever [{kind}]"))
        if self.license not in ("trial", "enterprise"):
            raise _Reply(
                403,
                es_error(
                    403,
                    "security_exception",
                    "current license is non-compliant for [Reciprocal Rank Fusion (RRF)]",
                    **{"license.expired.feature": "Reciprocal Rank Fusion (RRF)"},
                ),
            )
        window = int(spec.get("rank_window_size", size))
        constant = int(spec.get("rank_constant", 60))
        if window < size:
            raise _Reply(
                400,
                es_error(
                    400,
                    "illegal_argument_exception",
                    f"[rank_window_size] must be greater than or equal to [size], was [{window}] and [{size}]",
                ),
            )
        if constant < 1:
            raise _Reply(400, es_error(400, "illegal_argument_exception", "[rank_constant] must be >= 1"))
        fused: dict[str, tuple[FakeIndex, float]] = {}
        for child in spec["retrievers"]:
            scored = self._retriever(targets, child, window)
            ranked = sorted(scored.items(), key=lambda kv: (-kv[1][1], kv[0]))[:window]
            for rank, (doc_id, (index, _)) in enumerate(ranked, start=1):
                previous = fused.get(doc_id, (index, 0.0))[1]
                fused[doc_id] = (index, previous + 1.0 / (constant + rank))
        return fused


class _Server(LoopbackServer):
    service = "fake Elasticsearch"
    fake: FakeElasticsearch


class _Handler(QuietHandler):
    server: _Server

    def _handle(self) -> None:
        fake = self.server.fake
        url = urllib.parse.urlsplit(self.path)
        path, query = url.path, urllib.parse.parse_qs(url.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        compat = "compatible-with=" in headers.get("accept", "") + headers.get("content-type", "")
        body: Any = None

        def record(status: int | None) -> None:
            fake._record(RecordedRequest(self.command, path, query, headers, body, status))

        fault = fake._take_fault(path)
        if fault == "drop":
            record(None)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            body = self._parse_body(raw, headers.get("content-type", ""))
            self._check_media_types(headers)
            fake._check_auth(headers)
            if fault is not None:
                error_type, reason = _FAULT_ERRORS[fault]
                raise _Reply(fault, es_error(fault, error_type, reason))
            status, payload = 200, fake._route(self.command, path, query, body)
        except _Reply as reply:
            status, payload = reply.status, reply.payload
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            status, payload = 400, es_error(400, "parsing_exception", f"bad request: {err!r}")
        record(status)
        data = b"" if payload is None or self.command == "HEAD" else json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("X-Elastic-Product", "Elasticsearch")
        if data:
            mime = "application/vnd.elasticsearch+json;compatible-with=8" if compat else "application/json"
            self.send_header("Content-Type", mime)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    @staticmethod
    def _check_media_types(headers: dict[str, str]) -> None:
        for name in ("accept", "content-type"):
            found = re.search(r"compatible-with=(\d+)", headers.get(name, ""))
            if found and found.group(1) not in ("7", "8"):
                raise _Reply(
                    400,
                    es_error(
                        400,
                        "media_type_header_exception",
                        f"Invalid media-type value on headers [{name.title()}]",
                        caused_by={
                            "type": "status_exception",
                            "reason": f"{name.title()} version must be either version 8 or 7, "
                            f"but found {found.group(1)}. {name.title()}={headers[name]}",
                        },
                    ),
                )

    @staticmethod
    def _parse_body(raw: bytes, content_type: str) -> Any:
        if not raw:
            return None
        text = raw.decode("utf-8")
        if "ndjson" in content_type:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return json.loads(text)


@pytest.fixture
def es_server() -> Iterator[FakeElasticsearch]:
    """A running fake Elasticsearch 8 server; stopped after the test."""
    with FakeElasticsearch() as server:
        yield server
