"""Stage ``extract`` on the 15 gold pages and on small pages written for the cases real pages show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tasks.crossgenre import news, news_language
from tasks.crossgenre.news_ids import find_identifiers
from tasks.crossgenre.news_links import normalise_url, unwrap
from tasks.crossgenre.stages import extract, ingest
from tasks.crossgenre.stages.extract import ExtractConfig, PageRejected, read_page
from tests.crossgenre.conftest import NEWS, run_one

GOLD = {g["file"]: g for g in map(json.loads, (NEWS / "gold.jsonl").read_text(encoding="utf-8").splitlines())}
STUDY_KINDS = {"doi", "publisher", "pubmed", "redirect-wrapped"}
NEVER_KEPT = {"ad", "social", "other-external"}
# Outbound links that are not the study but are what the page cites in its text or metadata.
EXPECTED_NON_STUDY = {
    "p01": ["trial-registry"],  # "registered as NCT03166332", in the body
    "p04": ["journal-homepage"],  # the Journal row of the release's metadata table
    "p12": ["trial-registry"],  # the only study-related link of the page
    "p14": ["syndication-source"],  # the wire credit line
}
FILLER = {
    "en": "The researchers followed the patients for two years and compared the groups carefully. ",
    "de": "Die Forschenden begleiteten die Teilnehmenden zwei Jahre lang und verglichen die Gruppen sorgfältig. ",
    "fr": "Les chercheurs ont suivi les patients pendant deux ans et ont comparé les groupes avec soin. ",
    "es": "Los investigadores siguieron a los pacientes durante dos años y compararon los grupos con cuidado. ",
}


@pytest.fixture(scope="module")
def gold_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("gold")
    pages = run_one(root, ingest.SPEC, ingest.IngestConfig(pages=["news"]), {}, base_dir=NEWS.parent)
    outcome = run_one(root, extract.SPEC, ExtractConfig(), {"ingest": pages.artifact})
    assert outcome.artifact.excluded().num_rows == 0
    by_id = {r["page_id"]: Path(r["source"]).name for r in pages.artifact.read().to_pylist()}
    return {by_id[r["page_id"]]: r for r in outcome.artifact.read().to_pylist()}


@pytest.mark.parametrize("name", sorted(GOLD))
def test_gold_page_headline_site_and_study_link(gold_rows: dict[str, dict[str, Any]], name: str) -> None:
    gold, row = GOLD[name], gold_rows[name]
    assert row["headline"] == gold["headline"]
    assert row["site"] == gold["site_host"]
    urls = [link["url"] for link in row["links"]]
    primary = gold.get("primary_study_link_unwrapped") or gold["primary_study_link"]
    if primary:
        assert primary in urls
    for other in gold.get("other_links_to_same_study", []) + [
        c["link"] for c in gold.get("cited_records", [])
    ]:
        assert other in urls
    if gold.get("doi_in_text"):
        assert ("doi", gold["doi_in_text"]) in [(i["kind"], i["value"]) for i in row["identifiers"]]
    if gold["expected_outcome"] == "excluded:no_study_link":
        assert not [i for i in row["identifiers"]]


@pytest.mark.parametrize("name", sorted(GOLD))
def test_gold_page_keeps_no_ad_social_or_blogroll_link(
    gold_rows: dict[str, dict[str, Any]], name: str
) -> None:
    kinds = {link["href"]: link["kind"] for link in GOLD[name]["outbound_links"]}
    kept = [kinds.get(link["href"], "not an outbound link of the page") for link in gold_rows[name]["links"]]
    assert not [k for k in kept if k in NEVER_KEPT or k not in kinds.values()]
    assert [k for k in kept if k not in STUDY_KINDS] == EXPECTED_NON_STUDY.get(name[:3], [])


def test_gold_page_blocks_dates_and_language(gold_rows: dict[str, dict[str, Any]]) -> None:
    blocks = {n[:3]: {link["block"] for link in r["links"]} for n, r in gold_rows.items()}
    assert blocks["p06"] == {"reference"}  # the References (doc-endnotes) list
    assert blocks["p04"] == {"metadata"}  # the release's metadata table
    assert blocks["p14"] == {"main", "credit"}
    assert blocks["p13"] == {"metadata"}  # in the text and in JSON-LD isBasedOn
    dates = {n[:3]: r["published"] for n, r in gold_rows.items()}
    assert dates["p01"] == "2021-12-07" and dates["p13"] == "2022-11-28"
    assert dates["p04"] is None and dates["p05"] is None  # no date in their metadata
    assert {r["language"] for r in gold_rows.values()} == {"en"}
    p05 = [i for n, r in gold_rows.items() if n.startswith("p05") for i in r["identifiers"]]
    assert p05 == [{"kind": "doi", "value": "10.1016/j.burns.2019.11.006", "where": "reference"}]


# --- small pages for the cases real pages show ------------------------------------------


def _page(body: str, *, lang: str = "en", head: str = "", title: str = "A study page") -> str:
    """A page with site chrome (nav, social footer, an ad) around ``body``."""
    return (
        f'<!DOCTYPE html><html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title>{head}</head>'
        '<body><header><a class="logo" href="https://www.outlet.example/">Outlet</a>'
        '<nav><a href="https://www.outlet.example/health">Health</a> '
        '<a href="https://www.outlet.example/science">Science</a></nav></header>'
        f"{body}"
        '<div class="ad-slot"><a href="https://ads.example/click?id=1">Buy now</a></div>'
        '<footer><a href="https://twitter.com/outlet">Twitter</a> <a href="https://www.outlet.example/about">About</a>'
        "</footer></body></html>"
    )


def _read(html: str, url: str = "https://www.outlet.example/story", **config: Any) -> dict[str, Any]:
    return read_page(html, url, news.host_of(url), ExtractConfig(**config))


def _text(lang: str, times: int = 4) -> str:
    return "".join(f"<p>{FILLER[lang] * 2}</p>" for _ in range(times))


def test_german_originalpublikation_box_outside_the_article_is_a_reference() -> None:
    body = (
        "<main><article><h1>Kaffee am Morgen senkt das Risiko für Herzrhythmusstörungen nicht</h1>"
        f"{_text('de')}</article>"
        '<div class="kasten"><h3>Originalpublikation</h3><p>Müller A, et al. Kaffee und Herz. '
        "<i>Eur Heart J</i> 2024. "
        '<a href="https://academic.oup.com/eurheartj/article/45/1/12/7000001?utm_source=newsletter">Zur Studie</a>'
        "</p></div>"
        '<section class="verwandte"><h3>Mehr zum Thema</h3><a href="https://other-news.example/tee">Tee</a></section>'
        "</main>"
    )
    row = _read(
        _page(
            body,
            lang="de",
            title="Kaffee am Morgen senkt das Risiko für Herzrhythmusstörungen nicht | Outlet",
        )
    )
    assert row["headline"] == "Kaffee am Morgen senkt das Risiko für Herzrhythmusstörungen nicht"
    assert row["language"] == "de"
    assert [(link["url"], link["block"]) for link in row["links"]] == [
        ("https://academic.oup.com/eurheartj/article/45/1/12/7000001", "reference")
    ]
    assert row["links"][0]["anchor"] == "Zur Studie"


def test_google_and_nested_redirects_are_unwrapped_and_tracking_stripped() -> None:
    inner = "https%3A%2F%2Fwww.nejm.org%2Fdoi%2Ffull%2F10.1056%2FNEJMoa2000001%3Futm_campaign%3Dx"
    google = f"https://www.google.com/url?q={inner}&sa=D&ust=1"
    nested = "https://click.tracker.example/c?id=9&target=" + google.replace("%", "%25").replace(
        "?", "%3F"
    ).replace("&", "%26").replace("=", "%3D")
    body = (
        "<article><h1>Un medicamento nuevo redujo las hospitalizaciones en un ensayo grande</h1>"
        f'{_text("es")}<p>Fuente: <a href="{nested}">NEJM</a>.</p></article>'
    )
    row = _read(
        _page(body, lang="es", title="Un medicamento nuevo redujo las hospitalizaciones en un ensayo grande")
    )
    assert [(link["url"], link["block"]) for link in row["links"]] == [
        ("https://www.nejm.org/doi/full/10.1056/NEJMoa2000001", "reference")
    ]
    assert row["links"][0]["href"] == nested
    assert unwrap(google) == "https://www.nejm.org/doi/full/10.1056/NEJMoa2000001?utm_campaign=x"


def test_french_reference_line_footnotes_credit_and_metadata_citations() -> None:
    head = (
        '<meta name="citation_reference" content="citation_title=Essai; citation_doi=10.1136/bmj.n1111; '
        'citation_pmid=34000001">'
        '<script type="application/ld+json">{"@type":"NewsArticle","headline":"x",'
        '"citation":{"@type":"ScholarlyArticle","identifier":{"@type":"PropertyValue","propertyID":"PMID",'
        '"value":"34000002"},"url":"https://europepmc.org/article/MED/34000002"}}</script>'
    )
    body = (
        "<article><h1>Le sommeil des adolescents s’allonge quand les cours commencent plus tard</h1>"
        f"{_text('fr')}"
        "<figure><img src='x.jpg'><figcaption>Figure de l’étude. Crédit : "
        "<a href='https://www.thelancet.com/journals/lanchi/article/PIIS2352-4642(21)00001-1/fulltext'>"
        "The Lancet Child</a></figcaption></figure>"
        "<p>Référence : Dupont M, et al. PMID: 33999999, PMCID: PMC8000001.</p>"
        '<section role="doc-endnotes"><ol><li id="fn1"><a href="https://doi.org/10.1001/jama.2021.1">'
        "doi:10.1001/jama.2021.1</a></li></ol></section>"
        '<div class="commentaires"><a href="https://blog.example/">Mon blog</a></div></article>'
    )
    row = _read(_page(body, lang="fr", head=head, title="Le sommeil des adolescents"))
    assert {link["url"]: link["block"] for link in row["links"]} == {
        "https://www.thelancet.com/journals/lanchi/article/PIIS2352-4642(21)00001-1/fulltext": "credit",
        "https://doi.org/10.1001/jama.2021.1": "reference",
        "https://europepmc.org/article/MED/34000002": "metadata",
    }
    assert {(i["kind"], i["value"]): i["where"] for i in row["identifiers"]} == {
        ("pmid", "33999999"): "reference",
        ("pmcid", "PMC8000001"): "reference",
        ("doi", "10.1001/jama.2021.1"): "reference",
        ("doi", "10.1136/bmj.n1111"): "metadata",
        ("pmid", "34000001"): "metadata",
        ("pmid", "34000002"): "metadata",
    }


def test_links_are_deduplicated_on_the_normalised_url_and_internal_ones_dropped() -> None:
    body = (
        "<article><h1>Walking after meals lowered blood sugar peaks in a small crossover trial</h1>"
        f"{_text('en')}"
        '<p>It was <a href="https://doi.org/10.2337/dc21-0001#abstract">published</a> in Diabetes Care '
        '(<a href="https://DOI.org/10.2337/dc21-0001?utm_source=x">doi</a>); see our '
        '<a href="/explainers/glucose">explainer</a> and <a href="https://outlet.example/older">older story</a>, '
        'and the <a href="https://pubmed.ncbi.nlm.nih.gov/34000003/">PubMed record</a>.</p></article>'
    )
    row = _read(_page(body, title="Walking after meals lowered blood sugar peaks in a small crossover trial"))
    assert [link["url"] for link in row["links"]] == [
        "https://doi.org/10.2337/dc21-0001",
        "https://pubmed.ncbi.nlm.nih.gov/34000003/",
    ]


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\n", "PDF document"),
        (b'{"headline": "not a page", "body": "json"}', "JSON-like text"),
        (b"Just some plain text about a study, no markup at all.", "plain text"),
        (b"", "0 bytes"),
    ],
)
def test_what_is_not_html_is_excluded(data: bytes, detail: str) -> None:
    with pytest.raises(PageRejected) as caught:
        _read(ingest.decode(data, None))
    assert caught.value.reason == "not_html"
    assert detail in caught.value.detail


def test_a_page_without_text_or_without_headline_is_excluded() -> None:
    empty = _page("<article><h1>Scientists found something interesting about sleep</h1></article>")
    with pytest.raises(PageRejected, match="no_main_text: 0 characters of main text besides the headline"):
        _read(empty)
    with pytest.raises(PageRejected) as caught:
        _read(f"<html><body><div>{_text('en')}</div></body></html>")
    assert caught.value.reason == "no_headline"


def test_the_stage_excludes_with_reasons_and_keeps_accounting(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "report.html").write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\nbinary")
    (folder / "empty.html").write_text(_page("<article><h1>Nothing to read here today at all</h1></article>"))
    (folder / "fine.html").write_bytes((NEWS / sorted(GOLD)[6]).read_bytes())
    pages = run_one(
        tmp_path / "art", ingest.SPEC, ingest.IngestConfig(pages=["saved"]), {}, base_dir=tmp_path
    )
    outcome = run_one(tmp_path / "art", extract.SPEC, ExtractConfig(), {"ingest": pages.artifact})
    reasons = {r["url"].rsplit("/", 1)[-1]: r["reason"] for r in outcome.artifact.excluded().to_pylist()}
    assert reasons == {"report.html": "not_html", "empty.html": "no_main_text"}
    assert len(outcome.artifact.read()) == 1
    assert outcome.manifest["counts"]["units_in"] == 3


# --- headline, URL normalisation, identifiers --------------------------------------------


@pytest.mark.parametrize(
    ("head", "body", "expected"),
    [
        # no <h1>: the title without the site's name (trailing or leading)
        (
            '<meta property="og:site_name" content="Health Daily">',
            "",
            "Bright light therapy eased winter depression",
        ),
        ("", "", "Bright light therapy eased winter depression"),
        # a truncated og:title: the full <h1>; the logo's <h1> in the header is not the headline
        (
            '<meta property="og:title" content="Bright light therapy eased…">',
            '<header><h1 class="logo">Health Daily</h1></header>'
            "<article><h1>Bright light therapy eased winter depression in a trial</h1></article>",
            "Bright light therapy eased winter depression in a trial",
        ),
    ],
)
def test_headline_rules(head: str, body: str, expected: str) -> None:
    title = "Bright light therapy eased winter depression | Health Daily"
    if not head and not body:
        title = "Health Daily — Bright light therapy eased winter depression"
    doc = news.load_document(f"<html><head><title>{title}</title>{head}</head><body>{body}</body></html>")
    assert news.headline(doc, "www.healthdaily.example") == expected


def test_url_normal_form() -> None:
    assert (
        normalise_url("HTTP://Example.COM:80/a/(b);c?utm_medium=x&b=2&a=1#top")
        == "http://example.com/a/(b);c?a=1&b=2"
    )
    wrapped = "https://l.facebook.com/l.php?u=aHR0cHM6Ly9kb2kub3JnLzEwLjEwMDAveHl6"
    assert unwrap(wrapped) == "https://doi.org/10.1000/xyz"  # base64 in the parameter
    assert unwrap("https://web.archive.org/web/2020/https://www.nature.com/articles/x") == (
        "https://www.nature.com/articles/x"
    )
    assert unwrap("https://www.nature.com/articles/x?page=2") == "https://www.nature.com/articles/x?page=2"


def test_identifiers_written_in_text() -> None:
    text = (
        "See doi:10.1016/S2213-2600(19)30271-1. Also (DOI 10.1056/NEJMoa1911149), PMID: 31839957; "
        "PMC 6123456 and https://pubmed.ncbi.nlm.nih.gov/31826360/. Not 10.12/x or PMID:"
    )
    assert find_identifiers(text) == [
        ("doi", "10.1016/s2213-2600(19)30271-1"),
        ("doi", "10.1056/nejmoa1911149"),
        ("pmid", "31839957"),
        ("pmcid", "PMC6123456"),
        ("pmid", "31826360"),
    ]


FRENCH = (
    "Une équipe de chercheurs de l'université de Lyon a suivi pendant dix ans plus de deux mille "
    "adultes et montre que ceux qui marchent chaque jour au moins trente minutes ont moins souvent "
    "des maladies du cœur. Les résultats sont publiés cette semaine dans une revue de cardiologie, "
    "et les auteurs appellent à poursuivre le travail avec des groupes plus jeunes."
)


def test_language_is_what_the_page_declares_checked_against_its_text() -> None:
    assert news_language.language(["en"], FRENCH) == "fr"  # a template's lang="en" on a French article
    assert news_language.language([], FRENCH) == "fr"  # nothing declared: the text's
    assert news_language.language(["fr", "en"], FRENCH) == "fr"
    assert news_language.language(["de"], "Zu kurz.") == "de"  # too little text to overrule a declaration
    assert news_language.language([], "Zu kurz.") is None


def test_a_cjk_headline_agrees_with_its_title_and_a_rewritten_title_keeps_the_h1() -> None:
    cjk = "<html><head><title>港特首梁振英就住宅违建事件道歉 - BBC中文网 - 两岸三地</title></head>"
    cjk += "<body><h1>港特首梁振英就住宅违建事件道歉</h1><p>正文</p></body></html>"
    doc = news.load_document(cjk)
    assert news.headline(doc, "www.bbc.co.uk") == "港特首梁振英就住宅违建事件道歉"
    seo = '<html><head><meta property="og:title" content="Wie kann ich schnell abnehmen? Der Plan zum Ziel">'
    seo += "</head><body><h1>Wie kann ich schnell abnehmen? Die 8 besten Tipps</h1></body></html>"
    assert (
        news.headline(news.load_document(seo), "example.de")
        == "Wie kann ich schnell abnehmen? Die 8 besten Tipps"
    )


def test_a_doi_box_after_the_story_is_a_metadata_block() -> None:
    html = (
        "<html><head><title>Cold-sensitive bacteria</title></head><body><article><h1>Cold-sensitive bacteria</h1>"
        + "".join(
            f"<p>Golden staph adapts to place number {i}, scientists from Geneva report.</p>"
            for i in range(6)
        )
        + '</article><div class="details"><div class="well"><h4>DOI</h4><p>'
        '<a href="http://dx.doi.org/10.1371/journal.pgen.1008779">10.1371/journal.pgen.1008779</a></p></div></div>'
        "</body></html>"
    )
    row = read_page(
        html, "https://www.eurekalert.org/pub_releases/x.php", "www.eurekalert.org", ExtractConfig()
    )
    assert [(link["url"], link["block"]) for link in row["links"]] == [
        ("http://dx.doi.org/10.1371/journal.pgen.1008779", "metadata")
    ]


def test_a_logo_h1_a_value_meta_and_an_h1_that_is_part_of_the_title() -> None:
    logo = '<html><head><meta property="og:title" value="Why New Yorkers Received a Push Alert">'
    logo += '<meta property="og:site_name" value="The Atlantic"></head>'
    logo += "<body><h1>The Atlantic</h1><p>Text.</p></body></html>"
    assert (
        news.headline(news.load_document(logo), "www.theatlantic.com")
        == "Why New Yorkers Received a Push Alert"
    )
    part = "<html><head><title>COSMOS+ - Helmholtz-Gemeinschaft Deutscher Forschungszentren</title></head>"
    part += "<body><h1>COSMOS+</h1></body></html>"
    assert news.headline(news.load_document(part), "") == "COSMOS+"
