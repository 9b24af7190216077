"""Readers (sniff, JATS, HTML/jusText, licences) on the real sample articles and on broken inputs.

Expected values were read off the sample files themselves (and their SOURCES.json), not
copied from the readers' output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.common.text.document import Block, InputRejected, ParsedArticle
from tasks.common.text.html import parse_html
from tasks.common.text.jats import FORMULA_TOKEN, parse_jats
from tasks.common.text.licences import normalise_licence
from tasks.common.text.sniff import sniff
from tests.conftest import SAMPLES

JATS_DIRS = (SAMPLES / "articles", SAMPLES / "reviews")
HTML_DIR = SAMPLES / "html"

needs_samples = pytest.mark.skipif(
    not (SAMPLES / "articles" / "SOURCES.json").is_file() or not (HTML_DIR / "SOURCES.json").is_file(),
    reason=f"shared sample articles not found under {SAMPLES} (they live outside the repository)",
)


def _jats_files() -> list[Path]:
    return sorted(p for d in JATS_DIRS if d.is_dir() for p in d.iterdir() if p.suffix in (".xml", ".nxml"))


def _html_files() -> list[Path]:
    return sorted(HTML_DIR.glob("*.html")) if HTML_DIR.is_dir() else []


def _sources(directory: Path) -> dict[str, dict[str, object]]:
    return {entry["file"]: entry for entry in json.loads((directory / "SOURCES.json").read_text())}


def _read(path: Path) -> ParsedArticle:
    data = path.read_bytes()
    sniffed = sniff(str(path), data)
    if sniffed.format == "jats":
        return parse_jats(data)
    return parse_html(data, encoding=sniffed.encoding)


def _all_text(article: ParsedArticle) -> str:
    return "\n".join(block.text for block in article.blocks)


def _block_starting(article: ParsedArticle, start: str) -> Block:
    found = [b for b in article.blocks if b.text.startswith(start)]
    assert len(found) == 1, f"{len(found)} blocks start with {start!r}"
    return found[0]


# --- every sample -----------------------------------------------------------------------


@needs_samples
@pytest.mark.parametrize("path", _jats_files(), ids=lambda p: p.name)
def test_every_jats_sample_sniffs_and_parses(path: Path) -> None:
    data = path.read_bytes()
    sniffed = sniff(str(path), data)
    assert sniffed.format == "jats"
    assert sniffed.encoding == "utf-8"
    article = parse_jats(data)
    assert len(article.blocks) >= 10
    kinds = [b.kind for b in article.blocks]
    abstracts = kinds.count("abstract")
    assert "abstract" not in kinds[abstracts:]  # the abstracts come first, then the body
    for block in article.blocks:
        assert block.text == block.text.strip() and block.text
        if block.kind != "list":
            assert "\n" not in block.text and "  " not in block.text
    source = _sources(path.parent)[path.name]
    ids = source["ids"]
    assert isinstance(ids, dict)
    assert article.meta.doi == str(ids["doi"]).lower()
    assert article.meta.title is not None
    assert article.meta.title.startswith(str(source["title"])[:60])
    assert article.meta.article_type == source["article_type"]
    assert article.meta.license is not None and article.meta.license.startswith(("CC-BY", "public-domain"))


@needs_samples
@pytest.mark.parametrize("path", _html_files(), ids=lambda p: p.name)
def test_every_html_sample_sniffs_and_parses(path: Path) -> None:
    data = path.read_bytes()
    sniffed = sniff(str(path), data)
    assert sniffed.format == "html"
    article = parse_html(data, encoding=sniffed.encoding)
    assert len(article.blocks) >= 10
    source = _sources(HTML_DIR)[path.name]
    assert article.meta.doi == str(source["doi"]).lower()
    assert article.meta.title == source["title"]
    assert article.meta.license is not None and article.meta.license.startswith("CC-BY")
    text = _all_text(article)
    for chrome in ("Download PDF", "Skip to main content", "Share this article", "Cite this article"):
        assert chrome not in text


# --- JATS, concrete ---------------------------------------------------------------------


@needs_samples
def test_jats_bmc_microbiology_lysis_time() -> None:
    article = _read(SAMPLES / "articles" / "1471-2180-11-174.nxml")
    meta = article.meta
    assert meta.title == "Factors influencing lysis time stochasticity in bacteriophage λ"
    assert meta.journal == "BMC Microbiology"
    assert (meta.pmid, meta.pmcid, meta.doi) == ("21810267", "PMC3166277", "10.1186/1471-2180-11-174")
    assert meta.license == "CC-BY-2.0"
    assert meta.license_url == "http://creativecommons.org/licenses/by/2.0"
    assert meta.license_text is not None and meta.license_text.startswith("This is an Open Access article")

    first = article.blocks[0]
    assert first.kind == "abstract"
    assert first.section_path == ("Abstract", "Background")
    assert first.text.startswith("Despite identical genotypes and seemingly uniform environments")
    stats = _block_starting(article, "In most cases, data collection for a given strain")
    assert (stats.kind, stats.section_path) == ("paragraph", ("Methods", "Statistical analysis"))
    # Inline markup is kept as text: the citation markers and the subscripts.
    assert "[1-9]" in _block_starting(article, "Some phenotypic variation arises").text

    text = _all_text(article)
    assert "Schematic presentation of two models of holin hole formation" not in text  # figure caption
    assert "Microbial cell individuality and the underlying sources" not in text  # a reference title
    assert "Sample sizes and standard deviations" not in text  # supplementary material
    # Back matter that this (converted) file keeps as body sections is dropped like <back>.
    assert not any(b.section_path[:1] in (("Competing interests",), ("Appendix A",)) for b in article.blocks)


@needs_samples
def test_jats_plos_medicine_summaries_and_lists() -> None:
    article = _read(SAMPLES / "articles" / "journal.pmed.1001300.xml")
    meta = article.meta
    assert meta.doi == "10.1371/journal.pmed.1001300"
    assert meta.pmid is None and meta.pmcid is None  # the file carries only the DOI
    assert meta.journal is None  # its journal-meta has no journal title
    assert meta.license == "CC-BY"  # the statement names CC BY without a version
    assert meta.license_url is None
    assert meta.language == "en"

    # The one-line table-of-contents teaser is left out; the main abstract comes first.
    assert "Dick Menzies and colleagues report" not in _all_text(article)
    first = article.blocks[0]
    assert first.section_path == ("Abstract", "Background")
    assert first.text.startswith("Treatment of multidrug resistant tuberculosis (MDR-TB) is lengthy")
    summary = _block_starting(article, "In 2010, 8.8 million people developed tuberculosis")
    assert (summary.kind, summary.section_path) == ("abstract", ("Editors' Summary", "Background"))

    # The summary's "Additional Information" list of links is not its text (issue 18): it
    # is left out, and the reader says why.
    who = "The World Health Organization provides information on all aspects of tuberculosis"
    assert who not in _all_text(article)
    assert [d.reason for d in article.dropped if who in d.text] == ["back_matter_section"]
    assert "Please see later in the article for the Editors' Summary" not in _all_text(article)

    text = _all_text(article)
    assert "Clinical characteristics and treatment received of patients" not in text  # table caption
    assert (
        "Best drug treatment for multidrug-resistant and extensively drug-resistant" not in text
    )  # reference
    assert "Ruffy Guilatco" not in text  # acknowledgements
    assert "Chinese translation of the abstract" not in text  # supplementary material


@needs_samples
def test_jats_plos_one_formulas_and_copyright_statement() -> None:
    article = _read(SAMPLES / "articles" / "pone.0000217.nxml")
    meta = article.meta
    assert (meta.pmid, meta.pmcid) == ("17299597", "PMC1790863")
    # No <permissions> in this file: the licence is read from the copyright statement.
    assert meta.license == "CC-BY"
    assert meta.license_text is not None and "Creative Commons Attribution License" in meta.license_text

    assert article.blocks[0].text.startswith(
        "Various definitions of biological complexity have been proposed"
    )
    assert article.blocks[0].section_path == ("Abstract", "Background")
    # A display formula (an image here) inside a sentence is dropped, the sentence kept.
    linear = _block_starting(article, "If fitness is assumed to be a linearly decreasing function")
    assert linear.section_path == ("Model and Results", "Linear Fitness Decline")
    assert "(Methods, Appendix A): in the diploid case" in linear.text
    text = _all_text(article)
    assert "pone.0000217.e002" not in text
    assert "Fisher's geometric model in two-dimensional phenotypic space" not in text  # figure caption
    assert "Art Poon" not in text  # acknowledgements
    assert not any(b.section_path and b.section_path[-1].startswith("Appendix") for b in article.blocks)


@needs_samples
def test_jats_springer_review_ali_licence_and_lists() -> None:
    article = _read(SAMPLES / "reviews" / "10_1186_s12943-025-02501-9.xml")
    meta = article.meta
    assert meta.license == "CC-BY-4.0"
    assert meta.license_url == "https://creativecommons.org/licenses/by/4.0/"
    assert (meta.pmid, meta.pmcid) == ("41250091", "PMC12625062")
    assert article.blocks[0].text.startswith(
        "Bispecific antibodies (bsAbs), designed to recognize two distinct"
    )
    assert article.blocks[0].section_path == ("Abstract",)
    assert any(b.kind == "list" for b in article.blocks)
    text = _all_text(article)
    assert "BsAbs approved by EMA and/or FDA or currently in fast-track designation" not in text  # table
    assert "Functional classification of bispecific antibodies (bsAbs) in cancer therapy" not in text  # fig
    assert "The present and future of bispecific antibodies for cancer therapy" not in text  # reference


@needs_samples
def test_jats_public_domain_licence() -> None:
    meta = _read(SAMPLES / "articles" / "ehp-116-1694.nxml").meta
    assert meta.license == "public-domain"
    assert meta.license_url == "http://creativecommons.org/publicdomain/mark/1.0/"
    assert meta.license_text is not None and len(meta.license_text) <= 501


# --- HTML, concrete ---------------------------------------------------------------------


@needs_samples
def test_html_nature_alphafold() -> None:
    article = _read(HTML_DIR / "nature_s41586-021-03819-2_alphafold.html")
    meta = article.meta
    assert meta.title == "Highly accurate protein structure prediction with AlphaFold"
    assert meta.journal == "Nature"
    assert meta.doi == "10.1038/s41586-021-03819-2"
    assert meta.license == "CC-BY-4.0"
    assert meta.license_url == "http://creativecommons.org/licenses/by/4.0/"
    assert meta.language == "en"

    first = article.blocks[0]
    assert first.kind == "abstract" and first.section_path == ("Abstract",)
    assert first.text.startswith("Proteins are essential to life, and understanding their structure")
    training = _block_starting(
        article, "To train, we use structures from the PDB with a maximum release date"
    )
    assert (training.kind, training.section_path) == ("paragraph", ("Methods", "Training regimen"))
    assert _block_starting(article, "The key principle of the building block").section_path == ("Evoformer",)

    text = _all_text(article)
    assert "Thank you for visiting nature.com" not in text  # browser banner before the title
    assert "cookies" not in text.lower()
    assert "The performance of AlphaFold on the CASP14 dataset" not in text  # figure caption
    assert "Advances in methods for atomic resolution macromolecular structure" not in text  # reference
    assert "Commenting on this article is now closed" not in text  # reader comments
    assert "licensed under a Creative Commons Attribution 4.0" not in text  # licence: metadata only


@needs_samples
def test_html_plos_one_reticuloendotheliosis() -> None:
    article = _read(HTML_DIR / "plosone_pone.0213978_reticuloendotheliosis_virus.html")
    meta = article.meta
    assert meta.journal == "PLOS ONE"
    assert meta.doi == "10.1371/journal.pone.0213978"
    assert meta.license == "CC-BY-4.0"
    assert meta.license_text is not None and meta.license_text.startswith("This is an open access article")

    first = article.blocks[0]
    assert first.kind == "abstract" and first.section_path == ("Abstract",)
    assert first.text.startswith("Reticuloendotheliosis virus (REV) is the most frequent exogenous virus")
    strain = _block_starting(article, "The strain REV-HA9901 was isolated in 1999")
    assert (strain.kind, strain.section_path) == ("paragraph", ("Materials and methods", "REV strain"))

    text = _all_text(article)
    assert "Funding:" not in text and "Competing interests:" not in text  # article-info lines
    assert "Occurrence of reticuloendotheliosis in Chinese partridge" not in text  # reference
    assert "Consistent yolk and serum antibody measurements with different dilutions" not in text  # table
    assert "Subject Areas" not in text and "Submit Your Manuscript" not in text  # navigation / aside


@needs_samples
def test_html_bmc_trials_statement_beats_stale_dc_rights() -> None:
    path = HTML_DIR / "bmc_trials_15-511_low_back_pain.html"
    assert b'name="dc.rights" content="http://creativecommons.org/licenses/by/2.0/"' in path.read_bytes()
    article = _read(path)
    meta = article.meta
    assert (meta.pmid, meta.doi) == ("25540987", "10.1186/1745-6215-15-511")
    # dc.rights says 2.0 (site template); the article's own statement links 4.0.
    assert meta.license == "CC-BY-4.0"
    assert meta.license_url == "http://creativecommons.org/licenses/by/4.0"

    first = article.blocks[0]
    assert first.section_path == ("Abstract", "Background")
    assert first.text.startswith("Low back pain (LBP) is one of the most disabling and costly disorders")
    round_one = _block_starting(article, "In the first round, participants were initially given information")
    assert round_one.section_path == ("Methods/Design", "Delphi round one")

    text = _all_text(article)
    assert "Using the Delphi technique to determine which outcomes to measure" not in text  # reference
    assert "Definitions of the terms used in this study protocol" not in text  # table caption
    assert "This is an Open Access article distributed under the terms" not in text  # licence statement
    assert "AC, CT, MB and RO conceived and designed the study" not in text  # authors' contributions


@needs_samples
def test_html_mdpi_title_in_a_div_and_keywords() -> None:
    article = _read(HTML_DIR / "mdpi_metabo4040932_fusarium_wheat.html")
    meta = article.meta
    assert meta.doi == "10.3390/metabo4040932"
    assert meta.license == "CC-BY-4.0"  # statement (4.0) over dc.rights (3.0)
    first = article.blocks[0]
    assert first.kind == "abstract"
    assert first.text.startswith("Volatile metabolites from mold contamination have been proposed")
    text = _all_text(article)
    assert "scheduled maintaince work" not in text  # site banner before the article
    assert "Fusarium poae; durum wheat; volatile metabolites" not in text  # keywords
    assert "GC-MS identification of volatile compounds in the headspace" not in text  # table caption
    assert _block_starting(article, "Fusarium head blight (FHB) is a significant").section_path == (
        "1. Introduction",
    )


# --- malformed and edge-case inputs -----------------------------------------------------

_MINI_JATS = """<?xml version="1.0" encoding="{encoding}"?>
<!DOCTYPE article PUBLIC "-//NLM//DTD JATS (Z39.96) Journal Archiving and Interchange DTD v1.0 20120330//EN"
  "JATS-archivearticle1.dtd">
<article xmlns:mml="http://www.w3.org/1998/Math/MathML" xmlns:xlink="http://www.w3.org/1999/xlink"
         article-type="research-article" xml:lang="en-GB">
<front><journal-meta><journal-title-group><journal-title>Journal of Tests</journal-title>
</journal-title-group></journal-meta>
<article-meta>
<article-id pub-id-type="pmc">PMC42</article-id>
<article-id pub-id-type="doi">https://doi.org/10.1000/ABC.Def</article-id>
<title-group><article-title>Café and naïve tests</article-title></title-group>
<permissions><license license-type="cc-by-nc"><license-p>Free to read.</license-p></license></permissions>
<abstract><p>An abstract with <inline-formula><mml:math><mml:mi>x</mml:mi></mml:math></inline-formula> inside.</p>
</abstract>
</article-meta></front>
<body>
<sec><title>Intro</title>
<p>Before the list&nbsp;<list><list-item><p>one</p></list-item><list-item><p>two<list><list-item>
<p>two-a</p></list-item></list></p></list-item></list> after it.</p>
<boxed-text><caption><title>Box 1. Key points</title></caption><p>Boxed   text.</p></boxed-text>
<fig><caption><p>A figure caption.</p></caption></fig>
<p>Equation <disp-formula><tex-math>a=b</tex-math></disp-formula> here, and <tex-math>\\alpha</tex-math>.</p>
<p>  </p>
</sec>
</body>
<back><ref-list><ref><mixed-citation>A reference.</mixed-citation></ref></ref-list></back>
</article>
"""


def test_jats_structure_formulas_lists_boxes() -> None:
    article = parse_jats(_MINI_JATS.format(encoding="UTF-8").encode("utf-8"))
    meta = article.meta
    assert meta.title == "Café and naïve tests"
    assert (meta.pmcid, meta.doi, meta.language) == ("PMC42", "10.1000/abc.def", "en")
    assert meta.license == "CC-BY-NC"  # only the license-type attribute says anything
    assert [(b.kind, b.section_path, b.text) for b in article.blocks] == [
        ("abstract", ("Abstract",), f"An abstract with {FORMULA_TOKEN} inside."),
        ("paragraph", ("Intro",), "Before the list"),  # &nbsp; (no DTD) mapped, then trimmed
        ("list", ("Intro",), "one\ntwo\ntwo-a"),
        ("paragraph", ("Intro",), "after it."),
        ("paragraph", ("Intro", "Box 1. Key points"), "Boxed text."),
        ("paragraph", ("Intro",), f"Equation here, and {FORMULA_TOKEN}."),
    ]


def test_utf16_with_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "article.xml"
    path.write_bytes(_MINI_JATS.format(encoding="UTF-16").encode("utf-16"))
    data = path.read_bytes()
    assert data[:2] in (b"\xff\xfe", b"\xfe\xff")
    sniffed = sniff(str(path), data)
    assert (sniffed.format, sniffed.encoding) == ("jats", "utf-16")
    assert parse_jats(data).meta.title == "Café and naïve tests"


@needs_samples
def test_truncated_xml_is_malformed(tmp_path: Path) -> None:
    data = (SAMPLES / "articles" / "pone.0046493.nxml").read_bytes()
    path = tmp_path / "truncated.nxml"
    path.write_bytes(data[: len(data) // 2])
    assert sniff(str(path), path.read_bytes()).format == "jats"  # looks like JATS ...
    with pytest.raises(InputRejected) as caught:
        parse_jats(path.read_bytes())  # ... but is cut off
    assert caught.value.reason == "malformed_xml"
    assert "line" in caught.value.detail


def test_unclosed_tag_is_malformed() -> None:
    with pytest.raises(InputRejected) as caught:
        parse_jats(b"<article><front><article-meta></front></article>")
    assert caught.value.reason == "malformed_xml"
    assert "line 1" in caught.value.detail


def test_xml_that_is_not_jats() -> None:
    data = b'<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel><title>x</title></channel></rss>'
    with pytest.raises(InputRejected) as caught:
        parse_jats(data)
    assert caught.value.reason == "not_jats" and "<rss>" in caught.value.detail
    with pytest.raises(InputRejected) as caught:
        sniff("feed.xml", data)
    assert caught.value.reason == "unsupported_format" and "<rss>" in caught.value.detail
    with pytest.raises(InputRejected) as caught:
        parse_jats(b"<article><body><p>No front matter.</p></body></article>")
    assert caught.value.reason == "not_jats"


@pytest.mark.parametrize("content", [b"", b"  \n\t\r\n  "], ids=["zero-bytes", "whitespace"])
def test_empty_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "empty.xml"
    path.write_bytes(content)
    with pytest.raises(InputRejected) as caught:
        sniff(str(path), path.read_bytes())
    assert caught.value.reason == "empty_file"


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00", "PNG"),
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\n", "PDF"),
        (b"<article>\x00\x01\x02\x03 binary junk", "NUL"),
        (bytes(range(1, 32)) * 20 + b"<article/>", "control bytes"),
    ],
    ids=["png", "pdf", "nul", "controls"],
)
def test_binary_content(tmp_path: Path, content: bytes, named: str) -> None:
    path = tmp_path / "renamed.xml"
    path.write_bytes(content)
    with pytest.raises(InputRejected) as caught:
        sniff(str(path), path.read_bytes())
    assert caught.value.reason == "binary_content"
    assert named in caught.value.detail


def test_latin1_bytes_in_utf8_declared_xml(tmp_path: Path) -> None:
    path = tmp_path / "latin1.xml"
    path.write_bytes(_MINI_JATS.format(encoding="UTF-8").encode("latin-1"))
    data = path.read_bytes()
    with pytest.raises(InputRejected) as caught:
        sniff(str(path), data)
    assert caught.value.reason == "undecodable"
    detail = caught.value.detail
    assert "utf-8" in detail and "0xe9" in detail  # 'é' in Latin-1
    assert f"offset {data.index(b'Caf') + 3}" in detail


def test_undeclared_bytes_must_be_utf8(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_bytes(b"<html><body><p>Na\xefve</p></body></html>")
    with pytest.raises(InputRejected) as caught:
        sniff(str(path), path.read_bytes())
    assert caught.value.reason == "undecodable" and "UTF-8" in caught.value.detail


_PROSE = (
    "The patients who were treated with the new drug in this study were followed for two years, and "
    "most of them reported that their symptoms had improved after the first month of treatment. "
    "The café where the naïve participants met was the place where they answered all of the questions."
)


def test_windows_1252_html_with_meta_charset(tmp_path: Path) -> None:
    page = (
        '<!DOCTYPE html><html lang="en"><head><meta http-equiv="Content-Type" '
        'content="text/html; charset=windows-1252"><meta name="citation_title" content="R\xe9sum\xe9">'
        f"<title>x</title></head><body><h1>R\xe9sum\xe9</h1><h2>Abstract</h2><p>{_PROSE}</p>"
        f"<h2>Results</h2><p>{_PROSE} \u2013 as \u201cexpected\u201d.</p></body></html>"
    )
    path = tmp_path / "page.html"
    path.write_bytes(page.encode("cp1252"))
    sniffed = sniff(str(path), path.read_bytes())
    assert (sniffed.format, sniffed.encoding) == ("html", "cp1252")
    article = parse_html(path.read_bytes(), encoding=sniffed.encoding)
    assert article.meta.title == "Résumé"
    assert [(b.kind, b.section_path) for b in article.blocks] == [
        ("abstract", ("Abstract",)),
        ("paragraph", ("Results",)),
    ]
    assert "café where the naïve participants" in article.blocks[0].text
    assert article.blocks[1].text.endswith("\u2013 as \u201cexpected\u201d.")  # cp1252 0x96, 0x93/0x94


def test_html_without_text_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "empty.html"
    path.write_bytes(
        b"<!doctype html><html><head><title>Nothing</title></head><body><nav>Home</nav></body></html>"
    )
    sniffed = sniff(str(path), path.read_bytes())
    with pytest.raises(InputRejected) as caught:
        parse_html(path.read_bytes(), encoding=sniffed.encoding)
    assert caught.value.reason == "no_text"


_FRENCH = (
    "Les patients qui ont été traités avec le nouveau médicament dans cette étude ont été suivis pendant "
    "deux ans, et la plupart d'entre eux ont indiqué que leurs symptômes se sont améliorés après le premier "
    "mois de traitement, ce qui est un résultat important pour la suite de nos travaux."
)


def test_stoplist_follows_page_language() -> None:
    page = f'<html lang="{{lang}}"><body><h2>Résultats</h2><p>{_FRENCH}</p></body></html>'
    french = parse_html(page.replace("{lang}", "fr-FR").encode(), encoding="utf-8")
    assert french.meta.language == "fr"
    assert [(b.section_path, b.text) for b in french.blocks] == [(("Résultats",), _FRENCH)]
    # Undeclared: default_language decides; an unknown code falls back to English, which
    # finds too few stop words in French prose: nothing is kept.
    untagged = page.replace(' lang="{lang}"', "").encode()
    assert parse_html(untagged, encoding="utf-8", default_language="fr").blocks[0].text == _FRENCH
    with pytest.raises(InputRejected) as caught:
        parse_html(page.replace("{lang}", "qq").encode(), encoding="utf-8")
    assert caught.value.reason == "no_text" and "English" in caught.value.detail


def test_html_heading_levels_nest_relative_to_each_other() -> None:
    page = (
        "<html><head><meta name='citation_title' content='The Title'></head><body>"
        f"<p>{_PROSE} Banner.</p><h1>The Title</h1><h2>Methods</h2><h4>Sampling</h4><p>{_PROSE}</p>"
        f"<h3>Analysis</h3><p>{_PROSE} Two.</p><h2>References</h2><p>{_PROSE} Three.</p></body></html>"
    )
    blocks = parse_html(page.encode(), encoding="utf-8").blocks
    assert [b.section_path for b in blocks] == [("Methods", "Sampling"), ("Methods", "Analysis")]
    assert not any("Banner" in b.text or "Three" in b.text for b in blocks)


def test_html_lists_formulas_and_cookie_banner() -> None:
    item_one = "The first item of the list is about the patients who were treated in the study."
    item_two = "The second item of the list is about the patients who were not treated."
    page = (
        "<html><body><div id='onetrust-consent-sdk'><p>We use cookies to improve your experience on "
        "our website and for the purposes of analytics, and you can change your preferences at any "
        f"time in the settings of the browser.</p></div><h2>Methods</h2><p>{_PROSE} The rate "
        "<math><mi>k</mi></math> was fixed and <math display='block'><mi>y</mi></math> held.</p>"
        f"<ul><li>{item_one}</li><li>{item_two}</li></ul><p>{_PROSE} After.</p></body></html>"
    )
    blocks = parse_html(page.encode(), encoding="utf-8").blocks
    assert [(b.kind, b.section_path) for b in blocks] == [
        ("paragraph", ("Methods",)),
        ("list", ("Methods",)),
        ("paragraph", ("Methods",)),
    ]
    assert blocks[0].text.endswith(f"The rate {FORMULA_TOKEN} was fixed and held.")
    assert blocks[1].text == f"{item_one}\n{item_two}"
    assert not any("cookies" in b.text for b in blocks)


def test_format_by_content_then_extension() -> None:
    jats = b'<?xml version="1.0"?><article article-type="x"><front/></article>'
    assert sniff("looks.html", jats).format == "jats"  # content wins over the extension
    page = b"<!DOCTYPE html><html><body><p>x</p></body></html>"
    assert sniff("page.xml", page).format == "html"
    fragment = b"<div><p>An HTML fragment without an html element.</p></div>"
    assert sniff("fragment.html", fragment).format == "html"  # extension breaks the tie
    with pytest.raises(InputRejected) as caught:
        sniff("fragment.txt", fragment)
    assert caught.value.reason == "unsupported_format"
    with pytest.raises(InputRejected) as caught:
        sniff("notes.xml", b"Just some notes, no markup at all.")
    assert caught.value.reason == "unsupported_format" and "plain text" in caught.value.detail


@pytest.mark.parametrize(
    ("url", "text", "license_type", "expected"),
    [
        ("http://creativecommons.org/licenses/by/2.0", None, "open-access", "CC-BY-2.0"),
        ("https://creativecommons.org/licenses/by-nc-nd/4.0/legalcode", None, None, "CC-BY-NC-ND-4.0"),
        ("http://creativecommons.org/publicdomain/zero/1.0/", None, None, "CC0-1.0"),
        ("http://creativecommons.org/publicdomain/mark/1.0/", None, "public-domain", "public-domain"),
        (None, "licensed under a Creative Commons Attribution 4.0 International License", None, "CC-BY-4.0"),
        (
            None,
            "the Creative Commons Attribution-NonCommercial-ShareAlike 3.0 licence",
            None,
            "CC-BY-NC-SA-3.0",
        ),
        (None, "distributed under the Creative Commons Attribution License, which permits", None, "CC-BY"),
        (None, "Attribution License (http://creativecommons.org/licenses/by/4.0)", None, "CC-BY-4.0"),
        (None, "This is an open access article under the CC BY-NC license.", None, "CC-BY-NC"),
        (None, None, "cc-by", "CC-BY"),
        (None, "All rights reserved.", "open-access", None),
        (None, None, None, None),
    ],
)
def test_normalise_licence(
    url: str | None, text: str | None, license_type: str | None, expected: str | None
) -> None:
    assert normalise_licence(url, text, license_type) == expected
