"""What the readers leave out as not-prose (issue 18): back-matter titles, registration lines,
summary pointers, abbreviation lists, lone back-matter labels, superscript citation numbers."""

from __future__ import annotations

import pytest

from tasks.common.text.back_matter import is_back_matter_title, section_key
from tasks.common.text.html import parse_html
from tasks.common.text.jats import parse_jats
from tests.conftest import REPO


@pytest.mark.parametrize(
    ("title", "back"),
    [
        ("Revised Amendments from Version 1", True),
        ("Appendix B. Derivations", True),
        ("5. Authors\u2019  information:", True),
        ("Acknowledgements", True),
        ("Appendicitis in children", False),
        ("Results", False),
    ],
)
def test_back_matter_titles(title: str, back: bool) -> None:
    assert is_back_matter_title(title) is back


def test_section_key_drops_numbers_punctuation_case_and_curly_quotes() -> None:
    assert section_key(" 2.1.  Authors\u2019   Contributions: ") == "authors' contributions"


def _jats(body: str, abstract: str = "") -> str:
    xml = (
        "<article><front><article-meta><title-group><article-title>T</article-title></title-group>"
        f"{abstract}</article-meta></front><body>{body}</body></article>"
    )
    return xml


def test_jats_sections_that_are_not_prose() -> None:
    abstract = (
        "<abstract><sec><title>Methods</title><p>We pooled twelve trials of children in the Sahel.</p></sec>"
        "<sec><title>Trial Registration</title><p>ClinicalTrials.gov NCT00000001</p></sec>"
        "<p>Please see later in the article for the Editors' Summary</p></abstract>"
    )
    body = (
        "<sec><title>Methods</title><sec><title>Ethics Statement</title><p>The study was approved by the"
        " York ethics committee.</p></sec><def-list><def-item><term>BMI</term><def><p>body mass index</p>"
        "</def></def-item></def-list></sec><sec><title>Ethics statement</title><p>Consent was waived by"
        " the board.</p></sec>"
    )
    article = parse_jats(_jats(body, abstract).encode())
    texts = [b.text for b in article.blocks]
    assert texts == [
        "We pooled twelve trials of children in the Sahel.",
        "The study was approved by the York ethics committee.",
    ]
    reasons = {d.reason for d in article.dropped}
    assert {"back_matter_section", "summary_pointer", "jats:def-list"} <= reasons


@pytest.mark.parametrize(
    ("mode", "expected"), [("drop", "Cells grow fast."), ("bracket", "Cells [5,6] grow fast.")]
)
def test_jats_superscript_citation_numbers(mode: str, expected: str) -> None:
    body = (
        '<sec><p>Cells<sup><xref ref-type="bibr" rid="B5">5</xref>,<xref ref-type="bibr" rid="B6">6</xref>'
        "</sup> grow fast.</p></sec>"
    )
    article = parse_jats(_jats(body).encode(), citation_numbers=mode)  # type: ignore[arg-type]
    assert [b.text for b in article.blocks] == [expected]


def test_html_lone_back_matter_label_goes_with_its_value() -> None:
    filler = " ".join(["The patients were followed for twelve months and their outcomes recorded."] * 3)
    page = (
        "<html lang='en'><head><meta name='citation_title' content='A trial'></head><body><article>"
        "<h1>A trial</h1><h2>Methods</h2>"
        f"<p>{filler}</p>"
        "<div class='grant'>Grant information</div>"
        "<div class='grant-text'>This work was supported in part by unrestricted gifts from the Example"
        " Foundation and the Sample Trust to the authors of the study.</div>"
        "</article></body></html>"
    )
    article = parse_html(page.encode(), encoding="utf-8")
    assert [b.text for b in article.blocks] == [filler]
    assert any(d.reason == "article_info_label" and d.text == "Grant information" for d in article.dropped)


def test_html_abstract_heading_in_another_language_opens_the_abstract() -> None:
    page = REPO / "data" / "demo" / "html" / "demo8_dermatologie_atopique_fr.html"
    article = parse_html(page.read_bytes(), encoding="utf-8")
    assert [(b.kind, b.section_path[0]) for b in article.blocks][:2] == [
        ("abstract", "Résumé"),
        ("paragraph", "Introduction"),
    ]
