"""EvidenceBench retrieval baselines (BM25, dense) and their ER@K aggregation, by hand and on the dev set."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import pytest

from tasks.common.embed.local import BUILTIN_MINILM, SentenceTransformerEncoder
from tasks.common.embed.port import F32, Kind, ProgressFn
from tasks.evidencebench.baselines import (
    E6_PREFIXES,
    BM25Ranker,
    DenseRanker,
    RankingBaseline,
    evaluate,
    negated_set,
    rank_by_score,
    task_sizes,
)
from tasks.evidencebench.selection import TASK_K, Task, coverage
from tests.conftest import SAMPLES

DEV = SAMPLES / "evidencebench" / "evidencebench_dev_set.json"
needs_dev = pytest.mark.skipif(
    not DEV.is_file(),
    reason=f"the released EvidenceBench dev set is not at {DEV} (it lives beside the checkout)",
)
RELEASED: dict[Task, str] = {
    "ER@optimal": "evidence_retrieval_at_optimal_evaluation",
    "ER@10": "evidence_retrieval_at_10_evaluation",
    "Result-ER@optimal": "results_evidence_retrieval_at_optimal_evaluation",
    "Result-ER@5": "results_evidence_retrieval_at_5_evaluation",
}


@cache
def dev_set() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DEV.read_text())
    return data


def instance(
    sentences: list[str], covers: list[set[int]], n_aspects: int, results: list[int] | None = None
) -> dict[str, Any]:
    """A schema-shaped instance: sentence i covers aspects ``covers[i]``; hypothesis set by the caller."""
    ids = [f"a{j}" for j in range(n_aspects)]
    return {
        "hypothesis": "placeholder hypothesis",
        "paper_as_candidate_pool": sentences,
        "aspect_list_ids": ids,
        "results_aspect_list_ids": None if results is None else [ids[j] for j in results],
        "aspect2sentence_indices": {
            a: [i for i, c in enumerate(covers) if j in c] for j, a in enumerate(ids)
        },
    }


SENTENCES = [
    "Mice were housed at room temperature.",  # 0
    "Plasma glucose was measured after fasting.",  # 1
    "Insulin resistance rose in obese mice.",  # 2
    "Body weight was recorded weekly.",  # 3
    "Glucose tolerance improved after treatment.",  # 4
    "Statistical analysis used a t-test.",  # 5
]
# Aspects: a0 by 1 or 4, a1 by 2, a2 by 3 (results: a1, a2); the minimum cover is {1, 2, 3}.
COVERS = [set(), {0}, {1}, {2}, {0}, set()]


class HashedBagOfWords:
    """A tiny deterministic :class:`~tasks.common.embed.port.Encoder`: word counts hashed into 64 dims, unit length.

    It counts its passage calls, so the pool cache is observable.
    """

    name = "test-bag-of-words"
    model_id = "bag-of-words"
    revision = None
    dims = 64

    def __init__(self) -> None:
        self.passage_calls = 0

    def encode(self, texts: Sequence[str], *, kind: Kind, on_batch: ProgressFn | None = None) -> F32:
        if kind == "passage":
            self.passage_calls += 1
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(word.encode()) % self.dims] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.ascontiguousarray(out / np.where(norms == 0, 1, norms), dtype=np.float32)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name}


# ---- ranking


def test_rank_by_score_breaks_ties_by_index() -> None:
    assert rank_by_score([0.5, 0.9, 0.5, 0.9, 0.1]) == [1, 3, 0, 2, 4]
    assert rank_by_score([0.0, 0.0, 0.0]) == [0, 1, 2]
    with pytest.raises(ValueError, match="NaN"):
        rank_by_score([0.1, float("nan")])


def test_bm25_ranks_the_only_sentence_with_the_query_words_first() -> None:
    ranking = BM25Ranker()("insulin resistance", SENTENCES)
    assert ranking[0] == 2
    assert sorted(ranking) == list(range(len(SENTENCES)))
    # The other sentences all score 0: they follow in pool order.
    assert ranking[1:] == [0, 1, 3, 4, 5]


def test_bm25_ties_and_stopword_only_queries_fall_back_to_pool_order() -> None:
    pool = ["Glucose was high.", "Weight was low.", "Glucose was high."]
    assert BM25Ranker()("glucose", pool) == [0, 2, 1]
    # "the of and" is all stop words: no token is left, every sentence scores 0.
    assert BM25Ranker()("the of and", pool) == [0, 1, 2]
    assert BM25Ranker()("glucose", []) == []


def test_dense_ranker_ranks_by_cosine_and_encodes_each_pool_once() -> None:
    encoder = HashedBagOfWords()
    ranker = DenseRanker(encoder, cached_pools=2)
    pool = ["alpha beta", "gamma delta", "alpha beta"]
    assert ranker("alpha beta", pool) == [0, 2, 1]  # exact duplicates tie: lower index first
    assert ranker("gamma delta", pool) == [1, 0, 2]
    assert encoder.passage_calls == 1
    ranker("alpha", ["alpha", "omega"])
    ranker("alpha", pool)
    assert encoder.passage_calls == 2  # both pools fit in the cache
    ranker("alpha", ["third pool"])
    ranker("alpha", ["alpha", "omega"])  # the least recently used pool was evicted
    assert encoder.passage_calls == 4
    with pytest.raises(ValueError, match="cached_pools"):
        DenseRanker(encoder, cached_pools=0)


@pytest.fixture(scope="module")
def minilm() -> Iterator[SentenceTransformerEncoder]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield SentenceTransformerEncoder(BUILTIN_MINILM, device="cpu")


def test_dense_ranker_with_minilm_prefers_the_paraphrase(minilm: SentenceTransformerEncoder) -> None:
    pool = [
        "The samples were stored at minus eighty degrees.",
        "Patients who smoked had many more heart attacks.",
        "The questionnaire was translated into Spanish.",
    ]
    assert DenseRanker(minilm)("Tobacco use increases the risk of myocardial infarction.", pool)[0] == 1


# ---- top K per task


def test_top_k_per_task_follows_the_optimal_size_and_the_fixed_k() -> None:
    x = instance(SENTENCES, COVERS, 3, results=[1, 2])
    x["hypothesis"] = "glucose"
    assert task_sizes(x) == {"ER@optimal": 3, "ER@10": 10, "Result-ER@optimal": 2, "Result-ER@5": 5}
    chosen = RankingBaseline(BM25Ranker())("toy", x)
    ranking = BM25Ranker()("glucose", SENTENCES)
    assert ranking[:2] == [1, 4]  # the two glucose sentences, of equal length: a tie, by index
    assert (
        chosen
        == {
            "ER@optimal": ranking[:3],
            "ER@10": ranking,  # a pool smaller than K: all of it
            "Result-ER@optimal": ranking[:2],
            "Result-ER@5": ranking[:5],
        }
    )


def test_no_results_aspects_means_no_results_tasks() -> None:
    x = instance(SENTENCES, COVERS, 3, results=None)
    x["hypothesis"] = "glucose"
    assert set(RankingBaseline(BM25Ranker())("toy", x)) == {"ER@optimal", "ER@10"}


def test_the_prefix_of_each_aspect_group_reaches_the_query() -> None:
    x = instance(SENTENCES, COVERS, 3, results=[1, 2])
    x["hypothesis"] = "glucose"
    # A prefix naming "weight" lifts sentence 3 above the glucose sentences, only for results tasks.
    chosen = RankingBaseline(BM25Ranker(), {"results": "body weight weekly "})("toy", x)
    assert chosen["Result-ER@optimal"][0] == 3 and chosen["Result-ER@5"][0] == 3
    assert chosen["ER@optimal"][:2] == [1, 4]
    assert E6_PREFIXES["all"].endswith("relevant to the hypothesis ")


def test_blank_input_is_refused_with_the_instance_name() -> None:
    x = instance(SENTENCES, COVERS, 3)
    x["hypothesis"] = "  "
    with pytest.raises(ValueError, match="toy: the hypothesis is missing or blank"):
        RankingBaseline(BM25Ranker())("toy", x)
    y = instance([*SENTENCES[:5], " "], COVERS, 3)
    with pytest.raises(ValueError, match=r"toy: candidate-pool sentences \[5\] are blank"):
        RankingBaseline(BM25Ranker())("toy", y)


# ---- evaluation and negation


def test_evaluate_averages_over_instances_and_names_the_skipped() -> None:
    with_results = instance(SENTENCES, COVERS, 3, results=[1, 2])
    without = instance(SENTENCES, COVERS, 3, results=None)
    answers: dict[str, dict[Task, list[int]]] = {
        "with": {"ER@optimal": [1, 2, 3], "ER@10": [0, 5], "Result-ER@optimal": [2, 0], "Result-ER@5": [3]},
        "without": {"ER@optimal": [0, 1, 5], "ER@10": [4, 3, 2]},
    }
    scores = evaluate({"with": with_results, "without": without}, lambda name, _: answers[name])
    assert scores["ER@optimal"].per_instance == {"with": 1.0, "without": pytest.approx(1 / 3)}
    assert scores["ER@optimal"].mean == pytest.approx(2 / 3)
    assert scores["ER@10"].mean == pytest.approx(0.5)  # 0 and 1
    assert scores["Result-ER@optimal"].per_instance == {"with": 0.5}
    assert scores["Result-ER@5"].mean == pytest.approx(0.5)
    assert scores["Result-ER@5"].skipped == ("without",) and scores["ER@10"].skipped == ()


def test_evaluate_refuses_a_missing_selection_and_an_empty_set() -> None:
    x = instance(SENTENCES, COVERS, 3, results=[1])
    with pytest.raises(ValueError, match="toy: the system gave no selection for Result-ER@optimal"):
        evaluate({"toy": x}, lambda *_: {"ER@optimal": [1], "ER@10": [1]})
    with pytest.raises(ValueError, match="no instances"):
        evaluate({}, lambda *_: {})


def test_a_selection_longer_than_k_scores_the_mean_of_its_k_subsets() -> None:
    x = instance(SENTENCES, COVERS, 3)  # optimal = 3; [1, 2, 3, 0] holds 4 sentences
    scores = evaluate({"toy": x}, lambda *_: {"ER@optimal": [1, 2, 3, 0], "ER@10": [1]})
    # Of the four 3-subsets, the one without 0 covers all three aspects, the others two.
    assert scores["ER@optimal"].mean == pytest.approx((1 + 3 * 2 / 3) / 4)


def test_negated_set_replaces_only_the_hypothesis() -> None:
    data = {"a": {**instance(SENTENCES, COVERS, 3), "hypothesis": "Glucose rises."}}
    negated = negated_set(data, {"a": "Glucose falls."})
    assert negated["a"]["hypothesis"] == "Glucose falls."
    assert {k: v for k, v in negated["a"].items() if k != "hypothesis"} == {
        k: v for k, v in data["a"].items() if k != "hypothesis"
    }
    assert data["a"]["hypothesis"] == "Glucose rises."
    with pytest.raises(ValueError, match=r"missing for \['a'\], given for unknown instances \['b'\]"):
        negated_set(data, {"b": "x"})
    with pytest.raises(ValueError, match="a: the negated hypothesis is the hypothesis itself"):
        negated_set(data, {"a": " glucose  RISES. "})
    with pytest.raises(ValueError, match="a: the negated hypothesis is blank"):
        negated_set(data, {"a": ""})


# ---- the 37 released dev instances


def released(name: str, x: Mapping[str, Any]) -> dict[Task, list[int]]:
    """The oracle: the released selections of each task."""
    return {task: x[field]["one_selection_of_sentences"] for task, field in RELEASED.items() if x[field]}


def worst_case(name: str, x: Mapping[str, Any]) -> dict[Task, list[int]]:
    """A fixed worst ordering: sentences covering no aspect first (by index), then the others."""
    covers_some = coverage(x, "all", name).matrix.any(axis=1)
    useless, useful = np.flatnonzero(~covers_some).tolist(), np.flatnonzero(covers_some).tolist()
    return {task: (useless + useful)[:k] for task, k in task_sizes(x, name).items()}


@pytest.fixture(scope="module")
def bm25_scores() -> dict[Task, Any]:
    return evaluate(dev_set(), RankingBaseline(BM25Ranker()))


@needs_dev
def test_released_selections_score_full_recall_through_the_same_path() -> None:
    scores = evaluate(dev_set(), released)
    assert scores["ER@optimal"].mean == 1.0 and scores["Result-ER@optimal"].mean == 1.0
    assert (
        len(scores["ER@optimal"].per_instance) == 37 and len(scores["Result-ER@optimal"].per_instance) == 35
    )
    for task in ("ER@10", "Result-ER@5"):
        for name, recall in scores[task].per_instance.items():
            field = dev_set()[name][RELEASED[task]]
            group = TASK_K[task][0]
            assert recall == len(field["covered_aspects"]) / len(coverage(dev_set()[name], group).coverable)


@needs_dev
def test_bm25_on_the_dev_set(bm25_scores: dict[Task, Any]) -> None:
    worst = evaluate(dev_set(), worst_case)
    for task, score in bm25_scores.items():
        assert all(0.0 <= r <= 1.0 for r in score.per_instance.values())
        assert score.mean > worst[task].mean, task
    assert bm25_scores["ER@10"].skipped == () and len(bm25_scores["Result-ER@5"].skipped) == 2
    assert worst["ER@optimal"].mean == 0.0  # every instance has more than optimal useless sentences
