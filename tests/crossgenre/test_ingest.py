"""Stage ``ingest``: saved pages, JSONL and WARC files, RSS/Atom feeds on a loopback news site."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.errors import ConfigError
from tasks.common.pacing import HostPacer
from tasks.crossgenre.fetch import FetchConfig, PoliteFetcher
from tasks.crossgenre.stages.ingest import SPEC, IngestConfig
from tests.crossgenre.conftest import NEWS, run_one
from tests.fakes.news_server import Entry, NewsServer, news_server

__all__ = ["news_server"]  # the fixture, used by parameter name below

GOLD = [json.loads(line) for line in (NEWS / "gold.jsonl").read_text(encoding="utf-8").splitlines()]
P01, P07, P08, P13 = (NEWS / g["file"] for g in (GOLD[0], GOLD[6], GOLD[7], GOLD[12]))


def _ingest(root: Path, base_dir: Path, **config: Any) -> StageOutcome:
    return run_one(root, SPEC, validate_config(IngestConfig, config, "test"), {}, base_dir=base_dir)


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


def _excluded(outcome: StageOutcome) -> dict[str, dict[str, Any]]:
    return {row["item"]: row for row in outcome.artifact.excluded().to_pylist()}


# --- saved pages ------------------------------------------------------------------------


def test_demo_folder_gives_one_row_per_gold_page_with_its_outlet(tmp_path: Path) -> None:
    outcome = _ingest(tmp_path, NEWS.parent, pages=["news"])
    rows = {Path(r["source"]).name: r for r in outcome.artifact.read().to_pylist()}
    assert sorted(rows) == sorted(g["file"] for g in GOLD)  # gold.jsonl in the folder is no page
    assert outcome.artifact.excluded().num_rows == 0
    for gold in GOLD:
        row = rows[gold["file"]]
        assert row["site"] == gold["site_host"], gold["file"]
        assert row["sha256"] == gold["sha256"]
        assert row["page_id"] == _sha(row["url"])[:16]
        assert row["html"] == (NEWS / gold["file"]).read_text(encoding="utf-8")
        assert row["source"] == f"news/{gold['file']}" == row["item"]
        mtime = datetime.fromtimestamp((NEWS / gold["file"]).stat().st_mtime, UTC)
        assert row["fetched_at"] == mtime.strftime("%Y-%m-%dT%H:%M:%SZ")
    # og:url wins; the AMP page states its canonical; the syndicated copy's canonical is the wire's
    p01 = "https://www.dailypulse.example/health/pregnancy/2021/12/07/mediterranean-diet-mindfulness-small-babies"
    assert rows[GOLD[0]["file"]]["url"] == p01
    amp = "https://www.heartline.example/news/2019/12/13/cpap-sleep-apnoea-acute-coronary-syndrome-trial"
    assert rows[GOLD[2]["file"]]["url"] == amp
    assert rows[GOLD[13]["file"]]["url"] == f"file:news/{GOLD[13]['file']}"


def test_gzipped_pages_are_read_whatever_their_name_and_damaged_gzip_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "crawl"
    folder.mkdir()
    (folder / "a.html.gz").write_bytes(gzip.compress(P01.read_bytes(), mtime=0))
    (folder / "b.html").write_bytes(gzip.compress(P07.read_bytes(), mtime=0))  # gzip under a .html name
    (folder / "c.htm.gz").write_bytes(gzip.compress(P08.read_bytes(), mtime=0)[:200])  # cut short
    outcome = _ingest(tmp_path / "art", tmp_path, pages=["crawl"])
    kept = {r["item"]: r for r in outcome.artifact.read().to_pylist()}
    assert sorted(kept) == ["crawl/a.html.gz", "crawl/b.html"]
    assert kept["crawl/a.html.gz"]["html"] == P01.read_text(encoding="utf-8")
    assert kept["crawl/a.html.gz"]["sha256"] == _sha(P01.read_bytes())  # of the page, not the archive
    assert kept["crawl/b.html"]["html"] == P07.read_text(encoding="utf-8")
    damaged = _excluded(outcome)["crawl/c.htm.gz"]
    assert damaged["reason"] == "unreadable"
    assert damaged["detail"].startswith("crawl/c.htm.gz: gzip-compressed but damaged")


def test_same_bytes_or_same_url_is_a_duplicate_page(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    folder.mkdir()
    shutil.copy(P01, folder / "a.html")
    shutil.copy(P01, folder / "b.html")  # the same bytes again
    # Another saving of p01's page: other bytes, the same og:url.
    (folder / "c.html").write_text(P01.read_text(encoding="utf-8").replace("</body>", "<p>x</p></body>"))
    outcome = _ingest(tmp_path / "art", tmp_path, pages=["saved"])
    kept = outcome.artifact.read().to_pylist()
    assert [r["item"] for r in kept] == ["saved/a.html"]
    excluded = _excluded(outcome)
    assert {k: v["reason"] for k, v in excluded.items()} == {
        "saved/b.html": "duplicate_page",
        "saved/c.html": "duplicate_page",
    }
    assert excluded["saved/b.html"]["detail"] == f"same bytes as page {kept[0]['page_id']} (saved/a.html)"
    assert excluded["saved/c.html"]["detail"] == f"same URL as page {kept[0]['page_id']} (saved/a.html)"
    assert excluded["saved/c.html"]["url"] == kept[0]["url"]


def test_unreadable_files_are_excluded_with_the_reason(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    folder.mkdir()
    shutil.copy(P07, folder / "ok.html")
    (folder / "gone.html").symlink_to(tmp_path / "missing.html")
    (tmp_path / "outside.html").write_text("<html><body><h1>x</h1></body></html>")
    (folder / "out.html").symlink_to(tmp_path / "outside.html")
    outcome = _ingest(tmp_path / "art", tmp_path, pages=["saved"])
    excluded = _excluded(outcome)
    assert {k: v["reason"] for k, v in excluded.items()} == {
        "saved/gone.html": "unreadable",
        "saved/out.html": "unreadable",
    }
    assert excluded["saved/gone.html"]["detail"].startswith("dangling_link: link to")
    assert excluded["saved/out.html"]["detail"].startswith("outside_source_root: link to")
    assert [r["item"] for r in outcome.artifact.read().to_pylist()] == ["saved/ok.html"]


def test_config_needs_an_input_and_existing_paths(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give pages"):
        validate_config(IngestConfig, {}, "test")
    with pytest.raises(ConfigError, match=r"stages\.ingest\.pages\[0\]: no such folder"):
        _ingest(tmp_path, tmp_path, pages=["nowhere"])


# --- JSONL and WARC ---------------------------------------------------------------------


def test_jsonl_lines_become_pages_or_unreadable_items(tmp_path: Path) -> None:
    html = P07.read_text(encoding="utf-8")
    lines = [
        json.dumps({"url": "https://a.example/one", "html": html, "fetched_at": "2024-03-01T10:00:00+02:00"}),
        "",  # a blank line is no item
        "{not json",
        json.dumps({"url": "https://a.example/two"}),
        json.dumps({"url": "https://a.example/three", "html": html + " ", "fetched_at": "yesterday"}),
        json.dumps({"url": "https://b.example/four", "html": "<html><body>café</body></html>"}),
    ]
    (tmp_path / "crawl.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    outcome = _ingest(tmp_path / "art", tmp_path, pages=["crawl.jsonl"])
    kept = {r["item"]: r for r in outcome.artifact.read().to_pylist()}
    assert sorted(kept) == ["crawl.jsonl:1", "crawl.jsonl:6"]
    assert kept["crawl.jsonl:1"]["fetched_at"] == "2024-03-01T08:00:00Z"
    assert kept["crawl.jsonl:1"]["site"] == "a.example"
    assert kept["crawl.jsonl:1"]["sha256"] == _sha(html)
    assert kept["crawl.jsonl:6"]["html"] == "<html><body>café</body></html>"
    excluded = _excluded(outcome)
    assert {k: v["reason"] for k, v in excluded.items()} == dict.fromkeys(
        ["crawl.jsonl:3", "crawl.jsonl:4", "crawl.jsonl:5"], "unreadable"
    )
    assert "not a JSON object" in excluded["crawl.jsonl:3"]["detail"]
    assert "'url' and 'html'" in excluded["crawl.jsonl:4"]["detail"]
    assert "'yesterday' is not an ISO 8601 time" in excluded["crawl.jsonl:5"]["detail"]


def _warc(path: Path, gz: bool) -> None:
    with path.open("wb") as fh:
        writer = WARCWriter(fh, gzip=gz)
        writer.write_record(writer.create_warcinfo_record(path.name, {"software": "test"}))
        page = (
            "<html><head><title>Kaffee</title></head><body><h1>Kaffee</h1><p>Café für alle</p></body></html>"
        )
        records = [
            ("https://de.example/kaffee", 200, page.encode("iso-8859-1"), "text/html; charset=iso-8859-1"),
            ("https://de.example/fehlt", 404, b"<html><body>nicht da</body></html>", "text/html"),
        ]
        for url, status, body, content_type in records:
            headers = StatusAndHeaders(f"{status} X", [("Content-Type", content_type)], protocol="HTTP/1.1")
            record = writer.create_warc_record(
                url,
                "response",
                payload=io.BytesIO(body),
                http_headers=headers,
                warc_headers_dict={"WARC-Date": "2023-07-04T12:30:00Z"},
            )
            writer.write_record(record)
            writer.write_record(
                writer.create_warc_record(url, "request", payload=io.BytesIO(b"GET / HTTP/1.1\r\n\r\n"))
            )


@pytest.mark.parametrize("name", ["crawl.warc", "crawl.warc.gz"])
def test_warc_response_records_become_pages(tmp_path: Path, name: str) -> None:
    _warc(tmp_path / name, gz=name.endswith(".gz"))
    outcome = _ingest(tmp_path / "art", tmp_path, pages=[name])
    kept = outcome.artifact.read().to_pylist()
    assert [r["url"] for r in kept] == ["https://de.example/kaffee"]
    assert "Café für alle" in kept[0]["html"]  # decoded with the HTTP charset
    assert kept[0]["fetched_at"] == "2023-07-04T12:30:00Z"
    assert kept[0]["item"].startswith(f"{name}@")
    excluded = outcome.artifact.excluded().to_pylist()
    assert [(e["reason"], e["url"]) for e in excluded] == [("fetch_failed", "https://de.example/fehlt")]
    assert "HTTP 404" in excluded[0]["detail"]


def test_damaged_warc_files_keep_what_precedes_the_damage(tmp_path: Path) -> None:
    _warc(tmp_path / "ok.warc.gz", gz=True)
    _warc(tmp_path / "ok.warc", gz=False)
    compressed, plain = (tmp_path / "ok.warc.gz").read_bytes(), (tmp_path / "ok.warc").read_bytes()
    (tmp_path / "cut.warc.gz").write_bytes(compressed[: len(compressed) // 3])  # inside the page record
    (tmp_path / "cut.warc").write_bytes(plain[: len(plain) // 2])  # after the page record
    start = plain.index(b"WARC/1", plain.index(b"WARC-Type: response") - 200)
    (tmp_path / "short.warc").write_bytes(plain[: start + 450])  # the page record's content cut
    (tmp_path / "junk.warc").write_bytes(gzip.compress(b"this is not a WARC record\r\n\r\n"))
    names = ["cut.warc.gz", "cut.warc", "short.warc", "junk.warc"]
    outcome = _ingest(tmp_path / "art", tmp_path, pages=names)
    assert [(r["item"].split("@")[0], r["url"]) for r in outcome.artifact.read().to_pylist()] == [
        ("cut.warc", "https://de.example/kaffee")
    ]
    excluded = {e["source"]: e for e in outcome.artifact.excluded().to_pylist()}
    assert {s: e["reason"] for s, e in excluded.items()} == dict.fromkeys(names, "unreadable")
    assert start - 4 <= int(excluded["short.warc"]["item"].split("@")[1]) <= start  # at the record
    assert "record truncated:" in excluded["short.warc"]["detail"]
    for name in ("cut.warc.gz", "cut.warc"):
        assert excluded[name]["detail"].endswith(
            "after the last complete record are no WARC record (truncated or damaged)"
        )
        assert excluded[name]["detail"].startswith(excluded[name]["item"])
    assert "without WARC-Target-URI" in excluded["junk.warc"]["detail"]


# --- feeds ------------------------------------------------------------------------------


def _site(server: NewsServer) -> tuple[str, str, str]:
    server.robots = "User-agent: *\nDisallow: /private/\n"
    server.page("/news/a.html", P01.read_bytes())
    server.page("/news/b.html", P07.read_bytes())
    server.page("/private/c.html", P08.read_bytes())
    server.page("/news/d.html", P08.read_bytes())
    server.page("/news/e.html", P13.read_bytes())
    server.page("/news/slow.html", "<html><body><h1>late</h1></body></html>")
    server.slow["/news/slow.html"] = 5.0
    server.redirects["/go/d"] = server.url + "/news/d.html"
    rss = server.feed(
        "/feeds/health.rss",
        [
            Entry("A", "/news/a.html"),
            Entry("B", "/news/b.html"),
            Entry("C", "/private/c.html"),
            Entry("Missing", "/news/missing.html"),
            Entry("Slow", "/news/slow.html"),
            Entry("D", "/go/d"),
            Entry("FTP", "ftp://files.example/e.html"),
        ],
    )
    atom = server.feed(
        "/feeds/science.atom", [Entry("A again", "/news/a.html"), Entry("E", "/news/e.html")], "atom"
    )
    return rss, atom, server.url + "/feeds/gone.rss"


FETCH = {
    "requests_per_second": 500, "timeout_s": 0.5, "max_attempts": 1, "backoff_s": 0, "day": "2024-05-01",
    "allow_hosts": ["127.0.0.1"],  # the loopback news server (internal addresses are refused by default)
}  # fmt: skip


def test_feeds_fetch_their_entries_politely_and_a_rerun_sends_nothing(
    tmp_path: Path, news_server: NewsServer
) -> None:
    rss, atom, gone = _site(news_server)
    outcome = _ingest(tmp_path, tmp_path, feeds=[rss, atom, gone, rss], fetch=FETCH)  # rss named twice
    url = news_server.url
    kept = {r["item"]: r for r in outcome.artifact.read().to_pylist()}
    assert {k: v["url"] for k, v in kept.items()} == {
        f"{rss}#0": f"{url}/news/a.html",
        f"{rss}#1": f"{url}/news/b.html",
        f"{rss}#5": f"{url}/news/d.html",  # after the redirect
        f"{atom}#1": f"{url}/news/e.html",
    }
    assert kept[f"{rss}#0"]["sha256"] == _sha(P01.read_bytes())
    assert all(r["site"] == "127.0.0.1" and r["source"] in (rss, atom) for r in kept.values())
    assert all(r["page_id"] == _sha(r["url"])[:16] for r in kept.values())
    excluded = _excluded(outcome)
    assert {k: v["reason"] for k, v in excluded.items()} == {
        f"{rss}#2": "robots_disallowed",
        f"{rss}#3": "fetch_failed",
        f"{rss}#4": "fetch_failed",
        f"{rss}#6": "fetch_failed",
        f"{atom}#0": "duplicate_page",
        gone: "fetch_failed",
    }
    assert f"{url}/private/c.html is disallowed" in excluded[f"{rss}#2"]["detail"]
    assert excluded[f"{rss}#3"]["detail"] == f"HTTP 404 from {url}/news/missing.html"
    assert f"{url}/news/slow.html" in excluded[f"{rss}#4"]["detail"]
    assert "Timeout" in excluded[f"{rss}#4"]["detail"]
    assert excluded[f"{rss}#6"]["detail"] == "ftp://files.example/e.html: not an http(s) URL"
    assert excluded[gone]["url"] == gone
    paths = news_server.paths()
    assert paths.count("/robots.txt") == 1
    assert "/private/c.html" not in paths  # robots.txt is read before, not after
    assert all(r.user_agent == "irforge-crossgenre/1 (research crawler)" for r in news_server.requests)

    # The same fetch day again: everything but the timed-out page comes from the cache.
    news_server.clear()
    shutil.rmtree(outcome.artifact.path)
    again = _ingest(tmp_path, tmp_path, feeds=[rss, atom, gone, rss], fetch=FETCH)
    assert news_server.paths() == ["/news/slow.html"]
    assert again.artifact.read().to_pylist() == list(kept.values())  # fetched_at too: cached


def test_robots_txt_answering_5xx_disallows_the_host_and_404_allows_it(
    tmp_path: Path, news_server: NewsServer
) -> None:
    rss = news_server.feed("/feed.rss", [Entry("A", "/news/a.html")])
    news_server.page("/news/a.html", P01.read_bytes())
    news_server.robots, news_server.robots_status = "", 503
    down = _ingest(tmp_path / "a", tmp_path, feeds=[rss], fetch=FETCH)
    assert [e["reason"] for e in down.artifact.excluded().to_pylist()] == ["robots_disallowed"]
    news_server.robots = None  # 404: no rules
    up = _ingest(tmp_path / "b", tmp_path, feeds=[rss], fetch=FETCH)
    assert [r["url"] for r in up.artifact.read().to_pylist()] == [f"{news_server.url}/news/a.html"]


def test_429_and_5xx_are_retried_then_a_page_is_taken(tmp_path: Path, news_server: NewsServer) -> None:
    rss = news_server.feed("/feed.atom", [Entry("A", "/news/a.html")], "atom")
    news_server.page("/news/a.html", P01.read_bytes())
    news_server.inject(429, times=1, path="/news/a.html")
    news_server.inject(503, times=1, path="/news/a.html")
    fetch = {**FETCH, "max_attempts": 3}
    outcome = _ingest(tmp_path, tmp_path, feeds=[rss], fetch=fetch)
    assert len(outcome.artifact.read()) == 1
    assert news_server.paths().count("/news/a.html") == 3
    assert (
        outcome.manifest["cost"]["http_requests"] == 3.0
    )  # the page's three tries; the feed was read in source


def test_the_pacer_spaces_requests_per_host() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)

    pacer = HostPacer(clock=lambda: now[0], sleep=sleep)
    assert pacer.wait("a.example", 0.5) == 0.0
    assert pacer.wait("a.example", 0.5) == 0.5  # booked right after the first
    assert pacer.wait("b.example", 0.5) == 0.0  # another host is not held back
    now[0] = 100.2
    assert pacer.wait("a.example", 0.5) == pytest.approx(0.8)
    assert slept == [0.5, pytest.approx(0.8)]


def test_crawl_delay_slows_the_pace_and_every_request_is_paced(news_server: NewsServer) -> None:
    news_server.robots = "User-agent: *\nCrawl-delay: 3\n"
    news_server.page("/a.html", "<html><body>a</body></html>")
    news_server.page("/b.html", "<html><body>b</body></html>")
    waits: list[tuple[str, float]] = []

    class Recording(HostPacer):
        def wait(self, host: str, interval: float) -> float:
            waits.append((host, interval))
            return 0.0

    fetcher = PoliteFetcher(
        FetchConfig(requests_per_second=10, allow_hosts=["127.0.0.1"]), None, pacer=Recording()
    )
    try:
        fetcher.get(news_server.url + "/a.html")
        fetcher.get(news_server.url + "/b.html")
    finally:
        fetcher.close()
    assert waits == [("127.0.0.1", 0.1), ("127.0.0.1", 3.0), ("127.0.0.1", 3.0)]  # robots.txt, a, b


def test_a_feed_that_does_not_parse_is_unreadable_and_items_can_be_capped(
    tmp_path: Path, news_server: NewsServer
) -> None:
    news_server.page("/news/a.html", P01.read_bytes())
    news_server.page("/news/b.html", P07.read_bytes())
    rss = news_server.feed("/feed.rss", [Entry("A", "/news/a.html"), Entry("B", "/news/b.html")])
    not_feed = news_server.page("/index.html", b"<html><body><p>Our homepage</p></body></html>")
    fetch = {**FETCH, "max_items_per_feed": 1}
    outcome = _ingest(tmp_path, tmp_path, feeds=[rss, not_feed], fetch=fetch)
    assert [r["item"] for r in outcome.artifact.read().to_pylist()] == [f"{rss}#0"]
    excluded = outcome.artifact.excluded().to_pylist()
    assert [(e["item"], e["reason"]) for e in excluded] == [(not_feed, "unreadable")]
    assert excluded[0]["detail"].startswith(f"{not_feed}: not an RSS/Atom feed")
    assert "/news/b.html" not in news_server.paths()


def test_an_empty_jsonl_or_warc_file_is_an_excluded_empty_file_not_a_vanished_row(tmp_path: Path) -> None:
    (tmp_path / "none.jsonl").write_text("\n\n", encoding="utf-8")
    (tmp_path / "none.warc").write_bytes(b"")
    outcome = _ingest(tmp_path / "art", tmp_path, pages=["none.jsonl", "none.warc"])
    assert outcome.artifact.read().num_rows == 0
    assert {k: (r["reason"], r["detail"]) for k, r in _excluded(outcome).items()} == {
        "none.jsonl": ("empty_file", "none.jsonl: no content"),
        "none.warc": ("empty_file", "none.warc: no content"),
    }
