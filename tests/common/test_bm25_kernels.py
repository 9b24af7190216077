"""The embedded backend's BM25 (tasks.common.search.bm25_kernels) against its oracle, tantivy's own search.

``EmbeddedBackend.bm25`` scores tantivy's BM25 from a precomputed matrix with pruning;
``EmbeddedBackend.bm25_tantivy`` runs the same ``should`` query in tantivy. Scores must
agree within 1e-5 (relative: tantivy sums float32 in its own order) and rankings must be
the same, except that passages whose scores are that close may swap. The kernel's pruning
is also checked exactly against an exhaustive numpy scorer that adds the same terms in the
same order.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bench.samples import sample_passages
from tasks.common.search import bm25_kernels
from tasks.common.search.embedded.backend import EmbeddedBackend
from tasks.common.search.port import PASSAGE_SCHEMA, Hit
from tests.conftest import SAMPLES, needs_samples

DIMS = 4
REL = 1e-5


def batch(rows: Sequence[tuple[str, str]]) -> pa.RecordBatch:
    rng = np.random.default_rng(len(rows))
    vectors = rng.standard_normal((len(rows), DIMS))
    return pa.RecordBatch.from_pydict(
        {
            "passage_id": [pid for pid, _ in rows],
            "article_id": [pid.split("-")[0] for pid, _ in rows],
            "text": [text for _, text in rows],
            "vector": [list(map(float, v)) for v in vectors],
        },
        schema=PASSAGE_SCHEMA,
    )


def build(directory: Path, rows: Sequence[tuple[str, str]], *, parts: int = 2) -> EmbeddedBackend:
    backend = EmbeddedBackend.create(directory, DIMS)
    step = max(1, -(-len(rows) // parts))
    for at in range(0, len(rows), step):
        assert backend.add([batch(rows[at : at + step])]).failed == []
    backend.finish()
    return backend


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


def assert_same_ranking(ours: list[Hit], oracle: list[Hit], more: list[Hit]) -> None:
    """``ours`` equals tantivy's top k (``oracle``) up to swaps among near-equal scores.

    ``more``: tantivy's ranking with a larger k, for ties across the cut."""
    assert [h.rank for h in ours] == list(range(1, len(ours) + 1))
    assert len(ours) == len(oracle)
    for a, b in zip(ours, oracle, strict=True):
        assert close(a.score, b.score), (a, b)
    for a, b in itertools.pairwise(ours):  # the port's order, exactly
        assert a.score > b.score or (a.score == b.score and a.passage_id < b.passage_id), (a, b)
    i = 0
    while i < len(oracle):
        j = i
        while j + 1 < len(oracle) and close(oracle[j + 1].score, oracle[i].score):
            j += 1
        mine = {h.passage_id for h in ours[i : j + 1]}
        if j + 1 < len(oracle):
            assert mine == {h.passage_id for h in oracle[i : j + 1]}, (i, ours[i : j + 1], oracle[i : j + 1])
        else:  # the last group may be cut: any passages tying with it in the longer list
            assert mine <= {h.passage_id for h in more if close(h.score, oracle[i].score)}
        i = j + 1


def check(backend: EmbeddedBackend, queries: list[str], k: int) -> int:
    """Compare with the oracle; returns how many queries have exactly the oracle's id list."""
    ours = backend.bm25(queries, k)
    oracle = backend.bm25_tantivy(queries, k)
    more = backend.bm25_tantivy(queries, k + 50)
    exact = 0
    for q, (a, b, c) in enumerate(zip(ours, oracle, more, strict=True)):
        try:
            assert_same_ranking(a, b, c)
        except AssertionError as err:
            raise AssertionError(f"query {queries[q]!r}, k={k}: {err}") from err
        exact += [h.passage_id for h in a] == [h.passage_id for h in b]
    return exact


# ----------------------------------------------------------------------------- field norms


def test_field_norm_table_is_tantivys() -> None:
    table = bm25_kernels.FIELD_NORMS
    assert table[:41].tolist() == list(range(41))
    assert table[41:50].tolist() == [42, 44, 46, 48, 50, 52, 54, 56, 60]
    assert int(table[255]) == 2_013_265_944
    assert np.all(np.diff(table.astype(np.int64)) > 0)
    ids = bm25_kernels.fieldnorm_ids(np.array([0, 1, 40, 41, 42, 43, 59, 60]))
    assert ids.tolist() == [0, 1, 40, 40, 41, 41, 48, 49]
    lengths = np.random.default_rng(0).integers(0, 2**31 - 1, size=1000)
    codes = bm25_kernels.fieldnorm_ids(lengths).astype(np.int64)
    assert np.all(table[codes] <= lengths)  # the largest code not above the length
    assert np.all((codes == 255) | (table[np.minimum(codes + 1, 255)] > lengths))


# ----------------------------------------------------------------------------- vs tantivy


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[EmbeddedBackend, list[str]]:
    """Up to 600 real sample paragraphs (each once), and queries cut from them."""
    if not (SAMPLES / "articles").is_dir():
        pytest.skip("shared samples are not there")
    texts = list(dict.fromkeys(t for t in sample_passages(SAMPLES) if len(t.split()) >= 20))[:600]
    rng = random.Random(7)
    order = list(range(len(texts)))
    rng.shuffle(order)  # passage ids not in row order: ties must go by id, not by row
    rows = [(f"s-{i:05d}", texts[i]) for i in order]
    backend = build(tmp_path_factory.mktemp("real") / "index", rows, parts=3)
    queries = []
    for _ in range(150):
        words = rng.choice(texts).split()
        size = rng.randint(1, min(14, len(words)))
        at = rng.randrange(len(words) - size + 1)
        queries.append(" ".join(words[at : at + size]))
    queries += [
        "of the",
        "the the the patients",
        "patients were treated and the results",
        "zqxwvk unknownterm of",
        "THE Patients, (were) treated!",
        texts[0],  # a whole passage as the query
    ]
    return backend, queries


@needs_samples
@pytest.mark.parametrize("k", [1, 10, 50])
def test_real_passages_rank_like_tantivy(real: tuple[EmbeddedBackend, list[str]], k: int) -> None:
    backend, queries = real
    exact = check(backend, queries, k)
    assert exact >= 0.9 * len(queries)  # swaps only among near-ties, which are rare


@needs_samples
def test_k_larger_than_the_corpus(real: tuple[EmbeddedBackend, list[str]]) -> None:
    backend, queries = real
    k = backend.count() + 100
    check(backend, [*queries[:20], "of the"], k)
    # a common word: every passage holding it comes back, and no more
    (hits,) = backend.bm25(["the"], k)
    assert len(hits) == len(backend.bm25_tantivy(["the"], k)[0]) > 100


def test_ties_go_by_passage_id(tmp_path: Path) -> None:
    # identical texts: identical scores, ranked by passage id whatever the row order
    rows = [
        ("p-9", "alpha beta gamma"),
        ("p-3", "alpha beta gamma"),
        ("p-5", "alpha beta gamma"),
        ("p-1", "alpha delta"),
        ("p-7", "alpha beta gamma"),
        ("p-2", "alpha delta"),
        ("p-0", "unrelated words only"),
        ("p-4", "gamma gamma gamma alpha"),
    ]
    backend = build(tmp_path / "index", rows, parts=3)
    (hits,) = backend.bm25(["alpha beta gamma"], 10)
    assert [h.passage_id for h in hits[:4]] == ["p-3", "p-5", "p-7", "p-9"]
    assert len({h.score for h in hits[:4]}) == 1
    for k in (1, 2, 3, 4, 5, 7, 10):
        check(backend, ["alpha beta gamma", "alpha", "delta alpha", "gamma", "alpha alpha"], k)
    # k cuts through a tie: the smallest ids are kept
    assert [h.passage_id for h in backend.bm25(["alpha delta"], 2)[0]] == ["p-1", "p-2"]
    assert [h.passage_id for h in backend.bm25(["alpha"], 3)[0]] == ["p-1", "p-2", "p-3"]


def test_empty_and_unknown_queries(tmp_path: Path) -> None:
    backend = build(tmp_path / "index", [("a-1", "red apples and green pears"), ("a-2", "green tea")])
    assert backend.bm25([], 5) == []
    assert backend.bm25(["", "   ", "?!", "zzzunknown", "qqq rrr"], 5) == [[], [], [], [], []]
    # unknown terms add nothing: the known ones alone decide
    assert backend.bm25(["green zzzunknown"], 5) == backend.bm25(["green"], 5)
    check(backend, ["green", "green green tea", "apples pears", "x" * 45 + " tea"], 5)
    with pytest.raises(ValueError, match="k must be at least 1"):
        backend.bm25(["green"], 0)


def test_empty_index(tmp_path: Path) -> None:
    backend = EmbeddedBackend.create(tmp_path / "index", DIMS)
    assert backend.bm25(["anything"], 3) == [[]]
    backend.finish()
    assert backend.bm25(["anything"], 3) == [[]]
    assert EmbeddedBackend.open(tmp_path / "index").bm25(["anything", ""], 3) == [[], []]


def test_reopen_and_extend(tmp_path: Path) -> None:
    rng = random.Random(3)
    vocabulary = [f"w{i}" for i in range(40)] + ["the"] * 30
    rows = [(f"d-{i:04d}", " ".join(rng.choices(vocabulary, k=rng.randint(1, 30)))) for i in range(300)]
    queries = [" ".join(rng.choices(vocabulary, k=rng.randint(1, 8))) for _ in range(60)]
    backend = build(tmp_path / "index", rows[:200])
    before = backend.bm25(queries, 15)
    check(backend, queries, 15)
    backend.close()
    reopened = EmbeddedBackend.open(tmp_path / "index")
    assert reopened.bm25(queries, 15) == before
    check(reopened, queries, 15)
    reopened.close()
    # more passages: N, df and the mean length change, so every weight does
    grown = EmbeddedBackend.create(tmp_path / "grown", DIMS)
    grown.add([batch(rows[:200])])
    grown.finish()
    grown.add([batch(rows[200:])])
    grown.finish()
    check(grown, queries, 15)
    assert EmbeddedBackend.open(tmp_path / "grown").bm25(queries, 15) == grown.bm25(queries, 15)


def test_batches_and_threads_agree(tmp_path: Path) -> None:
    rng = random.Random(5)
    vocabulary = [f"t{i}" for i in range(25)] + ["and", "of", "the"] * 10
    rows = [(f"r-{i:04d}", " ".join(rng.choices(vocabulary, k=rng.randint(3, 40)))) for i in range(400)]
    queries = [" ".join(rng.choices(vocabulary, k=rng.randint(1, 10))) for _ in range(100)]
    build(tmp_path / "index", rows).close()
    one = EmbeddedBackend.open(tmp_path / "index", threads=1)
    three = EmbeddedBackend.open(tmp_path / "index", threads=3)
    batched = three.bm25(queries, 7)
    assert batched == one.bm25(queries, 7) == [one.bm25([q], 7)[0] for q in queries]


# ----------------------------------------------------------------------------- the kernel


def reference(
    matrix: bm25_kernels.Bm25Matrix, terms: list[int], k: int, id_rank: np.ndarray
) -> list[tuple[int, float]]:
    """Exhaustive: every posting of every term, added in the kernel's order; (row, score)."""
    counts: dict[int, int] = {}
    for t in terms:
        if t >= 0:
            counts[t] = counts.get(t, 0) + 1
    order = sorted(counts, key=lambda t: (-counts[t] * matrix.max_weight[t], t))
    acc = np.zeros(len(id_rank), dtype=np.float64)
    for t in order:
        a, b = matrix.indptr[t], matrix.indptr[t + 1]
        acc[matrix.docs[a:b]] += counts[t] * matrix.weights[a:b].astype(np.float64)
    rows = np.flatnonzero(acc)
    scores = acc[rows].astype(np.float32)
    top = np.lexsort((id_rank[rows], -scores))[:k]
    return [(int(rows[j]), float(scores[j])) for j in top]


@pytest.mark.parametrize("seed", range(4))
def test_pruning_loses_nothing(seed: int) -> None:
    """The pruned kernel equals the exhaustive reference exactly, on corpora full of near-ties."""
    rng = np.random.default_rng(seed)
    n, n_terms = 3000, 60
    lengths = rng.integers(1, 60, size=n)
    # Zipf-like term frequencies: a few very common terms (dense rows), many rare ones
    p = 1.0 / np.arange(1, n_terms + 1)
    tokens = rng.choice(n_terms, size=int(lengths.sum()), p=p / p.sum()).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indexed = np.ones(n_terms, dtype=bool)
    indexed[n_terms - 1] = False  # as a 40+ byte term: no postings
    matrix = bm25_kernels.Bm25Matrix.build(tokens, starts, lengths.astype(np.int32), indexed)
    assert matrix.dense.shape[0] > 0 and matrix.max_weight[n_terms - 1] == 0
    id_rank = rng.permutation(n).astype(np.int64)
    by_rank = np.argsort(id_rank).astype(np.int64)
    queries = [rng.choice(n_terms, size=rng.integers(1, 12), p=p / p.sum()).tolist() for _ in range(200)]
    queries += [[], [-1], [n_terms - 1], [0, 0, 0], [-1, 5, -1, 5]]
    flat = np.array([t for q in queries for t in q], dtype=np.int32)
    q_starts = np.concatenate([[0], np.cumsum([len(q) for q in queries])]).astype(np.int64)
    for k in (1, 10, 100, n + 5):
        rows, scores, counts = bm25_kernels.search(matrix, flat, q_starts, k, id_rank, by_rank, 2)
        for q, terms in enumerate(queries):
            got = [
                (int(r), float(s)) for r, s in zip(rows[q, : counts[q]], scores[q, : counts[q]], strict=True)
            ]
            assert got == reference(matrix, terms, k, id_rank), (k, terms)
