"""The E-utilities adapter against a fake NCBI speaking the real protocols on loopback
(``tests/fakes/eutils_server.py``): key handling, retries, the shared rate limit, the reply cache."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from irforge.errors import ConfigError
from tasks.common.pubmed.config import EutilsConfig, PubmedConfig, pubmed_source
from tasks.common.pubmed.eutils import EutilsPubmed
from tasks.common.pubmed.ncbi import RateLimiter
from tasks.common.pubmed.port import ArticleId, PubmedError
from tests.conftest import fake_key
from tests.fakes.eutils_server import FakeEutils

MEDLINE = Path(__file__).resolve().parents[2] / "data" / "crossgenre" / "medline"
FILES = [
    MEDLINE / "data-raw" / "baseline" / "pubmed20n1015.xml.gz",
    MEDLINE / "pubmed_sample" / "baseline" / "pubmed22n1114.xml.gz",
    MEDLINE / "testfiles" / "pubmed20n1016.xml.gz",
]
KEY = fake_key("ncbi-", "eutils tests")
PMIDS = ["34874420", "31839558", "31826360", "34867626", "34870689", "31839552"]


@pytest.fixture
def server() -> Iterator[FakeEutils]:
    with FakeEutils(FILES, api_key=KEY) as fake:
        yield fake


def _source(
    server: FakeEutils, cache: Path | None, waits: list[float] | None = None, **config: Any
) -> EutilsPubmed:
    settings: dict[str, Any] = {"requests_per_second": 200, "max_attempts": 4, **config}
    eutils = EutilsConfig(base_url=server.base_url, idconv_url=server.idconv_url, **settings)
    sleep = None if waits is None else waits.append
    return EutilsPubmed(eutils, cache, backoff_s=0.01, max_backoff_s=5.0, sleep=sleep)


def _efetch_url(server: FakeEutils) -> str:
    return server.base_url + "efetch.fcgi"


def test_the_key_is_sent_in_the_body_and_shown_nowhere(
    server: FakeEutils, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("NCBI_API_KEY", KEY)
    caplog.set_level(logging.DEBUG)  # httpx logs every request URL at INFO
    server.inject(429, path="efetch.fcgi")  # NCBI's 429 body echoes the key; so does this fake's
    source = _source(server, tmp_path / "c.sqlite", waits=[])
    assert source.requests_per_second == 200
    found = source.pmids_for(
        [ArticleId("doi", "10.1001/jama.2021.20178"), ArticleId("doi", "10.1056/NEJMoa1911149")]
    )
    assert list(found.values()) == ["34874420", "31826360"]
    sent = server.requests
    assert any(r.path.endswith("/esearch.fcgi") for r in sent) and any(
        r.path.endswith("/articles/") for r in sent
    )
    for request in sent:
        on_eutils = request.path.endswith(".fcgi")
        assert request.param("api_key") == (KEY if on_eutils else None)  # not to the PMC service
        assert request.param("tool") == "irforge"
        assert (request.method == "POST") == on_eutils  # in a form body, never in a URL
    assert KEY not in caplog.text and "HTTP 429" in caplog.text

    server.inject(503, times=10, path="efetch.fcgi")
    with pytest.raises(PubmedError) as failed:
        source.records(["31839957"])
    message = str(failed.value)
    assert message.startswith(f"{_efetch_url(server)} still failing after 4 attempts (HTTP 503)")
    assert KEY not in message and failed.value.__cause__ is None and failed.value.__context__ is None
    source.close()


def test_a_wrong_key_is_refused_at_once_and_masked_in_the_message(
    server: FakeEutils, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = fake_key("ncbi-", "not the key")
    monkeypatch.setenv("MY_NCBI_KEY", wrong)
    source = _source(server, tmp_path / "c.sqlite", api_key_env="MY_NCBI_KEY")
    with pytest.raises(PubmedError, match=r"refused the request \(HTTP 400: .*<api key>") as refused:
        source.records(["31839558"])
    assert wrong not in str(refused.value) and len(server.requests) == 1
    source.close()


def test_the_rate_follows_the_key(
    server: FakeEutils, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NCBI_API_KEY", raising=False)
    plain = EutilsConfig(base_url=server.base_url, idconv_url=server.idconv_url)
    assert EutilsPubmed(plain, None).requests_per_second == 3
    monkeypatch.setenv("NCBI_API_KEY", KEY)
    assert EutilsPubmed(plain, None).requests_per_second == 10


def test_429_waits_as_asked_and_5xx_timeouts_and_cuts_are_retried(server: FakeEutils, tmp_path: Path) -> None:
    waits: list[float] = []
    server.retry_after = "3"
    server.slow_s = 1.0
    for fault in (429, 500, 502, "drop", "slow"):
        server.inject(fault, path="efetch.fcgi")
    source = _source(server, tmp_path / "c.sqlite", waits, max_attempts=6, timeout_s=0.3)
    records = source.records(["31839558", "34874420"])
    assert sorted(records) == ["31839558", "34874420"]
    answers = [(r.status, r.late) for r in server.requests]
    assert answers == [(429, False), (500, False), (502, False), (None, False), (200, True), (200, False)]
    assert waits[0] == 3.0  # Retry-After honoured
    assert all(0 < w <= 0.01 * 2**i for i, w in enumerate(waits[1:], start=1))  # exponential backoff
    assert len(waits) == 5
    source.close()


def test_after_max_attempts_an_error_names_the_url_and_nothing_is_cached(
    server: FakeEutils, tmp_path: Path
) -> None:
    server.inject(500, times=3, path="efetch.fcgi")
    cache = tmp_path / "c.sqlite"
    source = _source(server, cache, [], max_attempts=3)
    with pytest.raises(
        PubmedError, match=r"^http://127\.0\.0\.1:\d+/entrez/eutils/efetch\.fcgi still failing"
    ):
        source.records(["31839558"])
    source.close()
    assert len(server.requests) == 3
    again = _source(server, cache, [])
    assert list(again.records(["31839558"])) == ["31839558"]  # asked again: the failure was not cached
    again.close()


def test_a_second_run_sends_nothing(server: FakeEutils, tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    ids = [
        ArticleId("doi", "10.1001/jama.2021.20178"),
        ArticleId("doi", "10.1056/NEJMoa1911149"),
        ArticleId("pmcid", "PMC8636330"),
        ArticleId("pii", "S0920996419305389"),
        ArticleId("pmid", "31839957"),
        ArticleId("doi", "10.1234/not.in.pubmed"),
    ]
    first = _source(server, cache)
    found, records = first.pmids_for(ids), first.records([*PMIDS, "99999999"])
    first.close()
    sent = len(server.requests)
    assert sent > 0 and sent == first.sent
    second = _source(server, cache)
    assert second.pmids_for(ids) == found
    assert second.records([*PMIDS, "99999999"]) == records
    assert len(server.requests) == sent and second.sent == 0
    second.close()


def test_a_failure_midway_loses_no_batch_already_answered(server: FakeEutils, tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    server.inject(500, times=10, after=1, path="efetch.fcgi")
    first = _source(server, cache, [], batch_size=2, max_attempts=2)
    with pytest.raises(PubmedError):
        first.records(PMIDS)
    first.close()
    server.clear()
    server.clear_faults()
    second = _source(server, cache, batch_size=2)
    assert sorted(second.records(PMIDS)) == sorted(PMIDS)
    asked = [r.param("id") for r in server.requests]
    assert asked == ["31826360,34867626", "34870689,31839552"]  # the first batch came from the cache
    second.close()


def test_invalid_pmids_are_absent_and_not_asked_again(server: FakeEutils, tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    source = _source(server, cache, batch_size=10)
    assert list(source.records(["abc", "99999999", "31839558", " "])) == ["31839558"]
    assert [r.param("id") for r in server.requests] == ["99999999,31839558"]  # "abc" is never sent
    assert source.records(["99999999"]) == {}
    assert len(server.requests) == 1
    source.close()


def test_the_factory_puts_the_reply_cache_in_the_cache_folder(server: FakeEutils, tmp_path: Path) -> None:
    config = PubmedConfig(
        engine="eutils", eutils=EutilsConfig(base_url=server.base_url, idconv_url=server.idconv_url)
    )
    source = pubmed_source(config, tmp_path, tmp_path / "cache")
    assert isinstance(source, EutilsPubmed)
    assert list(source.records(["31839558"])) == ["31839558"]
    source.close()
    assert (tmp_path / "cache" / "pubmed_replies.sqlite").is_file()
    with pytest.raises(ConfigError, match="max_attempts must be at least 1"):
        _source(server, None, max_attempts=0)


def test_concurrent_callers_share_one_rate_limit(server: FakeEutils, tmp_path: Path) -> None:
    pmids = sorted(server.articles, key=int)[:32]
    rate = 20
    source = _source(server, tmp_path / "c.sqlite", requests_per_second=rate, batch_size=1)
    threads = [threading.Thread(target=source.records, args=(pmids[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    source.close()
    arrivals = sorted(r.at for r in server.requests)
    assert len(arrivals) == 32
    busiest = max(sum(1 for t in arrivals if start <= t < start + 1.0) for start in arrivals)
    assert busiest <= rate + 1  # starts are 1/rate apart; +1 for the window's closed end


def test_the_limiter_spaces_starts_across_threads() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))

    limiter = RateLimiter(4, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        limiter.wait()
    assert slept == [0.25, 0.5]  # reserved slots at 100.0, 100.25, 100.5
    now[0] = 102.0  # idle for long: no burst is saved up beyond the next slot
    limiter.wait()
    limiter.wait()
    assert slept == [0.25, 0.5, 0.25]
    with pytest.raises(ValueError, match="must be positive"):
        RateLimiter(0)
