"""Workers sharing one E-utilities reply cache send each request to NCBI once.

Real OS processes (``multiprocessing`` 'spawn') each open :class:`EutilsPubmed` over the same
cache file and the same fake NCBI (``tests/fakes/eutils_server.py``, here answering every
request a little late so that the workers' requests overlap); the claims that keep them from
asking twice are :meth:`irforge.sqlite_cache.SqliteCache.fill`.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from tasks.common.pubmed.config import EutilsConfig
from tasks.common.pubmed.eutils import EutilsPubmed
from tasks.common.pubmed.port import ArticleId, PubmedError
from tests import spawned
from tests.fakes.eutils_server import FakeEutils, RecordedRequest

MEDLINE = Path(__file__).resolve().parents[2] / "data" / "crossgenre" / "medline"
FILES = [
    MEDLINE / "data-raw" / "baseline" / "pubmed20n1015.xml.gz",
    MEDLINE / "pubmed_sample" / "baseline" / "pubmed22n1114.xml.gz",
    MEDLINE / "testfiles" / "pubmed20n1016.xml.gz",
]
CTX = spawned.CTX
WAIT_S = spawned.WAIT_S
NO_KEY_ENV = "IRFORGE_TEST_NO_NCBI_KEY"  # never set: no key is sent to the fake


class LateEutils(FakeEutils):
    """The fake, answering each request ``delay_s`` after it arrives (faults included)."""

    delay_s = 0.05

    def _record(self, request: RecordedRequest) -> int:
        index = super()._record(request)
        self.stopping.wait(self.delay_s)
        return index


@pytest.fixture
def server() -> Iterator[LateEutils]:
    with LateEutils(FILES) as fake:
        yield fake


def _source(base_url: str, idconv_url: str, cache: Path | None, **config: Any) -> EutilsPubmed:
    settings: dict[str, Any] = {"requests_per_second": 500, "batch_size": 2, "api_key_env": NO_KEY_ENV}
    eutils = EutilsConfig(base_url=base_url, idconv_url=idconv_url, **{**settings, **config})
    return EutilsPubmed(eutils, cache, backoff_s=0.01)


def _worker(
    name: str,
    urls: tuple[str, str],
    cache: str,
    pmids: list[str],
    ids: list[ArticleId],
    barrier: Barrier,
    out: Queue[Any],
) -> None:
    """One worker process: ``pmids`` in calls of 4, then ``ids``, over the shared cache."""
    source = _source(*urls, Path(cache))
    try:
        barrier.wait(WAIT_S)
        records = {}
        for start in range(0, len(pmids), 4):
            records.update(source.records(pmids[start : start + 4]))
        found = source.pmids_for(ids)
        out.put((name, records, found, source.sent))
    finally:
        source.close()


def _race(server: FakeEutils, cache: Path, pmids: list[str], ids: list[ArticleId]) -> dict[str, Any]:
    """Two spawned workers, each with ``pmids`` and ``ids`` in its own order; results by name."""
    urls = (server.base_url, server.idconv_url)
    args = {}
    for name, seed in (("a", 19), ("b", 91)):
        shuffled = random.Random(seed)
        args[name] = (urls, str(cache), shuffled.sample(pmids, len(pmids)), shuffled.sample(ids, len(ids)))
    return {name: list(rest) for name, rest in spawned.race(_worker, args).items()}


def _asked(requests: Sequence[RecordedRequest], path: str, param: str, sep: str) -> Counter[str]:
    """How often each value was asked of ``path``, over all requests (``param`` split on ``sep``)."""
    return Counter(
        value for r in requests if r.path.endswith(path) for value in (r.param(param) or "").split(sep)
    )


def _identifiers(server: FakeEutils) -> tuple[list[str], list[ArticleId], dict[ArticleId, str]]:
    """PMIDs (one absent) and DOIs / PMCIDs / PIIs to ask for, and the PMIDs the DOIs have."""
    articles = sorted(server.articles.values(), key=lambda a: int(a.pmid))
    in_pmc = [a for a in articles if a.pmcid and "." not in a.pmcid and a.doi][:6]
    not_in_pmc = [a for a in articles if a.doi and not a.pmcid][:6]
    with_pii = [a for a in articles if any(i.startswith("s0") for i in a.aid)][:3]
    expected = {ArticleId("doi", a.doi.upper()): a.pmid for a in in_pmc + not_in_pmc if a.doi}
    ids = [
        *expected,
        *(ArticleId("pmcid", a.pmcid) for a in in_pmc[:3] if a.pmcid),
        *(ArticleId("pii", next(i for i in a.aid if i.startswith("s0"))) for a in with_pii),
        ArticleId("doi", "10.1234/not.in.pubmed"),
    ]
    pmids = [*(a.pmid for a in articles[:720:60]), "99999999"]
    return pmids, ids, expected


def test_two_processes_send_each_pmid_and_identifier_once(server: LateEutils, tmp_path: Path) -> None:
    cache = tmp_path / "pubmed_replies.sqlite"
    pmids, ids, expected = _identifiers(server)
    results = _race(server, cache, pmids, ids)
    sent = server.requests
    (records_a, found_a, sent_a), (records_b, found_b, sent_b) = results["a"], results["b"]

    fetched = _asked(sent, "/efetch.fcgi", "id", ",")
    converted = _asked(sent, "/articles/", "ids", ",")
    searched = _asked(sent, "/esearch.fcgi", "term", " OR ")
    assert set(pmids) <= set(fetched) and converted and searched
    assert {v for c in (fetched, converted, searched) for v, n in c.items() if n > 1} == set()
    assert all(r.status == 200 for r in sent) and sent_a + sent_b == len(sent)

    assert records_a == records_b and sorted(records_a) == sorted(pmids[:-1])  # 99999999 is absent
    assert found_a == found_b and {i: found_a[i] for i in expected} == expected
    assert found_a[ArticleId("doi", "10.1234/not.in.pubmed")] is None

    rerun = _source(server.base_url, server.idconv_url, cache)
    assert rerun.records(pmids) == records_a and rerun.pmids_for(ids) == found_a
    assert rerun.sent == 0 and len(server.requests) == len(sent)
    rerun.close()


def test_a_failed_request_is_released_and_a_waiting_worker_asks_it_itself(
    server: LateEutils, tmp_path: Path
) -> None:
    cache = tmp_path / "pubmed_replies.sqlite"
    server.delay_s = 0.3
    server.inject(500, path="efetch.fcgi")
    first = _source(server.base_url, server.idconv_url, cache, max_attempts=1)
    second = _source(server.base_url, server.idconv_url, cache, max_attempts=1)
    failures: list[BaseException] = []

    def fail() -> None:
        try:
            first.records(["31839558", "34874420"])
        except PubmedError as err:
            failures.append(err)

    worker = threading.Thread(target=fail)
    worker.start()
    deadline = time.monotonic() + 10
    while not server.requests and time.monotonic() < deadline:  # the first worker's request is in flight
        time.sleep(0.01)
    records = second.records(["34874420", "31839558"])  # waits for the first worker's claims
    worker.join()
    first.close()
    second.close()
    assert len(failures) == 1 and sorted(records) == ["31839558", "34874420"]
    failed, sent = server.requests
    assert [(r.status, r.param("id")) for r in (failed, sent)] == [
        (500, "31839558,34874420"),
        (200, "34874420,31839558"),
    ]
    assert sent.at >= failed.at + server.delay_s  # asked only once the first worker had failed


def test_without_a_cache_file_each_answer_is_asked_once_per_source(server: LateEutils) -> None:
    server.delay_s = 0.0
    source = _source(server.base_url, server.idconv_url, None)
    doi = ArticleId("doi", "10.1001/jama.2021.20178")
    pmids = ["31839558", "34874420", "99999999"]
    assert sorted(source.records(pmids)) == ["31839558", "34874420"]
    assert source.pmids_for([doi]) == {doi: "34874420"}
    sent = len(server.requests)
    assert [r.param("id") for r in server.requests[:2]] == ["31839558,34874420", "99999999"]
    assert sorted(source.records(pmids)) == ["31839558", "34874420"]
    assert source.pmids_for([doi]) == {doi: "34874420"}
    assert len(server.requests) == sent == source.sent
    source.close()
