"""Stage ``hybrid`` and :func:`tasks.spanish_sr.fusion_scores.first_stage` on 50 real CT-EBM-SP abstracts
with their titles as questions: every method's ranking recomputed here from rank_bm25's own
BM25Okapi scores and the fine-tuned model's cosines."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import rank_bm25  # type: ignore[import-untyped]

from irforge.config import validate_config
from irforge.errors import ConfigError
from tasks.common.embed.local import SentenceTransformerEncoder
from tasks.common.search.fusion import rrf
from tasks.common.search.port import Hit
from tasks.spanish_sr.analysis import Analyzer
from tasks.spanish_sr.fusion_scores import METHODS, Bm25Params, Fusion, first_stage
from tasks.spanish_sr.stages import bm25 as bm25_stage
from tasks.spanish_sr.stages.hybrid import SPEC, HybridConfig
from tests.spanish_sr.conftest import artifact_of, run_one
from tests.spanish_sr.test_train_dense import real_fifty, train_dense


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("hybrid")
    clean, pairs = real_fifty(root)
    bm25 = run_one(root / "store", bm25_stage.SPEC, bm25_stage.Bm25Config(), {"questions": pairs}).artifact
    trained = train_dense(root, pairs).artifact
    model = trained.files / trained.read().to_pylist()[0]["model_dir"]
    return {
        "root": root,
        "clean": clean,
        "questions": pairs,
        "bm25": bm25,
        "train_dense": trained,
        "model": model,
    }


def by_hand(
    demo: dict[str, Any],
) -> tuple[list[str], list[str], list[str], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Ids, abstracts, titles, rank_bm25's scores and the model's cosines [query, document]."""
    table = demo["questions"].read().sort_by("record_id")
    ids, abstracts = table.column("record_id").to_pylist(), table.column("abstract").to_pylist()
    titles = table.column("question").to_pylist()
    params = demo["bm25"].read(table="params").to_pylist()[0]
    analyzer = Analyzer("es", params["fold_accents"])
    okapi = rank_bm25.BM25Okapi(analyzer.documents(abstracts), k1=params["k1"], b=params["b"])
    bm25 = np.array([okapi.get_scores(q) for q in analyzer.queries(titles)])
    encoder = SentenceTransformerEncoder(str(demo["model"]), device="cpu")
    dense = (
        encoder.encode(titles, kind="query").astype(float)
        @ encoder.encode(abstracts, kind="passage").astype(float).T
    )
    return ids, abstracts, titles, bm25, dense


def ranking(ids: list[str], scores: np.ndarray[Any, Any], n: int) -> list[str]:
    return [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))][:n]


def mrr(rows: list[dict[str, Any]], method: str) -> float:
    ranks = {
        r["query_id"]: r["rank"] for r in rows if r["method"] == method and r["record_id"] == r["query_id"]
    }
    queries = {r["query_id"] for r in rows}
    return sum(1 / ranks[q] for q in queries if q in ranks) / len(queries)


def test_every_method_matches_its_formula_recomputed_by_hand(demo: dict[str, Any]) -> None:
    ids, abstracts, titles, bm25, dense = by_hand(demo)
    params = demo["bm25"].read(table="params").to_pylist()[0]
    bp = Bm25Params(params["k1"], params["b"], "okapi", "es", params["fold_accents"])
    encoder = SentenceTransformerEncoder(str(demo["model"]), device="cpu")
    rows = first_stage(
        list(zip(ids, titles, strict=True)),
        list(zip(ids, abstracts, strict=True)),
        bp,
        encoder,
        Fusion(top_n=20),
    )
    got = {(r["query_id"], r["method"]): [] for r in rows}
    for r in rows:
        got[(r["query_id"], r["method"])].append(r)
    mm = lambda s: (s - s.min()) / (s.max() - s.min()) if s.max() > s.min() else 0 * s  # noqa: E731
    zs = lambda s: (s - s.mean()) / s.std() if s.std() > 0 else 0 * s  # noqa: E731
    for q, qid in enumerate(ids):
        expected = {
            "bm25": bm25[q], "dense": dense[q], "weighted": 0.5 * bm25[q] + dense[q],
            "minmax": 0.5 * mm(bm25[q]) + mm(dense[q]), "zscore": 0.5 * zs(bm25[q]) + zs(dense[q]),
        }  # fmt: skip
        for method, scores in expected.items():
            ranked = got[(qid, method)]
            assert [r["record_id"] for r in ranked] == ranking(ids, scores, 20), (qid, method)
            position = [ids.index(r["record_id"]) for r in ranked]
            assert [r["score"] for r in ranked] == pytest.approx(scores[position], abs=1e-5)
            assert [r["bm25_score"] for r in ranked] == pytest.approx(bm25[q][position], abs=1e-9)
            assert [r["dense_score"] for r in ranked] == pytest.approx(dense[q][position], abs=1e-5)
        lists = {
            "bm25": [
                Hit(k, i, 0.0) for k, i in enumerate(ranking(ids, bm25[q], 50)[: int((bm25[q] > 0).sum())], 1)
            ],
            "dense": [Hit(k, i, 0.0) for k, i in enumerate(ranking(ids, dense[q], 50), 1)],
        }
        fused = rrf(lists, k=60, top=20)
        assert [(r["record_id"], r["score"]) for r in got[(qid, "rrf")]] == [
            (f.passage_id, f.score) for f in fused
        ]
        # by hand, for the first: 1 / (60 + rank in BM25) + 1 / (60 + rank in dense)
        top = fused[0]
        hand = sum(1 / (60 + r) for r in top.ranks.values() if r is not None)
        assert got[(qid, "rrf")][0]["score"] == pytest.approx(hand)
    # Self-retrieval (a title finds its own abstract): hybrid at least as good as the worse retriever
    scores = {m: mrr(rows, m) for m in METHODS}
    print("self-retrieval MRR on 50 real titles:", {m: round(v, 4) for m, v in scores.items()})
    for method in ("weighted", "minmax", "zscore", "rrf"):
        assert scores[method] >= min(scores["bm25"], scores["dense"]), scores


def test_the_stage_ranks_each_seed_questions_of_the_parts_asked(demo: dict[str, Any]) -> None:
    upstream = {n: demo[n] for n in ("bm25", "clean", "train_dense", "questions")}
    config = validate_config(
        HybridConfig, {"top_n": 5, "methods": ["weighted", "rrf"], "parts": ["validation"]}, "test"
    )
    outcome = run_one(demo["root"] / "store", SPEC, config, upstream)
    rows = outcome.artifact.read().to_pylist()
    split = demo["train_dense"].read(table="split").to_pylist()
    validation = {r["record_id"] for r in split if r["part"] == "validation"}
    assert {r["query_id"] for r in rows} == validation and len(validation) == 10
    assert len(rows) == 10 * 2 * 5 and {r["seed"] for r in rows} == {42}
    assert {r["part"] for r in rows} == {"validation"}
    # by default both parts: every question of the split, each tagged with its part
    every = (
        run_one(demo["root"] / "store", SPEC, validate_config(HybridConfig, {"top_n": 2}, "test"), upstream)
        .artifact.read(columns=["query_id", "part"])
        .to_pylist()
    )
    assert {(r["query_id"], r["part"]) for r in every} == {(r["record_id"], r["part"]) for r in split}
    for qid in validation:
        weighted = [r for r in rows if r["query_id"] == qid and r["method"] == "weighted"]
        assert [r["rank"] for r in weighted] == [1, 2, 3, 4, 5]
        assert all(r["score"] == pytest.approx(0.5 * r["bm25_score"] + r["dense_score"]) for r in weighted)
        assert [r["score"] for r in weighted] == sorted((r["score"] for r in weighted), reverse=True)


def test_an_empty_question_is_excluded_with_its_id(demo: dict[str, Any]) -> None:
    table = demo["questions"].read()
    split = demo["train_dense"].read(table="split").to_pylist()
    victim = next(r["record_id"] for r in split if r["part"] == "validation")
    questions = [
        ("¿?" if rid == victim else q)
        for rid, q in zip(table["record_id"].to_pylist(), table["question"].to_pylist(), strict=True)
    ]
    broken = artifact_of(demo["root"], "questions", table.set_column(1, "question", pa.array(questions)))
    upstream = {n: demo[n] for n in ("bm25", "clean", "train_dense")} | {"questions": broken}
    outcome = run_one(
        demo["root"] / "store", SPEC, validate_config(HybridConfig, {"top_n": 3}, "test"), upstream
    )
    [bad] = outcome.artifact.excluded().to_pylist()
    assert (bad["seed"], bad["query_id"], bad["reason"]) == (42, victim, "empty_query") and victim in bad[
        "detail"
    ]
    assert victim not in set(outcome.artifact.read().column("query_id").to_pylist())
    with pytest.raises(ConfigError, match="methods repeat"):
        validate_config(HybridConfig, {"methods": ["rrf", "rrf"]}, "test")
