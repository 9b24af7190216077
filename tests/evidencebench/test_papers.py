"""The cited paper's candidate pool: real JATS articles, the released dev set's shape, edge cases."""

from __future__ import annotations

import json
import re
from collections import Counter
from itertools import groupby
from pathlib import Path

import pytest

from tasks.common.text.document import InputRejected
from tasks.evidencebench.paper_pool import PoolElement, candidate_pool_fields, paper_pool, read_paper_pool
from tests.conftest import SAMPLES, needs_samples

ARTICLES = SAMPLES / "articles"
DEV_SET = SAMPLES / "evidencebench" / "evidencebench_dev_set.json"
needs_dev_set = pytest.mark.skipif(
    not DEV_SET.is_file(), reason=f"the released EvidenceBench dev set is not at {DEV_SET}"
)

EHP = "ehp-116-1694.nxml"  # Environ Health Perspect 2008: structured abstract, untitled introduction
BMC = "1471-2180-11-174.nxml"  # BMC Microbiology 2011: tables, figures, back-matter sections


def _texts(pool: list[PoolElement]) -> list[str]:
    return [e.text for e in pool]


def _runs(types: list[str]) -> list[tuple[str, int]]:
    """("abstract", 12), ("normal_paragraph", 16), ("section_name", 2), ...: the pool's shape."""
    return [(kind, len(list(run))) for kind, run in groupby(types)]


def _article(body: str, abstract: str = "<abstract><p>One abstract sentence.</p></abstract>") -> bytes:
    return (
        '<article xmlns:mml="http://www.w3.org/1998/Math/MathML" article-type="research-article">'
        "<front><article-meta><title-group><article-title>A small paper</article-title></title-group>"
        f"{abstract}</article-meta></front>{body}</article>"
    ).encode()


# --- real articles ------------------------------------------------------------------------


@needs_samples
def test_ehp_article_pool_counts_types_and_sentences() -> None:
    pool = read_paper_pool(ARTICLES / EHP)
    assert Counter(e.type for e in pool) == {"abstract": 14, "section_name": 18, "normal_paragraph": 159}
    assert [e.index for e in pool] == list(range(len(pool)))
    # The structured abstract's part titles are elements typed "abstract", as in the released pools.
    assert pool[0] == PoolElement(0, "abstract", "Background", ("Abstract", "Background"), None)
    assert pool[8] == PoolElement(
        8,
        "abstract",
        "Minnows exposed to PBDE-47 had depressed plasma thyroxine (T4), but not 3,5,3′-triiodothyronine (T3).",
        ("Abstract", "Results"),
        3,
    )
    assert pool[9].text.startswith("This decline in T4 was accompanied")
    # The introduction has no title: its sentences follow the abstract directly.
    assert pool[14].type == "normal_paragraph" and pool[14].section_path == ()
    assert pool[14].text.startswith("Polybrominated diphenyl ethers (PBDEs) are added to plastics")
    assert pool[38:40] == [
        PoolElement(38, "section_name", "Materials and Methods", ("Materials and Methods",), None),
        PoolElement(
            39, "section_name", "Animals and housing", ("Materials and Methods", "Animals and housing"), None
        ),
    ]
    # A title with markup inside (T<sub>4</sub>) is still one section name.
    assert "T4 and T3 radioimmunoassays" in [e.text for e in pool if e.type == "section_name"]
    assert pool[-1].section_path == ("Discussion",)
    assert pool[-1].text.endswith("how PBDEs influence TH-mediated neural function.")


@needs_samples
def test_bmc_article_sections_are_their_own_elements() -> None:
    pool = read_paper_pool(ARTICLES / BMC)
    assert Counter(e.type for e in pool) == {"abstract": 13, "section_name": 18, "normal_paragraph": 190}
    titles = [(e.index, e.section_path) for e in pool if e.type == "section_name"]
    assert titles[:3] == [
        (13, ("Background",)),
        (54, ("Results",)),
        (60, ("Results", "Effect of allelic variation in holin sequence")),
    ]
    assert titles[-1] == (204, ("Methods", "Statistical analysis"))
    # Every section title is followed by its text (or a subsection's title), never by nothing.
    for index, _ in titles:
        assert index + 1 < len(pool)
    # Sentences of one paragraph share its paragraph index; titles have none.
    assert {e.paragraph for e in pool[55:60]} == {10}
    assert pool[56].text == (
        "These observations revealed a considerable amount of variation in lysis time for the wild-type (WT) "
        "λ phage (Table 1; Figure 2B)."
    )


@needs_samples
@pytest.mark.parametrize(
    ("name", "left_out"),
    [
        (EHP, "depressed circulating concentrations of total"),  # figure 1 caption
        (EHP, "toxicokinetics and reproductive effects"),  # a reference title
        (EHP, "The authors declare they have no competing financial interests."),  # author note
        (BMC, "Effects of holin allelic sequences on the stochasticity of lysis time."),  # table caption
        (BMC, "IN56 (WT)"),  # a table cell
        (BMC, "Schematic presentation of two models of holin hole formation"),  # figure caption
        (BMC, "The authors declare that they have no competing interests."),  # back matter
    ],
)
def test_figures_tables_and_back_matter_do_not_leak(name: str, left_out: str) -> None:
    assert left_out.encode() in (ARTICLES / name).read_bytes()  # the text is there to leak
    assert not any(left_out in text for text in _texts(read_paper_pool(ARTICLES / name)))


@needs_samples
def test_every_sample_article_gives_a_clean_pool() -> None:
    for path in sorted(ARTICLES.glob("*.*ml")):
        pool = read_paper_pool(path)
        types, texts = [e.type for e in pool], _texts(pool)
        assert "normal_paragraph" in types and "section_name" in types, path.name
        assert all(t == t.strip() and t for t in texts), path.name
        # All abstract elements come first, as one run.
        assert "abstract" not in types[types.count("abstract") :], path.name


@needs_samples
@needs_dev_set
@pytest.mark.parametrize(
    ("name", "dev_id"),
    [(EHP, "evidencebench_dev_id_0"), (BMC, "evidencebench_dev_id_8")],  # same journal families
)
def test_pool_shape_matches_released_pool_of_same_journal(name: str, dev_id: str) -> None:
    released = json.loads(DEV_SET.read_text())[dev_id]
    ours_texts, ours_types = candidate_pool_fields(read_paper_pool(ARTICLES / name))
    theirs_types = released["sentence_types_in_candidate_pool"]
    theirs_texts = released["paper_as_candidate_pool"]
    assert set(ours_types) == set(theirs_types) == {"abstract", "section_name", "normal_paragraph"}
    # Both: an abstract run, then body text in which titles only ever precede text.
    shape = re.compile(r"a+(n+)?(s+n+)+")
    code = {"abstract": "a", "section_name": "s", "normal_paragraph": "n"}
    assert shape.fullmatch("".join(code[t] for t in ours_types))
    assert shape.fullmatch("".join(code[t] for t in theirs_types))
    # The same opening: untitled introduction (EHP) or a titled one (BMC), then a section + subsection.
    ours_runs, theirs_runs = _runs(ours_types), _runs(theirs_types)
    assert [kind for kind, _ in ours_runs[:4]] == [kind for kind, _ in theirs_runs[:4]]
    first_title = ours_types.index("section_name")
    assert ours_texts[first_title] == theirs_texts[theirs_types.index("section_name")]


@needs_samples
@needs_dev_set
def test_bmc_structured_abstract_titles_typed_like_the_released_pool() -> None:
    released = json.loads(DEV_SET.read_text())["evidencebench_dev_id_8"]
    theirs = list(
        zip(released["paper_as_candidate_pool"], released["sentence_types_in_candidate_pool"], strict=True)
    )
    ours = [(e.text, e.type) for e in read_paper_pool(ARTICLES / BMC)]
    for title in ("Background", "Results", "Conclusion"):
        assert (title, "abstract") in theirs
    for title in ("Background", "Results", "Conclusions"):
        assert (title, "abstract") in ours


# --- handmade edge cases ------------------------------------------------------------------


def test_nested_sections_give_one_title_per_level_once() -> None:
    body = (
        "<body><p>Intro first. Intro second.</p>"
        "<sec><title>Methods</title><p>Methods text.</p>"
        "<sec><title>Cohort</title><sec><title>Inclusion</title><p>Adults only.</p></sec></sec>"
        "<sec><title>Analysis</title><p>We used R.</p></sec></sec>"
        "<sec><title>Results</title><p>It worked.</p></sec></body>"
    )
    pool = paper_pool(_article(body), "nested.xml")
    assert [(e.type, e.text) for e in pool] == [
        ("abstract", "One abstract sentence."),
        ("normal_paragraph", "Intro first."),
        ("normal_paragraph", "Intro second."),
        ("section_name", "Methods"),
        ("normal_paragraph", "Methods text."),
        ("section_name", "Cohort"),
        ("section_name", "Inclusion"),
        ("normal_paragraph", "Adults only."),
        ("section_name", "Analysis"),
        ("normal_paragraph", "We used R."),
        ("section_name", "Results"),
        ("normal_paragraph", "It worked."),
    ]
    assert pool[6].section_path == ("Methods", "Cohort", "Inclusion")
    assert [e.paragraph for e in pool] == [0, 1, 1, None, 2, None, None, 3, None, 4, None, 5]


def test_boxed_text_is_a_section_and_the_parent_title_is_not_repeated() -> None:
    body = (
        "<body><sec><title>Discussion</title><p>Before the box.</p>"
        "<boxed-text><caption><title>Key points</title></caption><p>Boxed sentence.</p></boxed-text>"
        "<p>After the box.</p></sec></body>"
    )
    pool = paper_pool(_article(body), "box.xml")
    assert [(e.type, e.text, e.section_path) for e in pool[1:]] == [
        ("section_name", "Discussion", ("Discussion",)),
        ("normal_paragraph", "Before the box.", ("Discussion",)),
        ("section_name", "Key points", ("Discussion", "Key points")),
        ("normal_paragraph", "Boxed sentence.", ("Discussion", "Key points")),
        ("normal_paragraph", "After the box.", ("Discussion",)),
    ]


def test_list_items_are_split_on_their_own() -> None:
    body = (
        "<body><sec><title>Aims</title><p>We had two aims:</p><list list-type='bullet'>"
        "<list-item><p>measure exposure in adults</p></list-item>"
        "<list-item><p>compare it with children. Then report both</p></list-item></list></sec></body>"
    )
    pool = paper_pool(_article(body), "list.xml")
    assert _texts(pool)[2:] == [
        "We had two aims:",
        "measure exposure in adults",
        "compare it with children.",
        "Then report both",
    ]
    assert [e.type for e in pool[2:]] == ["normal_paragraph"] * 4
    assert (pool[2].paragraph, pool[3].paragraph, pool[4].paragraph) == (1, 2, 2)


def test_formulas_figures_and_tables_inside_the_body() -> None:
    body = (
        "<body><sec><title>Model</title>"
        "<p>The rate is <inline-formula><mml:math><mml:mi>k</mml:mi></mml:math></inline-formula> per day. "
        "It is fixed.<disp-formula><tex-math>k = 2</tex-math></disp-formula></p>"
        "<fig id='f1'><label>Figure 1</label><caption><p>Secret caption text.</p></caption></fig>"
        "<table-wrap><caption><p>Table caption.</p></caption><table><tr><td>cell 42</td></tr></table>"
        "</table-wrap></sec></body>"
    )
    pool = paper_pool(_article(body), "formula.xml")
    assert _texts(pool)[1:] == ["Model", "The rate is [formula] per day.", "It is fixed."]


def test_section_with_only_a_figure_leaves_no_title() -> None:
    body = (
        "<body><sec><title>Text</title><p>Some text.</p></sec>"
        "<sec><title>Figures</title><fig><caption><p>Only a figure.</p></caption></fig></sec></body>"
    )
    assert _texts(paper_pool(_article(body), "figs.xml")) == ["One abstract sentence.", "Text", "Some text."]


def test_title_only_when_asked_and_author_summary_after_the_abstract() -> None:
    abstract = (
        "<abstract><p>Main abstract.</p></abstract>"
        "<abstract abstract-type='summary'><title>Author Summary</title><p>Plain words.</p></abstract>"
    )
    data = _article("<body><p>Body text.</p></body>", abstract)
    assert [(e.type, e.text) for e in paper_pool(data, "t.xml", include_title=True)] == [
        ("section_name", "A small paper"),
        ("abstract", "Main abstract."),
        ("abstract", "Author Summary"),
        ("abstract", "Plain words."),
        ("normal_paragraph", "Body text."),
    ]
    assert _texts(paper_pool(data, "t.xml"))[0] == "Main abstract."


def test_candidate_pool_fields_are_the_released_schema_columns() -> None:
    pool = paper_pool(
        _article("<body><sec><title>Design</title><p>Rats were dosed. Mice were not.</p></sec></body>"),
        "f.xml",
    )
    assert candidate_pool_fields(pool) == (
        ["One abstract sentence.", "Design", "Rats were dosed.", "Mice were not."],
        ["abstract", "section_name", "normal_paragraph", "normal_paragraph"],
    )
    with pytest.raises(ValueError, match="position 0 has index 1"):
        candidate_pool_fields(pool[1:])


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"<html><body><p>Not JATS.</p></body></html>", "not_jats"),
        (b"<article><front><article-meta>", "malformed_xml"),
        (_article(""), "no_body"),
        (_article("<body><fig><caption><p>Only a caption.</p></caption></fig></body>"), "no_body"),
    ],
)
def test_bad_input_is_rejected_naming_the_file(tmp_path: Path, data: bytes, reason: str) -> None:
    path = tmp_path / "paper-17.xml"
    path.write_bytes(data)
    with pytest.raises(InputRejected, match=rf"^{reason}: .*paper-17\.xml") as caught:
        read_paper_pool(path)
    assert caught.value.reason == reason
