"""Stage ``evaluate``: R@1/3/5/20 and MRR computed by hand on a tiny collection.

The reranker is vLLM's ``/score`` protocol on loopback (``tests/fakes/score_server.py``),
whose logit is ``8 · overlap − 4`` (the share of the headline's words in the abstract), so
the reranked order — and every metric — can be worked out on paper. The dense system runs
the builtin MiniLM encoder on a corpus where the answer is certain. The abstract views
(paper 003 §3.1) are checked on hand-made and real labelled abstracts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from irforge.artifacts import Artifact
from irforge.engine import StageOutcome
from tasks.common.embed.config import EncoderConfig
from tasks.common.embed.local import BUILTIN_MINILM
from tasks.common.rerank.config import RerankerConfig
from tasks.crossgenre.abstract_views import abstract_view, first_last
from tasks.crossgenre.stages import evaluate
from tasks.crossgenre.stages.evaluate import DenseSystem, EvaluateConfig
from tests.crossgenre.collection import Collection, Query, medline_docs
from tests.crossgenre.conftest import run_one
from tests.fakes.score_server import DEFAULT_MODEL, FakeScore, score_server

__all__ = ["score_server"]  # the fixture, used by parameter name below


def _doc(doc_id: str, text: str, sections: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    parts = sections or [("", text)]
    return {
        "doc_id": doc_id, "title": f"Title of {doc_id}", "abstract": text,
        "sections": [{"label": label, "text": body} for label, body in parts],
        "labelled": sections is not None, "mesh": [], "publication_types": ["Journal Article"],
        "journal": "J Test", "year": 2024,
    }  # fmt: skip


FILLERS = [
    _doc(f"f{i:02d}", f"Unrelated filler abstract number {i} about zebrafish fins.") for i in range(30)
]
DOCS = [
    _doc("doc-a", "Aspirin lowers stroke risk in older adults."),
    _doc("doc-b", "Coffee consumption in a survey of adults."),
    _doc("doc-c", "Coffee polyphenols reach liver cells in mice."),
    _doc("doc-d", "Vitamin pills in a trial that failed."),
    _doc("doc-e", "Running improves sleep quality in students."),
    _doc("doc-g", "Green tea calms anxiety in a small trial."),
    _doc("doc-x", "Stroke units in rural hospitals."),
    _doc("doc-z", "Coffee protects liver enzymes."),
    *FILLERS,
]
QUERIES = [
    Query("t1", "test", ("doc-a",), "Aspirin lowers stroke risk"),
    Query("t2", "test", ("doc-b", "doc-c"), "Coffee protects liver cells"),
    Query("t3", "test", ("doc-d",), "Vitamin pills fail trial"),
    Query("t4", "test", ("doc-e",), "Running improves sleep quality"),
    Query("d1", "dev", ("doc-g",), "Tea calms anxiety"),
]


def _ranked(placed: dict[int, str], length: int = 25) -> list[tuple[str, float]]:
    """``length`` candidates: the placed docs at their 1-based ranks, fillers elsewhere."""
    fillers = iter(d["doc_id"] for d in FILLERS)
    ids = [placed.get(rank) or next(fillers) for rank in range(1, length + 1)]
    return [(doc, 100.0 - i) for i, doc in enumerate(ids)]


RANKINGS = {
    "t1": {"plus_pre": _ranked({1: "doc-x", 2: "doc-a"})},
    "t2": {"plus_pre": _ranked({1: "doc-b", 2: "doc-z", 6: "doc-c"})},
    "t3": {"plus_pre": _ranked({})},  # doc-d missed
    "t4": {"plus_pre": _ranked({22: "doc-e"})},  # below rerank_k = 20: the reranker never sees it
    "d1": {"plus_pre": _ranked({3: "doc-g"})},
}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Artifact]:
    return Collection(DOCS, QUERIES, RANKINGS).publish(tmp_path_factory.mktemp("evaluate-up"))


def _table(outcome: StageOutcome, queries: dict[str, int]) -> dict[tuple[str, str], dict[str, float]]:
    """(system, split) → metric → value; ``queries``: how many each split's rows must count."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in outcome.artifact.read().to_pylist():
        out.setdefault((r["system"], r["split"]), {})[r["metric"]] = r["value"]
        assert r["queries"] == queries[r["split"]]
    return out


def test_bm25_and_reranker_metrics_by_hand(
    upstream: dict[str, Artifact], score_server: FakeScore, tmp_path: Path
) -> None:
    reranker = RerankerConfig(engine="vllm", base_url=score_server.url, model=DEFAULT_MODEL)
    config = EvaluateConfig(reranker=reranker, rerank_k=20, rerank_splits=("test",))
    outcome = run_one(tmp_path, evaluate.SPEC, config, upstream)
    table = _table(outcome, {"test": 4, "dev": 1})
    rerank = f"rerank:{DEFAULT_MODEL}"
    assert set(table) == {("bm25_plus_pre", "test"), ("bm25_plus_pre", "dev"), (rerank, "test")}
    # BM25: t1 cited at 2; t2 cites two, at 1 and 6; t3 missed; t4 at 22.
    assert table["bm25_plus_pre", "test"] == pytest.approx(
        {"R@1": 0.5 / 4, "R@3": 1.5 / 4, "R@5": 1.5 / 4, "R@20": 2 / 4, "MRR": (1 / 2 + 1 + 0 + 1 / 22) / 4}
    )
    assert table["bm25_plus_pre", "dev"] == pytest.approx(
        {"R@1": 0, "R@3": 1, "R@5": 1, "R@20": 1, "MRR": 1 / 3}
    )
    # Reranked (logit 8·overlap − 4): t1 doc-a (+4) first; t2 doc-c and doc-z (+2, doc-c first by id),
    # then doc-b (−2): ranks 1 and 3; t3 still missed; t4's doc-e stays at 22.
    assert table[rerank, "test"] == pytest.approx(
        {"R@1": 1.5 / 4, "R@3": 2 / 4, "R@5": 2 / 4, "R@20": 2 / 4, "MRR": (1 + 1 + 0 + 1 / 22) / 4}
    )
    scored = {
        pair
        for r in score_server.scored()
        for pair in zip(r.side("queries"), r.side("documents"), strict=True)
    }
    assert ("Running improves sleep quality", "Running improves sleep quality in students.") not in scored
    assert len(scored) == 4 * 20  # only the test queries' top 20
    excluded = outcome.artifact.excluded().to_pylist()
    assert [(r["system"], r["split"], r["reason"]) for r in excluded] == [
        ("bm25_plus_pre", "train", "no_queries")
    ]
    per_query = outcome.artifact.read(table="per_query").to_pylist()
    mrr = {r["query_id"]: r["value"] for r in per_query if r["system"] == rerank and r["metric"] == "MRR"}
    assert mrr == pytest.approx({"t1": 1, "t2": 1, "t3": 0, "t4": 1 / 22})


def test_dense_views_find_a_copied_abstract(tmp_path: Path) -> None:
    docs = [_doc(f"m{i}", text) for i, text in enumerate(
        ["Cats sleep most of the day in warm places.", "Dogs bark at the postman every morning.",
         "Parrots learn words from their owners.", "Goldfish remember feeding times for months."]
    )]  # fmt: skip
    queries = [
        Query("q0", "test", ("m0",), docs[0]["abstract"]),
        Query("q3", "test", ("m3",), docs[3]["abstract"]),
    ]
    rankings = {q.query_id: {"plus_pre": [(d["doc_id"], 1.0) for d in docs]} for q in queries}
    upstream = Collection(docs, queries, rankings).publish(tmp_path / "up")
    dense = DenseSystem(encoder=EncoderConfig(model=BUILTIN_MINILM), views=("full", "first_last_3"), depth=20)
    config = EvaluateConfig(reranker=None, dense=(dense,), splits=("test",))
    table = _table(run_one(tmp_path / "run", evaluate.SPEC, config, upstream), {"test": 2})
    for view in ("full", "first_last_3"):  # short unlabelled abstracts: both views are the whole text
        assert table[f"dense:{BUILTIN_MINILM}:{view}", "test"] == pytest.approx(
            {"R@1": 1, "R@3": 1, "R@5": 1, "R@20": 1, "MRR": 1}
        )


def test_abstract_views() -> None:
    labelled = {
        "abstract": "B. M. R. C.",
        "labelled": True,
        "sections": [
            {"label": "BACKGROUND", "text": "Why we looked."},
            {"label": "METHODS", "text": "How."},
            {"label": "RESULTS", "text": "What."},
            {"label": "Conclusions and relevance", "text": "So what."},
        ],
    }
    assert abstract_view(labelled, "full") == "B. M. R. C."
    assert abstract_view(labelled, "background_conclusion") == "Why we looked.\n\nSo what."
    assert abstract_view(labelled, "first_last_3") == "Why we looked.\n\nSo what."
    neither = {
        **labelled,
        "sections": [{"label": "METHODS", "text": "How."}, {"label": "RESULTS", "text": "What."}],
    }
    assert abstract_view(neither, "background_conclusion") == "B. M. R. C."

    sentences = [f"Sentence {i} cites e.g. Smith et al. for p < 0.05 here." for i in range(1, 9)]
    plain = {"abstract": " ".join(sentences), "labelled": False, "sections": [{"label": "", "text": "x"}]}
    assert abstract_view(plain, "background_conclusion") == plain["abstract"]
    assert abstract_view(plain, "first_last_3") == " ".join(sentences[:3] + sentences[-3:])
    assert first_last(" ".join(sentences[:6])) == " ".join(sentences[:6])  # six sentences: whole

    real = next(d for d in medline_docs(40) if d["doc_id"] == "31815348")  # RATIONALE ... CONCLUSION
    labels = [s["label"] for s in real["sections"]]
    assert labels[0] == "RATIONALE" and labels[-1] == "CONCLUSION"
    expected = f"{real['sections'][0]['text']}\n\n{real['sections'][-1]['text']}"
    assert abstract_view(real, "background_conclusion") == expected
