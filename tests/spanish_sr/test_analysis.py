"""The batch analysis (tasks/spanish_sr/analysis.py: ``documents``, ``queries``, each distinct
piece analysed once) gives exactly the per-word path's terms (``document``, ``query``, the
oracle) on every real record: the CT-EBM-SP texts (data/spanish_sr/ct-ebm-sp and the 720 of
../shared/corpora/ct-ebm-sp, see its SOURCES.md) and the English Cohen 2006 abstracts."""

from __future__ import annotations

import csv
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from tasks.common.search.bm25_rank import encode_documents
from tasks.spanish_sr import analysis
from tasks.spanish_sr.analysis import Analyzer
from tests.spanish_sr.conftest import CT_EBM_SP, DATA

SHARED_CT_EBM_SP = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "ct-ebm-sp"
SR_SCREENING = DATA / "spanish_sr" / "sr-screening" / "Antihistamines.csv"

# Pieces that test the splitting: operators glued to brackets, underscores, NFD accents, a
# no-break space and other Unicode spaces, digits, empty and missing texts.
ODD = [
    "(caries O fluor) Y NO adultos",
    "depresion Y ninos Y Mexico; NOT the Y",
    "mal_oclusión foo__bar _x_",
    unicodedata.normalize("NFD", "niños pequeños con depresión"),
    "niños\u00a0años\u2003más\u3000menos\u2028línea",
    "¿Qué? ¡No! 3,5 mg/kg-día (IC95%: 1,2–2,4)",
    "",
    None,
    "   ",
    "Y",
]


def spanish_texts() -> list[str]:
    paths = sorted(CT_EBM_SP.glob("*.txt")) + sorted(SHARED_CT_EBM_SP.rglob("*.txt"))
    return [p.read_text(encoding="utf-8") for p in paths]


def english_texts() -> list[str]:
    with SR_SCREENING.open(encoding="utf-8", newline="") as f:
        return [f"{row['title']} {row['abstract']}" for row in csv.DictReader(f)]


@pytest.mark.parametrize("fold", [False, True])
def test_spanish_documents_and_queries_equal_the_per_word_path(fold: bool) -> None:
    texts = spanish_texts()
    # The oracle sees every real record: data/'s 300, and shared's too where it lies beside the
    # checkout (CI; a clone elsewhere has data/'s only).
    assert len(texts) >= (1000 if SHARED_CT_EBM_SP.is_dir() else 300)
    texts += ODD  # type: ignore[arg-type]
    batch, oracle = Analyzer("es", fold), Analyzer("es", fold)
    # Two batches on one analyzer: the second meets a warm cache.
    half = len(texts) // 2
    got = batch.documents(texts[:half]) + batch.documents(texts[half:])
    for i, text in enumerate(texts):
        assert got[i] == oracle.document(text), f"record {i}"
    titles = [t.strip().splitlines()[0] if t and t.strip() else t for t in texts]
    got_q = batch.queries(titles)
    for i, title in enumerate(titles):
        assert got_q[i] == oracle.query(title), f"title {i}"


def test_english_documents_equal_the_per_word_path() -> None:
    texts = english_texts()
    assert len(texts) > 300
    batch, oracle = Analyzer("en"), Analyzer("en")
    assert batch.documents(texts) == [oracle.document(t) for t in texts]
    assert batch.queries(ODD) == [oracle.query(t) for t in ODD]


def test_a_full_cache_starts_afresh_and_stays_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "CACHE_PIECES", 50)
    texts = spanish_texts()[:40]
    batch, oracle = Analyzer("es"), Analyzer("es")
    for at in range(0, len(texts), 7):
        chunk = texts[at : at + 7]
        assert batch.documents(chunk) == [oracle.document(t) for t in chunk]
        assert len(batch._cache) <= max(50, len({p for t in chunk for p in t.split()}))


def test_queries_drop_operators_documents_keep_them() -> None:
    a = Analyzer("es")
    # Checked by hand: "Y"/"NO" in upper case are operators in a query, stop words in lower case.
    assert a.queries(["(caries O fluor) Y NO adultos"]) == [["cari", "fluor", "adult"]]
    assert a.documents(["depresion Y ninos"]) == [["depresion", "nin"]]  # "y" is a stop word
    assert a.queries(["NOT the"]) == [["the"]]  # the Spanish profile also drops English operators


@pytest.mark.parametrize("fold", [False, True])
def test_encoded_documents_equal_the_encoded_per_word_terms(fold: bool) -> None:
    texts: list[str | None] = [*spanish_texts(), *ODD]
    batch, oracle = Analyzer("es", fold), Analyzer("es", fold)
    vocabulary, tokens, starts = batch.encode_documents(texts)
    expected = encode_documents([oracle.document(t) for t in texts])
    assert vocabulary == expected[0]
    assert list(vocabulary) == list(expected[0])  # first seen, first numbered
    assert tokens.dtype == expected[1].dtype and np.array_equal(tokens, expected[1])
    assert starts.dtype == expected[2].dtype and np.array_equal(starts, expected[2])


def test_encoding_nothing_and_only_stop_words() -> None:
    a = Analyzer("es")
    for texts in ([], [None, "", "la de y"], ["la", "niños", None]):
        got, expected = a.encode_documents(texts), encode_documents([a.document(t) for t in texts])
        assert got[0] == expected[0]
        assert np.array_equal(got[1], expected[1]) and np.array_equal(got[2], expected[2])
