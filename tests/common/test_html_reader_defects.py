"""The HTML reader's defect classes of issue 18 §2 "Parse — HTML", one group of tests each.

Small pages mimic the markup of real publisher pages (Nature/Springer, PeerJ, eLife,
Hindawi, PMC, F1000); the shared sample pages show the same where they have it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.common.text.document import Block, ParsedArticle
from tasks.common.text.html import parse_html, read_html_metadata
from tests.conftest import SAMPLES

HTML_DIR = SAMPLES / "html"
needs_samples = pytest.mark.skipif(
    not (HTML_DIR / "SOURCES.json").is_file(), reason=f"shared sample pages not found under {HTML_DIR}"
)

TITLE = "Sarcopenia predicts mortality in older adults admitted to hospital"
_HEAD = (
    f"<html lang='en'><head><meta name='citation_title' content='{TITLE}'>"
    "<meta name='citation_doi' content='10.1000/test.1'></head><body>"
)
_PROSE = (
    "The patients who were treated with the new drug in this study were followed for two years, and most "
    "of them reported that their symptoms had improved after the first month of the treatment, which is "
    "what the doctors who had seen them at the first visit had hoped for."
)
# Number-dense Results prose: jusText's stop-word density (< 0.3) rates these bad.
_RESULTS = (
    "Of 516 patients, 62 (12.0 %) had sarcopenia; age 78.2 ± 6.9 vs 74.1 ± 7.3 years, BMI 22.9 ± 3.8 vs "
    "26.4 ± 4.1 kg/m2, HR 2.31 (95 % CI 1.45–3.68, p < 0.001) for 1-year mortality in the cohort."
)
_METHODS = (
    "Methods: Cross-sectional study of 516 inpatients aged ≥ 65 years; EWGSOP2 criteria, grip strength "
    "(Jamar), BIA (Tanita MC-780), SARC-F ≥ 4; Cox models adjusted for age, sex, CCI and albumin."
)


def _page(body: str, head: str = _HEAD) -> ParsedArticle:
    return parse_html(f"{head}{body}</body></html>".encode(), encoding="utf-8")


def _text(article: ParsedArticle) -> str:
    return "\n".join(b.text for b in article.blocks)


def _block(article: ParsedArticle, start: str) -> Block:
    found = [b for b in article.blocks if b.text.startswith(start)]
    assert len(found) == 1, (
        f"{len(found)} blocks start with {start!r}: {[b.text[:40] for b in article.blocks]}"
    )
    return found[0]


def _reasons(article: ParsedArticle, needle: str) -> set[str]:
    return {d.reason for d in article.dropped if needle in d.text}


def _sample(name: str) -> ParsedArticle:
    return parse_html((HTML_DIR / name).read_bytes(), encoding="utf-8")


# --- 1. number-dense paragraphs inside the article ------------------------------------


def test_number_dense_abstract_and_results_in_the_article_are_kept() -> None:
    article = _page(
        f"<main><article><h1>{TITLE}</h1>"
        "<section class='c-article-section' id='Abs1-section'><h2>Abstract</h2>"
        f"<h3>Methods</h3><p>{_METHODS}</p><h3>Results</h3><p>{_RESULTS}</p>"
        f"<h3>Conclusions</h3><p>{_PROSE}</p></section>"
        f"<div class='c-article-body'><h2>Results</h2><p>{_PROSE}</p><p>{_RESULTS.replace('Of 516', 'Of 398')}</p>"
        "<ul><li>Age ≥ 65 years, MMSE ≥ 24, LOS ≥ 3 days (n = 412; 79.8 %)</li></ul></div>"
        "</article></main>"
    )
    assert (_block(article, "Methods: Cross").kind, _block(article, "Methods: Cross").section_path) == (
        "abstract",
        ("Abstract", "Methods"),
    )
    assert _block(article, "Of 516 patients").section_path == ("Abstract", "Results")
    assert _block(article, "Of 398 patients").section_path == ("Results",)
    assert _block(article, "Age ≥ 65 years").kind == "list"


def test_rescue_leaves_metadata_references_and_site_text_alone() -> None:
    article = _page(
        "<p class='banner-text'>Registered office: 4 Crinan Street, London N1 9XW; company no. 785998 of "
        "the group, VAT GB 592 1234 56 (2024).</p>"
        f"<article><h1>{TITLE}</h1>"
        "<ul class='c-article-author-list'><li>Anna B. Smith<sup>1</sup>, Carl D. Jones<sup>2</sup> and "
        "Eva F. Lee<sup>1,2</sup> of the 3 groups</li></ul>"
        "<div class='c-article-author-affiliation'><p class='c-article-author-affiliation__address'>"
        "Department of Geriatrics, University of Testing, 12345 Testville, Country of the North</p></div>"
        f"<div class='c-article-body'><h2>Results</h2><p>{_RESULTS}</p>"
        "<p class='c-article-info-details'>Received: 12 March 2021; Accepted: 2 July 2021; Published: "
        "15 July 2021 in the 3rd issue</p></div>"
        "<ol class='c-article-references'><li><p class='c-article-references__text'>Smith, A. &amp; "
        "Jones, C. Sarcopenia in the old. J. Geriatr. 12, 34–56 (2010) of the journal.</p></li></ol>"
        "<div class='c-cookie'><p>We use 12 cookies for 3 purposes on the 2 sites of the group.</p></div>"
        "</article>"
    )
    text = _text(article)
    assert "Of 516 patients" in text
    for chrome in (
        "Registered office",
        "Anna B. Smith",
        "Department of Geriatrics",
        "Received:",
        "Sarcopenia in the old",
    ):
        assert chrome not in text
    assert "We use 12 cookies" not in text
    assert _reasons(article, "Department of Geriatrics") == {"justext:bad"}


def test_without_a_named_container_a_section_heading_after_the_title_decides() -> None:
    # Hindawi's old layout: no <article>/<main>, no body class; headings carry the structure.
    article = _page(
        f"<p>{_RESULTS} Before the title.</p><div class='middle_content'><h1>{TITLE}</h1>"
        f"<h4>3. Results</h4><p>{_RESULTS}</p></div>"
    )
    assert [b.text for b in article.blocks] == [_RESULTS]


def test_citation_links_and_springer_paragraph_divs_count_as_prose() -> None:
    cited = (
        "The primate brain is sensitive to optic flow (<a href='#B4'>Duffy and Wurtz, 1991</a>; "
        "<a href='#B9'>Lappe et al., 1999</a>; <a href='#B12'>Morrone et al., 2000</a>; "
        "<a href='#B17'>Smith et al., 2006</a>) in MST, VIP and V6 (<a href='#B3'>Cardin and Smith, 2010</a>)."
    )
    article = _page(
        f"<div class='JournalFullText'><h1>{TITLE}</h1><h2>Introduction</h2><p class='mb15'>{cited}</p>"
        f"<div class='Section1'><h2>Results</h2><div class='Para'>{_RESULTS}</div></div></div>"
    )
    assert [b.text[:29] for b in article.blocks] == ["The primate brain is sensitiv", _RESULTS[:29]]


@needs_samples
def test_number_dense_sample_paragraphs_are_kept() -> None:
    f1000 = _sample("f1000research_3-305_aedes_obp.html")
    assert _block(f1000, "NPN and DEET (N,N-diethyl-3-methylbenzamide)").section_path == (
        "Materials and methods",
        "Chemicals",
    )
    nature = _sample("nature_s41586-021-03819-2_alphafold.html")
    assert _block(nature, "Extensive explanations of the components").section_path == (
        "Methods",
        "Full algorithm details",
    )
    elife = _sample("elife_44753_basal_chordate_visual_circuitry.html")
    assert _block(elife, "All larvae used were between 26 and 28 hpf").section_path[-1] == "Spontaneous Swims"


# --- 2. figures and tables by compound class names ------------------------------------


def test_compound_float_classes_are_removed_but_inline_references_stay() -> None:
    article = _page(
        f"<article><h1>{TITLE}</h1><h2>Results</h2>"
        f"<p>{_PROSE} As <a class='fig-link' href='#F1'>Figure 1</a> and "
        "<span class='table-ref'>Table 2</span> show, grip strength fell with age in both groups.</p>"
        f"<div class='fig-expansion'><p>{_PROSE} Legend one.</p></div>"
        f"<div class='article-image-caption-wrapper'><p>{_PROSE} Legend two.</p></div>"
        f"<div class='table-caption'><p>{_PROSE} Legend three.</p></div>"
        f"<p class='figure__caption'>{_PROSE} Legend four.</p>"
        f"<figure><img src='f1.png'><figcaption>{_PROSE} Legend five.</figcaption></figure>"
        f"<div class='html-fig_description'>{_PROSE} Legend six.</div></article>"
    )
    text = _text(article)
    assert "As Figure 1 and Table 2 show, grip strength fell" in text
    assert "Legend" not in text
    assert _reasons(article, "Legend one") == {"removed:class=fig"}
    assert _reasons(article, "Legend two") == {"removed:class=caption"}
    assert _reasons(article, "Legend four") == {"removed:class=caption"}
    assert _reasons(article, "Legend five") == {"removed:figure"}


def test_a_layout_table_holding_the_article_is_no_float() -> None:
    # Europe PMC's old pages set the whole article in a layout table.
    paragraphs = [f"{_PROSE} {n}." for n in range(6)]
    article = _page(
        f"<table class='layout'><tr><td><h1>{TITLE}</h1><h2>Results</h2>"
        + "".join(f"<p>{p}</p>" for p in paragraphs)
        + f"<table><tr><td>{_PROSE} Cell.</td></tr></table></td></tr></table>"
    )
    assert [b.text for b in article.blocks] == paragraphs
    assert _reasons(article, "Cell.") == {"removed:table"}


def test_a_table_label_heading_opens_no_section() -> None:
    # PMC: <section class="tw"><h4>Table 2.</h4>...: the table goes, its label heading stays behind.
    article = _page(
        f"<article><h1>{TITLE}</h1><h2>Results</h2><p>{_PROSE} One.</p>"
        f"<section class='tw xbox'><h4>Table 2.</h4><table><tr><td>1.2</td></tr></table></section>"
        f"<p>{_PROSE} Two.</p></article>"
    )
    assert [b.section_path for b in article.blocks] == [("Results",), ("Results",)]
    assert _reasons(article, "Table 2.") == {"caption"}


# --- 3. in-text citations as buttons and links ----------------------------------------


def test_inline_citation_buttons_and_links_keep_their_text() -> None:
    article = _page(
        f"<article><h1>{TITLE}</h1>"
        "<div class='c-article-actions'><button class='c-btn'>Download PDF</button><button>Cite</button></div>"
        "<h2>Introduction</h2><p>The statistical power of a trial is the chance that it has to detect an effect "
        "that is there, and most of the trials that were done in this field were too small for that, "
        "which is power (<button class='xref' data-rid='B1'>Cohen, 1988</button>). Power is what most of "
        "the small studies of this field lacked.</p>"
        "<p>Following <a class='xref xref-bibr' href='#B2' role='button'>Smith et al. (2010)</a>, we "
        "reasoned that the patients who were frail at admission would have the worst outcome of all, and that "
        "this would be seen in the first year after they had left the hospital.</p>"
        "</article>"
    )
    text = _text(article)
    assert "which is power (Cohen, 1988). Power is what" in text
    assert "Following Smith et al. (2010), we reasoned" in text
    assert "Download PDF" not in text and "Cite" not in text.split()
    assert _reasons(article, "Download PDF") == {"removed:button"}


# --- 4. superscript reference numbers -------------------------------------------------

_SUP_PAGE = (
    f"<article><h1>{TITLE}</h1><h2>Introduction</h2><p>Muscle stem cells"
    "<sup><a href='#B5'>5</a>,<a href='#B6'>6</a></sup> divide after injury in the adult, and about "
    "10<sup>6</sup> of the cells that were counted in the muscle fibres of the mice survived"
    "<sup>[<a href='#B7'>7</a>–<a href='#B9'>9</a>]</sup> the first week of the repair, which is what "
    "the authors of the first study of this kind had found in the rats that they had used.</p></article>"
)


def test_superscript_citation_numbers_are_dropped_by_default() -> None:
    article = _page(_SUP_PAGE)
    assert article.blocks[0].text.startswith(
        "Muscle stem cells divide after injury in the adult, and about 106 "
    )
    assert "mice survived the first week" in article.blocks[0].text
    assert [d.text for d in article.dropped if d.reason == "citation_number"] == ["5,6", "7–9"]


def test_superscript_citation_numbers_can_be_bracketed() -> None:
    page = f"{_HEAD}{_SUP_PAGE}</body></html>".encode()
    text = parse_html(page, encoding="utf-8", citation_numbers="bracket").blocks[0].text
    assert "Muscle stem cells [5,6] divide" in text
    assert "mice survived [7–9] the first week" in text
    assert "about 106 of the cells" in text  # a power of ten is no citation


# --- 5. site widgets --------------------------------------------------------------------


def test_site_widgets_never_reach_a_block() -> None:
    article = _page(
        f"<div class='page-wrapper share-enabled'><main><article><h1>{TITLE}</h1><h2>Results</h2>"
        f"<p>{_PROSE}</p>"
        "<div class='asset-viewer-inline asset-viewer-inline--video'><span>Video 1</span><video controls>"
        "<p>This video cannot be played in place because your browser does support HTML5 video. You may "
        "still download the video for offline viewing.</p></video></div>"
        "<video><p>Your browser does not support HTML5 video, please use a more recent browser.</p></video>"
        "<p>Download figure Open in new tab Download powerpoint</p>"
        f"<div class='c-article-share-box'><p>Share this article with anyone you like: {_PROSE}</p></div>"
        f"<div role='toolbar'><p>{_PROSE} Toolbar.</p></div>"
        f"<div hidden><p>{_PROSE} Hidden.</p></div>"
        f"<div aria-hidden='true'><p>{_PROSE} Aria.</p></div>"
        f"<p>{_PROSE} Last.</p></article></main>"
        "<div class='modal fade' id='flagModal'><h3>Flag an issue</h3><p>Our promise PeerJ promises to "
        "address all issues as quickly and professionally as possible. We thank you in advance for your "
        "patience and understanding.</p></div>"
        "<div class='follow-publication'><h3>Follow this publication for updates</h3><p>\"Following\" is "
        "like subscribing to any updates related to a publication. These updates will appear in your home "
        "dashboard each time you visit the site.</p></div></div>"
    )
    assert [b.text for b in article.blocks] == [_PROSE, f"{_PROSE} Last."]
    assert _reasons(article, "Share this article") == {"removed:class=share"}
    assert _reasons(article, "Toolbar.") == {"removed:role=toolbar"}
    assert _reasons(article, "Hidden.") == {"removed:hidden"}
    assert _reasons(article, "Aria.") == {"removed:aria-hidden"}
    assert _reasons(article, "This video cannot be played") == {"removed:class=asset"}
    assert _reasons(article, "Your browser does not support") == {"removed:video"}
    assert _reasons(article, "Download figure Open in new tab") == {"widget"}
    assert _reasons(article, "Our promise PeerJ") == {"removed:class=modal"}
    assert _reasons(article, "is like subscribing") == {"removed:class=follow"}


def test_a_hidden_tab_holding_the_article_stays() -> None:
    paragraphs = [f"{_PROSE} {n}." for n in range(6)]
    article = _page(
        f"<h1>{TITLE}</h1><div class='tab-abstract' hidden><p>{_PROSE} Copy.</p></div>"
        "<div class='tab-fulltext' style='display: none'><h2>Results</h2>"
        + "".join(f"<p>{p}</p>" for p in paragraphs)
        + "</div>"
    )
    assert [b.text for b in article.blocks] == paragraphs
    assert _reasons(article, "Copy.") == {"removed:hidden"}


def test_ids_go_only_when_all_of_them_names_furniture() -> None:
    article = _page(
        f"<article><h1>{TITLE}</h1><section id='related-work'><h2>Related work</h2><p>{_PROSE}</p></section>"
        f"<section id='sec-follow-up'><h2>Follow-up</h2><p>{_PROSE} Later.</p></section>"
        f"<div id='article-metrics'><p>{_PROSE} Metrics.</p></div></article>"
    )
    assert [b.section_path for b in article.blocks] == [("Related work",), ("Follow-up",)]
    assert _reasons(article, "Metrics.") == {"removed:id=metrics"}


def test_a_removed_reference_section_still_ends_the_article() -> None:
    # eLife: the whole <section> with its "References" heading goes by its id; what follows
    # (decision letter, metrics) is not article text even where jusText likes it.
    article = _page(
        f"<main><h1>{TITLE}</h1><section id='s2'><h2>Results</h2><p>{_PROSE}</p></section>"
        "<section class='article-section' id='references'><h2>References</h2><ol><li>Smith A (2010) A "
        "title of a paper. J Test 1:1–2.</li></ol></section>"
        f"<section id='s9'><h2>Metrics</h2><p>{_PROSE} Metrics.</p></section></main>"
    )
    assert [b.text for b in article.blocks] == [_PROSE]
    assert _reasons(article, "Metrics.") == {"after_references"}


# --- 6. the title repeated as a heading -------------------------------------------------


def test_a_repeated_title_heading_resets_the_section_path() -> None:
    # Hindawi: <h1> title, the abstract, then the title again as <h2> above the full text.
    article = _page(
        f"<div id='content'><h1>{TITLE}</h1><h4>Abstract</h4><p>{_PROSE} Abstract.</p>"
        f"<h2>{TITLE}</h2><h4>1. Introduction</h4><p>{_PROSE} Intro.</p>"
        f"<h4>2. Methods</h4><h5>2.1. Animals</h5><p>{_PROSE} Animals.</p></div>"
    )
    assert [(b.kind, b.section_path) for b in article.blocks] == [
        ("abstract", ("Abstract",)),
        ("paragraph", ("1. Introduction",)),
        ("paragraph", ("2. Methods", "2.1. Animals")),
    ]


# --- 7. where the abstract ends ---------------------------------------------------------


def test_the_abstract_ends_with_its_container() -> None:
    # PMC / Springer: the abstract is a section; the introduction follows with no heading.
    article = _page(
        f"<article><h1>{TITLE}</h1><section class='abstract' id='abstract1'><h2>Abstract</h2>"
        f"<p>{_PROSE} One.</p><p>{_PROSE} Two.</p></section>"
        f"<section class='body'><p>{_PROSE} Intro.</p><h2>Methods</h2><p>{_PROSE} Methods.</p></section>"
        "</article>"
    )
    assert [(b.kind, b.section_path) for b in article.blocks] == [
        ("abstract", ("Abstract",)),
        ("abstract", ("Abstract",)),
        ("paragraph", ()),
        ("paragraph", ("Methods",)),
    ]


def test_abstract_container_after_the_heading_or_none() -> None:
    nature = _page(
        f"<article><h1>{TITLE}</h1><div class='c-article-section'><h2>Abstract</h2>"
        f"<div class='c-article-section__content'><p>{_PROSE} One.</p></div></div>"
        f"<p>{_PROSE} Intro.</p></article>"
    )
    assert [b.kind for b in nature.blocks] == ["abstract", "paragraph"]
    # A flat page says nothing: the abstract runs to the next heading, as before.
    flat = _page(
        f"<div><h1>{TITLE}</h1><h2>Abstract</h2><p>{_PROSE} One.</p><p>{_PROSE} Two.</p>"
        f"<h2>Introduction</h2><p>{_PROSE} Intro.</p></div>"
    )
    assert [b.kind for b in flat.blocks] == ["abstract", "abstract", "paragraph"]


# --- 8. PMCID of a PMC page ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "pmcid"),
    [
        ("<link rel='canonical' href='https://pmc.ncbi.nlm.nih.gov/articles/PMC2377243/'>", "PMC2377243"),
        ("<meta property='og:url' content='https://www.ncbi.nlm.nih.gov/pmc/articles/PMC123/'>", "PMC123"),
        (
            "<meta name='citation_pmcid' content='PMC9'>"
            "<link rel='canonical' href='https://pmc.ncbi.nlm.nih.gov/articles/PMC2377243/'>",
            "PMC9",
        ),
        ("<link rel='canonical' href='https://europepmc.org/article/PMC/PMC2377243'>", None),
    ],
)
def test_pmcid_from_the_canonical_url(head: str, pmcid: str | None) -> None:
    page = f"<html><head>{head}</head><body><p>{_PROSE}</p></body></html>".encode()
    assert read_html_metadata(page, encoding="utf-8").pmcid == pmcid


# --- every sample page --------------------------------------------------------------------


@needs_samples
@pytest.mark.parametrize(
    "path", sorted(HTML_DIR.glob("*.html")) if HTML_DIR.is_dir() else [], ids=lambda p: p.name
)
def test_sample_pages_have_no_widget_lines_or_glued_citations(path: Path) -> None:
    article = parse_html(path.read_bytes(), encoding="utf-8")
    text = _text(article)
    for widget in ("Download figure", "Open in new tab", "HTML5 video", "Flag an issue", "Video 1\n"):
        assert widget not in text
    assert all(d.reason and d.text for d in article.dropped)
