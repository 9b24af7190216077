"""Evaluation: metrics against hand-computed values, BM25 and dense baselines on a handmade
corpus, rater agreement against hand-computed κ."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tasks.common.embed.port import F32, Kind, check_texts, normalise_rows
from tasks.common.evaluate.agreement import (
    AGREEMENT_SCHEMA,
    CONFUSION_SCHEMA,
    AgreementError,
    agreement,
)
from tasks.common.evaluate.baselines import bm25_run, dense_run, document_texts
from tasks.common.evaluate.metrics import EvaluationError, evaluate, evaluate_per_query

# ------------------------------------------------------------------------------ metrics

QRELS = {
    "q1": {"a": 2, "b": 1, "c": 0, "d": 1},
    "q2": {"e": 2},  # no run at all: scores 0
    "q3": {"f": 0},  # judged, nothing relevant: scores 0
}
RUN = {
    "q1": {"b": 0.9, "x": 0.8, "a": 0.7, "c": 0.6},
    "q3": {"f": 1.0},
    "q4": {"a": 1.0},  # no qrels: ignored
}
# q1 by hand. Ranked: b (gain 1), x (unjudged, 0), a (2), c (0); linear gains, discount log2(rank + 1).
Q1_DCG = 1 / math.log2(2) + 2 / math.log2(4)
Q1_IDCG = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)  # ideal: a, b, d
Q1_NDCG = Q1_DCG / Q1_IDCG  # 2 / 3.1309 = 0.6388
Q1_RECALL = 2 / 3  # a and b of the relevant a, b, d (labels >= 1)


def test_ndcg_and_recall_by_hand() -> None:
    per_query = evaluate_per_query(QRELS, RUN)
    assert list(per_query) == ["q1", "q2", "q3"]
    assert per_query["q1"]["nDCG@10"] == pytest.approx(Q1_NDCG)
    assert per_query["q1"]["R@100"] == pytest.approx(Q1_RECALL)
    assert per_query["q2"] == {"nDCG@10": 0.0, "R@100": 0.0}
    assert per_query["q3"] == {"nDCG@10": 0.0, "R@100": 0.0}
    means = evaluate(QRELS, RUN)
    assert means == pytest.approx({"nDCG@10": Q1_NDCG / 3, "R@100": Q1_RECALL / 3})


def test_recall_relevance_level_and_cutoff() -> None:
    # Only the 2s count with rel=2: q1 retrieves its one 2 (recall 1), q2 and q3 score 0.
    assert evaluate(QRELS, RUN, measures=("R(rel=2)@100",))["R(rel=2)@100"] == pytest.approx(1 / 3)
    # A relevant passage at rank 101 is outside R@100 and inside R@1000.
    run = {"q": {**{f"n{i:03d}": 2.0 for i in range(100)}, "rel": 1.0}}
    scores = evaluate({"q": {"rel": 1}}, run, measures=("R@100", "R@1000", "nDCG@10"))
    assert scores == {"R@100": 0.0, "R@1000": 1.0, "nDCG@10": 0.0}


def test_ties_are_evaluated_in_passage_id_order() -> None:
    # a and b tie; the project's rule puts a (label 0) first: DCG = 2 / log2(3), IDCG = 2.
    # (trec_eval alone would put b first, by reverse id, and give 1.0.)
    scores = evaluate({"q": {"a": 0, "b": 2}}, {"q": {"b": 1.0, "a": 1.0}}, measures=("nDCG@10",))
    assert scores["nDCG@10"] == pytest.approx(1 / math.log2(3))


@pytest.mark.parametrize(
    ("qrels", "run", "measures", "message"),
    [
        ({}, RUN, ("nDCG@10",), "no qrels"),
        ({"q": {}}, RUN, ("nDCG@10",), "qrels of query 'q' are empty"),
        ({"q": {"a": 1.5}}, RUN, ("nDCG@10",), r"label of \('q', 'a'\) is 1.5, not an integer"),
        ({"q": {"a": 1}}, {"q": {"a": float("nan")}}, ("nDCG@10",), r"run score of \('q', 'a'\) is nan"),
        (QRELS, RUN, ("nDCG@ten",), "unknown measure 'nDCG@ten'"),
        (QRELS, RUN, ("nDCG@10", "nDCG@10"), "asked twice"),
        (QRELS, RUN, "nDCG@10", "a list of names"),
    ],
)
def test_metric_input_errors(qrels: Any, run: Any, measures: Any, message: str) -> None:
    with pytest.raises(EvaluationError, match=message):
        evaluate(qrels, run, measures)


# ---------------------------------------------------------------------------- baselines

CORPUS = pa.table(
    {
        "_id": ["p3", "p1", "p2", "p4"],
        "title": ["Orthopaedics", "", "Paediatrics", ""],
        "text": [
            "Knee arthroplasty outcomes after ten years of follow up.",
            "The mitral valve regurgitates when its leaflets do not close.",
            "Inhaled corticosteroids control asthma in children.",
            "Outcomes of asthma in adults and children after ten years.",
        ],
    }
)
QUERIES = pa.table(
    {"_id": ["mitral", "title", "none"], "text": ["mitral valve disease", "orthopaedics", "?! ..."]}
)


def test_bm25_ranks_the_only_passage_with_the_query_words_first() -> None:
    run = bm25_run(CORPUS, QUERIES, k=10)
    assert set(run) == {"mitral", "title", "none"}
    # "mitral" and "valve" occur in p1 only; "disease" nowhere: p1 is the one hit.
    assert list(run["mitral"]) == ["p1"]
    assert run["mitral"]["p1"] > 0
    assert list(run["title"]) == ["p3"]  # the word is only in p3's title: titles are searched
    assert run["none"] == {}  # no indexable word: an empty run (it scores 0)


def test_bm25_order_and_cut() -> None:
    queries = pa.table({"_id": ["q"], "text": ["asthma children outcomes"]})
    run = bm25_run(CORPUS, queries, k=2)["q"]
    # p4 holds all three words, p2 two of them and p3 one: p4 then p2, and k=2 cuts p3.
    assert list(run) == ["p4", "p2"]
    assert run["p4"] > run["p2"]


def test_document_text_is_title_then_text() -> None:
    ids, texts = document_texts(CORPUS)
    assert ids == ["p3", "p1", "p2", "p4"]
    assert texts[0] == "Orthopaedics Knee arthroplasty outcomes after ten years of follow up."
    assert texts[1] == "The mitral valve regurgitates when its leaflets do not close."


class WordCountEncoder:
    """A real (if crude) Encoder: counts of a fixed vocabulary, unit-normalised; kinds are recorded."""

    name = "word-counts"
    model_id = "word-counts"
    revision = None
    vocabulary = ("asthma", "children", "knee", "mitral", "valve", "outcomes", "orthopaedics")

    def __init__(self) -> None:
        self.kinds: list[Kind] = []

    @property
    def dims(self) -> int:
        return len(self.vocabulary) + 1

    def encode(self, texts: Sequence[str], *, kind: Kind, on_batch: Any = None) -> F32:
        self.kinds.append(kind)
        rows = []
        for text in check_texts(texts):
            words = text.lower().replace(".", " ").split()
            rows.append([words.count(w) for w in self.vocabulary] + [0.01])  # never a zero vector
        return normalise_rows(
            np.array(rows, dtype=np.float64).reshape(len(rows), self.dims), source=self.name
        )

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name}


def test_dense_run_is_exact_inner_product_with_id_tie_breaks() -> None:
    encoder = WordCountEncoder()
    corpus = pa.table(
        {
            "_id": ["z", "b", "a", "c"],
            "title": ["", "", "", ""],
            # b and z are the same words: equal vectors, equal scores; a matches better; c not at all.
            "text": ["asthma knee", "knee asthma", "asthma asthma children", "mitral valve"],
        }
    )
    queries = pa.table({"_id": ["q"], "text": ["asthma children"]})
    run = dense_run(corpus, queries, encoder, k=3)["q"]
    assert list(run) == ["a", "b", "z"]  # a best; b and z tie: by id
    # Hand check: query (asthma 1, children 1) and a (asthma 2, children 1), 0.01 extra dimension each.
    q, a = np.array([1, 1, 0.01]), np.array([2, 1, 0.01])
    assert run["a"] == pytest.approx(q @ a / np.linalg.norm(q) / np.linalg.norm(a), rel=1e-6)
    assert run["b"] == run["z"]
    # The tie at the cut is decided by id too: with k=2, b stays and z goes.
    assert list(dense_run(corpus, queries, encoder, k=2)["q"]) == ["a", "b"]
    assert encoder.kinds[:2] == ["passage", "query"]


def test_baseline_input_errors() -> None:
    duplicated = pa.table({"_id": ["p", "p"], "title": ["", ""], "text": ["x", "y"]})
    with pytest.raises(EvaluationError, match="corpus row 1: _id 'p' occurs twice"):
        bm25_run(duplicated, QUERIES)
    with pytest.raises(EvaluationError, match="queries table has no column '_id'"):
        dense_run(CORPUS, pa.table({"id": ["q"], "text": ["x"]}), WordCountEncoder())
    with pytest.raises(EvaluationError, match="k must be at least 1"):
        bm25_run(CORPUS, QUERIES, k=0)


@pytest.fixture(scope="module")
def minilm() -> Iterator[Any]:
    from tasks.common.embed.local import SentenceTransformerEncoder

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield SentenceTransformerEncoder("builtin:all-MiniLM-L6-v2", device="cpu")


def test_dense_run_with_the_builtin_model(minilm: Any) -> None:
    queries = pa.table({"_id": ["heart", "lungs"], "text": ["heart valve leak", "wheezing kids"]})
    run = dense_run(CORPUS, queries, minilm, k=4)
    assert next(iter(run["heart"])) == "p1"
    assert next(iter(run["lungs"])) in {"p2", "p4"}
    assert all(len(hits) == 4 for hits in run.values())


# ---------------------------------------------------------------------------- agreement


def labels(rows: list[tuple[str, str, str, int]]) -> pa.Table:
    return pa.table(
        {
            "query_id": [r[0] for r in rows],
            "passage_id": [r[1] for r in rows],
            "rater": [r[2] for r in rows],
            "label": pa.array([r[3] for r in rows], pa.int64()),
        }
    )


def test_cohen_kappa_and_confusion_by_hand() -> None:
    first = [2, 2, 2, 2, 2, 2, 0, 0, 0, 0]
    second = [2, 2, 2, 2, 2, 0, 0, 0, 0, 2]
    rows = [("q", f"p{i}", "ann", a) for i, a in enumerate(first)]
    rows += [("q", f"p{i}", "bob", b) for i, b in enumerate(second)]
    result = agreement(labels(rows))
    (pair,) = result.pairs
    # Observed 8/10; each rater says 2 six times in ten: expected 0.6^2 + 0.4^2 = 0.52.
    assert pair.kappa == pytest.approx((0.8 - 0.52) / (1 - 0.52))
    assert (pair.rater_a, pair.rater_b, pair.items) == ("ann", "bob", 10)
    # Rows: ann's label, columns: bob's label.
    assert pair.confusion == ((3, 0, 1), (0, 0, 0), (1, 0, 5))


def test_fleiss_kappa_by_hand_and_skipped_items() -> None:
    table = [(2, 2, 2), (2, 2, 1), (0, 0, 1), (0, 1, 2)]
    rows = [
        ("q", f"p{i}", rater, label)
        for i, item in enumerate(table)
        for rater, label in zip("xyz", item, strict=True)
    ]
    rows += [("q", "extra", "x", 1), ("q", "extra", "y", 1)]  # z did not label it: not in Fleiss
    result = agreement(labels(rows))
    # Per-item agreement P_i: 1, 1/3, 1/3, 0 -> mean 5/12. Category shares 3/12, 3/12, 6/12 ->
    # P_e = 1/16 + 1/16 + 1/4 = 3/8. kappa = (5/12 - 3/8) / (1 - 3/8) = 1/15.
    assert result.fleiss_kappa == pytest.approx(1 / 15)
    assert (result.items, result.fleiss_items, result.skipped_items) == (5, 4, 1)
    assert result.raters == ("x", "y", "z")
    xy = next(p for p in result.pairs if (p.rater_a, p.rater_b) == ("x", "y"))
    assert xy.items == 5  # Cohen uses every item both labelled, the extra one included
    assert [(p.rater_a, p.rater_b) for p in result.pairs] == [("x", "y"), ("x", "z"), ("y", "z")]


def test_agreement_tables() -> None:
    rows = [("q", "p1", "a", 0), ("q", "p1", "b", 1), ("q", "p2", "a", 2), ("q", "p2", "b", 2)]
    result = agreement(labels(rows))
    table = result.agreement
    assert table.schema == AGREEMENT_SCHEMA
    assert table.column("measure").to_pylist() == ["cohen_kappa", "fleiss_kappa"]
    assert table.column("rater_a").to_pylist() == ["a", "all"]
    confusion = result.confusion
    assert confusion.schema == CONFUSION_SCHEMA
    assert confusion.num_rows == 9  # every cell of the one pair, zeros included
    cells = {(r["label_a"], r["label_b"]): r["count"] for r in confusion.to_pylist()}
    assert cells[0, 1] == 1 and cells[2, 2] == 1 and sum(cells.values()) == 2


def test_undefined_kappa_is_none() -> None:
    same = agreement(
        labels([("q", "p1", "a", 1), ("q", "p1", "b", 1), ("q", "p2", "a", 1), ("q", "p2", "b", 1)])
    )
    assert same.pairs[0].kappa is None and same.fleiss_kappa is None  # one label throughout
    disjoint = agreement(labels([("q", "p1", "a", 1), ("q", "p2", "b", 2)]))
    assert disjoint.pairs[0].items == 0 and disjoint.pairs[0].kappa is None
    assert disjoint.fleiss_kappa is None and disjoint.skipped_items == 2


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [("q", "p", "a", 1), ("q", "p", "a", 2)],
            r"labels row 1 \(query 'q', passage 'p', rater 'a'\): .* twice",
        ),
        ([("q", "p", "a", 3)], r"labels row 0 .*label 3 is not one of \[0, 1, 2\]"),
    ],
)
def test_agreement_input_errors(rows: list[tuple[str, str, str, int]], message: str) -> None:
    with pytest.raises(AgreementError, match=message):
        agreement(labels(rows))
    with pytest.raises(AgreementError, match="lacks column"):
        agreement(labels(rows).drop_columns(["rater"]))
