"""Harvesting evidence summaries from JATS reviews: handmade rules, the demo pair, real reviews."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tasks.common.text.document import InputRejected
from tasks.evidencebench.summaries import Harvest, harvest_review
from tests.conftest import REPO, SAMPLES

REVIEWS = SAMPLES / "reviews"
needs_reviews = pytest.mark.skipif(
    not (REVIEWS / "SOURCES.json").is_file(),
    reason=f"the shared sample reviews are not at {REVIEWS} (they live beside the checkout, not in it)",
)
DEMO = REPO / "data" / "evidence_demo"

_REFS = """
<ref id="R1"><label>1.</label><element-citation publication-type="journal"><article-title>First trial.</article-title>
  <pub-id pub-id-type="pmid">111</pub-id><pub-id pub-id-type="pmcid">12345</pub-id>
  <pub-id pub-id-type="doi">https://doi.org/10.1000/ABC.1</pub-id></element-citation></ref>
<ref id="R2"><label>2</label><element-citation><article-title>Second trial</article-title></element-citation></ref>
<ref id="R3"><label>3</label><element-citation><pub-id pub-id-type="doi">10.1000/c3</pub-id></element-citation></ref>
<ref id="R4"><label>4</label><element-citation publication-type="book"><source>A textbook</source></element-citation></ref>
"""


def _jats(body: str, refs: str = _REFS, licence: str = "") -> bytes:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<article xmlns:xlink="http://www.w3.org/1999/xlink" article-type="review-article">
<front><article-meta><article-id pub-id-type="doi">10.1000/REVIEW</article-id>
<title-group><article-title>A review</article-title></title-group>{licence}</article-meta></front>
<body>{body}</body><back><ref-list>{refs}</ref-list></back></article>""".encode()


def _cite(rid: str, label: str) -> str:
    return f'<xref ref-type="bibr" rid="{rid}">{label}</xref>'


def _units(harvest: Harvest) -> dict[str, tuple[str, tuple[str, ...]]]:
    """sentence → (outcome, cited refs): "kept" or the exclusion reason."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {
        k.sentence: ("kept", (k.cited_ref_id,)) for k in harvest.kept
    }
    out.update({e.sentence: (e.reason, e.cited_ref_ids) for e in harvest.excluded})
    return out


# --- the rules, on handmade snippets -------------------------------------------------------


def test_single_citation_is_kept_with_resolved_identifiers_and_spans() -> None:
    body = f"""<sec><title>Trials</title>
<p>Background without a citation. Falls fell by half in 200 adults [{_cite("R1", "1")}]. It was safe.</p>
</sec>"""
    licence = (
        '<permissions><license xlink:href="https://creativecommons.org/licenses/by/4.0/">'
        "<license-p>CC BY</license-p></license></permissions>"
    )
    harvest = harvest_review(_jats(body, licence=licence), "rev")
    assert harvest.review.doi == "10.1000/review"
    assert harvest.review.license == "CC-BY-4.0"
    [kept] = harvest.kept
    assert kept.unit_id == "rev:0:1"
    assert kept.sentence == "Falls fell by half in 200 adults [1]."
    assert kept.section_path == ("Trials",)
    assert (kept.cited_ref_id, kept.cited_label, kept.cited_title) == ("R1", "1", "First trial")
    assert (kept.cited_pmid, kept.cited_pmcid, kept.cited_doi) == ("111", "PMC12345", "10.1000/abc.1")
    assert kept.review_license == "CC-BY-4.0"
    assert kept.paragraph[kept.sentence_start : kept.sentence_end] == kept.sentence
    [(start, end)] = kept.citation_spans
    assert kept.paragraph[start:end] == "1"
    assert [(e.sentence, e.reason) for e in harvest.excluded] == [
        ("Background without a citation.", "no_citation"),
        ("It was safe.", "no_citation"),
    ]


def test_several_references_in_one_sentence_are_excluded() -> None:
    body = f"""<p>Two trials agreed [{_cite("R1", "1")}, {_cite("R2", "2")}].
One xref naming two ids <xref ref-type="bibr" rid="R2 R3">2,3</xref>.</p>"""
    units = _units(harvest_review(_jats(body), "rev"))
    assert units["Two trials agreed [1, 2]."] == ("multiple_citations", ("R1", "R2"))
    assert units["One xref naming two ids 2,3."] == ("multiple_citations", ("R2", "R3"))


@pytest.mark.parametrize(
    "written",
    [
        f"[{_cite('R1', '1')}\u2013{_cite('R3', '3')}]",  # [1–3]
        f"[{_cite('R1', '1')}]\u2013[{_cite('R3', '3')}]",  # [1]–[3]
        f"{_cite('R1', '[1]')}-{_cite('R3', '[3]')}",  # [1]-[3], brackets inside the xrefs
        _cite("R1", "1\u20133"),  # one xref whose text is the range
    ],
)
def test_a_range_cites_every_reference_between_its_ends(written: str) -> None:
    body = f"<sec><title>A</title><p>Three trials agreed {written}.</p></sec>"
    [excluded] = harvest_review(_jats(body), "rev").excluded
    assert (excluded.reason, excluded.cited_ref_ids) == ("multiple_citations", ("R1", "R2", "R3"))


def test_a_reference_inside_a_range_counts_as_cited_in_the_section() -> None:
    body = f"""<sec><title>A</title><p>Three trials agreed [{_cite("R1", "1")}&#x2013;{_cite("R3", "3")}].</p>
<p>The second one alone found more [{_cite("R2", "2")}].</p></sec>"""
    units = _units(harvest_review(_jats(body), "rev"))
    assert units["The second one alone found more [2]."] == ("cited_twice_in_section", ("R2",))


def test_a_reference_cited_twice_in_one_section_is_excluded_in_both_places() -> None:
    body = f"""<sec><title>Trials</title>
<p>The trial halved falls [{_cite("R1", "1")}].</p>
<p>Its follow-up was short [{_cite("R1", "1")}].</p>
</sec>
<sec><title>Surveys</title><p>A survey found the same [{_cite("R1", "1")}].</p></sec>"""
    harvest = harvest_review(_jats(body), "rev")
    units = _units(harvest)
    assert units["The trial halved falls [1]."] == ("cited_twice_in_section", ("R1",))
    assert units["Its follow-up was short [1]."] == ("cited_twice_in_section", ("R1",))
    assert units["A survey found the same [1]."] == ("kept", ("R1",))  # once in its own section
    detail = next(e.detail for e in harvest.excluded)
    assert "R1" in detail and "2 sentences" in detail


def test_section_scope_innermost_or_top() -> None:
    body = f"""<sec><title>Trials</title>
<sec><title>Adults</title><p>Falls halved [{_cite("R1", "1")}].</p></sec>
<sec><title>Children</title><p>No effect in children [{_cite("R1", "1")}].</p></sec>
</sec>"""
    innermost = harvest_review(_jats(body), "rev")
    assert [(k.section_path, k.sentence) for k in innermost.kept] == [
        (("Trials", "Adults"), "Falls halved [1]."),
        (("Trials", "Children"), "No effect in children [1]."),
    ]
    top = harvest_review(_jats(body), "rev", scope="top")
    assert top.kept == []
    assert {e.reason for e in top.excluded} == {"cited_twice_in_section"}


def test_unresolved_references_are_excluded_with_the_reason() -> None:
    body = f"""<p>Cited but missing [{_cite("R9", "9")}]. A textbook says so [{_cite("R4", "4")}].
Only a DOI is enough [{_cite("R3", "3")}]. Only a title is enough [{_cite("R2", "2")}].</p>"""
    harvest = harvest_review(_jats(body), "rev")
    units = _units(harvest)
    assert units["Cited but missing [9]."] == ("unresolved_reference", ("R9",))
    assert units["A textbook says so [4]."] == ("unresolved_reference", ("R4",))
    assert units["Only a DOI is enough [3]."] == ("kept", ("R3",))
    assert units["Only a title is enough [2]."] == ("kept", ("R2",))
    details = {e.detail for e in harvest.excluded}
    assert "rid 'R9' is not in the reference list" in details
    assert harvest.references["R4"].publication_type == "book"


def test_citation_placement_decides_its_sentence() -> None:
    body = f"""<p>Falls were halved. [{_cite("R1", "1")}] The next sentence cites nothing.</p>
<p>Falls were rare. <xref ref-type="bibr" rid="R2">(Doe et al., 2020)</xref> showed more.</p>"""
    units = _units(harvest_review(_jats(body), "rev"))
    # a numbered citation opening a sentence closes the sentence before it
    assert units["Falls were halved. [1]"] == ("kept", ("R1",))
    assert units["The next sentence cites nothing."] == ("no_citation", ())
    # an author-year citation opening a sentence is that sentence's subject
    assert units["(Doe et al., 2020) showed more."] == ("kept", ("R2",))
    assert units["Falls were rare."] == ("no_citation", ())


def test_figures_back_matter_and_other_xrefs_are_not_text() -> None:
    body = f"""<sec><title>Trials</title>
<p>The trial halved falls (<xref ref-type="fig" rid="f1">Fig. 1</xref>) [{_cite("R1", "1")}].</p>
<fig id="f1"><caption><p>Falls by arm [{_cite("R1", "1")}].</p></caption></fig>
<table-wrap><table><tr><td>Falls [{_cite("R1", "1")}]</td></tr></table></table-wrap>
</sec>
<sec><title>Acknowledgements</title><p>We thank the authors of [{_cite("R2", "2")}].</p></sec>"""
    harvest = harvest_review(_jats(body), "rev")
    assert [k.sentence for k in harvest.kept] == ["The trial halved falls (Fig. 1) [1]."]
    assert harvest.excluded == []


def test_context_is_the_neighbouring_paragraphs_of_the_same_section() -> None:
    body = f"""<sec><title>A</title><p>Other section.</p></sec>
<sec><title>B</title><p>Before one.</p><p>Before two.</p><p>The finding [{_cite("R1", "1")}].</p>
<p>After one.</p></sec><sec><title>C</title><p>Next section.</p></sec>"""
    [one] = harvest_review(_jats(body), "rev").kept
    assert (one.context_before, one.context_after) == (("Before two.",), ("After one.",))
    [two] = harvest_review(_jats(body), "rev", context_paragraphs=2).kept
    assert (two.context_before, two.context_after) == (("Before one.", "Before two."), ("After one.",))
    [none] = harvest_review(_jats(body), "rev", context_paragraphs=0).kept
    assert (none.context_before, none.context_after) == ((), ())
    assert none.paragraph_index == 3
    with pytest.raises(ValueError, match="context_paragraphs"):
        harvest_review(_jats(body), "rev", context_paragraphs=-1)


def test_a_list_inside_a_paragraph_splits_it() -> None:
    body = f"""<p>Two findings stand out:<list><list-item><p>falls fell [{_cite("R1", "1")}];</p></list-item>
<list-item><p>balance improved [{_cite("R2", "2")}].</p></list-item></list>These agree.</p>"""
    harvest = harvest_review(_jats(body), "rev")
    assert [(k.paragraph_index, k.sentence) for k in harvest.kept] == [
        (1, "falls fell [1];"),
        (2, "balance improved [2]."),
    ]
    assert [(e.paragraph_index, e.sentence) for e in harvest.excluded] == [
        (0, "Two findings stand out:"),
        (3, "These agree."),
    ]


def test_a_citation_alone_after_the_full_stop_is_no_sentence_of_its_own() -> None:
    body = f"<p>Falls were halved. [{_cite('R1', '1')}, {_cite('R2', '2')}]. Then nothing.</p>"
    harvest = harvest_review(_jats(body), "rev")
    assert [(e.sentence_index, e.sentence, e.reason, e.cited_ref_ids) for e in harvest.excluded] == [
        (0, "Falls were halved. [1, 2].", "multiple_citations", ("R1", "R2")),
        (1, "Then nothing.", "no_citation", ()),
    ]


def test_whitespace_and_entities_keep_offsets_right() -> None:
    body = f"<p>  Falls&#x2009;fell\n\n   by   half&amp;more  [ {_cite('R1', ' 1 ')} ] .  </p>"
    [kept] = harvest_review(_jats(body), "rev").kept
    assert kept.paragraph == "Falls fell by half&more [ 1 ] ."  # thin space is whitespace too
    [(start, end)] = kept.citation_spans
    assert kept.paragraph[start:end] == "1"


def test_malformed_xml_is_rejected() -> None:
    with pytest.raises(InputRejected) as err:
        harvest_review(b"<article><front>", "rev")
    assert err.value.reason == "malformed_xml"


# --- the demo pair -----------------------------------------------------------------------


def test_demo_review_harvest() -> None:
    harvest = harvest_review((DEMO / "review.xml").read_bytes(), "demo")
    assert harvest.review.license == "CC0-1.0"
    assert harvest.review.pmid == "91000100"
    kept = {k.cited_ref_id: k for k in harvest.kept}
    assert sorted(kept) == ["R3", "R4", "R5"]
    assert (kept["R3"].cited_pmid, kept["R3"].cited_pmcid, kept["R3"].cited_doi) == (
        "91000003",
        "PMC0091003",
        "10.5555/irforge.evidence-demo.3",
    )
    assert kept["R4"].cited_doi == "10.5555/irforge.evidence-demo.4"  # written in capitals in the file
    assert kept["R3"].sentence.startswith("In a randomised trial of 212 adults")
    assert kept["R3"].context_after[0].startswith("Tablet-guided exercise")
    reasons = Counter((e.reason, e.cited_ref_ids) for e in harvest.excluded if e.cited_ref_ids)
    assert reasons == Counter(
        {
            ("multiple_citations", ("R1", "R2")): 1,
            ("multiple_citations", ("R7", "R8", "R9")): 1,
            ("cited_twice_in_section", ("R6",)): 2,
        }
    )
    # every cited paper that the demo supplies is one of the kept summaries
    supplied = {path.stem for path in (DEMO / "papers").glob("*.xml")}
    assert supplied == {"91000003", "91000004"}
    assert supplied <= {k.cited_pmid for k in harvest.kept}


# --- real reviews ----------------------------------------------------------------------------


def _real(name: str) -> Harvest:
    path: Path = REVIEWS / name
    return harvest_review(path.read_bytes(), path.stem)


@needs_reviews
def test_real_review_molecular_cancer() -> None:
    harvest = _real("10_1186_s12943-025-02501-9.xml")
    assert (harvest.review.pmcid, harvest.review.pmid) == ("PMC12625062", "41250091")
    assert harvest.review.license == "CC-BY-4.0"
    assert len(harvest.references) == 126
    kept = {k.cited_ref_id: k for k in harvest.kept}
    amivantamab = kept["CR10"]
    assert amivantamab.section_path == ("Introduction",)
    assert amivantamab.sentence.startswith(
        "An example of the success of this approach is illustrated by Amivantamab"
    )
    assert amivantamab.sentence.endswith("non-small cell lung cancer treatment [10].")
    assert (amivantamab.cited_pmid, amivantamab.cited_doi) == ("34339292", "10.1200/jco.21.00662")
    assert amivantamab.cited_title is not None and amivantamab.cited_title.startswith(
        "Amivantamab in EGFR exon 20"
    )
    assert kept["CR2"].sentence.startswith("BsAbs are available in a variety of formats [2]")
    assert (kept["CR2"].cited_pmid, kept["CR2"].cited_doi) == ("38106416", "10.3389/fimmu.2023.1291836")
    excluded = {(e.reason, e.cited_ref_ids) for e in harvest.excluded}
    assert ("multiple_citations", ("CR59", "CR60", "CR61", "CR62")) in excluded  # written [59–62]
    assert ("multiple_citations", ("CR1", "CR3")) in excluded
    assert ("cited_twice_in_section", ("CR1",)) in excluded  # [1] twice in the Introduction
    assert "CR1" not in kept
    assert {e.reason for e in harvest.excluded} == {
        "no_citation",
        "multiple_citations",
        "cited_twice_in_section",
    }


@needs_reviews
def test_real_review_plos_one_books_are_unresolved() -> None:
    harvest = _real("journal.pone.0016976.xml")
    assert harvest.review.doi == "10.1371/journal.pone.0016976"
    kept = {k.cited_ref_id: k for k in harvest.kept}
    cochrane = kept["pone.0016976-Meremikwu1"]
    assert cochrane.sentence == (
        "A Cochrane review published in 2008 reviewed the efficacy and safety of chemoprophylaxis "
        "and IPT in children [6]."
    )
    assert cochrane.cited_title is not None and cochrane.cited_title.startswith(
        "Chemoprophylaxis and intermittent"
    )
    assert cochrane.cited_doi is None and cochrane.cited_pmid is None  # PLOS 2011: titles only
    unresolved = {e.cited_ref_ids for e in harvest.excluded if e.reason == "unresolved_reference"}
    assert ("pone.0016976-Kirkwood1",) in unresolved  # a statistics textbook: no article title


@needs_reviews
def test_every_sentence_of_every_real_review_is_accounted_for() -> None:
    for path in sorted(REVIEWS.glob("*.xml")):
        harvest = harvest_review(path.read_bytes(), path.stem)
        ids = [k.unit_id for k in harvest.kept] + [e.unit_id for e in harvest.excluded]
        assert len(ids) == len(set(ids)), path.name
        assert harvest.kept, path.name
        for k in harvest.kept:
            assert k.paragraph[k.sentence_start : k.sentence_end] == k.sentence
            assert all(k.sentence_start <= s < e <= k.sentence_end for s, e in k.citation_spans), k.unit_id
