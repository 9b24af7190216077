"""The fake Elasticsearch's search side: ``_msearch`` and the query evaluation behind it
(``match``, ``match_phrase``, ``knn`` and the ``standard``/``knn``/``rrf`` retrievers).

Scoring is simple and deterministic, not BM25 (see ``tests/fakes/es_server.py``): ranking
quality is the conformance suite's job against a real server."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from tests.fakes.es_indices import FakeIndex, IndexApi, ItemFault, es_reply, take_item_fault
from tests.fakes.loopback import Reply

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

Scored = dict[str, tuple[FakeIndex, float]]  # doc id -> (its index, its score)


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


def _match_score(kind: str, params: dict[str, Any], terms: list[str], doc: list[str]) -> float:
    if kind == "match_phrase":
        gaps = _phrase_gaps(terms, doc, int(params.get("slop", 0)))
        return 0.0 if gaps is None else 1.0 / (1 + gaps)
    if params.get("fuzziness") == "AUTO":
        vocabulary = set(doc)
        return float(sum(_within(q, vocabulary, _auto_edits(q)) for q in set(terms)))
    return float(len(set(terms) & set(doc)))


def _check_knn(knn: Any) -> int:
    """``k``, once ``num_candidates`` is checked as the server checks it."""
    k, candidates = int(knn["k"]), int(knn.get("num_candidates", min(int(1.5 * int(knn["k"])), 10_000)))
    if candidates < k:
        raise es_reply(400, "illegal_argument_exception", "[num_candidates] cannot be less than [k]")
    if candidates > MAX_NUM_CANDIDATES:
        raise es_reply(
            400, "illegal_argument_exception", f"[num_candidates] cannot exceed [{MAX_NUM_CANDIDATES}]"
        )
    return k


def _knn(targets: list[FakeIndex], knn: Any) -> Scored:
    k = _check_knn(knn)
    query = [float(x) for x in knn["query_vector"]]
    scored: list[tuple[float, str, FakeIndex]] = []
    for index in targets:
        spec = index.properties.get(knn["field"], {})
        if spec.get("type") != "dense_vector":
            raise es_reply(
                400, "illegal_argument_exception", "[knn] queries are only supported on [dense_vector] fields"
            )
        if len(query) != spec.get("dims"):
            raise es_reply(
                400,
                "illegal_argument_exception",
                f"the query vector has a different number of dimensions [{len(query)}] than the index "
                f"vectors [{spec.get('dims')}]",
            )
        qn = math.sqrt(sum(x * x for x in query))
        for doc_id, source in index.visible.items():
            vector = source[knn["field"]]
            dn = math.sqrt(sum(x * x for x in vector))
            cos = sum(a * b for a, b in zip(query, vector, strict=True)) / (qn * dn)
            scored.append(((1 + cos) / 2, doc_id, index))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return {doc_id: (index, score) for score, doc_id, index in scored[:k]}


def _rrf_params(spec: Any, size: int) -> tuple[int, int]:
    """``rank_window_size`` and ``rank_constant``, checked as the server checks them."""
    window = int(spec.get("rank_window_size", size))
    constant = int(spec.get("rank_constant", 60))
    if window < size:
        raise es_reply(
            400,
            "illegal_argument_exception",
            f"[rank_window_size] must be greater than or equal to [size], was [{window}] and [{size}]",
        )
    if constant < 1:
        raise es_reply(400, "illegal_argument_exception", "[rank_constant] must be >= 1")
    return window, constant


class SearchApi(IndexApi):
    """``_msearch`` beside the index APIs, mixed into the fake server (which holds the state)."""

    license: str
    tie_order: Literal["asc", "desc"]
    _query_faults: dict[str, ItemFault]

    def _msearch(self, default_index: str | None, lines: Any) -> Any:
        if not isinstance(lines, list) or len(lines) % 2:
            raise es_reply(400, "illegal_argument_exception", "malformed msearch body")
        responses = []
        for header, body in zip(lines[0::2], lines[1::2], strict=True):
            name = header.get("index", default_index)
            try:
                responses.append(self._search(name, body))
            except Reply as reply:
                responses.append(reply.payload)
        return {"took": 1, "responses": responses}

    def _search(self, name: str | None, body: Any) -> dict[str, Any]:
        targets = self.resolve(name or "")
        if not targets:
            raise es_reply(404, "index_not_found_exception", f"no such index [{name}]")
        unknown = set(body) - _SEARCH_KEYS
        if unknown:
            raise es_reply(
                400, "parsing_exception", f"Unknown key for a START_OBJECT in [{sorted(unknown)[0]}]."
            )
        size = int(body.get("size", 10))
        if "retriever" in body:
            scored = self._retriever(targets, body["retriever"], size)
        elif "knn" in body:
            scored = _knn(targets, body["knn"])
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

    def _query(self, targets: list[FakeIndex], query: Any) -> Scored:
        (kind, spec), *_ = query.items()
        if kind == "match_all":
            return {d: (i, 1.0) for i in targets for d in i.visible}
        if kind not in ("match", "match_phrase"):
            raise es_reply(400, "parsing_exception", f"unknown query [{kind}]")
        (fieldname, params), *_ = spec.items()
        params = params if isinstance(params, dict) else {"query": params}
        allowed = _MATCH_PARAMS if kind == "match" else _PHRASE_PARAMS
        for key in params:
            if key not in allowed:
                raise es_reply(400, "parsing_exception", f"[{kind}] query does not support [{key}]")
        text = str(params["query"])
        fault = take_item_fault(self._query_faults, text)
        if fault is not None:
            raise es_reply(fault.status, fault.error_type, fault.reason)
        terms = tokens(text)
        out: Scored = {}
        for index in targets:
            for doc_id, source in index.visible.items():
                score = _match_score(kind, params, terms, tokens(str(source.get(fieldname, ""))))
                if score > 0:
                    out[doc_id] = (index, score)
        return out

    def _retriever(self, targets: list[FakeIndex], retriever: Any, size: int) -> Scored:
        (kind, spec), *_ = retriever.items()
        if kind == "standard":
            return self._query(targets, spec["query"])
        if kind == "knn":
            return _knn(targets, spec)
        if kind != "rrf":
            raise es_reply(400, "parsing_exception", f"unknown retriever [{kind}]")
        if self.license not in ("trial", "enterprise"):
            raise es_reply(
                403,
                "security_exception",
                "current license is non-compliant for [Reciprocal Rank Fusion (RRF)]",
                **{"license.expired.feature": "Reciprocal Rank Fusion (RRF)"},
            )
        window, constant = _rrf_params(spec, size)
        fused: Scored = {}
        for child in spec["retrievers"]:
            scored = self._retriever(targets, child, window)
            ranked = sorted(scored.items(), key=lambda kv: (-kv[1][1], kv[0]))[:window]
            for rank, (doc_id, (index, _)) in enumerate(ranked, start=1):
                previous = fused.get(doc_id, (index, 0.0))[1]
                fused[doc_id] = (index, previous + 1.0 / (constant + rank))
        return fused
