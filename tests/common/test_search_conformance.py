"""The search port's behaviour, the same tests on every backend (tasks.common.search).

``backend_factory`` makes empty backends of one kind: ``embedded`` always runs;
``elasticsearch`` runs when ``ES_URL`` points at a server (``infra/elasticsearch``) and is
skipped otherwise. Tests assert behaviour that both engines promise (who is found, in
which order), never score values, which differ by engine (tantivy's BM25 is 2.2x Lucene's,
Elasticsearch reports cosine as ``(1 + cos) / 2``).

The corpus: real paragraphs of the shared sample articles (when they are there) plus
made-up passages with invented words, so that the made-up cases cannot be disturbed by
real text. Vectors are random unit vectors with a fixed seed: no model runs.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.samples import sample_passages
from tasks.common.search.embedded import phrase
from tasks.common.search.embedded.backend import EmbeddedBackend
from tasks.common.search.embedded.sloppy import sloppy_frequency
from tasks.common.search.port import PASSAGE_SCHEMA, Hit, SearchBackend, SearchError, SearchUnavailable
from tests.conftest import SAMPLES, needs_samples

DIMS = 16
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")

# Invented words: no real passage contains them, so only the made-up passages can match.
MADE_UP = {
    "m-exact": "Samples were stored with zorblax quintor vellum before the analysis began.",
    "m-swapped": "Samples were stored with quintor zorblax vellum before the analysis began.",
    "m-far": "Zorblax was measured first and many hours later the quintor vellum appeared.",
    "m-fuzzy": "Biopsies confirmed quarblingtonite deposits in three of the patients.",
    "m-fuzzy-near": "Biopsies confirmed quarblingtonate deposits in three of the patients.",
    "m-short": "The zqvok assay was repeated twice.",
    "m-twin-b": "Twin passage with a vector identical to its sibling.",
    "m-twin-a": "Another twin passage sharing that very same vector.",
    "m-unicode": "Naïve café extracts and COVID-19 titres in 北京 cohorts.",
    # a 45-letter token between two words: the embedded index drops it but keeps its position
    "m-long": "Before " + "x" * 45 + " afterwards the glorbit was weighed.",
}
TWINS = ("m-twin-b", "m-twin-a")  # added in this order; a tie must still list m-twin-a first

Factory = Callable[[int], SearchBackend]


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(params=["embedded", pytest.param("elasticsearch", marks=pytest.mark.service)])
def backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """Makes new, empty backends of one kind (``dims`` → backend); drops them afterwards."""
    made: list[SearchBackend] = []

    def make(dims: int) -> SearchBackend:
        backend: SearchBackend
        if request.param == "embedded":
            backend = EmbeddedBackend.create(tmp_path / f"index-{len(made)}", dims)
        else:
            backend = _elasticsearch(dims)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        drop = getattr(backend, "drop", None)  # Elasticsearch: delete the test index
        if callable(drop):
            drop()
        backend.close()


def _elasticsearch(dims: int) -> SearchBackend:
    hint = "set ES_URL to run against Elasticsearch"
    if not os.environ.get("ES_URL"):
        pytest.skip(f"{hint}: ES_URL is not set")
    try:
        # the optional backend: imported late
        from tasks.common.search.elastic.backend import ElasticsearchBackend
    except ImportError as err:
        pytest.skip(f"{hint}: tasks.common.search.elastic.backend cannot be imported: {err}")
    try:
        backend: SearchBackend = ElasticsearchBackend.from_env(
            index_prefix=f"irforge-test-{uuid.uuid4().hex[:12]}", dims=dims
        )
    except SearchUnavailable as err:
        pytest.skip(f"{hint}: {err}")
    return backend


def real_passages() -> dict[str, str]:
    """Up to 200 distinct sample paragraphs of at least 40 words, in the samples' order."""
    if not (SAMPLES / "articles").is_dir():
        return {}
    out: dict[str, str] = {}
    seen: set[str] = set()
    for text in sample_passages(SAMPLES):
        if len(text.split()) >= 40 and text not in seen:
            seen.add(text)
            out[f"s-{len(out):04d}"] = text
            if len(out) == 200:
                break
    return out


@pytest.fixture(scope="module")
def corpus() -> dict[str, tuple[str, np.ndarray]]:
    """passage id -> (text, unit vector): real paragraphs plus the made-up passages."""
    texts = {**real_passages(), **MADE_UP}
    rng = np.random.default_rng(20240601)
    vectors = rng.standard_normal((len(texts), DIMS))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    out = {pid: (text, vectors[i].astype(np.float32)) for i, (pid, text) in enumerate(texts.items())}
    out[TWINS[1]] = (out[TWINS[1]][0], out[TWINS[0]][1].copy())
    return out


def batch(rows: Sequence[tuple[str, str, Any]]) -> pa.RecordBatch:
    """(passage id, text, vector as a list or array) rows as PASSAGE_SCHEMA; article = id's prefix."""
    return pa.RecordBatch.from_pydict(
        {
            "passage_id": [r[0] for r in rows],
            "article_id": [r[0].split("-")[0] for r in rows],
            "text": [r[1] for r in rows],
            "vector": [None if r[2] is None else [float(x) for x in r[2]] for r in rows],
        },
        schema=PASSAGE_SCHEMA,
    )


def load(backend: SearchBackend, corpus: dict[str, tuple[str, np.ndarray]]) -> SearchBackend:
    rows = [(pid, text, vec) for pid, (text, vec) in corpus.items()]
    # Two batches in two add() calls: a bulk load may come in pieces before finish().
    first = backend.add([batch(rows[: len(rows) // 2])])
    second = backend.add([batch(rows[len(rows) // 2 :])])
    backend.finish()
    assert first.failed == second.failed == []
    assert first.indexed + second.indexed == len(rows) == backend.count()
    return backend


@pytest.fixture
def loaded(backend_factory: Factory, corpus: dict[str, tuple[str, np.ndarray]]) -> SearchBackend:
    return load(backend_factory(DIMS), corpus)


def ids(hits: Sequence[Hit]) -> list[str]:
    return [h.passage_id for h in hits]


def assert_port_order(hits: Sequence[Hit]) -> None:
    """Ranks 1..n; score descending; equal scores by passage id ascending."""
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    for a, b in itertools.pairwise(hits):
        assert a.score > b.score or (a.score == b.score and a.passage_id < b.passage_id), (a, b)
    assert len(set(ids(hits))) == len(hits)


def own_sentences(corpus: dict[str, tuple[str, np.ndarray]], count: int) -> list[tuple[str, str]]:
    """(passage id, its longest sentence) for real passages whose sentence no other passage holds."""
    real = [(pid, text) for pid, (text, _) in corpus.items() if pid.startswith("s-")]
    picked = []
    for pid, text in real[:: max(1, len(real) // (3 * count))]:
        sentence = max(SENTENCE.split(text), key=len)
        if len(sentence.split()) >= 12 and not any(sentence in t for p, t in real if p != pid):
            picked.append((pid, sentence))
    return picked[:count]


# ----------------------------------------------------------------------------- lexical


@needs_samples
def test_own_sentence_ranks_its_passage_first(loaded: SearchBackend, corpus: dict[str, Any]) -> None:
    cases = own_sentences(corpus, 12)
    assert len(cases) >= 8, "the samples should yield enough distinctive sentences"
    queries = [sentence for _, sentence in cases]
    for name, results in (
        ("bm25", loaded.bm25(queries, 10)),
        ("phrase", loaded.phrase(queries, 0, 10)),
        ("phrase slop 2", loaded.phrase(queries, 2, 10)),
    ):
        for (pid, sentence), hits in zip(cases, results, strict=True):
            assert hits, f"{name}: nothing found for {sentence!r}"
            assert hits[0].passage_id == pid, f"{name}: {sentence!r} -> {ids(hits)[:3]}, not {pid}"
            assert_port_order(hits)


def test_phrase_slop_counts_moves(loaded: SearchBackend) -> None:
    query = ["zorblax quintor vellum"]
    assert ids(loaded.phrase(query, 0, 10)[0]) == ["m-exact"]
    # swapping two adjacent terms is two moves: found with slop 2, not with slop 1
    assert "m-swapped" not in ids(loaded.phrase(query, 1, 10)[0])
    assert sorted(ids(loaded.phrase(query, 2, 10)[0])) == ["m-exact", "m-swapped"]
    # zorblax eight positions before "quintor vellum": far beyond slop 2, but bm25 finds it
    assert "m-far" not in ids(loaded.phrase(query, 2, 10)[0])
    assert {"m-exact", "m-swapped", "m-far"} <= set(ids(loaded.bm25(query, 10)[0]))


def test_phrase_across_a_very_long_token(loaded: SearchBackend) -> None:
    # "before" and "afterwards" are two positions apart: the long token between them counts
    assert loaded.phrase(["before afterwards"], 0, 10) == [[]]
    assert ids(loaded.phrase(["before afterwards"], 1, 10)[0]) == ["m-long"]
    assert ids(loaded.phrase(["afterwards the glorbit"], 0, 10)[0]) == ["m-long"]


@needs_samples
def test_more_slop_never_loses_a_match(loaded: SearchBackend, corpus: dict[str, Any]) -> None:
    # slop 0 is an exact phrase, slop > 0 a sloppy one (two code paths in the embedded
    # backend): every match at some slop is a match at a larger one
    queries = [" ".join(sentence.split()[2:7]) for _, sentence in own_sentences(corpus, 12)]
    queries += ["of the", "the patients", "in the study", "zorblax quintor vellum", "vellum quintor"]
    by_slop = [loaded.phrase(queries, slop, 1000) for slop in (0, 1, 2, 4)]
    for q, results in enumerate(zip(*by_slop, strict=True)):
        found = [set(ids(hits)) for hits in results]
        assert all(a <= b for a, b in itertools.pairwise(found)), queries[q]
        for hits in results:
            assert_port_order(hits)


def test_fuzzy_finds_a_misspelt_long_word_that_bm25_does_not(loaded: SearchBackend) -> None:
    # one substitution from both quarblingtonite and quarblingtonate (15 letters: 2 edits allowed)
    misspelt = "quarblingtonote"
    assert loaded.bm25([misspelt], 10) == [[]]
    hits = loaded.fuzzy([misspelt], 10)[0]
    assert set(ids(hits)) == {"m-fuzzy", "m-fuzzy-near"}
    # exact spelling: both passages match, the exact term above the near one (same length)
    exact = loaded.fuzzy(["quarblingtonite"], 10)[0]
    assert ids(exact)[:2] == ["m-fuzzy", "m-fuzzy-near"]
    assert exact[0].score > exact[1].score


def test_fuzzy_auto_edit_budget(loaded: SearchBackend) -> None:
    # "zqvok" has 5 letters: AUTO allows one edit (a transposition counts as one)
    found = loaded.fuzzy(["zqvak", "zqvko", "zxvak", "zqvok", "zqvokzz"], 10)
    assert ids(found[0]) == ["m-short"]  # one substitution
    assert ids(found[1]) == ["m-short"]  # one transposition
    assert found[2] == []  # two substitutions: beyond AUTO for a 5-letter word
    assert ids(found[3]) == ["m-short"]
    assert ids(found[4]) == ["m-short"]  # 7 letters may be 2 edits away: two insertions
    assert loaded.bm25(["zqvak", "zqvko", "zxvak", "zqvokzz"], 10) == [[], [], [], []]


def test_k_is_respected_and_results_are_deterministic(loaded: SearchBackend) -> None:
    queries = ["the patients were treated", "analysis of samples", "zorblax quintor vellum"]
    for k in (1, 3, 25):
        runs = [
            (loaded.bm25(queries, k), loaded.phrase(queries, 2, k), loaded.fuzzy(queries, k))
            for _ in range(2)
        ]
        assert runs[0] == runs[1]
        for results in runs[0]:
            assert len(results) == len(queries)
            for hits in results:
                assert len(hits) <= k
                assert_port_order(hits)
        if k <= 3:  # common words match at least 3 passages, made-up ones alone included
            assert [len(h) for h in runs[0][0]] == [k, k, k]
    vectors = np.stack([np.ones(DIMS, dtype=np.float32), -np.ones(DIMS, dtype=np.float32)])
    for k in (1, 5):
        first, second = loaded.knn(vectors, k, 50), loaded.knn(vectors, k, 50)
        assert first == second
        assert [len(h) for h in first] == [k, k]


def test_batches_answer_each_query_in_place(loaded: SearchBackend) -> None:
    queries = ["zorblax quintor vellum", "", "vorp assay", "zorblax quintor vellum"]
    batched = loaded.bm25(queries, 5)
    assert [ids(h) for h in batched] == [ids(loaded.bm25([q], 5)[0]) for q in queries]
    assert batched[1] == []
    assert batched[0] == batched[3]


@pytest.mark.parametrize("blank", ["", "   ", "\n\t", "?!", "—"])
def test_empty_text_gives_an_empty_list(loaded: SearchBackend, blank: str) -> None:
    assert loaded.bm25([blank], 10) == [[]]
    assert loaded.phrase([blank], 2, 10) == [[]]
    assert loaded.fuzzy([blank], 10) == [[]]
    assert loaded.bm25([], 10) == []


SPECIAL = [
    '"unbalanced quote',
    "title:(zorblax OR quintor)",
    "a\\b \\",
    "C++ && || ! ~2 ^3 [1 TO 5] {x} /regex/ *wild? <tag>",
    "AND",
    "NOT OR -",
    "zorblax:quintor vellum)",
    "naïve café — 北京 😀 COVID-19",
    "\x00 control \x07 chars",
    "'single' `back` ;semi; #hash $dollar %pct @at",
]


def test_query_syntax_is_plain_text(loaded: SearchBackend) -> None:
    for results in (loaded.bm25(SPECIAL, 10), loaded.phrase(SPECIAL, 2, 10), loaded.fuzzy(SPECIAL, 10)):
        assert len(results) == len(SPECIAL)
        for hits in results:
            assert_port_order(hits)
    # syntax characters are separators, not operators: the words still match
    assert "m-exact" in ids(loaded.bm25(["title:(zorblax OR quintor)"], 10)[0])
    assert ids(loaded.phrase(['"zorblax quintor vellum"'], 0, 10)[0]) == ["m-exact"]
    assert ids(loaded.phrase(["covid-19 TITRES"], 0, 10)[0]) == ["m-unicode"]
    assert ids(loaded.bm25(["北京"], 10)[0]) == ["m-unicode"]
    assert ids(loaded.bm25(["NAÏVE"], 10)[0]) == ["m-unicode"]


# ----------------------------------------------------------------------------- vectors


def test_knn_own_vector_ranks_itself_first(loaded: SearchBackend, corpus: dict[str, Any]) -> None:
    pids = [pid for pid in corpus if pid not in TWINS][:: max(1, len(corpus) // 20)]
    vectors = np.stack([corpus[pid][1] for pid in pids])
    results = loaded.knn(vectors, 10, 100)
    for pid, hits in zip(pids, results, strict=True):
        assert hits[0].passage_id == pid
        assert len(hits) == 10
        assert_port_order(hits)


def test_knn_ties_go_by_passage_id(loaded: SearchBackend, corpus: dict[str, Any]) -> None:
    twin_vector = corpus[TWINS[0]][1]
    hits = loaded.knn(twin_vector[None, :], 5, 100)[0]
    assert ids(hits)[:2] == ["m-twin-a", "m-twin-b"]  # added b first; equal score -> id order
    assert hits[0].score == hits[1].score
    assert_port_order(hits)


def test_knn_normalises_queries_and_refuses_bad_ones(loaded: SearchBackend, corpus: dict[str, Any]) -> None:
    vector = corpus["m-exact"][1]
    assert ids(loaded.knn((3.5 * vector)[None, :], 3, 50)[0]) == ids(loaded.knn(vector[None, :], 3, 50)[0])
    for bad in (np.zeros((1, DIMS), np.float32), np.full((1, DIMS), np.nan, np.float32)):
        with pytest.raises(ValueError):
            loaded.knn(bad, 3, 50)
    with pytest.raises(ValueError):
        loaded.knn(np.ones((1, DIMS + 1), np.float32), 3, 50)
    with pytest.raises(ValueError):
        loaded.knn(vector[None, :], 10, 5)  # num_candidates < k
    assert loaded.knn(np.zeros((0, DIMS), np.float32), 3, 50) == []


# ----------------------------------------------------------------------------- loading


def test_add_reports_bad_rows_and_indexes_the_rest(backend_factory: Factory) -> None:
    backend = backend_factory(4)
    rows = [
        ("ok-1", "good row about zorblax", [1.0, 0.0, 0.0, 0.0]),
        ("dims", "wrong dimensions about zorblax", [1.0, 0.0, 0.0]),
        ("nan", "not a number about zorblax", [math.nan, 0.0, 1.0, 0.0]),
        ("ok-2", "good row, not unit length, about zorblax", [0.0, 3.0, 0.0, 4.0]),
        ("zero", "zero vector about zorblax", [0.0, 0.0, 0.0, 0.0]),
        ("none", "missing vector about zorblax", None),
        ("inf", "infinite about zorblax", [math.inf, 0.0, 0.0, 0.0]),
        ("ok-3", "good row about zorblax", [0.0, 0.0, 1.0, 0.0]),
    ]
    report = backend.add([batch(rows[:4]), batch(rows[4:])])
    backend.finish()
    failed = dict(report.failed)
    assert report.indexed + len(report.failed) == len(rows)  # rows in = indexed + failed
    assert report.indexed == 3 == backend.count()
    assert set(failed) == {"dims", "nan", "zero", "none", "inf"}
    assert all(reason for reason in failed.values())
    assert sorted(ids(backend.bm25(["zorblax"], 10)[0])) == ["ok-1", "ok-2", "ok-3"]
    # ok-2 was re-normalised: the query (0, .6, 0, .8) is the same direction
    assert backend.knn(np.array([[0.0, 0.6, 0.0, 0.8]], np.float32), 1, 10)[0][0].passage_id == "ok-2"


def test_nothing_is_searchable_before_finish(backend_factory: Factory) -> None:
    backend = backend_factory(4)
    assert backend.count() == 0
    backend.add([batch([("x", "zorblax", [1.0, 0.0, 0.0, 0.0])])])
    assert backend.count() == 0
    assert backend.bm25(["zorblax"], 5) == [[]]
    backend.finish()
    assert backend.count() == 1
    assert ids(backend.bm25(["zorblax"], 5)[0]) == ["x"]


# ----------------------------------------------------------------------------- embedded only


def minimal_window(doc: list[str], phrase: list[str]) -> int | None:
    """Oracle: the smallest max - min of (position - offset) over every way of placing the
    phrase's words on distinct positions of ``doc`` holding them (None: some word is missing)."""
    places = [[i for i, w in enumerate(doc) if w == word] for word in phrase]
    best: int | None = None
    for choice in itertools.product(*places):
        if len(set(choice)) == len(choice):
            shifted = [p - i for i, p in enumerate(choice)]
            window = max(shifted) - min(shifted)
            best = window if best is None else min(best, window)
    return best


@settings(max_examples=400, deadline=None)
@given(
    doc=st.lists(st.sampled_from("abcd"), min_size=1, max_size=9),
    phrase=st.lists(st.sampled_from("abcd"), min_size=2, max_size=4),
    slop=st.integers(0, 4),
)
def test_sloppy_frequency_matches_iff_the_phrase_fits_in_a_window(
    doc: list[str], phrase: list[str], slop: int
) -> None:
    positions = {w: [i for i, x in enumerate(doc) if x == w] for w in set(phrase)}
    freq = sloppy_frequency(phrase, positions, list(range(len(phrase))), slop)
    window = minimal_window(doc, phrase)
    assert (freq > 0) == (window is not None and window <= slop)
    if freq > 0:  # each counted match weighs 1 / (1 + length) with length <= slop
        assert freq >= 1 / (1 + slop)


def test_sloppy_frequency_by_hand() -> None:
    # "a b c" against "b a c": phrase positions a 1-0, b 0-1, c 2-2 -> window 2
    assert sloppy_frequency(list("abc"), {"a": [1], "b": [0], "c": [2]}, [0, 1, 2], 1) == 0
    assert sloppy_frequency(list("abc"), {"a": [1], "b": [0], "c": [2]}, [0, 1, 2], 2) == pytest.approx(1 / 3)
    # exact twice: "a b x a b" -> two matches of length 0
    assert sloppy_frequency(list("ab"), {"a": [0, 3], "b": [1, 4]}, [0, 1], 0) == pytest.approx(2.0)
    # a repeated word needs two distinct positions: "a a" is not in "x a x"
    assert sloppy_frequency(list("aa"), {"a": [1]}, [0, 1], 3) == 0


def test_embedded_index_reopens_with_identical_results(
    tmp_path: Path, corpus: dict[str, tuple[str, np.ndarray]]
) -> None:
    built = load(EmbeddedBackend.create(tmp_path / "index", DIMS), corpus)
    queries = ["zorblax quintor vellum", "the patients were treated", "quarblingtonote deposits"]
    vectors = np.stack([corpus["m-exact"][1], corpus[TWINS[0]][1]])

    def everything(b: SearchBackend) -> Any:
        return (b.bm25(queries, 20), b.phrase(queries, 2, 20), b.fuzzy(queries, 20), b.knn(vectors, 20, 50))

    before = everything(built)
    built.close()
    reopened = EmbeddedBackend.open(tmp_path / "index")
    assert reopened.count() == len(corpus)
    assert isinstance(reopened._corpus.vectors, np.memmap)  # vectors are memory-mapped, not loaded
    assert everything(reopened) == before
    with pytest.raises(SearchError, match="read-only"):
        reopened.add([batch([("new", "text", [1.0] * DIMS)])])
    reopened.close()


def test_embedded_add_after_finish_extends_the_index(tmp_path: Path) -> None:
    backend = EmbeddedBackend.create(tmp_path / "index", 2)
    backend.add([batch([("a", "alpha zorblax", [1.0, 0.0])])])
    backend.finish()
    report = backend.add([batch([("b", "beta zorblax", [0.0, 1.0]), ("a", "again", [1.0, 0.0])])])
    assert report.indexed == 1
    assert report.failed == [("a", "duplicate passage_id: already added to this index")]
    backend.finish()
    assert sorted(ids(backend.bm25(["zorblax"], 5)[0])) == ["a", "b"]
    assert ids(backend.knn(np.array([[0.0, 1.0]], np.float32), 1, 5)[0]) == ["b"]
    backend.close()
    assert EmbeddedBackend.open(tmp_path / "index").count() == 2


def test_embedded_refuses_non_empty_missing_or_corrupt_directories(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(SearchError, match="not an empty directory"):
        EmbeddedBackend.create(tmp_path / "busy", 4)
    with pytest.raises(SearchError, match="no index"):
        EmbeddedBackend.open(tmp_path / "missing")
    backend = EmbeddedBackend.create(tmp_path / "index", 2)
    backend.add([batch([("a", "alpha", [1.0, 0.0]), ("b", "beta", [0.0, 1.0])])])
    backend.finish()
    backend.close()
    manifest = tmp_path / "index" / "manifest.json"
    good = manifest.read_text()
    manifest.write_text(json.dumps({**json.loads(good), "count": 3}))
    with pytest.raises(SearchError, match="corrupt"):
        EmbeddedBackend.open(tmp_path / "index")
    manifest.write_text("{not json")
    with pytest.raises(SearchError, match="unreadable"):
        EmbeddedBackend.open(tmp_path / "index")
    manifest.write_text(good)
    (tmp_path / "index" / "vectors.npy").write_bytes(b"garbage")
    with pytest.raises(SearchError, match="corrupt"):
        EmbeddedBackend.open(tmp_path / "index")


@needs_samples
def test_embedded_narrowing_sloppy_candidates_changes_nothing(
    tmp_path: Path, corpus: dict[str, tuple[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Above a number of AND candidates a sloppy phrase narrows them in tantivy first (terms
    # near the rarest one); the test corpus is too small to get there, so force both ways.
    backend = load(EmbeddedBackend.create(tmp_path / "index", DIMS), corpus)
    queries = [" ".join(s.split()[1:6]) for _, s in own_sentences(corpus, 12)]
    queries += ["of the", "the of", "in the study", "patients with the", "zorblax quintor vellum"]
    monkeypatch.setattr(phrase, "REFINE_ABOVE", 10**9)
    plain = {slop: backend.phrase(queries, slop, 1000) for slop in (1, 2, 3)}
    monkeypatch.setattr(phrase, "REFINE_ABOVE", 0)
    assert {slop: backend.phrase(queries, slop, 1000) for slop in (1, 2, 3)} == plain
    assert sum(len(h) for h in plain[2]) > 0


def test_embedded_token_store_survives_its_own_separator(tmp_path: Path) -> None:
    # The token store analyses a batch as one string joined by a marker word; a passage
    # holding that word must still get its own positions.
    mark = "irforgepassageboundaryq7x9z"
    backend = EmbeddedBackend.create(tmp_path / "index", 2)
    rows = [
        ("a", f"first {mark} zorblax quintor", [1.0, 0.0]),
        ("b", "zorblax gap quintor", [0.0, 1.0]),
        ("c", f"{mark} alone", [1.0, 1.0]),
    ]
    backend.add([batch(rows)])
    backend.finish()
    assert ids(backend.phrase(["zorblax quintor"], 1, 5)[0]) == ["a", "b"]
    assert ids(backend.phrase([f"first {mark} quintor zorblax"], 2, 5)[0]) == ["a"]
    assert ids(backend.phrase([f"{mark} alone"], 1, 5)[0]) == ["c"]


def test_embedded_is_a_search_backend(tmp_path: Path) -> None:
    backend = EmbeddedBackend.create(tmp_path / "index", 4)
    assert isinstance(backend, SearchBackend)
    assert backend.name == "embedded" and backend.dims == 4
    backend.close()
    with pytest.raises(SearchError, match="closed"):
        backend.bm25(["x"], 1)
