"""tasks.crossgenre.preprocess: words, terms, and the headline abbreviations of paper 003 §3.1."""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow as pa
import pytest
import Stemmer  # type: ignore[import-not-found]

from irforge.errors import ConfigError
from tasks.common.pubmed.local import scan_medline
from tasks.crossgenre.preprocess import (
    Expansion,
    analyse_corpus,
    analyse_queries,
    expansion_words,
    is_abbreviation,
    load_abbreviations,
    phrase_documents,
    plan_expansions,
    words,
)
from tests.crossgenre.conftest import MEDLINE

DICTIONARY = (
    Path(__file__).resolve().parents[2] / "data/crossgenre/abbreviations/wikipedia_abbreviation_database.csv"
)


@functools.lru_cache(maxsize=1)
def abstracts() -> list[str]:
    files = sorted(MEDLINE.rglob("*.xml.gz"))
    records = scan_medline([(f, f.name) for f in files])[1]
    return [records[p].abstract for p in sorted(records) if records[p].abstract]


def test_words_are_letter_and_digit_runs() -> None:
    flat, parent = words(
        ["COVID-19 raised HbA1c (p<0.05) in naïve β-cell donors’ ﬁles", "", "—", "Über 2 Tage"]
    )
    assert flat.to_pylist() == [
        "COVID", "19", "raised", "HbA1c", "p", "0", "05", "in", "naïve", "β", "cell", "donors", "files",
        "Über", "2", "Tage",
    ]  # fmt: skip
    assert parent.tolist() == [0] * 13 + [3] * 3  # the ligature ﬁ is NFKC's "fi"


def test_plain_and_pre_terms() -> None:
    text = "The STUDIES of Mice: women's running shoes, 3 trials; Über-Läufer"
    assert analyse_queries([text], "plain") == [
        ["the", "studies", "of", "mice", "women", "s", "running", "shoes", "3", "trials", "über", "läufer"]
    ]
    porter = Stemmer.Stemmer("porter")
    kept = ["studies", "mice", "women", "s", "running", "shoes", "3", "trials", "über", "läufer"]
    (pre,) = analyse_queries([text], "pre")  # "The" and "of" are stop words, whatever their case
    assert pre == [porter.stemWord(w) or w for w in kept]  # "s" stems to nothing: kept as is
    assert pre[:5] == ["studi", "mice", "women", "s", "run"]


def test_corpus_and_query_analysis_agree_on_real_abstracts() -> None:
    """The column-wise corpus path and the per-query path give every abstract the same terms."""
    texts = abstracts()[:300]
    for analysis in ("plain", "pre"):
        corpus = analyse_corpus(pa.array(texts, pa.large_string()), analysis)
        queries = analyse_queries(texts, analysis)
        for row, query in enumerate(queries):
            ids = corpus.tokens[corpus.starts[row] : corpus.starts[row + 1]]
            assert [corpus.terms[i] for i in ids] == query
    assert len(corpus.starts) == 301 and corpus.starts[-1] == len(corpus.tokens)


def test_corpus_terms_are_distinct_and_documents_may_be_empty() -> None:
    corpus = analyse_corpus(["", "the of and", "Cells cell CELLS"], "pre")
    assert corpus.starts.tolist() == [0, 0, 0, 3]
    assert corpus.terms == ["cell"] and corpus.tokens.tolist() == [0, 0, 0]
    assert analyse_corpus([], "plain").starts.tolist() == [0]


def test_the_real_dictionary() -> None:
    dictionary = load_abbreviations(DICTIONARY)
    assert len(dictionary) == 2266  # distinct abbreviations (data/crossgenre/abbreviations/LICENSE-NOTE.md)
    assert dictionary["BP"] == ("blood pressure", "bipolar disorder", "British Pharmacopoeia")
    assert dictionary["ā"] == ("before",)  # a pair listed twice is one long form
    assert "bp" not in dictionary  # case-sensitive


def test_a_bad_dictionary_names_its_file(tmp_path: Path) -> None:
    bad = tmp_path / "abbr.csv"
    bad.write_text("short,long\nBP,blood pressure\n")
    with pytest.raises(
        ConfigError, match=r"abbr\.csv: the abbreviation dictionary needs columns abr,long_form"
    ):
        load_abbreviations(bad)
    with pytest.raises(ConfigError, match=r"missing\.csv: cannot read"):
        load_abbreviations(tmp_path / "missing.csv")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [("BP", True), ("Tx", True), ("HbA1c", True), ("A1C", True), ("q6h", True), ("Ca", True),
     ("met", False), ("Post", False), ("A", False), ("a.a.", False), ("A/B", False), ("ab", False)],
)  # fmt: skip
def test_what_counts_as_an_abbreviation(entry: str, expected: bool) -> None:
    assert is_abbreviation(entry) is expected


HEADLINES = [
    "BP pills and MS relapses",
    "MS drug trial lowers BP",
    "Salt and BP: a new review",  # BP: 3 times; MS: 2 times (not more than twice)
    "US adults and us",  # US is a stop word whatever its case: never an abbreviation
    "US data on US adults in the US",
    "bp is not BP",  # case-sensitive: lower-case bp does not count
]


def test_plan_counts_case_sensitively_and_needs_min_count() -> None:
    dictionary = load_abbreviations(DICTIONARY)
    corpus = analyse_corpus(["blood pressure rose", "bipolar disorder", "high blood pressure"], "pre")
    plan = plan_expansions(HEADLINES, dictionary, 3, lambda terms: phrase_documents(corpus, terms))
    assert plan == [
        Expansion(
            "BP", 4, "blood pressure", ("blood pressure", "bipolar disorder", "British Pharmacopoeia"), 2
        )
    ]
    plan2 = plan_expansions(HEADLINES, dictionary, 2, lambda terms: phrase_documents(corpus, terms))
    assert [e.abbreviation for e in plan2] == ["BP", "MS"]
    assert plan_expansions(HEADLINES, dictionary, 5, lambda terms: phrase_documents(corpus, terms)) == []


def test_ambiguous_abbreviation_takes_the_long_form_the_corpus_holds() -> None:
    dictionary = load_abbreviations(DICTIONARY)
    assert dictionary["MS"][0] == "medical student"
    ms_corpus = analyse_corpus(
        ["multiple sclerosis relapse", "relapsing multiple sclerosis", "a student"], "pre"
    )
    plan = plan_expansions(HEADLINES, dictionary, 2, lambda terms: phrase_documents(ms_corpus, terms))
    ms = next(e for e in plan if e.abbreviation == "MS")
    assert ms.long_form == "multiple sclerosis" and ms.documents == 2
    nothing = analyse_corpus(["unrelated words"], "pre")
    plan = plan_expansions(HEADLINES, dictionary, 2, lambda terms: phrase_documents(nothing, terms))
    assert next(e for e in plan if e.abbreviation == "MS").long_form == "medical student"  # tie: the first
    # with min_documents, a long form no document writes is not used: the abbreviation stays
    guarded = plan_expansions(
        HEADLINES, dictionary, 2, lambda t: phrase_documents(nothing, t), min_documents=1
    )
    assert guarded == []
    kept = plan_expansions(
        HEADLINES, dictionary, 2, lambda t: phrase_documents(ms_corpus, t), min_documents=1
    )
    assert [(e.abbreviation, e.long_form) for e in kept] == [("MS", "multiple sclerosis")]


def test_expansion_in_queries() -> None:
    plan = [Expansion("BP", 3, "blood pressure", ("blood pressure",), 2)]
    assert analyse_queries(["The BP of US adults, not bp"], "pre", expansion_words(plan)) == [
        ["blood", "pressur", "adult", "bp"]
    ]
    assert analyse_queries(["The BP"], "plain", expansion_words(plan)) == [["the", "bp"]]  # plain: never


def test_phrase_documents() -> None:
    corpus = analyse_corpus(["a blood test", "blood pressure", "pressure and blood", "pressure"], "pre")
    phrases = [
        ["blood", "pressur"],
        ["pressur", "blood"],
        ["blood"],
        ["test", "blood"],
        ["nope"],
        [],
        ["pressur"] * 2,
    ]
    # "pressure and blood": the stop word is gone, so the two terms are adjacent; "test" ends
    # one document and "blood" starts the next: not a phrase
    assert phrase_documents(corpus, phrases) == [1, 1, 3, 0, 0, 0, 0]
