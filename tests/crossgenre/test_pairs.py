"""Stage ``pairs`` (paper 003 §3.2): label counts per query, train-only rows, augmentation limits.

Real PubMed abstracts, headlines written from the cited titles, and candidate lists made by
hand so that each rule has a case: a cited abstract ranked third, one missed in train
(added back) and one missed in test (no row), a query without candidates, a split row
without a claim.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from irforge.artifacts import Artifact
from irforge.engine import StageOutcome
from tasks.crossgenre.augment import AugmentConfig
from tasks.crossgenre.stages import pairs
from tasks.crossgenre.stages.pairs import PairsConfig
from tests.crossgenre.collection import Collection, Query, changed_tokens, headline_of, medline_docs
from tests.crossgenre.conftest import run_one

DOCS = medline_docs(40)
IDS = [d["doc_id"] for d in DOCS]
TITLE = {d["doc_id"]: d["title"] for d in DOCS}
ABSTRACT = {d["doc_id"]: d["abstract"] for d in DOCS}
N, M = 4, 4  # negatives and augmented headlines per query: the paper's (4, 10) with n = 4 here


def _query(qid: str, split: str, *cited: int) -> Query:
    return Query(qid, split, tuple(IDS[i] for i in cited), headline_of(TITLE[IDS[cited[0]]]))


QUERIES = [
    _query("q1", "train", 0),
    _query("q2", "train", 1, 2),
    _query("q3", "train", 3),
    _query("q4", "dev", 4),
    _query("q5", "test", 5),
    _query("q6", "test", 6),
]
NEGATIVE_POOL = IDS[10:]


def _ranking(qid: str, cited_at: dict[int, int]) -> list[tuple[str, float]]:
    """12 distractors (a rotation per query) with cited docs (index → 1-based rank) put in."""
    start = int(qid[1:]) * 3
    ranked = [NEGATIVE_POOL[(start + i) % len(NEGATIVE_POOL)] for i in range(12)]
    for doc, rank in sorted(cited_at.items(), key=lambda kv: kv[1]):
        ranked.insert(rank - 1, IDS[doc])
    return [(doc, 30.0 - i) for i, doc in enumerate(ranked)]


RANKINGS = {
    "q1": {"plus_pre": _ranking("q1", {0: 3}), "okapi": _ranking("q2", {0: 1})},
    "q2": {"plus_pre": _ranking("q2", {1: 1})},  # IDS[2] missed: added back (train)
    "q3": {"plus_pre": _ranking("q3", {})},  # missed: added back (train)
    "q4": {"plus_pre": _ranking("q4", {4: 5})},
    "q5": {"plus_pre": _ranking("q5", {})},  # missed in test: no positive row
    # q6: no candidates at all
}
COLLECTION = Collection(
    DOCS,
    QUERIES,
    RANKINGS,
    extra_splits=[{"query_id": "q7", "split": "train", "group_id": "q7"}],  # no claim
)
CONFIG = PairsConfig(negatives=N, augmented=M, augment=AugmentConfig(min_count=2))


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Artifact]:
    return COLLECTION.publish(tmp_path_factory.mktemp("pairs-up"))


@pytest.fixture(scope="module")
def outcome(upstream: dict[str, Artifact], tmp_path_factory: pytest.TempPathFactory) -> StageOutcome:
    return run_one(tmp_path_factory.mktemp("pairs"), pairs.SPEC, CONFIG, upstream)


def _rows(outcome: StageOutcome) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = outcome.artifact.read().to_pylist()
    return rows


def _kinds(rows: list[dict[str, Any]], qid: str) -> Counter[tuple[str, int]]:
    return Counter((r["kind"], r["label"]) for r in rows if r["query_id"] == qid)


def test_label_counts_per_query(outcome: StageOutcome) -> None:
    rows = _rows(outcome)
    assert _kinds(rows, "q1") == {("cited", 1): 1, ("negative", 0): N, ("augmented", 1): M}
    assert _kinds(rows, "q2") == {
        ("cited", 1): 1,
        ("added_back", 1): 1,
        ("negative", 0): N,
        ("augmented", 1): 2 * M,
    }
    assert _kinds(rows, "q3") == {("added_back", 1): 1, ("negative", 0): N, ("augmented", 1): M}
    assert _kinds(rows, "q4") == {("cited", 1): 1, ("negative", 0): N}
    assert _kinds(rows, "q5") == {("negative", 0): N}  # the missed abstract is not added back in test
    assert {r["query_id"] for r in rows} == {"q1", "q2", "q3", "q4", "q5"}
    excluded = {r["query_id"]: (r["reason"], r["split"]) for r in outcome.artifact.excluded().to_pylist()}
    assert excluded == {"q6": ("no_candidates", "test"), "q7": ("no_headline", "train")}
    manifest = outcome.manifest["counts"]
    assert (manifest["units_in"], manifest["units_kept"], manifest["units_excluded"]) == (7, 5, 2)


def test_rows_are_the_right_documents_in_order(outcome: StageOutcome) -> None:
    rows = _rows(outcome)
    q1 = [r for r in rows if r["query_id"] == "q1" and r["kind"] != "augmented"]
    ranked = [doc for doc, _score in RANKINGS["q1"]["plus_pre"]]  # the plus_pre list, not okapi's
    assert [(r["doc_id"], r["rank"]) for r in q1] == [
        (IDS[0], 3),
        (ranked[0], 1),
        (ranked[1], 2),
        (ranked[3], 4),
        (ranked[4], 5),
    ]
    q2 = [(r["doc_id"], r["kind"], r["rank"]) for r in rows if r["query_id"] == "q2"][:2]
    assert q2 == [(IDS[1], "cited", 1), (IDS[2], "added_back", None)]
    for r in rows:
        assert r["document"] == ABSTRACT[r["doc_id"]]
        assert r["split"] == next(q.split for q in QUERIES if q.query_id == r["query_id"])
        if r["kind"] != "augmented":
            assert r["query"] == next(q.headline for q in QUERIES if q.query_id == r["query_id"])


def test_augmented_and_added_back_rows_only_in_train(outcome: StageOutcome) -> None:
    rows = _rows(outcome)
    assert {r["split"] for r in rows if r["kind"] in ("augmented", "added_back")} == {"train"}
    assert {r["split"] for r in rows} == {"train", "dev", "test"}


def test_augmented_headlines_stay_within_the_papers_limits(outcome: StageOutcome) -> None:
    rows = _rows(outcome)
    for q in QUERIES[:3]:
        texts = [r["query"] for r in rows if r["query_id"] == q.query_id and r["kind"] == "augmented"]
        distinct = sorted(set(texts))
        assert len(distinct) == M and q.headline not in distinct
        assert Counter(texts) == dict.fromkeys(distinct, len(q.cited))
        for text in distinct:
            changed = changed_tokens(q.headline, text)
            assert 0 < changed <= 10 and changed <= 0.3 * len(q.headline.split()), (q.headline, text)
        docs = Counter(r["doc_id"] for r in rows if r["query_id"] == q.query_id and r["kind"] == "augmented")
        assert docs == dict.fromkeys(q.cited, M)  # each augmented headline with every cited abstract
    report = outcome.artifact.read(table="augmentation").to_pylist()
    assert [(r["query_id"], r["action"], r["wanted"], r["kept"]) for r in report] == [
        (q, a, M // 2, M // 2) for q in ("q1", "q2", "q3") for a in ("insert", "substitute")
    ]
    vectors = (outcome.artifact.files / pairs.VECTORS_FILE).read_text(encoding="utf-8").splitlines()
    words, dims = map(int, vectors[0].split())
    assert words == len(vectors) - 1 and dims == 100


def test_same_pairs_whatever_the_chunking(
    outcome: StageOutcome, upstream: dict[str, Artifact], tmp_path: Path
) -> None:
    again = run_one(tmp_path, pairs.SPEC, CONFIG, upstream, chunk_rows=2)
    assert again.artifact.read().equals(outcome.artifact.read())
    assert again.artifact.read(table="augmentation").equals(outcome.artifact.read(table="augmentation"))


def test_same_pairs_beside_another_stage_drawing_in_a_thread(
    outcome: StageOutcome, upstream: dict[str, Artifact], tmp_path: Path
) -> None:
    """Issue 30 §4: stages of one run share a process; another one drawing from Python's and
    numpy's global generators the whole time changes no byte of ``pairs``."""
    import random
    import threading

    import numpy as np

    stop = threading.Event()

    def other_stage() -> None:
        while not stop.is_set():
            random.random()
            np.random.random()

    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns every few bytecodes, not every 5 ms
    drawing = threading.Thread(target=other_stage)
    drawing.start()
    try:
        beside = run_one(tmp_path, pairs.SPEC, CONFIG, upstream, chunk_rows=2)
    finally:
        stop.set()
        drawing.join()
        sys.setswitchinterval(interval)
    assert beside.artifact.read().equals(outcome.artifact.read())
    assert beside.artifact.read(table="augmentation").equals(outcome.artifact.read(table="augmentation"))


def test_eval_negatives_and_the_papers_smallest_setting(
    upstream: dict[str, Artifact], tmp_path: Path
) -> None:
    # (m, n) = (0, 1): no augmentation, so the contextual engine is never loaded (no hub here).
    config = PairsConfig(
        negatives=1, augmented=0, eval_negatives=2, augment=AugmentConfig(engine="contextual")
    )
    rows = _rows(run_one(tmp_path, pairs.SPEC, config, upstream))
    assert _kinds(rows, "q1") == {("cited", 1): 1, ("negative", 0): 1}
    assert _kinds(rows, "q4") == {("cited", 1): 1, ("negative", 0): 2}
    assert _kinds(rows, "q5") == {("negative", 0): 2}
    schema = pa.schema(pairs.SCHEMA)
    assert schema.field("label").type == pa.int8() and schema.field("document").type == pa.large_string()


def test_queries_with_nothing_to_pair_or_an_unknown_document_are_excluded(tmp_path: Path) -> None:
    rankings = {**RANKINGS, "q1": {"plus_pre": [("00000000", 9.0), *RANKINGS["q1"]["plus_pre"]]}}
    upstream = Collection(DOCS, QUERIES, rankings).publish(tmp_path)
    config = PairsConfig(negatives=2, augmented=0, eval_negatives=0)
    outcome = run_one(tmp_path, pairs.SPEC, config, upstream)
    excluded = {r["query_id"]: (r["reason"], r["detail"]) for r in outcome.artifact.excluded().to_pylist()}
    assert excluded["q1"] == (
        "missing_document",
        "doc 00000000 is in neither claims' corpus nor the distractors",
    )
    assert excluded["q5"][0] == "no_pairs"  # test: its abstract was missed and no negative is asked
    rows = _rows(outcome)
    assert "q1" not in {r["query_id"] for r in rows}
    assert _kinds(rows, "q4") == {("cited", 1): 1}  # dev: no negatives asked
    assert _kinds(rows, "q3") == {("added_back", 1): 1, ("negative", 0): 2}
