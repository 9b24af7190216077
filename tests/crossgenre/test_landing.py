"""Publisher landing pages → identifiers (``tasks/crossgenre/landing.py``, stage ``journal_links``).

The publisher is the loopback news fake (``tests/fakes/news_server.py``) speaking real HTTP,
taken for a journal domain through ``extra_domains``; its pages carry the meta tags real
publishers write (Highwire ``citation_*``, PRISM, Dublin Core). The chain test resolves a
landing page to a real record of ``data/crossgenre/medline/`` (PMID 30511960, DOI
10.1172/JCI120606, in ``pubmed_sample/updatefiles/pubmed20n1016.xml.gz``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from tasks.common.pubmed.config import PubmedConfig
from tasks.crossgenre import news
from tasks.crossgenre.landing import LandingId, landing_identifier
from tasks.crossgenre.stages.extract import SCHEMA as EXTRACT
from tasks.crossgenre.stages.journal_links import SPEC as LINKS
from tasks.crossgenre.stages.journal_links import JournalLinksConfig
from tasks.crossgenre.stages.resolve import SPEC as RESOLVE
from tasks.crossgenre.stages.resolve import ResolveConfig
from tasks.crossgenre.stages.single_study import SPEC as SINGLE
from tasks.crossgenre.stages.single_study import SingleStudyConfig
from tests.crossgenre.conftest import MEDLINE, artifact_of, run_one
from tests.crossgenre.test_journal_links import extract_row
from tests.fakes.news_server import NewsServer, news_server

__all__ = ["news_server"]  # the fixture, used by parameter name below

FETCH = {
    "requests_per_second": 500, "timeout_s": 2, "max_attempts": 1, "backoff_s": 0, "day": "2024-05-01",
    "allow_hosts": ["127.0.0.1"],  # the loopback publisher (internal addresses are refused by default)
}  # fmt: skip
PUBMED = PubmedConfig(engine="local", medline=["."])
NO_ID = "article path, no identifier in the URL"


def landing(*metas: str) -> str:
    """A publisher's article page with ``metas`` (``<meta …>`` tags) in its head."""
    return (
        "<!doctype html><html><head><title>An article</title>"
        '<meta property="og:title" content="An article">'
        f"{''.join(metas)}</head><body><h1>An article</h1><p>Abstract text.</p></body></html>"
    )


def publisher(server: NewsServer) -> dict[str, str]:
    """The fake publisher's article URLs by case (one landing page each)."""
    server.robots = "User-agent: *\nDisallow: /private/\n"
    pages = {
        "doi": landing(
            '<meta name="citation_doi" content="10.1056/NEJMoa1911149">',
            '<meta name="dc.identifier" content="doi:10.1056/NEJMoa1911149">',
        ),
        "pmid": landing(
            '<meta name="citation_doi" content="10.1016/j.burns.2019.11.006">',
            '<meta name="citation_pmid" content="31839957">',
        ),
        "dc": landing(
            '<meta name="DC.Identifier" scheme="issn" content="1664-1078">',
            '<meta name="DC.Identifier" scheme="doi" content="doi:10.3389/fpsyg.2021.745344">',
        ),
        "moved/full": landing('<meta name="prism.doi" content="doi:10.1001/jama.2021.20178">'),
        "nometa": landing('<meta name="description" content="A study of sleep.">'),
        "ambiguous": landing(
            '<meta name="citation_doi" content="10.1000/one">',
            '<meta name="citation_doi" content="10.1000/two">',
        ),
    }
    urls = {case: server.page(f"/article/2021/{case}", html) for case, html in pages.items()}
    server.redirects["/article/2021/moved"] = "/article/2021/moved/full"
    urls["moved"] = server.url + "/article/2021/moved"
    urls["gone"] = server.url + "/article/2021/gone"
    urls["private"] = server.page("/private/2021/article", pages["doi"])
    urls["pdf"] = server.page("/article/2021/paper.pdf", b"%PDF-1.7 not a web page", "application/pdf")
    urls["in_url"] = server.page("/doi/10.1093/jee/toz164", pages["doi"])
    return urls


def run_links(root: Path, rows: list[dict[str, Any]], **config: Any) -> Any:
    upstream = artifact_of(root, "extract", pa.Table.from_pylist(rows, schema=EXTRACT))
    cfg = JournalLinksConfig(extra_domains=["127.0.0.1"], **config)
    return run_one(root, LINKS, cfg, {"extract": upstream}, base_dir=root)


def case_rows(urls: dict[str, str]) -> list[dict[str, Any]]:
    rows = [extract_row(f"Study news {case}", [url]) for case, url in urls.items()]
    rows.append(extract_row("The same study on another page", [urls["doi"]]))
    return rows


def links_by_case(outcome: Any, urls: dict[str, str]) -> dict[str, dict[str, Any]]:
    by_url = {r["study_links"][0]["url"]: r["study_links"] for r in outcome.artifact.read().to_pylist()}
    return {case: by_url[url][0] for case, url in urls.items()}


def test_landing_meta_fills_the_identifier_and_a_bad_page_leaves_the_link_with_why(
    tmp_path: Path, news_server: NewsServer
) -> None:
    urls = publisher(news_server)
    outcome = run_links(tmp_path, case_rows(urls), landing_pages={"fetch": FETCH})
    assert outcome.artifact.read().num_rows == len(urls) + 1  # every page has its study link
    links = links_by_case(outcome, urls)
    found = {case: (link["id_kind"], link["id_value"]) for case, link in links.items()}
    assert found == {
        "doi": ("doi", "10.1056/nejmoa1911149"),
        "pmid": ("pmid", "31839957"),  # citation_pmid wins over citation_doi
        "dc": ("doi", "10.3389/fpsyg.2021.745344"),  # the ISSN identifier passed over
        "moved/full": ("doi", "10.1001/jama.2021.20178"),
        "moved": ("doi", "10.1001/jama.2021.20178"),  # the 301 followed
        "nometa": (None, None),
        "ambiguous": (None, None),
        "gone": (None, None),
        "private": (None, None),
        "pdf": (None, None),
        "in_url": ("doi", "10.1093/jee/toz164"),  # from its URL: never fetched
    }
    reasons = {case: link["reason"] for case, link in links.items()}
    where = "journal domain 127.0.0.1 (config extra_domains)"
    assert reasons["doi"] == f"{where}: {NO_ID}; landing page citation_doi"
    assert reasons["pmid"].endswith("; landing page citation_pmid")
    assert reasons["dc"].endswith("; landing page dc.identifier")
    assert reasons["moved"].endswith("; landing page prism.doi")
    assert reasons["gone"].endswith(f"; landing page not read (fetch_failed: HTTP 404 from {urls['gone']})")
    assert "; landing page not read (robots_disallowed: " in reasons["private"]
    assert reasons["pdf"].endswith("; landing page not HTML (application/pdf)")
    assert reasons["nometa"].endswith(
        "; landing page without identifier meta (citation_pmid, citation_doi, "
        "prism.doi, dc.identifier, citation_pmcid)"
    )
    assert reasons["ambiguous"].endswith(
        "; landing page ambiguous: citation_doi gives 2 different values (10.1000/one, 10.1000/two)"
    )
    assert reasons["in_url"] == f"{where}: DOI 10.1093/jee/toz164 in the URL"
    paths = news_server.paths()
    assert paths.count("/robots.txt") == 1
    assert paths.count("/article/2021/doi") == 1  # cited by two pages, fetched once
    assert "/doi/10.1093/jee/toz164" not in paths and "/private/2021/article" not in paths
    assert outcome.manifest["cost"]["http_requests"] == len(paths)


def test_a_rerun_reads_the_cache_and_a_new_fetch_day_fetches_again(
    tmp_path: Path, news_server: NewsServer
) -> None:
    urls = publisher(news_server)
    rows = case_rows(urls)
    first = run_links(tmp_path, rows, landing_pages={"fetch": FETCH})
    news_server.clear()
    # Another config (a new artifact, computed again) on the same cache and fetch day.
    again = run_links(tmp_path, rows, landing_pages={"fetch": FETCH}, exclude_domains=["unrelated.example"])
    assert again.state == "computed"
    assert news_server.paths() == []
    assert again.manifest["cost"]["http_requests"] == 0
    assert again.artifact.read().to_pylist() == first.artifact.read().to_pylist()
    # The fetch day is an input: the next day is a new artifact, its pages fetched anew.
    next_day = run_links(tmp_path, rows, landing_pages={"fetch": {**FETCH, "day": "2024-05-02"}})
    assert next_day.state == "computed"
    assert "/article/2021/doi" in news_server.paths()


def test_landing_pages_off_fetches_nothing(tmp_path: Path, news_server: NewsServer) -> None:
    urls = publisher(news_server)
    outcome = run_links(tmp_path, case_rows(urls))
    assert news_server.paths() == []
    link = links_by_case(outcome, urls)["doi"]
    assert (link["id_kind"], link["id_value"]) == (None, None)
    assert link["reason"] == f"journal domain 127.0.0.1 (config extra_domains): {NO_ID}"
    assert "http_requests" not in outcome.manifest["cost"]


def test_dublin_core_and_highwire_value_forms() -> None:
    def found(*metas: str) -> LandingId | str:
        doc = news.load_document(landing(*metas))
        assert doc is not None
        return landing_identifier(doc)

    assert found('<meta name="dc.identifier" content="info:doi/10.1016/S0140-6736(22)02324-8">') == LandingId(
        "doi", "10.1016/s0140-6736(22)02324-8", "dc.identifier"
    )
    assert found('<meta name="DC.Identifier" content="https://doi.org/10.7150/ijms.99958">') == LandingId(
        "doi", "10.7150/ijms.99958", "dc.identifier"
    )
    assert found('<meta name="citation_pmcid" content="PMC6355224">') == LandingId(
        "pmcid", "PMC6355224", "citation_pmcid"
    )
    assert found('<meta name="citation_pmid" content="PMID: 30511960">') == LandingId(
        "pmid", "30511960", "citation_pmid"
    )
    # Repeated equal values are one value; a non-identifier is passed over.
    assert found(
        '<meta name="citation_pmid" content="not a number">',
        '<meta name="citation_doi" content="10.1172/JCI120606">',
        '<meta name="citation_doi" content="10.1172/jci120606">',
    ) == LandingId("doi", "10.1172/jci120606", "citation_doi")


def test_a_landing_page_link_alone_resolves_to_its_medline_record(
    tmp_path: Path, news_server: NewsServer
) -> None:
    landing_url = news_server.page(
        "/content/129/2/thermogenesis-article",
        landing('<meta name="citation_doi" content="10.1172/JCI120606">'),
    )
    rows = [
        extract_row("Cold makes fat cells burn energy, study finds", [landing_url]),
        extract_row(
            "Mouse study links peroxisome lipids to heat production",
            [landing_url, "https://doi.org/10.1172/JCI120606"],
        ),
    ]

    def chain(root: Path, **config: Any) -> tuple[Any, Any]:
        links = run_links(root, rows, **config).artifact
        single = run_one(
            root, SINGLE, SingleStudyConfig(pubmed=PUBMED), {"journal_links": links}, base_dir=MEDLINE
        )
        resolve = run_one(
            root, RESOLVE, ResolveConfig(pubmed=PUBMED), {"single_study": single.artifact}, base_dir=MEDLINE
        )
        return single, resolve

    single, resolve = chain(tmp_path / "on", landing_pages={"fetch": FETCH})
    works = {r["headline"]: (r["works"], r["cited"]) for r in single.artifact.read().to_pylist()}
    assert works["Cold makes fat cells burn energy, study finds"] == (
        1,
        [{"id_kind": "pmid", "id_value": "30511960", "url": landing_url}],
    )
    # The landing page and the doi.org link are one work.
    assert works["Mouse study links peroxisome lipids to heat production"][0] == 1
    kept = resolve.artifact.read().to_pylist()
    assert [r["pmids"] for r in kept] == [["30511960"], ["30511960"]]
    [record] = resolve.artifact.read(table="records").to_pylist()
    assert record["pmid"] == "30511960"
    assert record["doi"] == "10.1172/JCI120606"  # as the MEDLINE file writes it
    assert record["title"].startswith("Peroxisome-derived lipids regulate adipose thermogenesis")

    # Without landing pages the first page has no PMID, and the second two works: undecided.
    single_off, resolve_off = chain(tmp_path / "off")
    [undecided] = single_off.artifact.excluded().to_pylist()
    assert undecided["url"] == rows[1]["url"]
    assert (undecided["reason"], undecided["works"]) == ("undecided", 2)
    [unresolved] = resolve_off.artifact.excluded().to_pylist()
    assert (unresolved["url"], unresolved["reason"]) == (rows[0]["url"], "unresolved_link")
