"""Stage ``release``: a Hugging Face dataset folder that ``datasets`` loads, with its card.

Real CT-EBM-SP abstracts (``data/spanish_sr/ct-ebm-sp``) with years given here, plus a
malformed line, a record without fields, a placeholder abstract, a short one, a near
duplicate and a title equal to its abstract, go through the real ``ingest``, ``clean``
and ``questions`` stages, so the funnel's counts are known. ``bm25``, ``train_dense``
(with model folders and a config naming its base model), ``train_rerank``, ``reviews`` and
``evaluate`` are small handmade artifacts in those stages' shapes. Every config is loaded
with ``datasets.load_dataset`` and compared with what went in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from irforge.artifacts import Artifact
from irforge.config import StrictModel
from irforge.engine import StageOutcome
from irforge.errors import IrforgeError
from tasks.spanish_sr.review_sets import QUERY_SCHEMA
from tasks.spanish_sr.significance import RESULT_SCHEMA
from tasks.spanish_sr.stages import clean, ingest, questions, release
from tasks.spanish_sr.stages.clean import CleanConfig
from tasks.spanish_sr.stages.ingest import IngestConfig
from tasks.spanish_sr.stages.questions import QuestionsConfig
from tasks.spanish_sr.stages.release import ReleaseConfig
from tasks.spanish_sr.stages.train_dense import TrainDenseConfig
from tests.common.test_report import publish
from tests.spanish_sr.conftest import CT_EBM_SP, artifact_of, run_one

FLOW = "spanish_sr"
SECRET = "hf_release_test_secret_0123456789"
REAL = sorted(CT_EBM_SP.glob("*.txt"))[:11]
YEARS = [2009, 2012, 2013, 2015, 2016, 2020, 2023, 2005, None, 2011, 2014]  # the 11th: title = abstract


def _brat(path: Path) -> tuple[str, str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[0], "\n".join(lines[1:])


def _records() -> list[dict[str, Any]]:
    out = []
    for i, (path, year) in enumerate(zip(REAL, YEARS, strict=True)):
        title, abstract = _brat(path)
        if i == 10:
            title = abstract = " ".join(abstract.split())  # the abstract as both: questions drops it
        out.append(
            {"id": path.stem, "title": title, "abstract": abstract, "year": year, "descriptors": ["D1"]}
        )
    return out


KEPT = _records()
_T0, _A0 = KEPT[0]["title"], KEPT[0]["abstract"]
EXTRA = [
    {"id": "empty-1"},  # missing_field (ingest)
    {"id": "noabs-1", "title": "Revisión de casos clínicos", "abstract": "Sin resumen"},  # no_abstract
    {"id": "short-1", "title": "Nota clínica", "abstract": "Estudio breve de un caso."},  # short_abstract
    {"id": "dup-1", "title": _T0, "abstract": _A0.replace(" ", "  ", 1) + " ."},  # duplicate_of (no year)
]
FUNNEL = {
    "ingest": (len(KEPT) + len(EXTRA) + 2, {"malformed_record": 1, "missing_field": 1, "unreadable": 1}),
    "clean": (len(KEPT) + 3, {"duplicate_of": 1, "no_abstract": 1, "short_abstract": 1}),
    "questions": (len(KEPT), {"title_equals_abstract": 1}),
}  # stage → (units in, excluded per reason)
PAIRS = [r["id"] for r in KEPT[:10]]
SPLIT_42 = {rid: "validation" if i in (1, 4) else "train" for i, rid in enumerate(PAIRS)}
SPLIT_10 = {rid: "validation" if i in (0, 2) else "train" for i, rid in enumerate(PAIRS)}
REVIEWS = {"r1": ([PAIRS[0], PAIRS[3]], ["r1/question", "r1/expert-1"]),
           "r2": ([PAIRS[5]], ["r2/question", "r2/expert-1", "r2/expert-2"])}  # fmt: skip
SYSTEMS = {"bm25": (0.30, 0.02), "dense": (0.25, 0.05), "rerank": (0.41, 0.01)}


class RerankConfig(StrictModel):  # the config fields the release reads from train_rerank's manifest
    base_model: str = "cross-encoder/test-reranker"
    revision: str | None = None


def _write_sources(folder: Path) -> None:
    lines = [json.dumps(r, ensure_ascii=False) for r in KEPT[:5]]
    lines.append("{not json")  # malformed_record
    lines += [json.dumps(r, ensure_ascii=False) for r in [*KEPT[5:], *EXTRA]]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "export.xml").write_text(
        "<html><body>not an export</body></html>", encoding="utf-8"
    )  # unreadable


def _models(root: Path) -> dict[str, Artifact]:
    schema = {"seed": pa.int64(), "best_epoch": pa.int32(), "val_loss": pa.float64(), "val_mrr": pa.float64()}
    dense = pa.table(
        {"seed": [42, 10], "best_epoch": [1, 2], "val_metric": [0.5, 0.4], "val_loss": [0.5, 0.4],
         "val_mrr": [0.61, 0.66], "train_pairs": [8, 8], "val_pairs": [2, 2], "model_dir": ["42", "10"]},
        pa.schema({**schema, "val_metric": pa.float64(), "train_pairs": pa.int32(), "val_pairs": pa.int32(),
                   "model_dir": pa.string()}),
    )  # fmt: skip
    split = pa.table(
        {
            "seed": [42] * 10 + [10] * 10,
            "record_id": PAIRS * 2,
            "part": [SPLIT_42[r] for r in PAIRS] + [SPLIT_10[r] for r in PAIRS],
        }
    )
    card = {f"{s}/README.md": b"# model card\n" for s in (42, 10)}
    rerank = pa.table(
        {"seed": [42], "best_epoch": [3], "val_loss": [1.2], "val_mrr": [0.8], "train_lists": [8],
         "val_lists": [2], "model_dir": ["42"]},
        pa.schema({**schema, "train_lists": pa.int32(), "val_lists": pa.int32(), "model_dir": pa.string()}),
    )  # fmt: skip
    return {
        "train_dense": publish(root, "train_dense", dense, ("seed",), tables={"split": split}, files=card,
                               flow=FLOW, config=TrainDenseConfig(seeds=[42, 10])).artifact,
        "train_rerank": publish(root, "train_rerank", rerank, ("seed",), files={"42/README.md": b"# rr\n"},
                                flow=FLOW, config=RerankConfig()).artifact,
    }  # fmt: skip


def _reviews(root: Path, extra_record: str | None = None) -> Artifact:
    qrels = [(rid, rec) for rid, (recs, _q) in REVIEWS.items() for rec in recs]
    qrels += [("r2", extra_record)] if extra_record else []
    queries = [
        {"query_id": q, "review_id": rid, "language": "es", "kind": q.split("/")[1].split("-")[0],
         "text": f"consulta {q}"}
        for rid, (_recs, qs) in REVIEWS.items() for q in qs
    ]  # fmt: skip
    reviews = [
        {"review_id": rid, "source": "demo.yaml", "title": None, "language": "es", "question": f"¿{rid}?",
         "included": len(recs) + 1, "included_known": len(recs)}
        for rid, (recs, _q) in REVIEWS.items()
    ]  # fmt: skip
    table = pa.table(
        {"review_id": [r for r, _ in qrels], "record_id": [d for _, d in qrels],
         "relevance": pa.array([1] * len(qrels), pa.int32()), "source": ["demo.yaml"] * len(qrels)}
    )  # fmt: skip
    side = {"queries": pa.Table.from_pylist(queries, QUERY_SCHEMA), "reviews": pa.Table.from_pylist(reviews)}
    return artifact_of(root, "reviews", table, side)


def _evaluate(root: Path, tests: bool = True) -> Artifact:
    summary = [
        {"review_id": review, "query_kind": kind, "system": system, "measure": measure,
         "mean": mean + (0.1 if measure == "nDCG" else 0.0), "std": std, "min": mean - std, "max": mean + std,
         "seeds": 2, "queries": 5}
        for review in ("all", "r1") for kind in ("all", "question") for system, (mean, std) in SYSTEMS.items()
        for measure in ("AP", "nDCG")
    ]  # fmt: skip
    significance = [
        {"review": "r2", "metric": "AP", "n": 2, "mean_question": 0.2, "mean_expert": 0.4, "mean_difference": 0.2,
         "normality_statistic": 0.9, "normality_p": 0.5, "test": "paired_t", "statistic": 3.5, "p_value": 0.0123,
         "decision": "different", "note": ""},
        {"review": "r1", "metric": "AP", "n": 1, "mean_question": 0.3, "mean_expert": 0.3, "mean_difference": 0.0,
         "normality_statistic": None, "normality_p": None, "test": "none", "statistic": None, "p_value": None,
         "decision": "not tested", "note": "one pair"},
    ]  # fmt: skip
    # artifact_of's fingerprint sees the main table's row count and schema only: vary the count
    per_query = pa.table(
        {"query_id": ["r1/question"] * (1 if tests else 2), "value": [0.3] * (1 if tests else 2)}
    )
    side = {
        "summary": pa.Table.from_pylist(summary),
        "significance": pa.Table.from_pylist(significance if tests else [], RESULT_SCHEMA),
    }
    return artifact_of(root, "evaluate", per_query, side)


def _upstream(root: Path) -> dict[str, Artifact]:
    _write_sources(root / "sources")
    up = {"ingest": run_one(root, ingest.SPEC, IngestConfig(sources=["sources"]), {}).artifact}
    up["clean"] = run_one(root, clean.SPEC, CleanConfig(), up).artifact
    up["questions"] = run_one(root, questions.SPEC, QuestionsConfig(), {"clean": up["clean"]}).artifact
    params = {"k1": [1.7], "b": [0.75], "mrr": [0.55], "variant": ["okapi"], "fold_accents": [False],
              "language": ["es"]}  # fmt: skip
    grid = pa.table({"k1": [1.7], "b": [0.75], "mrr": [0.55]})
    up["bm25"] = artifact_of(root, "bm25", grid, {"params": pa.table(params)})
    return {**up, **_models(root), "reviews": _reviews(root), "evaluate": _evaluate(root)}


def _release(root: Path, upstream: dict[str, Artifact]) -> StageOutcome:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_TOKEN", SECRET)
        return run_one(root, release.SPEC, ReleaseConfig(name="irforge/spanish-sr-test"), upstream)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Artifact], StageOutcome]:
    root = tmp_path_factory.mktemp("release")
    upstream = _upstream(root)
    return root, upstream, _release(root, upstream)


def _folder(outcome: StageOutcome) -> Path:
    return outcome.artifact.files / "release"


def _card(outcome: StageOutcome) -> str:
    return (_folder(outcome) / "README.md").read_text(encoding="utf-8")


def test_upstream_counts_are_the_ones_built(built: tuple[Path, dict[str, Artifact], StageOutcome]) -> None:
    _root, up, _outcome = built
    for stage, (units_in, reasons) in FUNNEL.items():
        counts = up[stage].manifest["counts"]
        assert (counts["units_in"], counts["excluded_by_reason"]) == (units_in, reasons), stage
    assert up["clean"].num_rows == len(KEPT) and up["questions"].num_rows == len(PAIRS)


def test_files_and_accounting(built: tuple[Path, dict[str, Artifact], StageOutcome]) -> None:
    _root, _up, outcome = built
    files = {(r["config"], r["split"]): r["rows"] for r in outcome.artifact.read().to_pylist()}
    assert files == {
        ("corpus", "corpus"): 11, ("questions", "train"): 8, ("questions", "validation"): 2,
        ("queries", "test"): 5, ("qrels", "test"): 2 * 2 + 3 * 1, ("results", "results"): 24,
        ("significance", "significance"): 2, ("bm25", "bm25"): 1, ("models", "models"): 3,
    }  # fmt: skip
    counts = outcome.artifact.manifest["counts"]
    assert counts["units_in"] == counts["units_kept"] + counts["units_excluded"] == len(files)
    assert outcome.artifact.excluded().num_rows == 0
    folder = _folder(outcome)
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert on_disk == ["README.md", *sorted(f"{c}/{s}.jsonl" for c, s in files)]  # what push_release sends


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Nothing looked up on the Hub; a fresh ``datasets`` cache."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    yield


def test_every_config_loads_with_what_went_in(
    built: tuple[Path, dict[str, Artifact], StageOutcome], offline: None
) -> None:
    import datasets

    root, up, outcome = built
    folder = str(_folder(outcome))

    def load(config: str, split: str) -> list[dict[str, Any]]:
        return list(datasets.load_dataset(folder, config, split=split))

    for row in outcome.artifact.read().to_pylist():
        assert len(load(row["config"], row["split"])) == row["rows"], row
    corpus = load("corpus", "corpus")
    clean_rows = up["clean"].read().to_pylist()
    assert [(d["_id"], d["title"], d["text"], d["year"], d["descriptors"]) for d in corpus] == [
        (r["record_id"], r["title"], r["abstract"], r["year"], ["D1"]) for r in clean_rows
    ]
    assert {d["_id"] for d in corpus} == {
        r["id"] for r in KEPT
    }  # the near duplicate went, the original stayed
    for split in ("train", "validation"):
        got = load("questions", split)
        assert sorted(q["corpus-id"] for q in got) == sorted(r for r, s in SPLIT_42.items() if s == split)
        assert all(q["mode"] == "title" for q in got)
    qrels = {(q["query-id"], q["corpus-id"], q["score"]) for q in load("qrels", "test")}
    assert qrels == {(q, d, 1) for _rid, (docs, qs) in REVIEWS.items() for q in qs for d in docs}
    assert [q["kind"] for q in load("queries", "test")] == [
        "question",
        "expert",
        "question",
        "expert",
        "expert",
    ]
    assert load("bm25", "bm25") == [
        {"k1": 1.7, "b": 0.75, "mrr": 0.55, "variant": "okapi", "fold_accents": False, "language": "es"}
    ]
    models = load("models", "models")
    assert [(m["kind"], m["seed"], m["base_model"]) for m in models] == [
        ("dual_encoder", 42, "builtin:all-MiniLM-L6-v2"),
        ("dual_encoder", 10, "builtin:all-MiniLM-L6-v2"),
        ("reranker", 42, "cross-encoder/test-reranker"),
    ]
    assert all((root / m["path"] / "README.md").is_file() for m in models)
    tests = load("significance", "significance")
    assert tests[1]["statistic"] is None and tests[0]["p_value"] == 0.0123


def _mean(texts: list[str]) -> str:
    return f"{sum(len(t.split()) for t in texts) / len(texts):.2f}"


def test_card_funnel_years_results_licences(built: tuple[Path, dict[str, Artifact], StageOutcome]) -> None:
    root, _up, outcome = built
    card = _card(outcome)
    assert "## Citation" in card and "@inproceedings{oforiboateng2024zeroshot," in card
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["license"] == "cc-by-nc-sa-4.0" and front["language"] == ["es"]
    assert front["configs"][1]["data_files"] == [
        {"split": "train", "path": "questions/train.jsonl"},
        {"split": "validation", "path": "questions/validation.jsonl"},
    ]
    for stage, (units_in, reasons) in FUNNEL.items():
        assert f"| `{stage}` | " in card and f" | {units_in} |" in card
        for reason, n in reasons.items():
            assert f"| `{stage}` | excluded: `{reason}` | {n} |" in card
    assert (
        "| `ingest` | records read (a file that cannot be read counts once) | 17 |\n" in card
        and "| `ingest` | records ingested | 14 |" in card
    )
    assert "| `clean` | records kept (the corpus) | 11 |" in card
    assert "| `questions` | question–abstract pairs | 10 |" in card
    bins = {"2009-2012": (2009, 2012), "2013-2015": (2013, 2015), "2016-2019": (2016, 2019),
            "2020-2023": (2020, 2023), "other years": (1000, 2008), "unknown year": None}  # fmt: skip
    groups = {
        label: [r for r in KEPT if (r["year"] is None if span is None else r["year"] is not None
                                    and span[0] <= r["year"] <= span[1])]
        for label, span in bins.items()
    }  # fmt: skip
    assert f"| statistic | {' | '.join(bins)} |" in card
    assert "| records | 3 | 3 | 1 | 2 | 1 | 1 |" in card
    assert (
        "| mean abstract length | " + " | ".join(_mean([r["abstract"] for r in g]) for g in groups.values())
        in card
    )
    assert (
        "| mean title length | " + " | ".join(_mean([r["title"] for r in g]) for g in groups.values()) in card
    )
    assert (
        "| bm25 | 0.300 ± 0.020 | 0.400 ± 0.020 |" in card
        and "| rerank | 0.410 ± 0.010 | 0.510 ± 0.010 |" in card
    )
    assert "| r2 | AP | 2 | 0.200 | 0.400 | paired_t | 3.500 | 0.0123 | different |" in card
    assert "| r1 | AP | 1 | 0.300 | 0.300 | none | – | – | not tested |" in card
    assert "| 1.7 | 0.75 | 0.550 | okapi | False | es |" in card
    assert "`r2` | es | 1 | 2 | 1 / 2 |" in card
    assert "Ofori-Boateng" in card and "seed 42: 8 train, 2 validation" in card
    assert "`cc-by-nc-sa-4.0`" in card and "CT-EBM-SP: CC BY-NC-SA 4.0" in card
    assert "a demo, not a benchmark" in card
    assert SECRET not in card and str(root) not in card


def test_release_is_deterministic(
    built: tuple[Path, dict[str, Artifact], StageOutcome], tmp_path: Path
) -> None:
    _root, _up, outcome = built
    again = _release(tmp_path, _upstream(tmp_path))
    assert again.artifact.read().column("sha256").equals(outcome.artifact.read().column("sha256"))


def test_empty_split_is_excluded_and_said(built: tuple[Path, dict[str, Artifact], StageOutcome]) -> None:
    root, up, _outcome = built
    outcome = _release(root, {**up, "evaluate": _evaluate(root, tests=False)})
    excluded = outcome.artifact.excluded().to_pylist()
    assert [(r["config"], r["split"], r["reason"]) for r in excluded] == [
        ("significance", "significance", "empty_split")
    ]
    card = _card(outcome)
    assert "No test was run" in card and "significance/" not in card


def test_a_judgement_outside_the_corpus_is_an_error(
    built: tuple[Path, dict[str, Artifact], StageOutcome],
) -> None:
    root, up, _outcome = built
    with pytest.raises(IrforgeError, match="judges record 'dup-1', which is not in the corpus"):
        _release(root, {**up, "reviews": _reviews(root, extra_record="dup-1")})


def test_year_ranges_must_not_overlap() -> None:
    with pytest.raises(ValueError, match="overlap"):
        ReleaseConfig(year_bins=[(2009, 2013), (2013, 2015)])
    assert ReleaseConfig(year_bins=[(2020, 2023), (2009, 2012)]).year_bins[0] == (2020, 2023)


def test_the_card_names_the_model_that_wrote_llm_questions(tmp_path: Path) -> None:
    """Issue 29 §4: provenance from what ran: the model each ``llm`` question row names."""
    from tasks.common.release.card import provenance
    from tasks.spanish_sr.stages.release import _question_models

    rows = pa.table(
        {
            "record_id": ["a", "b", "c", "d"],
            "mode": ["llm", "llm", "title", "llm"],
            "model": ["gemma-3-270m-q4_k_m", "gemma-3-270m-q4_k_m", None, "Qwen/Qwen2.5-7B-Instruct"],
        }
    )
    answered = _question_models(artifact_of(tmp_path, "questions", rows))
    assert answered == (
        "`questions`: 1 question(s) written by `Qwen/Qwen2.5-7B-Instruct`",
        "`questions`: 2 question(s) written by `gemma-3-270m-q4_k_m`",
    )
    lines = provenance({"questions": "abc"}, answered)
    assert lines[:3] == ["## Provenance", "", "Models that answered, as the rows name them:"]
    assert "- `questions`: 2 question(s) written by `gemma-3-270m-q4_k_m`" in lines
    title_only = _question_models(
        artifact_of(tmp_path / "t", "questions", rows.filter(pa.array([False, False, True, False])))
    )
    assert title_only == ()
