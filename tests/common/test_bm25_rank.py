"""tasks.common.search.bm25_rank against its oracle, rank_bm25 itself (the tool of paper 003 §3.1).

For each query, our top k must be rank_bm25's: position by position, the rank_bm25 score of
our document equals the rank_bm25 score of rank_bm25's document at that position (to 1e-9
relative: two documents whose scores differ in the last bits may swap, as rank_bm25 sums in
another order), our scores equal ``get_scores`` to 1e-6, and our list holds exactly the
documents scoring above what a document holding no query term scores.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import rank_bm25  # type: ignore[import-untyped]
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tasks.common.pubmed.local import scan_medline
from tasks.common.search.bm25_rank import Params, RankBm25, Ranking, encode_documents, encode_queries

MEDLINE = Path(__file__).resolve().parents[2] / "data" / "crossgenre" / "medline"
ORACLES = {"okapi": rank_bm25.BM25Okapi, "plus": rank_bm25.BM25Plus, "l": rank_bm25.BM25L}


def oracle_of(docs: Sequence[Sequence[str]], params: Params) -> rank_bm25.BM25:
    kwargs: dict[str, float] = {"k1": params.k1, "b": params.b}
    if params.variant == "okapi":
        kwargs["epsilon"] = params.epsilon
    else:
        kwargs["delta"] = params.delta_value
    return ORACLES[params.variant](list(docs), **kwargs)


def ours(docs: Sequence[Sequence[str]], queries: Sequence[Sequence[str]], params: Params, k: int) -> Ranking:
    vocabulary, tokens, starts = encode_documents(docs)
    q_terms, q_starts = encode_queries(queries, vocabulary)
    return RankBm25.build(tokens, starts, len(vocabulary), params).search(q_terms, q_starts, k)


def floor_of(oracle: rank_bm25.BM25, params: Params, query: Sequence[str]) -> float:
    """What rank_bm25 gives a document holding no query term."""
    if params.variant != "plus":
        return 0.0
    return sum((oracle.idf.get(t) or 0) * params.delta_value for t in query)


def assert_same_top(
    docs: Sequence[Sequence[str]], queries: Sequence[Sequence[str]], params: Params, k: int
) -> None:
    got = ours(docs, queries, params, k)
    oracle = oracle_of(docs, params)
    for q, query in enumerate(queries):
        scores = np.asarray(oracle.get_scores(list(query)), dtype=np.float64)
        floor = floor_of(oracle, params, query)
        above = np.flatnonzero(scores > floor + 1e-9 * max(1.0, abs(floor)))
        expected = above[np.lexsort((above, -scores[above]))][:k]
        rows = got.rows[q, : got.counts[q]]
        assert len(rows) == len(expected), (q, query)
        assert len(set(rows.tolist())) == len(rows)
        np.testing.assert_allclose(got.scores[q, : got.counts[q]], scores[rows], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(scores[rows], scores[expected], rtol=1e-9, atol=1e-12)


def zipf_corpus(
    seed: int, docs: int, vocabulary: int, queries: int
) -> tuple[list[list[str]], list[list[str]]]:
    rng = np.random.default_rng(seed)

    def text(size: int, extra: int = 0) -> list[str]:
        words = rng.zipf(1.25, size=size)
        return [f"w{int(w)}" for w in words if w < vocabulary + extra]

    corpus = [text(int(rng.integers(0, 80))) for _ in range(docs)]
    return corpus, [text(int(rng.integers(1, 9)), extra=30) for _ in range(queries)]


@pytest.mark.parametrize("variant", ["okapi", "plus", "l"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_corpora_match_rank_bm25(variant: str, seed: int) -> None:
    corpus, queries = zipf_corpus(seed, docs=1500, vocabulary=400, queries=60)
    assert_same_top(corpus, queries, Params(variant), k=100)  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # rank_bm25: b = 1 and an empty document
@pytest.mark.parametrize(
    "params",
    [
        Params("okapi", k1=0.9, b=0.4, epsilon=0.5),
        Params("plus", k1=2.0, b=1.0, delta=0.5),
        Params("l", k1=1.2, b=0.0, delta=1.0),
        Params("plus", b=0.0),
    ],
)
def test_other_parameters_match_rank_bm25(params: Params) -> None:
    corpus, queries = zipf_corpus(7, docs=800, vocabulary=200, queries=40)
    assert_same_top(corpus, queries, params, k=50)


def test_few_words_many_ties_and_repeats() -> None:
    """A 6-word vocabulary: huge tie groups straddle every cut (windows grow until proven)."""
    rng = np.random.default_rng(3)
    corpus = [[f"t{int(w)}" for w in rng.integers(0, 6, size=int(rng.integers(0, 5)))] for _ in range(600)]
    queries = [["t0"], ["t1", "t1", "t2"], ["t5", "nope"], ["nope"], [], ["t3", "t4", "t0", "t3"]]
    for variant in ("okapi", "plus", "l"):
        assert_same_top(corpus, queries, Params(variant), k=25)


def test_a_sample_that_overestimates_the_kth_score() -> None:
    """The kernel guesses the k-th score from the first 8,192 rows: here they hold every high
    scorer, so fewer than k rows reach the guess and the query is summed again without one."""
    corpus = [["a", "a", "a"]] * 400 + [["a", "b", "c"]] * 39_600
    assert_same_top(corpus, [["a"], ["a", "b"]], Params("plus"), k=500)
    got = ours(corpus, [["a"]], Params("plus"), k=500)
    assert got.rows[0].tolist() == list(range(500))  # tf 3 first, then tf 1 by row


@pytest.mark.parametrize("variant", ["okapi", "plus", "l"])
def test_rows_past_the_sample_match_rank_bm25(variant: str) -> None:
    """More rows than the kernel's 8,192-row sample: the others are kept as their sums reach
    the guessed floor while the postings are added."""
    corpus, queries = zipf_corpus(21, docs=12_000, vocabulary=2_000, queries=30)
    assert_same_top(corpus, queries, Params(variant), k=100)  # type: ignore[arg-type]


def test_negative_weights_past_the_sample() -> None:
    """okapi, a negative mean idf: ``x`` and ``y`` weigh below 0, so a row's sum rises with
    ``w`` (the lowest id) and then falls; rows are kept on their final sums only."""
    rng = np.random.default_rng(5)
    corpus = [["w", "x", "y"]] + [
        [t for t, p in (("w", 0.03), ("x", 0.9), ("y", 0.8)) if rng.random() < p] for _ in range(11_999)
    ]
    oracle = rank_bm25.BM25Okapi(corpus)
    assert oracle.average_idf < 0
    assert_same_top(corpus, [["w", "x", "y"], ["w", "x"], ["x"]], Params("okapi"), k=100)


def test_identical_documents_rank_by_row() -> None:
    corpus = [["same", "words"]] * 100 + [["other"]]
    got = ours(corpus, [["words"]], Params("plus"), k=5)
    assert got.rows[0].tolist() == [0, 1, 2, 3, 4]
    assert got.counts.tolist() == [5]


def test_okapi_negative_idf_floor() -> None:
    """``common`` is in more than half the documents: rank_bm25 floors its idf at epsilon x mean idf."""
    corpus = [["common", "a"], ["common", "b"], ["common", "c"], ["common"], ["d"], ["common", "e", "e"]]
    oracle = rank_bm25.BM25Okapi(corpus)
    assert math_negative(oracle, "common")
    assert_same_top(corpus, [["common"], ["common", "e"], ["d", "common"]], Params("okapi"), k=6)


def math_negative(oracle: rank_bm25.BM25Okapi, word: str) -> bool:
    """The word's raw idf is negative (so rank_bm25 replaced it)."""
    n, df = oracle.corpus_size, sum(word in d for d in oracle.doc_freqs)
    return bool(np.log(n - df + 0.5) - np.log(df + 0.5) < 0)


def test_okapi_negative_mean_idf() -> None:
    """Most terms in most documents: the mean idf, hence the floor, is negative; documents
    holding only such terms score below 0 and are not candidates."""
    corpus = [["x", "y", "z"], ["x", "y", "z", "w"], ["x", "y"], ["x", "z", "v"], ["y", "z", "x"]]
    oracle = rank_bm25.BM25Okapi(corpus)
    assert oracle.average_idf < 0
    assert_same_top(corpus, [["x"], ["w", "x"], ["v", "w"], ["x", "y", "z"]], Params("okapi"), k=5)


def test_threads_do_not_change_results() -> None:
    corpus, queries = zipf_corpus(11, docs=1000, vocabulary=300, queries=200)
    vocabulary, tokens, starts = encode_documents(corpus)
    q_terms, q_starts = encode_queries(queries, vocabulary)
    index = RankBm25.build(tokens, starts, len(vocabulary), Params("plus"))
    one, two = index.search(q_terms, q_starts, 40, threads=1), index.search(q_terms, q_starts, 40, threads=2)
    assert np.array_equal(one.rows, two.rows) and np.array_equal(one.scores, two.scores)
    assert np.array_equal(one.counts, two.counts)


def test_a_query_scores_the_same_bits_in_any_batch() -> None:
    """Chunks of a stage search different batches of queries: each query's scores must not
    depend on the queries searched beside it (BM25+'s constant included)."""
    corpus, queries = zipf_corpus(12, docs=800, vocabulary=300, queries=120)
    vocabulary, tokens, starts = encode_documents(corpus)
    index = RankBm25.build(tokens, starts, len(vocabulary), Params("plus"))
    whole = index.search(*encode_queries(queries, vocabulary), 30)
    for first in (0, 37, 90):
        part = index.search(*encode_queries(queries[first : first + 23], vocabulary), 30)
        at = slice(first, first + 23)
        assert whole.scores[at].tobytes() == part.scores.tobytes()
        assert np.array_equal(whole.rows[at], part.rows) and np.array_equal(whole.counts[at], part.counts)


def test_an_index_saved_and_memory_mapped_searches_the_same(tmp_path: Path) -> None:
    from tasks.common.search import bm25_rank_files

    corpus, queries = zipf_corpus(13, docs=600, vocabulary=300, queries=50)
    vocabulary, tokens, starts = encode_documents(corpus)
    q_terms, q_starts = encode_queries(queries, vocabulary)
    for params in (Params("okapi"), Params("plus", k1=1.2, delta=0.5)):
        index = RankBm25.build(tokens, starts, len(vocabulary), params)
        bm25_rank_files.save(index, tmp_path / params.variant)
        mapped = bm25_rank_files.load(tmp_path / params.variant)
        assert mapped.params == params and not mapped.weights.flags.owndata  # the file's pages
        one, two = index.search(q_terms, q_starts, 25), mapped.search(q_terms, q_starts, 25)
        assert one.scores.tobytes() == two.scores.tobytes() and np.array_equal(one.rows, two.rows)


def test_an_index_of_the_former_format_is_refused(tmp_path: Path) -> None:
    """Format 1 (float32 weights + frequencies, no "format" key) must not load as if it were 2."""
    import json

    from tasks.common.search import bm25_rank_files

    vocabulary, tokens, starts = encode_documents([["a", "b"], ["b"]])
    bm25_rank_files.save(RankBm25.build(tokens, starts, len(vocabulary), Params()), tmp_path)
    params = tmp_path / bm25_rank_files.PARAMS
    saved = json.loads(params.read_text())
    del saved["format"]
    params.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="another format"):
        bm25_rank_files.load(tmp_path)


def test_id_rank_breaks_ties() -> None:
    corpus = [["a"], ["a"], ["a"], ["b"]]
    vocabulary, tokens, starts = encode_documents(corpus)
    q_terms, q_starts = encode_queries([["a"]], vocabulary)
    index = RankBm25.build(tokens, starts, len(vocabulary), Params("plus"), id_rank=np.array([2, 0, 1, 3]))
    assert index.search(q_terms, q_starts, 3).rows[0].tolist() == [1, 2, 0]


def test_bad_arguments() -> None:
    vocabulary, tokens, starts = encode_documents([["a"]])
    index = RankBm25.build(tokens, starts, len(vocabulary), Params())
    with pytest.raises(ValueError, match="k must be"):
        index.search(np.zeros(1, np.int32), np.array([0, 1]), 0)
    with pytest.raises(ValueError, match="out of range"):
        index.search(np.array([5], np.int32), np.array([0, 1]), 1)
    with pytest.raises(ValueError, match="at least one document"):
        RankBm25.build(np.zeros(0, np.int32), np.zeros(1, np.int64), 0, Params())


@functools.lru_cache(maxsize=1)
def medline_texts() -> tuple[list[str], list[str]]:
    """(abstracts, titles) of the real MEDLINE records of data/crossgenre/medline."""
    files = sorted(MEDLINE.rglob("*.xml.gz"))
    _entries, records = scan_medline([(p, p.name) for p in files])
    kept = [records[p] for p in sorted(records) if records[p].abstract]
    return [r.abstract for r in kept], [r.title for r in kept]


@pytest.mark.parametrize("variant", ["okapi", "plus"])
def test_real_abstracts_top_500(variant: str) -> None:
    """Real PubMed abstracts, lower-cased word tokens; titles of 30 of them as queries."""
    abstracts, titles = medline_texts()
    assert len(abstracts) > 900

    def words(text: str) -> list[str]:
        return [w for w in "".join(c.lower() if c.isalnum() else " " for c in text).split()]

    corpus = [words(a) for a in abstracts]
    queries = [words(t) for t in titles[::37][:30]]
    assert_same_top(corpus, queries, Params(variant), k=500)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    corpus=st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=7), min_size=1, max_size=30),
    query=st.lists(st.sampled_from("abcdefghij"), max_size=5),
    variant=st.sampled_from(["okapi", "plus", "l"]),
    k=st.integers(1, 12),
)
def test_property_small_corpora(corpus: list[list[str]], query: list[str], variant: str, k: int) -> None:
    assume(any(corpus))  # rank_bm25 divides by zero on a corpus without a single token
    assert_same_top(corpus, [query], Params(variant), k=k)  # type: ignore[arg-type]
