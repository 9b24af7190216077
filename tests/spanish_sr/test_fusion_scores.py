"""The fast paths of :mod:`tasks.spanish_sr.fusion_scores` give exactly what the plain ones gave:
the top-N selection equals a full ``np.lexsort`` (ties at the cut included), and the BM25 scores
of every document equal :meth:`RankBm25.search` over every document, bit for bit, on the real
CT-EBM-SP abstracts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tasks.common.search.bm25_rank import RankBm25, encode_documents, encode_queries
from tasks.spanish_sr import fusion_scores as fs
from tasks.spanish_sr.analysis import Analyzer

DATA = Path(__file__).resolve().parents[2] / "data" / "spanish_sr" / "ct-ebm-sp"


def full_sort(scores: np.ndarray[Any, Any], order_ids: np.ndarray[Any, Any], n: int) -> list[int]:
    return np.lexsort((order_ids, -scores))[:n].tolist()  # type: ignore[no-any-return]


@pytest.mark.parametrize("levels", [3, 50, 10_000])
def test_top_n_equals_the_full_lexsort_with_ties_at_the_cut(levels: int) -> None:
    rng = np.random.default_rng(levels)
    for trial in range(40):
        size = int(rng.integers(1, 3000))
        scores = rng.integers(0, levels, size).astype(np.float64) / 7  # few levels: many ties
        scores[rng.random(size) < 0.3] = 0.0  # a block of zeros, like documents matching no term
        ids = rng.permutation(size).astype(np.int64)
        for n in {0, 1, 5, 37, 100, size // 9, size // 8, size - 1, size, size + 3}:
            if n >= 0:
                assert fs._top(scores, ids, n).tolist() == full_sort(scores, ids, n), (trial, n)


def test_top_n_when_every_score_ties_or_ids_repeat() -> None:
    scores = np.zeros(5000)
    ids = np.arange(5000, dtype=np.int64)[::-1].copy()
    assert fs._top(scores, ids, 100).tolist() == list(range(4999, 4899, -1))
    repeated = np.repeat(np.arange(1000, dtype=np.int64), 5)  # not a permutation: still lexsort's order
    scores[::3] = 1.5
    assert fs._top(scores, repeated, 100).tolist() == full_sort(scores, repeated, 100)
    scores[10:4990] = np.nan  # fewer than n numbers: lexsort puts NaN last
    assert fs._top(scores, ids, 100).tolist() == full_sort(scores, ids, 100)
    signed = np.where(np.arange(5000) % 3 == 0, -0.0, 0.0)  # -0.0 and 0.0 tie, as in lexsort
    assert fs._top(signed, ids, 10).tolist() == full_sort(signed, ids, 10) == list(range(4999, 4989, -1))


def real_records() -> tuple[list[str], list[str]]:
    titles, abstracts = [], []
    for path in sorted(DATA.glob("*.txt")):
        lines = [s for line in path.read_text(encoding="utf-8").splitlines() if (s := line.strip())]
        titles.append(lines[0])
        abstracts.append(" ".join(lines[1:]))
    return titles, abstracts


@pytest.mark.parametrize(
    "params",
    [fs.Bm25Params(1.2, 0.75), fs.Bm25Params(1.5, 0.75, "plus"), fs.Bm25Params(1.5, 0.3, "l", "es", True)],
    ids=["okapi", "plus", "l-folded"],
)
def test_bm25_scores_equal_the_search_over_every_document_bit_for_bit(params: fs.Bm25Params) -> None:
    titles, abstracts = real_records()
    assert len(abstracts) == 300
    analyzer = Analyzer("es", params.fold_accents)
    encoded = encode_documents(analyzer.documents(abstracts))
    ids = [f"r{i:03d}" for i in range(len(abstracts))][::-1]  # id order is not row order
    id_rank, index = fs.bm25_index(ids, encoded, params)
    assert id_rank.tolist() == list(range(299, -1, -1))
    queries = [*titles, "xyzzy", "paciente paciente paciente estudio", abstracts[0][:200]]
    q_terms, q_starts = encode_queries(analyzer.queries(queries), encoded[0])
    full, matches = index.all_scores(q_terms, q_starts)
    expected, counts = by_search(index, q_terms, q_starts)
    assert np.array_equal(full.view(np.int64), expected.view(np.int64))
    assert matches == counts
    assert matches[len(titles)] == 0 and min(matches[: len(titles)]) > 0
    assert (full[len(titles)] == index.constant(q_terms, q_starts)[len(titles)]).all()


def by_search(index: RankBm25, q_terms: Any, q_starts: Any) -> tuple[np.ndarray[Any, Any], list[int]]:
    """The scores as the exact search ranks them, every document asked for."""
    ranking = index.search(q_terms, q_starts, index.documents)
    full = np.repeat(index.constant(q_terms, q_starts)[:, None], index.documents, axis=1)
    for q, count in enumerate(ranking.counts):
        full[q, ranking.rows[q, :count]] = ranking.scores[q, :count]
    return full, [int(c) for c in ranking.counts]


def test_a_document_whose_negative_idf_terms_outweigh_the_others_scores_the_constant() -> None:
    # BM25Okapi: terms in most documents get the floor epsilon x mean idf, negative here
    docs = [["gato", "perro"]] * 3 + [["gato", "raton"]]
    vocabulary, tokens, starts = encode_documents(docs)
    _, index = fs.bm25_index(["a", "b", "c", "d"], (vocabulary, tokens, starts), fs.Bm25Params(1.2, 0.75))
    assert index.idf[vocabulary["gato"]] < 0 < index.idf[vocabulary["raton"]]
    q_terms, q_starts = encode_queries([["gato"] * 6 + ["raton"], ["raton"]], vocabulary)
    full, matches = index.all_scores(q_terms, q_starts)
    expected, counts = by_search(index, q_terms, q_starts)
    assert matches == counts == [0, 1]  # "d" holds "raton" but scores below 0 for the first
    assert np.array_equal(full, expected)
    assert full[0].tolist() == [0.0] * 4


def test_the_corpus_encoded_in_chunks_equals_it_encoded_at_once() -> None:
    _, abstracts = real_records()
    analyzer = Analyzer("es")
    vocabulary, tokens, starts = encode_documents(analyzer.documents([*abstracts, "", "¿?"]))
    for chunk in (1, 7, 300, 10_000):
        got = fs.encode_corpus(analyzer, [*abstracts, "", "¿?"], chunk)
        assert list(got[0].items()) == list(vocabulary.items())  # same ids, same order
        assert got[1].dtype == tokens.dtype and got[1].tolist() == tokens.tolist()
        assert got[2].dtype == starts.dtype and got[2].tolist() == starts.tolist()
    empty = fs.encode_corpus(analyzer, [])
    assert (empty[0], empty[1].tolist(), empty[2].tolist()) == ({}, [], [0])
