"""Stage ``journal_links``: URL → study reference, the domain list, and the 15 gold pages.

Until extract's output is used (test_single_study.py runs the real pages through it), the
pages are extract-shaped rows built from ``data/crossgenre/news/gold.jsonl``: every outbound
link the gold file lists (ads, share and social links included) and the DOI written in p05's
text. Expected values come from gold.jsonl or are written here by hand.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from irforge.errors import ConfigError
from tasks.crossgenre.domains import CURATED_FILE, METAPUB_DIR, DomainList, load_domains, metapub_hosts
from tasks.crossgenre.stages.extract import SCHEMA as EXTRACT
from tasks.crossgenre.stages.journal_links import SPEC, JournalLinksConfig, page_study_links
from tasks.crossgenre.study_links import (
    Skipped,
    StudyLink,
    classify_url,
    clean_doi,
    identifier_link,
    tracked_title,
)
from tests.crossgenre.conftest import NEWS, artifact_of, run_one


def gold() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (NEWS / "gold.jsonl").read_text(encoding="utf-8").splitlines()]


def page_id(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def extract_row(
    headline: str,
    links: list[str],
    site: str = "news.example",
    identifiers: list[dict[str, str]] | None = None,
    context: str = "The findings were published this week.",
) -> dict[str, Any]:
    """An extract-shaped row: ``links`` as main-text links (href = url), each in a paragraph
    that reads ``context``."""
    url = f"https://{site}/{page_id(headline)}"
    return {
        "page_id": page_id(url),
        "url": url,
        "site": site,
        "headline": headline,
        "published": "2021-12-08",
        "language": "en",
        "main_text": f"{headline}. The article text.",
        "links": [
            {"href": h, "url": h, "anchor": "study", "block": "main", "context": context} for h in links
        ],
        "identifiers": identifiers or [],
        "page_types": [],
        "headings": [],
    }


def gold_rows(unwrap: bool = True) -> list[dict[str, Any]]:
    """One extract-shaped row per gold page (``unwrap``: p13's link as extract unwraps it)."""
    rows = []
    for g in gold():
        hrefs = [link["href"] for link in g["outbound_links"]]
        row = extract_row(g["headline"], [], site=g["site_host"])
        row["url"] = f"https://{g['site_host']}/{g['file'].removesuffix('.html')}"
        row["page_id"] = page_id(row["url"])
        unwrapped = g.get("primary_study_link_unwrapped") if unwrap else None
        row["links"] = [
            {
                "href": h,
                "url": unwrapped if unwrapped and h == g["primary_study_link"] else h,
                "anchor": "",
                "block": "main",
                "context": "",
            }
            for h in hrefs
        ]
        if g.get("doi_in_text"):
            row["identifiers"] = [{"kind": "doi", "value": g["doi_in_text"], "where": "reference"}]
        rows.append(row)
    return rows


def run_links(root: Path, rows: list[dict[str, Any]], **config: Any) -> Any:
    upstream = artifact_of(root, "extract", pa.Table.from_pylist(rows, schema=EXTRACT))
    return run_one(root, SPEC, JournalLinksConfig(**config), {"extract": upstream}, base_dir=root)


def by_file(table: pa.Table) -> dict[str, dict[str, Any]]:
    return {r["url"].rsplit("/", 1)[1][:3]: r for r in table.to_pylist()}


@pytest.fixture(scope="module")
def domains() -> DomainList:
    return load_domains()


@pytest.fixture(scope="module")
def gold_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return run_links(tmp_path_factory.mktemp("links"), gold_rows())


def test_gold_pages_without_a_publication_link_are_excluded_with_the_domains_seen(gold_run: Any) -> None:
    excluded = by_file(gold_run.artifact.excluded())
    assert sorted(excluded) == ["p11", "p12"]  # gold: expected_outcome excluded:no_study_link
    assert {r["reason"] for r in excluded.values()} == {"no_study_link"}
    assert "www.reddit.com" in excluded["p11"]["detail"]
    assert "www.linkedin.com" in excluded["p11"]["detail"]
    # p12's only study-related link is the trial registry: seen, named, not a publication.
    assert "clinicaltrials.gov" in excluded["p12"]["detail"]
    assert "trial registry ClinicalTrials.gov" in excluded["p12"]["detail"]
    assert "www.agefriendly-charity.example" in excluded["p12"]["detail"]


def test_every_cited_gold_study_is_a_study_link_with_its_identifier(gold_run: Any) -> None:
    kept = by_file(gold_run.artifact.read())
    assert len(kept) == 13
    expected = {  # gold primary links: the identifier each carries
        "p01": ("doi", "doi", "10.1001/jama.2021.20178"),
        "p02": ("journal", "doi", "10.3389/fpsyg.2021.745344"),
        "p03": ("doi", "doi", "10.1016/s2213-2600(19)30271-1"),
        "p04": ("doi", "doi", "10.7150/ijms.99958"),
        "p05": ("text", "doi", "10.1016/j.burns.2019.11.006"),
        "p06": ("journal", "pii", "2786581"),
        "p07": ("pubmed", "pmid", "31839957"),
        "p08": ("journal", "doi", "10.1056/nejmoa1911149"),
        "p10": ("journal", "pii", "S0920996419305389"),
        "p13": ("journal", "pii", "S0140-6736(22)02324-8"),
        "p15": ("doi", "doi", "10.1111/jcpe.13003"),
    }
    for page, (kind, id_kind, value) in expected.items():
        links = kept[page]["study_links"]
        assert [(s["kind"], s["id_kind"], s["id_value"]) for s in links] == [(kind, id_kind, value)], page
        assert links[0]["reason"]
    assert [s["id_value"] for s in kept["p09"]["study_links"]] == [
        "10.2169/internalmedicine.3943-19",
        "10.29219/fnr.v63.3515",
    ]
    assert [s["url"] for s in kept["p14"]["study_links"]] == [
        "https://jamanetwork.com/journals/jamanetworkopen/fullarticle/2844426",
        "https://pubmed.ncbi.nlm.nih.gov/41604152/",
    ]


def test_reasons_name_the_evidence_and_the_list_it_came_from(gold_run: Any) -> None:
    kept = by_file(gold_run.artifact.read())
    assert kept["p01"]["study_links"][0]["reason"] == "doi.org link"
    assert kept["p08"]["study_links"][0]["reason"] == (
        "journal domain nejm.org (metapub nejm.yaml): DOI 10.1056/nejmoa1911149 in the URL"
    )
    assert "JAMA Network article id 2786581" in kept["p06"]["study_links"][0]["reason"]
    assert kept["p05"]["study_links"][0]["reason"] == "DOI written in the page (reference)"
    assert kept["p05"]["study_links"][0]["url"] == "https://doi.org/10.1016/j.burns.2019.11.006"


def test_a_journal_homepage_and_a_trial_registry_are_skipped_not_cited(gold_run: Any) -> None:
    kept = by_file(gold_run.artifact.read())
    skipped = {s["url"]: s["reason"] for s in kept["p04"]["skipped_links"]}
    assert list(skipped) == ["https://www.medsci.org/"]
    assert "homepage, not an article" in skipped["https://www.medsci.org/"]
    assert [s["url"] for s in kept["p01"]["skipped_links"]] == [
        "https://clinicaltrials.gov/study/NCT03166332"
    ]


def test_outbound_domains_are_the_other_hosts_in_document_order(gold_run: Any) -> None:
    kept = by_file(gold_run.artifact.read())
    assert kept["p07"]["outbound_domains"] == ["pubmed.ncbi.nlm.nih.gov", "www.probiotic-brand.example"]
    assert kept["p03"]["outbound_domains"] == ["dx.doi.org"]
    counts = gold_run.manifest["counts"]
    assert (counts["units_in"], counts["units_kept"], counts["units_excluded"]) == (15, 13, 2)


def test_a_link_still_wrapped_in_a_redirect_is_unwrapped(tmp_path: Path) -> None:
    kept = by_file(run_links(tmp_path, gold_rows(unwrap=False)).artifact.read())
    [link] = kept["p13"]["study_links"]
    assert (
        link["url"] == "https://www.thelancet.com/journals/lancet/article/PIIS0140-6736(22)02324-8/fulltext"
    )
    assert link["reason"].endswith("(unwrapped from a go.linkredirect.example link)")


URL_TABLE = """
http://dx.doi.org/10.1136/bmj.m1  doi doi 10.1136/bmj.m1
https://doi.org/10.1093/eurheartj/ehz123.  doi doi 10.1093/eurheartj/ehz123
https://www.ncbi.nlm.nih.gov/pubmed/31839957  pubmed pmid 31839957
https://www.ncbi.nlm.nih.gov/pubmed/?term=31839957%5Buid%5D  pubmed pmid 31839957
https://www.ncbi.nlm.nih.gov/pmc/articles/PMC6912345/  pmc pmcid PMC6912345
https://pmc.ncbi.nlm.nih.gov/articles/PMC6912345/pdf/main.pdf  pmc pmcid PMC6912345
https://europepmc.org/article/MED/31839957  europepmc pmid 31839957
https://europepmc.org/abstract/MED/31839957  europepmc pmid 31839957
https://europepmc.org/article/PMC/PMC6912345  europepmc pmcid PMC6912345
https://www.sciencedirect.com/science/article/abs/pii/S0920996419305389?via%3Dihub  journal pii S0920996419305389
https://www.cell.com/cell/fulltext/S0092-8674(20)30120-5  journal pii S0092-8674(20)30120-5
https://linkinghub.elsevier.com/retrieve/pii/S0140673622023248  journal pii S0140673622023248
https://jamanetwork.com/journals/jama/article-abstract/2786581  journal pii 2786581
https://jamanetwork.com/journals/jamapsychiatry/fullarticle/10.1001/jamapsychiatry.2019.3254  journal doi 10.1001/jamapsychiatry.2019.3254
https://jamanetwork.com/journals/jamapediatrics/fullarticle/2756119/  journal pii 2756119
http://www.sciencedirect.com/science?_ob=ArticleURL&_udi=B6T2X-4RGM3TN-1&_user=10&_rdoc=1  journal - -
https://www.thelancet.com/journals/lancet/article/PIIS0140-6736(19)32317-7/fulltext  journal pii S0140-6736(19)32317-7
https://www.nejm.org/doi/pdf/10.1056/NEJMoa1911149  journal doi 10.1056/nejmoa1911149
https://onlinelibrary.wiley.com/doi/abs/10.1002/cncr.32000  journal doi 10.1002/cncr.32000
https://acsjournals.onlinelibrary.wiley.com/doi/full/10.1002/cncr.32000  journal doi 10.1002/cncr.32000
https://link.springer.com/content/pdf/10.1007/s00125-020-05100-x.pdf  journal doi 10.1007/s00125-020-05100-x
https://journals.plos.org/plosone/article?id=10.1371/journal.pone.0230000  journal doi 10.1371/journal.pone.0230000
https://www.nature.com/articles/s41586-020-2012-7  journal doi 10.1038/s41586-020-2012-7
https://www.medrxiv.org/content/10.1101/2020.03.01.20029074v2.full.pdf  journal doi 10.1101/2020.03.01.20029074
https://academic.oup.com/eurheartj/article/41/3/407/5556728  journal - -
https://repository.example.edu/items/10.5555/abc-123  journal doi 10.5555/abc-123
"""
URLS = [line.split() for line in URL_TABLE.strip().splitlines()]
"""url, kind, id_kind, id_value ("-": none) of each study link."""


@pytest.mark.parametrize(("url", "kind", "id_kind", "value"), URLS)
def test_study_link_urls(domains: DomainList, url: str, kind: str, id_kind: str, value: str) -> None:
    found = classify_url(url, domains)
    assert isinstance(found, StudyLink)
    assert (found.kind, found.id_kind or "-", found.id_value or "-") == (kind, id_kind, value)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://www.nejm.org/", "homepage"),
        ("https://www.thelancet.com/journals/lancet/home", "section or listing page"),
        ("https://www.nejm.org/toc/nejm/382/1", "section or listing page"),
        ("https://pubmed.ncbi.nlm.nih.gov/?term=mediterranean+diet", "without a record identifier"),
        ("https://doi.org/", "without a record identifier"),
        ("https://www.nature.com/articles/d41586-020-00001-1", "a Nature news or comment piece"),
        (
            "http://news.sciencemag.org/sciencenow/2011/04/did-feathered-dinos-spread-lice.html",
            "news section",
        ),
        ("https://www.science.org/content/article/dinosaurs-smelled-well-2011", "news section"),
        ("https://www.bmj.com/content/369/bmj.m1/news", "news section"),
        ("https://www.isrctn.com/ISRCTN12345678", "trial registry ISRCTN"),
        ("https://apps.who.int/trialsearch/Trial2.aspx?TrialID=DRKS0001", "trial registry WHO ICTRP"),
        (
            "https://www.clinicaltrialsregister.eu/ctr-search/trial/2015-001-22/GB",
            "EU Clinical Trials Register",
        ),
    ],
)
def test_research_looking_links_that_are_not_publications_are_skipped(
    domains: DomainList, url: str, why: str
) -> None:
    found = classify_url(url, domains)
    assert isinstance(found, Skipped)
    assert why in found.reason


@pytest.mark.parametrize(
    "url",
    [
        "https://www.nytimes.com/2021/12/07/health/pregnancy-diet.html",
        "https://twitter.com/intent/tweet?url=https%3A%2F%2Fnews.example%2Fstory",
        "mailto:desk@news.example",
        "http://[broken/",
        "javascript:void(0)",
    ],
)
def test_ordinary_and_broken_links_are_not_study_links(domains: DomainList, url: str) -> None:
    assert classify_url(url, domains) is None


def test_dois_are_cut_at_view_suffixes_and_unbalanced_brackets() -> None:
    assert clean_doi("10.3389/fpsyg.2021.745344/full") == "10.3389/fpsyg.2021.745344"
    assert clean_doi("(see 10.1016/S2213-2600(19)30271-1)") == "10.1016/s2213-2600(19)30271-1"
    assert clean_doi("10.1093/eurheartj/ehz123/abstract") == "10.1093/eurheartj/ehz123"
    assert clean_doi("no doi here") is None
    assert identifier_link("pmid", "0031839957", "main") == StudyLink(
        "https://pubmed.ncbi.nlm.nih.gov/31839957/",
        "text",
        "pmid",
        "31839957",
        "PMID written in the page (main)",
    )
    assert identifier_link("pmcid", "6912345", "metadata").id_value == "PMC6912345"  # type: ignore[union-attr]
    assert identifier_link("pmid", "n/a", "main") is None


def test_metapub_files_give_template_hosts_and_host_values() -> None:
    assert metapub_hosts(METAPUB_DIR / "nejm.yaml") == ["nejm.org"]
    assert "ahajournals.org" in metapub_hosts(METAPUB_DIR / "aha.yaml")  # {host}.ahajournals.org
    assert "care.diabetesjournals.org" in metapub_hosts(METAPUB_DIR / "ada.yaml")  # host: values
    domains = load_domains()
    assert domains.journal("www.nejm.org").source == "metapub nejm.yaml"  # type: ignore[union-attr]
    assert domains.journal("ai.nejm.org").domain == "nejm.org"  # type: ignore[union-attr]
    assert domains.journal("jamanetwork.com").source == "curated journal_domains.yaml"  # type: ignore[union-attr]
    assert domains.journal("example.com") is None  # schema.yaml's examples are not journals
    assert domains.journal("validate.perfdrive.com") is None  # curated exclusion
    assert domains.journal("notnejm.org") is None


def test_config_extends_and_excludes_domains(tmp_path: Path) -> None:
    rows = [
        extract_row("Journal link on an unlisted host", ["https://journal.example/articles/2021/123"]),
        extract_row("Link to the NEJM", ["https://www.nejm.org/doi/full/10.1056/NEJMoa1911149"]),
    ]
    plain = run_links(tmp_path / "plain", rows)
    assert [r["headline"] for r in plain.artifact.read().to_pylist()] == ["Link to the NEJM"]
    changed = run_links(
        tmp_path / "changed", rows, extra_domains=["journal.example"], exclude_domains=["nejm.org"]
    )
    [kept] = changed.artifact.read().to_pylist()
    assert kept["study_links"][0]["reason"] == (
        "journal domain journal.example (config extra_domains): article path, no identifier in the URL"
    )
    [excluded] = changed.artifact.excluded().to_pylist()
    assert excluded["reason"] == "no_study_link"
    assert "www.nejm.org" in excluded["detail"]


def test_a_bad_domain_list_is_a_one_line_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "domains.yaml"
    bad.write_text(
        "source: x\nlicence: y\njournals:\n  - {domain: ok.example, colour: red}\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"domains\.yaml") as err:
        load_domains(METAPUB_DIR, bad)
    assert "\n" not in str(err.value)
    bad.write_text("journals: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"domains\.yaml: not a valid YAML"):
        load_domains(METAPUB_DIR, bad)
    with pytest.raises(ConfigError, match="not a domain name"):
        load_domains(METAPUB_DIR, CURATED_FILE, extra=["not a host"])


def test_pages_without_links_or_with_broken_ones_are_excluded_not_dropped(tmp_path: Path) -> None:
    rows = [
        extract_row("No links at all", []),
        extract_row("Only broken links", ["http://[broken/", "not a url", ""]),
        extract_row(
            "A DOI in the text only",
            [],
            identifiers=[{"kind": "doi", "value": "doi:10.1056/X", "where": "main"}],
        ),
    ]
    outcome = run_links(tmp_path, rows)
    assert [r["headline"] for r in outcome.artifact.read().to_pylist()] == ["A DOI in the text only"]
    excluded = outcome.artifact.excluded().to_pylist()
    assert [(r["reason"], r["detail"]) for r in excluded] == [("no_study_link", "outbound domains: none")] * 2


def test_a_press_wire_tracking_link_on_a_quoted_title_is_a_study_link_to_follow() -> None:
    url = "https://www.globenewswire.com/Tracker?data=hacJBUQopjzlEvbGcw"
    title = "“Capturing and Recreating Diverse Antibody Repertoires as Multivalent Drugs.”"
    found = tracked_title(url, title)
    assert found is not None and (found.kind, found.id_kind) == ("tracker", None)
    assert tracked_title(url, "GigaGen Inc.") is None  # the company's own link
    assert tracked_title("https://www.example.com/Tracker?data=x", title) is None
    row = extract_row("GigaGen announces a publication", [url])
    row["links"][0]["anchor"] = title
    [(link, where)], _skipped, _out = page_study_links(row, load_domains(METAPUB_DIR, CURATED_FILE, [], []))
    assert link.kind == "tracker" and where["anchor"] == title
