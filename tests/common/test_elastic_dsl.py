"""The Elasticsearch adapter: its request bodies, and its protocol with the official client.

The expected bodies below are written from the Elasticsearch documentation (match /
match_phrase / fuzziness, top-level knn, dense_vector index_options, the rrf retriever:
https://www.elastic.co/docs/reference/query-languages/querydsl), not from the adapter's output.
The end-to-end tests run the real ``elasticsearch`` 8.x client against ``tests/fakes/es_server.py``;
ranking quality against a real server is the conformance suite's (``ES_URL=... pytest -m service``).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from elasticsearch import Elasticsearch

from tasks.common.search.elastic.backend import ElasticsearchBackend
from tasks.common.search.elastic.dsl import (
    bm25_body,
    check_knn,
    fuzzy_body,
    index_body,
    knn_body,
    knn_retriever,
    load_settings,
    match_query,
    phrase_body,
    rrf_body,
    serving_settings,
    standard_retriever,
)
from tasks.common.search.elastic.options import ElasticsearchOptions
from tasks.common.search.port import PASSAGE_SCHEMA, SearchBackend, SearchError, SearchUnavailable
from tests.fakes.es_server import FakeElasticsearch, es_server

__all__ = ["es_server"]  # the fixture, used by parameter name below

DIMS = 4
FAST = ElasticsearchOptions(initial_backoff=0.001, max_backoff=0.01)
ENV_VARS = ("ES_URL", "ES_API_KEY", "ES_USERNAME", "ES_PASSWORD", "ES_CA_CERTS")

PASSAGES = [
    ("p1", "a1", "heart attack risk in older adults", [1.0, 0.0, 0.0, 0.0]),
    ("p2", "a1", "risk of heart failure after surgery", [0.9, 0.1, 0.0, 0.0]),
    ("p3", "a2", "chronic kidney disease progression", [0.0, 1.0, 0.0, 0.0]),
    ("p4", "a2", "kidney stones and heart", [0.0, 0.0, 1.0, 0.0]),
    ("p5", "a3", "attack of the heart in winter", [0.0, 0.0, 0.0, 1.0]),
]


def batch(rows: list[tuple[Any, Any, Any, Any]]) -> pa.RecordBatch:
    ids, articles, texts, vectors = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [], [], [])
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids, pa.string()),
            pa.array(articles, pa.string()),
            pa.array(texts, pa.string()),
            pa.array(vectors, pa.list_(pa.float32())),
        ],
        schema=PASSAGE_SCHEMA,
    )


def bulk_ids(server: FakeElasticsearch) -> list[list[str]]:
    """The document ids of each bulk request, in order."""
    return [[line["index"]["_id"] for line in r.body[0::2]] for r in server.requests_to("/_bulk")]


@pytest.fixture(autouse=True)
def _no_es_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


Make = Callable[..., ElasticsearchBackend]


@pytest.fixture
def make(es_server: FakeElasticsearch) -> Iterator[Make]:
    clients: list[Elasticsearch] = []

    def build(
        prefix: str = "passages", fingerprint: str | None = "f" * 20, **options: Any
    ) -> ElasticsearchBackend:
        client = Elasticsearch(es_server.url)
        clients.append(client)
        opts = ElasticsearchOptions(**{"initial_backoff": 0.001, "max_backoff": 0.01, **options})
        return ElasticsearchBackend(client, prefix, DIMS, fingerprint=fingerprint, options=opts)

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def loaded(make: Make) -> ElasticsearchBackend:
    backend = make()
    report = backend.add([batch(PASSAGES[:3]), batch(PASSAGES[3:])])
    assert (report.indexed, report.failed) == (5, [])
    backend.finish()
    return backend


# -- request bodies ---------------------------------------------------------------------------


def test_bm25_is_a_plain_match_without_slop() -> None:
    assert bm25_body("heart attack", 50) == {
        "query": {"match": {"text": {"query": "heart attack"}}},
        "size": 50,
        "_source": False,
        "track_total_hits": False,
    }
    assert "slop" not in json.dumps(bm25_body("heart attack", 50))


def test_phrase_is_match_phrase_with_slop_and_no_fuzziness() -> None:
    body = phrase_body("heart attack", 2, 50)
    assert body["query"] == {"match_phrase": {"text": {"query": "heart attack", "slop": 2}}}
    assert "fuzziness" not in json.dumps(body)
    assert (body["size"], body["_source"]) == (50, False)
    with pytest.raises(ValueError, match="slop"):
        phrase_body("heart attack", -1, 50)


def test_fuzzy_is_match_with_fuzziness_auto() -> None:
    body = fuzzy_body("heart atack", 50)
    assert body["query"] == {"match": {"text": {"query": "heart atack", "fuzziness": "AUTO"}}}
    assert "slop" not in json.dumps(body)
    assert fuzzy_body("x", 5, max_expansions=10)["query"] == {
        "match": {"text": {"query": "x", "fuzziness": "AUTO", "max_expansions": 10}}
    }


def test_knn_is_a_top_level_section_with_k_and_num_candidates() -> None:
    # CURE's "250 per shard, 50 returned"; size must follow k (it defaults to 10).
    assert knn_body(np.array([0.5, -0.5, 0.0, 1.0], dtype=np.float32), 50, 250) == {
        "knn": {"field": "vector", "query_vector": [0.5, -0.5, 0.0, 1.0], "k": 50, "num_candidates": 250},
        "size": 50,
        "_source": False,
    }


@pytest.mark.parametrize(
    ("k", "num_candidates", "message"),
    [(0, 10, "k must be >= 1"), (51, 50, "must be >= k"), (50, 10_001, "<= 10000")],
)
def test_knn_limits_are_checked(k: int, num_candidates: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_knn(k, num_candidates)
    with pytest.raises(ValueError, match=message):
        knn_body([1.0, 0.0], k, num_candidates)


def test_knn_limits_accept_the_boundaries() -> None:
    check_knn(1, 1)
    check_knn(10_000, 10_000)


def test_mapping_is_explicit() -> None:
    assert index_body(384) == {
        "settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"}},
        "mappings": {
            "dynamic": "strict",
            "_source": {"excludes": ["vector"]},
            "properties": {
                "passage_id": {"type": "keyword"},
                "article_id": {"type": "keyword"},
                "text": {"type": "text", "analyzer": "standard"},
                "vector": {
                    "type": "dense_vector",
                    "dims": 384,
                    "index": True,
                    "similarity": "cosine",
                    "index_options": {"type": "int8_hnsw"},
                },
            },
        },
    }


def test_mapping_options() -> None:
    body = index_body(384, "hnsw", 3, analyzer="english", vectors_in_source=True)
    assert body["settings"]["index"]["number_of_shards"] == 3
    assert body["mappings"]["properties"]["vector"]["index_options"] == {"type": "hnsw"}
    assert body["mappings"]["properties"]["text"] == {"type": "text", "analyzer": "english"}
    assert "_source" not in body["mappings"]
    with pytest.raises(ValueError, match="dims > 64"):
        index_body(32, "bbq_hnsw")
    with pytest.raises(ValueError, match="4096"):
        index_body(5000)


def test_load_and_serving_settings() -> None:
    assert load_settings() == {"index": {"number_of_replicas": 0, "refresh_interval": "-1"}}
    # null resets refresh_interval to the server default
    assert serving_settings(1, None) == {"index": {"number_of_replicas": 1, "refresh_interval": None}}


def test_rrf_body() -> None:
    retrievers = [standard_retriever(match_query("heart")), knn_retriever([1.0, 0.0], 100, 250)]
    assert rrf_body(retrievers, 50, rank_window_size=100) == {
        "retriever": {
            "rrf": {
                "retrievers": [
                    {"standard": {"query": {"match": {"text": {"query": "heart"}}}}},
                    {"knn": {"field": "vector", "query_vector": [1.0, 0.0], "k": 100, "num_candidates": 250}},
                ],
                "rank_constant": 60,
                "rank_window_size": 100,
            }
        },
        "size": 50,
        "_source": False,
    }
    assert rrf_body(retrievers, 50)["retriever"]["rrf"]["rank_window_size"] == 50
    with pytest.raises(ValueError, match="rank_window_size"):
        rrf_body(retrievers, 50, rank_window_size=49)
    with pytest.raises(ValueError, match="rank_constant"):
        rrf_body(retrievers, 50, rank_constant=0)


# -- configuration and credentials --------------------------------------------------------------


def test_from_env_without_url_names_the_variable() -> None:
    with pytest.raises(SearchUnavailable, match="ES_URL is not set"):
        ElasticsearchBackend.from_env(index_prefix="passages", dims=DIMS)


def test_from_env_with_no_server_says_it_did_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("ES_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(SearchUnavailable, match=rf"127\.0\.0\.1:{port} did not answer"):
        ElasticsearchBackend.from_env(index_prefix="passages", dims=DIMS)


def test_from_env_refuses_old_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeElasticsearch(version="8.11.4") as server:
        monkeypatch.setenv("ES_URL", server.url)
        with pytest.raises(SearchUnavailable, match=r"8\.11\.4.*needs 8\.12"):
            ElasticsearchBackend.from_env(index_prefix="passages", dims=DIMS)


SECRET = "s3cret-Pa55word-xyz"


def assert_no_secret_logged(caplog: pytest.LogCaptureFixture) -> None:
    """No log record carries the secret. The one exception is the client's opt-in DEBUG wire
    trace (``elastic_transport.node``), which prints response bodies verbatim: the fake server
    echoes the presented credential there, a real server does not. The trace does hide the
    request's own Authorization header, which is checked."""
    assert caplog.records
    for record in caplog.records:
        text = record.getMessage()
        if record.name == "elastic_transport.node":
            assert "Authorization: " not in text or "<hidden>" in text
            text = text.split("< {", 1)[0]  # the response body follows the headers
        assert SECRET not in text, record.name


@pytest.mark.parametrize("how", ["api_key", "basic", "url"])
def test_credentials_never_reach_messages_or_logs(
    how: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeElasticsearch(api_key="the-right-key") as server:
        host = server.url.removeprefix("http://")
        if how == "api_key":
            monkeypatch.setenv("ES_URL", server.url)
            monkeypatch.setenv("ES_API_KEY", SECRET)
        elif how == "basic":
            monkeypatch.setenv("ES_URL", server.url)
            monkeypatch.setenv("ES_USERNAME", "elastic")
            monkeypatch.setenv("ES_PASSWORD", SECRET)
        else:
            monkeypatch.setenv("ES_URL", f"http://elastic:{SECRET}@{host}")
        with pytest.raises(SearchUnavailable) as caught:
            ElasticsearchBackend.from_env(index_prefix="passages", dims=DIMS)
        # The server did see (and echo) the credential; the user must not.
        assert server.requests[0].status == 401
        message = str(caught.value)
        assert "401" in message and "ES_API_KEY" in message
        assert host in message
    assert SECRET not in message
    assert "elastic:" not in message
    assert_no_secret_logged(caplog)


def test_from_env_with_the_right_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeElasticsearch(api_key=SECRET) as server:
        monkeypatch.setenv("ES_URL", server.url)
        monkeypatch.setenv("ES_API_KEY", SECRET)
        backend = ElasticsearchBackend.from_env(
            index_prefix="passages", dims=DIMS, fingerprint="ABCDEF0123456789xyz", index_type="hnsw", shards=2
        )
        try:
            assert isinstance(backend, SearchBackend)
            assert backend.index == "passages-abcdef0123456789"
            assert backend.add([batch(PASSAGES)]).indexed == 5
            assert server.requests_to(f"/{backend.index_name}", "PUT")[0].body == index_body(DIMS, "hnsw", 2)
            backend.finish()
            assert backend.count() == 5
            assert backend.options()["server_version"] == "8.19.3"
            assert SECRET not in json.dumps(backend.options())
            # An 8.x client asks for compatible-with=8, which ES 8 and 9 both accept.
            assert all("compatible-with=8" in r.headers["accept"] for r in server.requests)
        finally:
            backend.close()
    assert_no_secret_logged(caplog)


def test_mixed_credentials_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ES_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ES_API_KEY", "k")
    monkeypatch.setenv("ES_USERNAME", "u")
    with pytest.raises(SearchUnavailable, match="not both"):
        ElasticsearchBackend.from_env(index_prefix="passages", dims=DIMS)
    monkeypatch.delenv("ES_API_KEY")
    with pytest.raises(SearchUnavailable, match="ES_PASSWORD"):
        ElasticsearchBackend.from_env(index_prefix="passages", dims=DIMS)


def test_bad_prefix_is_refused(es_server: FakeElasticsearch) -> None:
    with pytest.raises(ValueError, match="index prefix"):
        ElasticsearchBackend(Elasticsearch(es_server.url), "Passages", DIMS)


# -- loading ------------------------------------------------------------------------------------------


def test_load_creates_the_mapping_with_load_settings_and_restores_them(
    make: Make, es_server: FakeElasticsearch
) -> None:
    backend = make(fingerprint="0123456789abcdef0123")
    assert backend.index == "passages-0123456789abcdef"
    assert backend.count() == 0 and es_server.requests == []  # nothing is sent before a load

    report = backend.add([batch(PASSAGES)])
    assert (report.indexed, report.failed) == (5, [])
    created = es_server.requests_to("/passages-0123456789abcdef", "PUT")[0].body
    assert created == index_body(DIMS)
    index = es_server.indices[backend.index]
    assert index.settings["refresh_interval"] == "-1"
    assert index.settings["number_of_replicas"] == 0
    assert backend.count() == 0  # not refreshed yet: nothing searchable

    backend.finish()
    restore = es_server.requests_to("/_settings", "PUT")[-1].body
    assert restore == {"index": {"number_of_replicas": 0, "refresh_interval": None}}
    assert "refresh_interval" not in index.settings  # back to the server default
    assert index.refreshes == 1
    assert backend.count() == 5
    assert es_server.aliases == {"passages": {backend.index}}


def test_documents_are_keyed_by_passage_id_so_reloading_is_idempotent(
    loaded: ElasticsearchBackend, es_server: FakeElasticsearch
) -> None:
    sent = es_server.requests_to("/_bulk")[0].body
    assert sent[0] == {"index": {"_index": loaded.index, "_id": "p1"}}
    assert sent[1] == {
        "passage_id": "p1",
        "article_id": "a1",
        "text": PASSAGES[0][2],
        "vector": PASSAGES[0][3],
    }
    report = loaded.add([batch(PASSAGES)])
    assert report.indexed == 5
    # A second add puts the index back into load mode; finish restores and refreshes again.
    assert es_server.indices[loaded.index].settings["refresh_interval"] == "-1"
    loaded.finish()
    assert loaded.count() == 5


def test_finish_moves_the_alias_atomically(make: Make, es_server: FakeElasticsearch) -> None:
    first = make(fingerprint="a" * 16)
    first.add([batch(PASSAGES)])
    first.finish()
    second = make(fingerprint="b" * 16)
    second.add([batch(PASSAGES[:2])])
    es_server.clear()
    second.finish()
    alias_requests = es_server.requests_to("/_aliases", "POST")
    assert len(alias_requests) == 1
    assert alias_requests[0].body == {
        "actions": [
            {"remove": {"index": "passages-aaaaaaaaaaaaaaaa", "alias": "passages"}},
            {"add": {"index": "passages-bbbbbbbbbbbbbbbb", "alias": "passages"}},
        ]
    }
    assert es_server.aliases == {"passages": {"passages-bbbbbbbbbbbbbbbb"}}
    assert "passages-aaaaaaaaaaaaaaaa" in es_server.indices  # kept unless drop_previous

    third = make(fingerprint="c" * 16, drop_previous=True)
    third.add([batch(PASSAGES[:1])])
    third.finish()
    assert es_server.aliases == {"passages": {"passages-cccccccccccccccc"}}
    assert "passages-bbbbbbbbbbbbbbbb" not in es_server.indices


def test_same_fingerprint_rebuilds_the_index(make: Make, es_server: FakeElasticsearch) -> None:
    first = make()
    first.add([batch(PASSAGES)])
    first.finish()
    again = make()
    again.add([batch(PASSAGES[:2])])
    again.finish()
    assert again.count() == 2
    assert es_server.requests_to(f"/{again.index}", "DELETE")


def test_per_item_429_is_retried(make: Make, es_server: FakeElasticsearch) -> None:
    es_server.reject_item("p2", 429, "es_rejected_execution_exception", "queue full", times=2)
    backend = make()
    report = backend.add([batch(PASSAGES)])
    assert (report.indexed, report.failed) == (5, [])
    assert bulk_ids(es_server) == [["p1", "p2", "p3", "p4", "p5"], ["p2"], ["p2"]]


def test_whole_request_429_is_retried(make: Make, es_server: FakeElasticsearch) -> None:
    es_server.inject(429, times=2, path="/_bulk")
    backend = make()
    report = backend.add([batch(PASSAGES)])
    assert (report.indexed, report.failed) == (5, [])
    assert [r.status for r in es_server.requests_to("/_bulk")] == [429, 429, 200]


def test_429_beyond_the_retries_is_a_reported_failure(make: Make, es_server: FakeElasticsearch) -> None:
    es_server.reject_item("p2", 429, "es_rejected_execution_exception", "queue full")
    backend = make(bulk_retries=2)
    report = backend.add([batch(PASSAGES)])
    assert report.indexed == 4
    assert report.failed == [("p2", "429 es_rejected_execution_exception: queue full")]
    assert len(es_server.requests_to("/_bulk")) == 3


def test_rejected_documents_are_reported_with_ids_and_reasons(
    make: Make, es_server: FakeElasticsearch
) -> None:
    es_server.reject_item(
        "p3", 400, "mapper_parsing_exception", "failed to parse field [text] of type [text]"
    )
    backend = make(chunk_size=2)
    report = backend.add([batch(PASSAGES)])
    assert report.failed == [
        ("p3", "400 mapper_parsing_exception: failed to parse field [text] of type [text]")
    ]
    assert report.indexed + len(report.failed) == len(PASSAGES)
    assert bulk_ids(es_server) == [["p1", "p2"], ["p3", "p4"], ["p5"]]  # a 400 is not retried
    backend.finish()
    assert backend.count() == 4


def test_invalid_rows_are_reported_and_never_sent(make: Make, es_server: FakeElasticsearch) -> None:
    rows = [
        ("ok", "a", "fine", [1.0, 0.0, 0.0, 0.0]),
        ("short", "a", "three dims", [1.0, 0.0, 0.0]),
        ("nan", "a", "not finite", [1.0, float("nan"), 0.0, 0.0]),
        ("zero", "a", "no direction", [0.0, 0.0, 0.0, 0.0]),
        (None, "a", "no id", [1.0, 0.0, 0.0, 0.0]),
        ("noarticle", None, "x", [1.0, 0.0, 0.0, 0.0]),
        ("x" * 513, "a", "id too long", [1.0, 0.0, 0.0, 0.0]),
    ]
    backend = make()
    report = backend.add([batch(rows)])
    assert report.indexed == 1
    reasons = dict(report.failed)
    assert reasons["short"] == "vector has 3 dims, the index has 4"
    assert "NaN" in reasons["nan"]
    assert "zeros" in reasons["zero"]
    assert reasons["<row 5>"] == "passage_id is null or empty"
    assert reasons["noarticle"] == "article_id is null"
    assert "512 bytes" in reasons["x" * 513]
    assert report.indexed + len(report.failed) == len(rows)
    assert bulk_ids(es_server) == [["ok"]]


def test_server_side_vector_rejection_is_a_reported_failure(es_server: FakeElasticsearch) -> None:
    # An index built with other dims than this backend's (e.g. by another encoder).
    client = Elasticsearch(es_server.url)
    wide = ElasticsearchBackend(client, "passages", 5, fingerprint="d" * 16, options=FAST)
    wide.add([batch([])])
    # a backend that believes in 4 dims, searching and loading the 5-dim index
    narrow = ElasticsearchBackend(client, "passages", DIMS, options=FAST, _existing_index=wide.index_name)
    report = narrow.add([batch(PASSAGES[:1])])
    assert report.indexed == 0
    assert report.failed[0][0] == "p1"
    assert "different number of dimensions [4]" in report.failed[0][1]
    client.close()


def test_a_failing_bulk_request_is_a_search_error_not_failed_rows(
    make: Make, es_server: FakeElasticsearch
) -> None:
    es_server.inject(500, times=1, path="/_bulk", after=1)
    backend = make(chunk_size=2)
    with pytest.raises(
        SearchError, match=r"stopped after 2 indexed and 0 failed rows: 500 internal_server_error"
    ):
        backend.add([batch(PASSAGES)])


def test_a_dead_connection_is_a_search_error(make: Make, es_server: FakeElasticsearch) -> None:
    es_server.inject("drop", times=10, path="/_bulk")
    backend = make()
    with pytest.raises(SearchError, match="no answer"):
        backend.add([batch(PASSAGES)])


# -- searching -------------------------------------------------------------------------------------------


def test_each_batch_of_queries_is_one_msearch_with_the_documented_bodies(
    make: Make, es_server: FakeElasticsearch
) -> None:
    backend = make(search_batch=100)
    backend.add([batch(PASSAGES)])
    backend.finish()
    es_server.clear()
    texts = [f"heart {i}" if i % 10 else "" for i in range(250)]
    results = backend.bm25(texts, 3)
    requests = es_server.requests_to("/_msearch")
    sent = [t for t in texts if t]
    assert [len(r.searches) for r in requests] == [100, 100, 25]  # batches of sent queries
    assert [s for r in requests for s in r.searches] == [bm25_body(t, 3) for t in sent]
    assert all(r.path == f"/{backend.index}/_msearch" for r in requests)
    assert len(results) == 250
    assert all(results[i] == [] for i in range(0, 250, 10))  # empty texts: answered locally


def test_retrievers_send_their_bodies_and_rank_by_score_then_id(
    loaded: ElasticsearchBackend, es_server: FakeElasticsearch
) -> None:
    es_server.clear()
    # "heart" is in p1, p2, p4, p5: four hits of equal score, which the fake returns in
    # descending id order; the port wants ascending ids among ties.
    (bm25,) = loaded.bm25(["heart"], 10)
    assert [(h.rank, h.passage_id) for h in bm25] == [(1, "p1"), (2, "p2"), (3, "p4"), (4, "p5")]
    (phrase,) = loaded.phrase(["heart attack"], 2, 10)
    assert [h.passage_id for h in phrase] == ["p1"]
    (fuzzy,) = loaded.fuzzy(["kidny"], 10)
    assert [h.passage_id for h in fuzzy] == ["p3", "p4"]
    query = np.array([[1.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    (knn,) = loaded.knn(query, 2, 10)
    assert [h.passage_id for h in knn] == ["p1", "p2"]
    assert knn[0].score == pytest.approx(1.0)  # (1 + cos) / 2
    searches = [r.searches[0] for r in es_server.requests_to("/_msearch")]
    assert searches == [
        bm25_body("heart", 10),
        phrase_body("heart attack", 2, 10),
        fuzzy_body("kidny", 10),
        knn_body([1.0, 0.0, 0.0, 0.0], 2, 10),
    ]


def test_an_error_item_names_the_query_and_the_reason(
    loaded: ElasticsearchBackend, es_server: FakeElasticsearch
) -> None:
    es_server.fail_query(
        "bad query", 400, "query_shard_exception", "failed to create query: too many clauses"
    )
    with pytest.raises(SearchError, match=r"fuzzy query #2 .*query_shard_exception: failed to create query"):
        loaded.fuzzy(["heart", "", "bad query", "kidney"], 5)


def test_a_429_item_is_retried(loaded: ElasticsearchBackend, es_server: FakeElasticsearch) -> None:
    es_server.fail_query("kidney", 429, "es_rejected_execution_exception", "search queue full", times=1)
    es_server.clear()
    results = loaded.bm25(["heart", "kidney"], 5)
    assert [h.passage_id for h in results[1]] == ["p3", "p4"]
    requests = es_server.requests_to("/_msearch")
    assert [len(r.searches) for r in requests] == [2, 1]
    assert requests[1].searches == [bm25_body("kidney", 5)]


def test_a_429_msearch_request_is_retried_then_a_search_error(
    loaded: ElasticsearchBackend, es_server: FakeElasticsearch
) -> None:
    es_server.inject(429, times=1, path="/_msearch")
    assert [h.passage_id for h in loaded.bm25(["kidney"], 5)[0]] == ["p3", "p4"]
    assert [r.status for r in es_server.requests_to("/_msearch")] == [429, 200]
    es_server.inject(429, times=10, path="/_msearch")
    with pytest.raises(SearchError, match=r"bm25 search on passages-f+: 429 es_rejected_execution_exception"):
        loaded.bm25(["kidney"], 5)


def test_knn_arguments_are_checked_before_sending(
    loaded: ElasticsearchBackend, es_server: FakeElasticsearch
) -> None:
    es_server.clear()
    good = np.eye(DIMS, dtype=np.float32)[:1]
    with pytest.raises(ValueError, match="must be >= k"):
        loaded.knn(good, 50, 10)
    with pytest.raises(ValueError, match=r"shape \(n, 4\)"):
        loaded.knn(np.ones((1, 3), dtype=np.float32), 5, 10)
    with pytest.raises(ValueError, match="#1 is not finite or is all zeros"):
        loaded.knn(np.vstack([good, np.zeros((1, DIMS), dtype=np.float32)]), 5, 10)
    assert es_server.requests == []
    assert loaded.knn(np.zeros((0, DIMS), dtype=np.float32), 5, 10) == []


def test_server_side_rrf_on_a_basic_licence_points_to_client_side_fusion(
    loaded: ElasticsearchBackend,
) -> None:
    with pytest.raises(SearchError, match=r"(?s)non-compliant.*Enterprise or trial licence.*client-side RRF"):
        loaded.rrf_search(["heart"], np.eye(DIMS, dtype=np.float32)[:1], 3, num_candidates=10)


def test_server_side_rrf_on_a_trial_licence(
    loaded: ElasticsearchBackend, es_server: FakeElasticsearch
) -> None:
    es_server.license = "trial"
    es_server.clear()
    vectors = np.eye(DIMS, dtype=np.float32)[[1, 0]]
    hits = loaded.rrf_search(["kidney", ""], vectors, 3, num_candidates=10, rank_window_size=5)
    (request,) = es_server.requests_to("/_msearch")
    assert request.searches[0] == rrf_body(
        [standard_retriever(match_query("kidney")), knn_retriever([0.0, 1.0, 0.0, 0.0], 5, 10)],
        3,
        rank_window_size=5,
    )
    assert request.searches[1] == knn_body([1.0, 0.0, 0.0, 0.0], 3, 10)  # empty text: kNN alone
    # p3 is first in both lists: 2 / (60 + 1)
    assert hits[0][0].passage_id == "p3"
    assert hits[0][0].score == pytest.approx(2 / 61)
    assert [(h.passage_id, h.score) for h in hits[1][:2]] == [("p1", 1 / 61), ("p2", 1 / 62)]


def test_open_existing_by_alias_and_by_fingerprint(
    loaded: ElasticsearchBackend, es_server: FakeElasticsearch
) -> None:
    client = Elasticsearch(es_server.url)
    try:
        by_alias = ElasticsearchBackend.open_existing("passages", DIMS, client=client)
        assert by_alias.index == loaded.index
        assert by_alias.count() == 5
        assert [h.passage_id for h in by_alias.bm25(["kidney"], 5)[0]] == ["p3", "p4"]
        by_alias.close()
        assert client.info()  # a client passed in stays open
        by_fp = ElasticsearchBackend.open_existing("passages", DIMS, fingerprint="f" * 20, client=client)
        assert by_fp.index == loaded.index
        with pytest.raises(SearchError, match="other encoder"):
            ElasticsearchBackend.open_existing("passages", 384, client=client)
        with pytest.raises(SearchError, match="no index or alias 'nothing'"):
            ElasticsearchBackend.open_existing("nothing", DIMS, client=client)
        by_name = ElasticsearchBackend.open_existing(loaded.index_name, DIMS, client=client)
        assert (by_name.index, by_name.alias) == (loaded.index, "passages")
        assert by_name.count() == 5
        with pytest.raises(SearchError, match="no index 'passages-0000000000000000'"):
            ElasticsearchBackend.open_existing("passages", DIMS, fingerprint="0" * 16, client=client)
    finally:
        client.close()


def test_drop_deletes_the_index(loaded: ElasticsearchBackend, es_server: FakeElasticsearch) -> None:
    loaded.drop()
    assert loaded.index not in es_server.indices
    assert es_server.aliases == {}
    assert loaded.count() == 0
    loaded.drop()  # a missing index is fine
