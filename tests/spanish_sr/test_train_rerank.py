"""Stage ``train_rerank`` (tasks/spanish_sr/stages/train_rerank.py) and its lists and losses
(tasks/spanish_sr/rerank_training.py): the builtin MiniLM cross-encoder fine-tuned on the
``weighted`` candidates of 50 real CT-EBM-SP questions (test_hybrid's ``demo``), 64 tokens,
lists of 4, 8 training lists; the losses checked against numpy by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch

from irforge.artifacts import Artifact
from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.errors import ConfigError, IrforgeError
from tasks.common.rerank.builtin import MINILM_CROSS_ENCODER
from tasks.common.rerank.local import CrossEncoderReranker
from tasks.spanish_sr.rerank_training import (
    Candidates,
    RerankSettings,
    build_lists,
    list_loss,
    positive_rr,
    validate,
)
from tasks.spanish_sr.stages.hybrid import SPEC as HYBRID
from tasks.spanish_sr.stages.hybrid import HybridConfig
from tasks.spanish_sr.stages.train_rerank import SPEC, TrainRerankConfig
from tests.spanish_sr.conftest import artifact_of, run_one
from tests.spanish_sr.test_hybrid import demo  # noqa: F401  (the module fixture: 50 real records)

# lr 2e-4 for 2 epochs of 4 steps lowers the listwise loss of the 8 training lists (measured on
# CPU, see the printed numbers) and the validation loss
SMALL = {
    "list_size": 4, "max_length": 64, "max_train_lists": 8, "epochs": 2, "train_batch_size": 2,
    "learning_rate": 2e-4, "warmup_ratio": 0.0, "patience": 2, "device": "cpu",
}  # fmt: skip


def settings(**change: Any) -> RerankSettings:
    return RerankSettings(**({"list_size": 4} | change))


# -- lists ------------------------------------------------------------------------------------

ABSTRACTS = {rid: f"abstract {rid}" for rid in ("q", "a", "b", "c", "d", "e", "f", "g")}


def test_top_negatives_skip_the_question_own_record_and_records_without_abstract() -> None:
    c = Candidates("q", "question?", ("a", "q", "x", "b", "c", "d"))  # x: no abstract
    [item] = build_lists([c], ABSTRACTS, settings())
    assert (item.record_id, item.question) == ("q", "question?")
    assert item.abstracts == ("abstract q", "abstract a", "abstract b", "abstract c")
    # sample without a generator (validation lists) is the top of the ranking too
    assert build_lists([c], ABSTRACTS, settings(negatives="sample")) == [item]


def test_few_candidates_give_a_shorter_list_and_none_no_list() -> None:
    short = Candidates("q", "q?", ("q", "a"))
    alone = Candidates("b", "b?", ("b", "x"))  # only itself and a record without abstract
    lists = build_lists([alone, short, Candidates("c", "c?", ())], ABSTRACTS, settings())
    assert [(t.record_id, t.abstracts) for t in lists] == [("q", ("abstract q", "abstract a"))]
    # sampling when there are no more candidates than wanted takes them all, in rank order
    many = Candidates("q", "q?", ("c", "q", "a", "b"))
    [drawn] = build_lists([many], ABSTRACTS, settings(negatives="sample"), np.random.default_rng(1))
    assert drawn.abstracts == ("abstract q", "abstract c", "abstract a", "abstract b")


def test_sampled_negatives_are_a_seeded_draw_in_rank_order() -> None:
    ranked = ("g", "q", "f", "e", "d", "c", "b", "a")
    c = Candidates("q", "q?", ranked)
    s = settings(negatives="sample")

    def draw(seed: int) -> tuple[str, ...]:
        [item] = build_lists([c], ABSTRACTS, s, np.random.default_rng(seed))
        assert item.abstracts[0] == "abstract q" and len(item.abstracts) == 4
        return tuple(a.removeprefix("abstract ") for a in item.abstracts[1:])

    draws = {seed: draw(seed) for seed in range(12)}
    for negatives in draws.values():
        assert "q" not in negatives and len(set(negatives)) == 3
        assert list(negatives) == sorted(negatives, key=ranked.index)  # kept in rank order
    assert all(draw(seed) == draws[seed] for seed in (0, 5))  # same seed, same draw
    assert len(set(draws.values())) > 3  # not always the same three
    # one generator over epochs gives a new draw each time (train() rebuilds lists per epoch)
    rng = np.random.default_rng(7)
    epochs = [build_lists([c], ABSTRACTS, s, rng)[0].abstracts for _ in range(6)]
    assert len(set(epochs)) > 1


# -- losses -----------------------------------------------------------------------------------


def test_losses_match_their_formulas_by_hand() -> None:
    s = np.array([0.5, 1.0, -0.5, 0.3])
    logits = torch.tensor(s, dtype=torch.float64)
    listwise = -np.log(np.exp(s[0]) / np.exp(s).sum())
    sig = 1 / (1 + np.exp(-s))
    labels = np.array([1.0, 0.0, 0.0, 0.0])
    bce = np.mean(-(labels * np.log(sig) + (1 - labels) * np.log(1 - sig)))
    hinge = np.mean(np.maximum(0.0, 1.0 - (s[0] - s[1:])))  # (1.5 + 0 + 0.8) / 3
    assert float(list_loss(logits, settings(loss="listwise"))) == pytest.approx(listwise, rel=1e-12)
    assert float(list_loss(logits, settings(loss="bce"))) == pytest.approx(bce, rel=1e-12)
    assert float(list_loss(logits, settings(loss="hinge"))) == pytest.approx(hinge, rel=1e-12)
    assert hinge == pytest.approx(2.3 / 3)
    wide = np.mean(np.maximum(0.0, 2.5 - (s[0] - s[1:])))
    assert float(list_loss(logits, settings(loss="hinge", margin=2.5))) == pytest.approx(wide)
    # a positive far above every negative: listwise and hinge near 0
    clear = torch.tensor([20.0, 0.0, -1.0, 1.0], dtype=torch.float64)
    assert float(list_loss(clear, settings())) < 1e-6
    assert float(list_loss(clear, settings(loss="hinge"))) == 0.0


def test_positive_rr_counts_ties_against_the_positive() -> None:
    assert positive_rr(torch.tensor([2.0, 1.0, 0.0])) == 1.0
    assert positive_rr(torch.tensor([1.0, 1.0, 0.5, 2.0])) == pytest.approx(1 / 3)
    assert positive_rr(torch.tensor([0.0, 0.0, 0.0, 0.0])) == pytest.approx(1 / 4)  # constant scores
    assert positive_rr(torch.tensor([0.5, 0.4999])) == 1.0


# -- the stage on the real fifty --------------------------------------------------------------


@pytest.fixture(scope="module")
def hybrid(demo: dict[str, Any]) -> Artifact:  # noqa: F811
    """The ``weighted`` top 3 of every question of both parts: fewer candidates than ``list_size``."""
    upstream = {n: demo[n] for n in ("bm25", "clean", "train_dense", "questions")}
    config = validate_config(HybridConfig, {"top_n": 3, "methods": ["weighted"]}, "test")
    return run_one(demo["root"] / "store", HYBRID, config, upstream).artifact


def train_rerank(root: Path, hybrid: Artifact, questions: Artifact, **config: Any) -> StageOutcome:
    cfg = validate_config(TrainRerankConfig, SMALL | config, "test")
    return run_one(root / "store", SPEC, cfg, {"hybrid": hybrid, "questions": questions})


@pytest.fixture(scope="module")
def runs(demo: dict[str, Any], hybrid: Artifact) -> tuple[StageOutcome, StageOutcome]:  # noqa: F811
    """The same training twice, in two stores."""
    root = demo["root"]
    return (
        train_rerank(root / "rerank-a", hybrid, demo["questions"]),
        train_rerank(root / "rerank-b", hybrid, demo["questions"]),
    )


def candidates_by_hand(hybrid: Artifact, questions: Artifact) -> dict[str, tuple[str, Candidates]]:
    """query id -> (part, its weighted candidates in rank order)."""
    text = {r["record_id"]: r["question"] for r in questions.read().to_pylist()}
    rows = sorted(hybrid.read().to_pylist(), key=lambda r: (r["query_id"], r["rank"]))
    ranked: dict[str, list[str]] = {}
    part = {}
    for r in rows:
        assert (r["seed"], r["method"]) == (42, "weighted")
        ranked.setdefault(r["query_id"], []).append(r["record_id"])
        part[r["query_id"]] = r["part"]
    return {q: (part[q], Candidates(q, text[q], tuple(ids))) for q, ids in ranked.items()}


def pairs(questions: Artifact, n: int) -> tuple[list[str], list[str]]:
    table = questions.read().sort_by("record_id").slice(0, n)
    return table.column("question").to_pylist(), table.column("abstract").to_pylist()


def test_one_model_per_seed_saved_loadable_with_card_history_and_lists(
    demo: dict[str, Any],  # noqa: F811
    hybrid: Artifact,
    runs: tuple[StageOutcome, StageOutcome],
) -> None:
    outcome = runs[0]
    [row] = outcome.artifact.read().to_pylist()
    assert outcome.artifact.excluded().num_rows == 0
    assert (row["seed"], row["model_dir"], row["max_length"]) == (42, "42", 64)
    assert (row["train_lists"], row["val_lists"]) == (8, 10)
    folder = outcome.artifact.files / row["model_dir"]
    reranker = CrossEncoderReranker(str(folder), max_length=row["max_length"], device="cpu")
    assert reranker.max_length == 64
    queries, abstracts = pairs(demo["questions"], 6)
    scores = reranker.score(queries, abstracts).logit
    base = CrossEncoderReranker(MINILM_CROSS_ENCODER, max_length=64, device="cpu")
    assert scores.shape == (6,) and np.isfinite(scores).all()
    assert not np.allclose(scores, base.score(queries, abstracts).logit, atol=1e-4)  # fine-tuned
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert MINILM_CROSS_ENCODER in card and "on 8 lists" in card and "10 lists validated" in card
    assert "loss: listwise" in card and "max length 64" in card and f"best {row['best_epoch']}" in card
    # history: epoch 0 is the base model, then every epoch; the row is the best one
    history = outcome.artifact.read(table="history").to_pylist()
    assert [h["epoch"] for h in history] == [0, 1, 2] and {h["seed"] for h in history} == {42}
    assert history[0]["train_loss"] is None and all(h["train_loss"] > 0 for h in history[1:])
    best = min(history, key=lambda h: h["val_loss"])
    assert row["best_epoch"] == best["epoch"] >= 1
    assert (row["val_loss"], row["val_mrr"]) == (best["val_loss"], best["val_mrr"])
    # lists: every hybrid question with its part and its negatives (top 3 minus itself, at most 3)
    by_hand = candidates_by_hand(hybrid, demo["questions"])
    lists = outcome.artifact.read(table="lists").to_pylist()
    assert len(lists) == len(by_hand) == 50
    for r in lists:
        part, c = by_hand[r["record_id"]]
        assert (r["seed"], r["part"]) == (42, part)
        assert r["negatives"] == min(3, sum(rid != c.record_id for rid in c.ranked))
    # every title ranks its own abstract in its top 3 (measured): lists of 2 negatives, not 3
    assert {r["negatives"] for r in lists} == {2}
    used = [(r["part"], r["used"]) for r in lists]
    assert used.count(("validation", True)) == 10 and used.count(("train", True)) == 8
    assert used.count(("train", False)) == 32
    # epoch 0 is the base model validated on the validation lists (top negatives, dropout off)
    val = [c for part, c in by_hand.values() if part == "validation"]
    val_lists = build_lists(val, abstracts_of(demo["questions"]), settings())
    loss, mrr = validate(base.cross_encoder, val_lists, settings())
    assert (loss, mrr) == pytest.approx((history[0]["val_loss"], history[0]["val_mrr"]), rel=1e-5)


def abstracts_of(questions: Artifact) -> dict[str, str]:
    return {
        r["record_id"]: r["abstract"] for r in questions.read(columns=["record_id", "abstract"]).to_pylist()
    }


def test_reproducible_and_training_lowers_the_loss_of_the_training_lists(
    demo: dict[str, Any],  # noqa: F811
    hybrid: Artifact,
    runs: tuple[StageOutcome, StageOutcome],
) -> None:
    first, again = runs
    assert first.artifact.path != again.artifact.path
    assert first.artifact.read().to_pylist() == again.artifact.read().to_pylist()
    for table in ("history", "lists"):
        assert first.artifact.read(table=table).to_pylist() == again.artifact.read(table=table).to_pylist()
    queries, abstracts = pairs(demo["questions"], 8)
    models = [CrossEncoderReranker(str(o.artifact.files / "42"), max_length=64, device="cpu") for o in runs]
    one, two = (m.score(queries, abstracts).logit for m in models)
    assert np.array_equal(one, two) and len(set(one.tolist())) == 8  # identical, and not constant
    # the 8 lists it trained on, scored by the base model and by the saved one
    lists = first.artifact.read(table="lists").to_pylist()
    trained_on = {r["record_id"] for r in lists if r["part"] == "train" and r["used"]}
    by_hand = candidates_by_hand(hybrid, demo["questions"])
    train_lists = build_lists(
        [by_hand[q][1] for q in sorted(trained_on)], abstracts_of(demo["questions"]), settings()
    )
    assert len(train_lists) == 8
    base = CrossEncoderReranker(MINILM_CROSS_ENCODER, max_length=64, device="cpu").cross_encoder
    before, rr_before = validate(base, train_lists, settings())
    after, rr_after = validate(models[0].cross_encoder, train_lists, settings())
    print(f"training lists: loss {before:.4f} -> {after:.4f}, MRR {rr_before:.4f} -> {rr_after:.4f}")
    assert after < 0.85 * before and rr_after > rr_before
    # the saved weights are the best epoch's, not the last one's (here epoch 1 of 2, measured)
    [row] = first.artifact.read().to_pylist()
    history = first.artifact.read(table="history").to_pylist()
    val = [c for part, c in by_hand.values() if part == "validation"]
    val_lists = build_lists(val, abstracts_of(demo["questions"]), settings())
    saved = validate(models[0].cross_encoder, val_lists, settings())
    assert saved == pytest.approx((row["val_loss"], row["val_mrr"]), rel=1e-5)
    if row["best_epoch"] < history[-1]["epoch"]:
        assert saved[0] != pytest.approx(history[-1]["val_loss"], rel=1e-5)


def test_no_training_or_no_validation_list_excludes_the_seed(
    demo: dict[str, Any],  # noqa: F811
    hybrid: Artifact,
) -> None:
    rows = hybrid.read()
    validation = rows.filter(pc.equal(rows["part"], "validation"))
    # one training question whose only candidate is itself: a list without negatives
    lone = rows.filter(pc.equal(rows["part"], "train")).slice(0, 1)
    qid = lone["query_id"][0].as_py()
    lone = lone.set_column(
        lone.schema.get_field_index("record_id"), lone.schema.field("record_id"), pa.array([qid])
    )
    root = demo["root"] / "few"
    only_validation = artifact_of(root, "hybrid", pa.concat_tables([validation, lone]))
    outcome = train_rerank(root, only_validation, demo["questions"])
    assert outcome.artifact.read().num_rows == 0
    [bad] = outcome.artifact.excluded().to_pylist()
    assert (bad["seed"], bad["reason"]) == (42, "too_few_lists")
    assert bad["detail"] == "seed 42: 0 training and 10 validation lists with a negative"
    lists = {r["record_id"]: r for r in outcome.artifact.read(table="lists").to_pylist()}
    assert len(lists) == 11 and (lists[qid]["part"], lists[qid]["negatives"], lists[qid]["used"]) == (
        "train",
        0,
        False,
    )
    assert outcome.artifact.read(table="history").num_rows == 0
    assert not (outcome.artifact.files / "42").exists()
    counts = outcome.manifest["counts"]
    assert (counts["rows_in"], counts["rows_out"], counts["rows_excluded"]) == (1, 0, 1)
    # and the other way round: training lists but no validation list
    only_train = artifact_of(root, "hybrid", rows.filter(pc.equal(rows["part"], "train")))
    [bad] = train_rerank(root, only_train, demo["questions"]).artifact.excluded().to_pylist()
    assert bad["detail"] == "seed 42: 40 training and 0 validation lists with a negative"


def test_candidates_from_a_method_the_hybrid_did_not_rank_is_a_one_line_error(
    demo: dict[str, Any],  # noqa: F811
    hybrid: Artifact,
) -> None:
    methods = sorted(set(hybrid.read(columns=["method"]).column("method").to_pylist()))
    assert "rrf" not in methods
    with pytest.raises(
        IrforgeError, match=r"candidates_from is 'rrf'.*ranked with \['weighted'\] only"
    ) as err:
        train_rerank(demo["root"] / "no-rrf", hybrid, demo["questions"], candidates_from="rrf")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"list_size": 1}, "list_size"),
        ({"loss": "softmax"}, "loss"),
        ({"negatives": "random"}, "negatives"),
        ({"max_length": 8}, "max_length"),
        ({"select_by": "val_ndcg"}, "select_by"),
        ({"margin": 0}, "margin"),
        ({"max_train_lists": 0}, "max_train_lists"),
        ({"list_sizes": 4}, "list_sizes"),
    ],
)
def test_bad_config_is_a_one_line_config_error(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_config(TrainRerankConfig, SMALL | change, "test")
    assert "\n" not in str(info.value) and field in str(info.value)
