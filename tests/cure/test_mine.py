"""The retrieval half of CURE on the demo corpus: embed → index → mine → corpus."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flows.registry import get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.config import load_config
from irforge.engine import StageOutcome
from irforge.errors import ConfigError
from irforge.pipeline import Selection, execute_step, select_steps
from tasks.cure.stages.corpus import annotation_passage_id, assign_domains
from tests.conftest import REPO

DEMO = REPO / "flows" / "configs" / "cure.yaml"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, StageOutcome]:
    pipeline = get_pipeline("cure")
    config = load_config(pipeline.config_type, DEMO)
    store = ArtifactStore(tmp_path_factory.mktemp("artifacts"))
    steps = select_steps(pipeline, pipeline.plan(config, DEMO.parent), Selection(until="corpus"), store)
    return {s.name: execute_step(s, store, "cure", config.execution) for s in steps}


def test_embed_gives_unit_vectors_for_every_kept_passage(demo_run: dict[str, StageOutcome]) -> None:
    embed = demo_run["embed"].artifact.read()
    passages = demo_run["filter"].artifact.read(columns=["passage_id"])
    assert embed.column("passage_id").to_pylist() == passages.column("passage_id").to_pylist()
    vectors = np.array(embed.column("vector").to_pylist(), dtype=np.float32)
    assert vectors.shape == (embed.num_rows, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # the model files' digest is part of what the fingerprint is made of
    assert demo_run["embed"].manifest["material"]["inputs"]["model_files"].startswith("blake2b")


def test_index_holds_every_embedded_passage(demo_run: dict[str, StageOutcome]) -> None:
    index = demo_run["index"].artifact
    assert index.read().num_rows == demo_run["embed"].artifact.read().num_rows
    (info,) = index.read(table="index_info").to_pylist()
    assert info["backend"] == "embedded" and info["dims"] == 384
    assert (index.files / "embedded").is_dir()  # the index travels inside the artifact


def test_mining_fuses_four_retrievers_per_query(demo_run: dict[str, StageOutcome]) -> None:
    mine = demo_run["mine"].artifact.read().to_pylist()
    queries = demo_run["annotations"].artifact.read(table="queries").column("query_id").to_pylist()
    by_query: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in mine:
        by_query[row["query_id"]].append(row)
    assert set(by_query) == set(queries)
    retrievers = ("query_lexical", "passage_fuzzy", "query_knn", "passage_knn")
    for rows in by_query.values():
        rows.sort(key=lambda r: r["fused_rank"])
        assert [r["fused_rank"] for r in rows] == list(range(1, len(rows) + 1))
        assert len(rows) <= 50
        for r in rows:
            # RRF, k = 60: the fused score is the sum of 1 / (60 + rank) over the retrievers
            # that returned the passage.
            expected = sum(
                1.0 / (60 + r[f"{name}_rank"]) for name in retrievers if r[f"{name}_rank"] is not None
            )
            assert r["fused_score"] == pytest.approx(expected)
        scores = [r["fused_score"] for r in rows]
        assert scores == sorted(scores, reverse=True)


def test_the_passage_retrievers_find_a_linked_relevant_passage_first(
    demo_run: dict[str, StageOutcome],
) -> None:
    mine = demo_run["mine"].artifact.read().to_pylist()
    rank = {(r["query_id"], r["passage_id"]): r for r in mine}
    dedup = sorted(demo_run["dedup"].artifact.read().to_pylist(), key=lambda r: r["record_key"])
    first: dict[str, dict[str, Any]] = {}
    for r in dedup:
        first.setdefault(r["query_id"], r)
    linked = [
        (q, r["canonical_corpus_passage_id"]) for q, r in first.items() if r["canonical_corpus_passage_id"]
    ]
    assert linked
    for query_id, passage_id in linked:
        # The mined passage is the annotator's copy of that corpus passage: the fuzzy and
        # kNN retrievers run with it put it at the top. (Its fused rank also depends on
        # the query's retrievers, so it need not be first after fusion.)
        row = rank[(query_id, passage_id)]
        assert row["passage_fuzzy_rank"] == 1 and row["passage_knn_rank"] == 1, (query_id, passage_id)


def test_corpus_puts_each_passage_in_one_domain_and_keeps_relevant_passages(
    demo_run: dict[str, StageOutcome],
) -> None:
    corpus = demo_run["corpus"].artifact
    rows = corpus.read().to_pylist()
    ids = [r["passage_id"] for r in rows]
    assert len(ids) == len(set(ids))
    articles = defaultdict(set)
    for r in rows:
        articles[r["article_id"]].add(r["domain"])
        assert r["n_words"] == len(r["text"].split())
    assert all(len(domains) == 1 for domains in articles.values())
    for r in demo_run["dedup"].artifact.read().to_pylist():
        assert annotation_passage_id(r["cluster_id"], r["canonical_corpus_passage_id"]) in ids
    stats = {s["domain"]: s for s in corpus.read(table="domain_stats").to_pylist()}
    for domain, s in stats.items():
        mine = [r for r in rows if r["domain"] == domain]
        assert s["passages"] == len(mine)
        assert s["articles"] == len({r["article_id"] for r in mine})
        assert s["mean_words"] == pytest.approx(sum(r["n_words"] for r in mine) / len(mine))


def test_an_article_claimed_by_two_domains_goes_to_exactly_one() -> None:
    claims = [
        ("A", "oncology", 3),
        ("A", "cardiology", 1),  # best rank wins
        ("B", "oncology", 2),
        ("B", "cardiology", 2),
        ("B", "oncology", 7),  # same best rank: more claims wins
        ("C", "pulmonology", 4),
        ("C", "dermatology", 4),  # same rank, one claim each: alphabetical
        ("D", "oncology", 0),  # an annotator's relevant passage beats any mined rank
        ("D", "cardiology", 1),
    ]
    assigned = {a: d for a, (d, *_rest) in assign_domains(claims).items()}
    assert assigned == {"A": "cardiology", "B": "oncology", "C": "dermatology", "D": "oncology"}
    assert assign_domains(claims)["B"][1:] == (2, 2, ["cardiology", "oncology"])


def test_a_configured_stage_without_its_upstream_is_a_config_error(tmp_path: Path) -> None:
    pipeline = get_pipeline("cure")
    config = load_config(pipeline.config_type, DEMO)
    broken = config.model_copy(update={"stages": config.stages.model_copy(update={"translate": None})})
    with pytest.raises(ConfigError, match=r"stages.mine needs stage\(s\) translate"):
        pipeline.plan(broken, DEMO.parent)


def test_index_and_mine_speak_elasticsearch(
    demo_run: dict[str, StageOutcome], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same stages with backend: elasticsearch, against a local server speaking ES's
    # REST protocol through the official client (a real server: tests/common/test_search_conformance.py).
    from tests.fakes.es_server import FakeElasticsearch

    pipeline = get_pipeline("cure")
    config = load_config(pipeline.config_type, DEMO)
    stages = config.stages.model_copy(
        update={"index": config.stages.index.model_copy(update={"backend": "elasticsearch"})}  # type: ignore[union-attr]
    )
    config = config.model_copy(update={"stages": stages})
    store = ArtifactStore(tmp_path)
    with FakeElasticsearch() as server:
        monkeypatch.setenv("ES_URL", server.url)
        steps = select_steps(pipeline, pipeline.plan(config, DEMO.parent), Selection(until="mine"), store)
        runs = {s.name: execute_step(s, store, "cure", config.execution) for s in steps}
        (info,) = runs["index"].artifact.read(table="index_info").to_pylist()
        assert info["backend"] == "elasticsearch" and info["index_name"].startswith("irforge-cure-")
        assert server.aliases["irforge-cure"] == {info["index_name"]}  # the alias points at the new index
    assert runs["index"].artifact.read().num_rows == demo_run["embed"].artifact.read().num_rows
    mined = runs["mine"].artifact.read()
    queries = set(demo_run["annotations"].artifact.read(table="queries").column("query_id").to_pylist())
    assert set(mined.column("query_id").to_pylist()) == queries
    assert runs["index"].artifact.fingerprint != demo_run["index"].artifact.fingerprint
