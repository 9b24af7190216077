"""Stage ``release``: a Hugging Face dataset folder that ``datasets`` and MTEB load.

Real PubMed abstracts, handmade claims, candidates and splits, the real ``pairs`` stage,
and funnel stages with known counts go through the real ``release`` stage. The folder is
loaded config by config with ``datasets.load_dataset`` and compared with what went in;
the card's MTEB snippet is run as written (mteb 2.x, its retrieval loader and evaluator)
with only the path swapped for the folder and the model for the builtin MiniLM, and its
nDCG@10 and recall@5 are checked against the shared dense baseline and ir-measures on the
released test files.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from irforge.engine import StageOutcome
from tasks.common.embed.local import BUILTIN_MINILM, builtin_model_path
from tasks.common.evaluate.metrics import evaluate
from tasks.crossgenre.stages import pairs, release
from tasks.crossgenre.stages.pairs import PairsConfig
from tasks.crossgenre.stages.release import ReleaseConfig
from tests.crossgenre.collection import FUNNEL, Collection, Query, headline_of, medline_docs, publish_funnel
from tests.crossgenre.conftest import run_one

NAME = "irforge/crossgenre-test"
DOCS = medline_docs(40)
IDS = [d["doc_id"] for d in DOCS]
TITLE = {d["doc_id"]: d["title"] for d in DOCS}


def _query(qid: str, split: str, site: str, published: str | None, *cited: int) -> Query:
    ids = tuple(IDS[i] for i in cited)
    # Test headlines keep three words of the title: hard enough that retrieval is not perfect.
    headline = (
        headline_of(TITLE[ids[0]]) if split == "train" else "News: " + " ".join(TITLE[ids[0]].split()[2:5])
    )
    return Query(qid, split, ids, headline, site=site, published=published)


QUERIES = [
    _query("q1", "train", "www.dailypulse.example", "2024-03-02", 0),
    _query("q2", "train", "news.wellbeing.example", "2024-05-17", 1, 2),
    _query("q3", "train", "www.dailypulse.example", None, 3),
    _query("q4", "train", "health.tribune.example", "2024-01-30", 4),
    _query("t1", "test", "www.dailypulse.example", "2024-06-11", 5),
    _query("t2", "test", "news.wellbeing.example", "2024-02-08", 6),
    _query("t3", "test", "health.tribune.example", "2024-02-09", 7),
    _query("t4", "test", "health.tribune.example", "2024-02-10", 8),
    _query("t5", "test", "health.tribune.example", "2024-02-11", 9),
]  # no dev query: the dev files are empty and left out


def _ranking(q: Query, first: int) -> list[tuple[str, float]]:
    fillers = [d for d in IDS[10:] if d not in q.cited]
    ranked = [*fillers[first : first + 2], *q.cited, *fillers[first + 2 : first + 12]]
    return [(doc, round(20.0 - i * 0.75, 2)) for i, doc in enumerate(ranked)]


RANKINGS = {
    q.query_id: {"plus_pre": _ranking(q, i), "okapi": _ranking(q, i + 1)} for i, q in enumerate(QUERIES)
}
RECALL = [
    {"variant": v, "k": k, "recall": r, "queries": 9}
    for v, values in (("okapi", (0.0, 0.5, 1.0)), ("plus_pre", (0.0, 0.75, 1.0)))
    for k, r in zip((1, 5, 20), values, strict=True)
]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> StageOutcome:
    root = tmp_path_factory.mktemp("release")
    return _release(root)


def _release(root: Path) -> StageOutcome:
    # One artifact root, as in a run: the card's provenance walks the manifests' lineage.
    upstream = Collection(DOCS, QUERIES, RANKINGS, RECALL).publish(root)
    upstream |= {name: o.artifact for name, o in publish_funnel(root).items()}
    upstream["pairs"] = run_one(root, pairs.SPEC, PairsConfig(negatives=3, augmented=2), upstream).artifact
    config = ReleaseConfig(name=NAME, pages_license="CC0-1.0 (written for irforge)")
    return run_one(root, release.SPEC, config, upstream)


def _folder(outcome: StageOutcome) -> Path:
    return outcome.artifact.files / "release"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_files_and_what_was_left_out(outcome: StageOutcome) -> None:
    files = {(r["config"], r["split"]): r["rows"] for r in outcome.artifact.read().to_pylist()}
    assert files == {
        ("corpus", "corpus"): 40,
        ("queries", "train"): 4, ("queries", "test"): 5,
        ("qrels", "train"): 5, ("qrels", "test"): 5,
        ("candidates", "train"): 3 * 13 + 14, ("candidates", "test"): 5 * 13,
        # train: cited + 3 negatives + 2 augmented per cited abstract; test: cited + 3 negatives
        ("pairs", "train"): (1 + 3 + 2) * 3 + (2 + 3 + 4), ("pairs", "test"): 5 * 4,
    }  # fmt: skip
    excluded = outcome.artifact.excluded().to_pylist()
    assert sorted((r["config"], r["split"], r["reason"]) for r in excluded) == [
        (c, "dev", "empty_split") for c in ("candidates", "pairs", "qrels", "queries")
    ]
    folder = _folder(outcome)
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert on_disk == ["README.md", *sorted(f"{c}/{s}.jsonl" for c, s in files)]  # what push_release sends


def test_rows_are_what_went_in(outcome: StageOutcome) -> None:
    folder = _folder(outcome)
    queries = _jsonl(folder / "queries" / "train.jsonl")
    assert [list(q) for q in queries] == [["_id", "text", "url", "site", "date"]] * 4
    assert queries[2] == {
        "_id": "q3", "text": QUERIES[2].headline, "url": "https://www.dailypulse.example/news/q3",
        "site": "www.dailypulse.example", "date": "",  # unknown: "" (MTEB refuses None)
    }  # fmt: skip
    qrels = _jsonl(folder / "qrels" / "train.jsonl")
    assert qrels[1:3] == [{"query-id": "q2", "corpus-id": d, "score": 1} for d in sorted(QUERIES[1].cited)]
    candidates = _jsonl(folder / "candidates" / "test.jsonl")
    assert candidates[:3] == [
        {"query-id": "t1", "corpus-id": doc, "rank": i + 1, "score": score}
        for i, (doc, score) in enumerate(RANKINGS["t1"]["plus_pre"][:3])
    ]
    corpus = {d["_id"]: d for d in _jsonl(folder / "corpus" / "corpus.jsonl")}
    assert {k: corpus[IDS[7]][k] for k in ("title", "text")} == {
        "title": DOCS[7]["title"],
        "text": DOCS[7]["abstract"],
    }
    kinds = {p["kind"] for p in _jsonl(folder / "pairs" / "train.jsonl")}
    assert kinds == {"cited", "negative", "augmented"}
    assert {p["kind"] for p in _jsonl(folder / "pairs" / "test.jsonl")} == {"cited", "negative"}


def test_card_statistics_and_licences(outcome: StageOutcome) -> None:
    card = (_folder(outcome) / "README.md").read_text(encoding="utf-8")
    assert (
        "## Citation" in card and "@inproceedings{zuo2020querying," in card and "@software{irforge," in card
    )
    front = yaml.safe_load(card.split("---\n")[1])
    assert [c["config_name"] for c in front["configs"]] == [
        "corpus",
        "queries",
        "qrels",
        "candidates",
        "pairs",
    ]
    assert front["configs"][1]["data_files"] == [
        {"split": "train", "path": "queries/train.jsonl"}, {"split": "test", "path": "queries/test.jsonl"}
    ]  # fmt: skip
    for stage, (kept, reasons) in FUNNEL.items():
        shown = ", ".join(f"{r}: {n}" for r, n in sorted(reasons.items()))
        assert f"| `{stage}` | " in card and f" | {kept + sum(reasons.values())} | {kept} | {shown} |" in card
    assert "| `claims` | claims (syndicated copies merged) | 9 | 9 | – |" in card
    assert "| 9 | 10 | 30 | 40 |" in card  # queries, cited, distractors, corpus
    assert (
        "| health.tribune.example | 4 |\n| www.dailypulse.example | 3 |\n| news.wellbeing.example | 2 |"
        in card
    )
    assert "| plus_pre | 0.000 | 0.750 | 1.000 |" in card
    assert "| train | 4 | 5 | 53 | 5 | 0 | 12 | 10 |" in card
    assert "not redistributed" in card and "CC0-1.0 (written for irforge)" in card and "NLM" in card
    assert "Why the splits are grouped" in card


def test_release_is_deterministic(outcome: StageOutcome, tmp_path: Path) -> None:
    again = _release(tmp_path)
    assert again.artifact.read().column("sha256").equals(outcome.artifact.read().column("sha256"))


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Nothing may be looked up on the Hub: the release is a local folder, the model a builtin.
    A fresh ``datasets`` cache: the user's one may hold a same-named folder's earlier files."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    yield


def test_every_config_loads_with_datasets(outcome: StageOutcome, offline: None) -> None:
    import datasets

    folder = str(_folder(outcome))
    for row in outcome.artifact.read().to_pylist():
        loaded = datasets.load_dataset(folder, row["config"], split=row["split"])
        assert len(loaded) == row["rows"], row
    queries = datasets.load_dataset(folder, "queries", split="train")
    assert queries.features["date"].dtype == "string" and queries[2]["date"] == ""
    assert datasets.load_dataset(folder, "qrels", split="test").features["score"].dtype == "int64"
    assert datasets.load_dataset(folder, "candidates", split="test").features["rank"].dtype == "int64"


def _card_snippet(card: str) -> str:
    section = card.split("## Evaluate with MTEB", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the card has no MTEB snippet"
    return found[1]


@pytest.mark.slow  # imports mteb and encodes with MiniLM (~15 s)
def test_the_card_snippet_runs_as_an_mteb_retrieval_task(
    outcome: StageOutcome, monkeypatch: pytest.MonkeyPatch, offline: None
) -> None:
    import mteb
    from sentence_transformers import SentenceTransformer

    folder = _folder(outcome)
    snippet = _card_snippet((folder / "README.md").read_text(encoding="utf-8"))
    assert f'"path": "{NAME}"' in snippet
    model = SentenceTransformer(str(builtin_model_path(BUILTIN_MINILM)), device="cpu")
    monkeypatch.setattr(mteb, "get_model", lambda name: model)
    monkeypatch.setattr(
        mteb, "evaluate", functools.partial(mteb.evaluate, cache=None, show_progress_bar=False)
    )
    scope: dict[str, Any] = {}
    exec(snippet.replace(f'"{NAME}"', repr(str(folder))), scope)  # the card's code, as a user runs it
    (scores,) = scope["results"].task_results[0].scores["test"]

    # The oracle: the same model, cosine over all documents (title + " " + text, as MTEB and
    # tasks.common.evaluate.baselines present them), scored by ir-measures.
    corpus = _jsonl(folder / "corpus" / "corpus.jsonl")
    queries = _jsonl(folder / "queries" / "test.jsonl")
    documents = model.encode([f"{d['title']} {d['text']}".strip() for d in corpus], normalize_embeddings=True)
    questions = model.encode([q["text"] for q in queries], normalize_embeddings=True)
    similarity = questions @ documents.T
    run = {
        q["_id"]: {d["_id"]: float(s) for d, s in zip(corpus, row, strict=True)}
        for q, row in zip(queries, similarity, strict=True)
    }
    qrels: dict[str, dict[str, int]] = {}
    for r in _jsonl(folder / "qrels" / "test.jsonl"):
        qrels.setdefault(r["query-id"], {})[r["corpus-id"]] = r["score"]
    ours = evaluate(qrels, run, ("nDCG@10", "R@5"))
    print(f"MTEB nDCG@10 {scores['ndcg_at_10']}, R@5 {scores['recall_at_5']}; ours {ours}")
    assert scores["ndcg_at_10"] == pytest.approx(ours["nDCG@10"], abs=1e-5)
    assert scores["recall_at_5"] == pytest.approx(ours["R@5"], abs=1e-5)
    assert ours["nDCG@10"] < 1  # not every cited abstract comes first: the comparison has teeth
