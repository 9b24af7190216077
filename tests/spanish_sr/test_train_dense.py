"""Stage ``train_dense`` (tasks/spanish_sr/stages/train_dense.py) on 50 real CT-EBM-SP title → abstract
pairs: the builtin MiniLM fine-tuned for one epoch, 64 tokens, with both losses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

from irforge.artifacts import Artifact
from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.errors import ConfigError
from tasks.spanish_sr.dense_training import Settings, save, self_mrr, split
from tasks.spanish_sr.stages.train_dense import SPEC, TrainDenseConfig
from tests.spanish_sr.conftest import CT_EBM_SP, artifact_of, run_one
from tests.spanish_sr.test_clean import clean
from tests.spanish_sr.test_ingest import ingest
from tests.spanish_sr.test_questions import questions

SMALL = {"epochs": 1, "train_batch_size": 8, "max_seq_length": 64, "seeds": [42]}


def real_fifty(root: Path) -> tuple[Artifact, Artifact]:
    """``(clean, questions)`` artifacts of the 50 first real demo records (by record id), title mode."""
    cleaned = clean(root, ingest(root, CT_EBM_SP.parent, "ct-ebm-sp"))
    pairs = questions(root, cleaned).artifact.read().sort_by("record_id").slice(0, 50)
    ids = pa.array(pairs.column("record_id").to_pylist())
    corpus = cleaned.artifact.read().filter(
        pa.compute.is_in(cleaned.artifact.read().column("record_id"), ids)
    )
    return artifact_of(root, "clean", corpus.sort_by("record_id")), artifact_of(root, "questions", pairs)


@pytest.fixture(scope="module")
def fifty(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Artifact]:
    root = tmp_path_factory.mktemp("train_dense")
    return root, real_fifty(root)[1]


def train_dense(root: Path, pairs: Artifact, **config: Any) -> StageOutcome:
    return run_one(
        root / "store", SPEC, validate_config(TrainDenseConfig, SMALL | config, "test"), {"questions": pairs}
    )


def embeddings(outcome: StageOutcome, texts: list[str]) -> np.ndarray[Any, Any]:
    from sentence_transformers import SentenceTransformer

    row = outcome.artifact.read().to_pylist()[0]
    model = SentenceTransformer(str(outcome.artifact.files / row["model_dir"]), device="cpu")
    return np.asarray(model.encode(texts, convert_to_numpy=True))


def base_embeddings(texts: list[str]) -> np.ndarray[Any, Any]:
    from sentence_transformers import SentenceTransformer

    from tasks.common.embed.local import builtin_model_path

    base = SentenceTransformer(str(builtin_model_path("builtin:all-MiniLM-L6-v2")), device="cpu")
    base.max_seq_length = 64
    return np.asarray(base.encode(texts, convert_to_numpy=True))


def test_one_seed_is_trained_saved_with_a_card_and_reproducible(fifty: tuple[Path, Artifact]) -> None:
    root, pairs = fifty
    first = train_dense(root / "a", pairs)
    again = train_dense(root / "b", pairs)
    [row] = first.artifact.read().to_pylist()
    assert (row["seed"], row["train_pairs"], row["val_pairs"], row["model_dir"]) == (42, 40, 10, "42")
    assert row["best_epoch"] in (0, 1) and row["val_metric"] == row["val_loss"]
    folder = first.artifact.files / "42"
    assert (folder / "model.safetensors").is_file() and (folder / "modules.json").is_file()
    card = (folder / "README.md").read_text()
    assert "builtin:all-MiniLM-L6-v2" in card and "40 title-question" in card
    split_rows = first.artifact.read(table="split").to_pylist()
    assert [r["part"] for r in split_rows].count("validation") == 10
    assert {r["record_id"] for r in split_rows} == set(pairs.read().column("record_id").to_pylist())
    history = first.artifact.read(table="history").to_pylist()
    assert [h["epoch"] for h in history] == [0, 1] and history[0]["train_loss"] is None
    texts = pairs.read().column("question").to_pylist()[:5]
    if row["best_epoch"] == 1:  # the fine-tuned weights differ from the base model's
        assert not np.allclose(embeddings(first, texts), base_embeddings(texts), atol=1e-4)
    assert np.array_equal(embeddings(first, texts), embeddings(again, texts))  # same seed, same weights


def test_early_stopping_keeps_the_best_epoch_even_the_base_model(fifty: tuple[Path, Artifact]) -> None:
    root, pairs = fifty
    # lr 1e-4 on 40 pairs overfits the English MiniLM: validation MRR drops after epoch 1 (measured),
    # so epoch 0 (the base model) is kept and saved, and patience 1 stops training at epoch 1
    outcome = train_dense(
        root / "c", pairs, epochs=3, learning_rate=1e-4, warmup_ratio=0.0, select_by="val_mrr"
    )
    [row] = outcome.artifact.read().to_pylist()
    history = outcome.artifact.read(table="history").to_pylist()
    assert [h["epoch"] for h in history] == [0, 1]
    assert history[1]["val_mrr"] < history[0]["val_mrr"]
    assert (row["best_epoch"], row["val_metric"]) == (0, history[0]["val_mrr"])
    texts = pairs.read().column("abstract").to_pylist()[:3]
    assert np.allclose(base_embeddings(texts), embeddings(outcome, texts), atol=1e-6)


def test_contrastive_loss_is_paper_equation_2() -> None:
    # torch's cosine_embedding_loss, computed by hand: 1 − cos for y = 1, max(0, cos − m) for y = −1
    a = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    b = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([1.0, -1.0, -1.0])
    c = 2**-0.5
    expected = ((1 - c) + max(0.0, c - 0.5) + max(0.0, 1.0 - 0.5)) / 3
    assert float(torch.nn.functional.cosine_embedding_loss(a, b, y, margin=0.5)) == pytest.approx(expected)


def test_contrastive_training_runs_with_random_negatives(fifty: tuple[Path, Artifact]) -> None:
    root, pairs = fifty
    outcome = train_dense(root / "d", pairs, loss="contrastive", margin=0.3, seeds=[10])
    [row] = outcome.artifact.read().to_pylist()
    assert row["seed"] == 10 and row["train_pairs"] == 40 and 0 < row["val_mrr"] <= 1


def test_split_and_mrr_helpers() -> None:
    train, val = split(50, 0.2, 42)
    assert len(val) == 10 and sorted(train + val) == list(range(50)) and split(50, 0.2, 42) == (train, val)
    assert split(50, 0.2, 10) != (train, val)
    assert split(1, 0.2, 42) == ([0], []) and split(2, 0.2, 42)[1] != []
    # row 0 own score ranks 1st, row 1's 2nd (tie with column 0 goes to the lower column), row 2's 3rd
    scores = np.array([[0.9, 0.1, 0.0], [0.5, 0.5, 0.1], [0.8, 0.7, 0.2]])
    assert self_mrr(scores) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert Settings().loss == "mnrl"


def test_too_few_pairs_are_excluded_and_bad_config_refused(fifty: tuple[Path, Artifact]) -> None:
    root, pairs = fifty
    two = artifact_of(root, "questions", pairs.read().slice(0, 2))
    outcome = train_dense(root / "e", two)
    assert outcome.artifact.read().num_rows == 0
    [bad] = outcome.artifact.excluded().to_pylist()
    assert bad["reason"] == "too_few_pairs" and "1 to train, 1 to validate" in bad["detail"]
    with pytest.raises(ConfigError, match="seeds repeat"):
        validate_config(TrainDenseConfig, {"seeds": [1, 1]}, "test")
    with pytest.raises(ConfigError, match="loss"):
        validate_config(TrainDenseConfig, {"loss": "triplet"}, "test")


def test_a_grid_trains_every_point_and_keeps_the_best_on_validation(fifty: tuple[Path, Artifact]) -> None:
    root, pairs = fifty
    outcome = train_dense(root / "grid", pairs, grid={"learning_rate": [1e-6, 2e-4], "warmup_ratio": [0.0]})
    points = outcome.artifact.read(table="grid").to_pylist()
    assert [json.loads(p["point"]) for p in points] == [
        {"learning_rate": 1e-6, "warmup_ratio": 0.0},
        {"learning_rate": 2e-4, "warmup_ratio": 0.0},
    ]
    best = min(points, key=lambda p: p["val_loss"])
    assert [p["chosen"] for p in points] == [p is best for p in points]
    [row] = outcome.artifact.read().to_pylist()
    assert row["grid_point"] == best["point"] and row["val_loss"] == best["val_loss"]
    card = (outcome.artifact.files / row["model_dir"] / "README.md").read_text(encoding="utf-8")
    assert f"learning rate {json.loads(best['point'])['learning_rate']}" in card
    plain = train_dense(root / "plain", pairs).artifact
    assert plain.read().to_pylist()[0]["grid_point"] == "{}" and plain.read(table="grid").num_rows == 1
    for bad in ({"epochs": [1.5]}, {"learning_rate": [1e-5, 1e-5]}, {"momentum": [0.9]}):
        with pytest.raises(ConfigError):
            validate_config(TrainDenseConfig, SMALL | {"grid": bad}, "test")


def test_saved_tokenizer_config_depends_on_the_model_not_on_the_process(tmp_path: Path) -> None:
    """How a process loaded the base model and what it last encoded do not reach the saved bytes."""
    from sentence_transformers import SentenceTransformer

    from tasks.common.embed.local import builtin_model_path

    base = str(builtin_model_path("builtin:all-MiniLM-L6-v2"))
    online = SentenceTransformer(base, device="cpu", local_files_only=False)
    offline = SentenceTransformer(base, device="cpu", local_files_only=True)
    offline.tokenizer(["una frase larga " * 40], truncation=True, max_length=16, padding="max_length")
    save(online, tmp_path / "a", "card")
    save(offline, tmp_path / "b", "card")
    first, second = ((tmp_path / d / "tokenizer_config.json").read_bytes() for d in "ab")
    assert first == second
    assert "model_max_length" in json.loads(first)  # the model's own settings are kept
