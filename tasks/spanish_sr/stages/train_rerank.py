"""Stage ``train_rerank``: a cross-encoder reranker fine-tuned on first-stage candidates, once per seed (issue 17 §7, paper 004 §3.4, §4.3).

Inputs: the ``hybrid`` rows of method ``candidates_from`` (default ``weighted``, paper 004
eq. 3) for each seed, its ``part`` telling training from validation questions (the split of
``train_dense``, so the reranker never trains on a question the dual encoder held out);
``questions`` for the question and abstract texts. Lists and losses:
:mod:`tasks.spanish_sr.rerank_training` (one positive + ``list_size − 1`` negatives from the
candidates; listwise softmax cross-entropy, BCE or hinge), the epoch loop shared with
``train_dense`` (AdamW, warm-up, weight decay, early stopping).

``base_model``: ``builtin:minilm-l6-cross-encoder`` by default (offline; all-MiniLM-L6-v2's
encoder with a fresh one-logit head, :mod:`tasks.common.rerank.builtin` — an English model, so
the demo shows the code path, not the paper's quality). The paper's models, by hub id, get a
fresh classification head: ``bert-base-multilingual-cased``,
``dccuchile/bert-base-spanish-wwm-cased``, ``IIC/XLM_R_Galen``, ``PlanTL-GOB-ES/bsc-bio-ehr-es``.

Units: the seeds of the ``hybrid`` artifact. Kept: ``seed``, ``best_epoch``, ``val_loss``,
``val_mrr`` (of the positive in its list), ``train_lists``, ``val_lists``, ``model_dir``
(under the artifact's ``files/``: a sentence-transformers ``CrossEncoder`` and a
``README.md`` card), ``max_length`` (tokens per pair it was trained with; scoring uses it). Side tables: ``history`` (every epoch; epoch 0 = the base model) and
``lists`` (seed, record_id, part, negatives: how many negatives each question's list got,
0 = no candidate besides itself; used: trained or validated on — a list without negatives,
or a training question outside the ``max_train_lists`` sample, is not). Excluded: ``too_few_lists``
(no training list or no validation list for the seed).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.fingerprint import Transport
from irforge.parallel import CPU, Resources
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.models.hub import on_gpu
from tasks.common.rerank.builtin import MINILM_CROSS_ENCODER, builtin_cross_encoder_path
from tasks.spanish_sr.dense_training import drop_call_state
from tasks.spanish_sr.fusion_scores import Method
from tasks.spanish_sr.rerank_training import Candidates, Loss, Negatives, RerankSettings, build_lists, train
from tasks.spanish_sr.training_loop import HISTORY_SCHEMA, SEED, SelectBy, Trained, base_model_inputs


class TrainRerankConfig(StrictModel):
    base_model: str = Field(
        MINILM_CROSS_ENCODER, description="Hub id, directory or builtin (module docstring)."
    )
    revision: str | None = Field(None, description="Hub revision (commit) of base_model.")
    candidates_from: Method = Field(
        "weighted", description="The hybrid method whose candidates make the lists."
    )
    list_size: int = Field(50, ge=2, description="1 positive + list_size - 1 negatives (paper 004: 50).")
    negatives: Negatives = Field(
        "top", description="top: best-ranked candidates; sample: seeded draw per epoch."
    )
    loss: Loss = Field("listwise", description="listwise (softmax CE), bce (the paper's pick) or hinge.")
    margin: float = Field(1.0, gt=0, description="hinge: logit margin of the positive over a negative.")
    epochs: int = Field(3, ge=1)
    train_batch_size: int = Field(4, ge=1, description="Lists per training step.")
    learning_rate: float = Field(3e-5, gt=0)
    warmup_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.01, ge=0)
    patience: int = Field(1, ge=1, description="Epochs without improvement before stopping.")
    select_by: SelectBy = Field("val_loss", description="Early stopping on val_loss or val_mrr.")
    max_length: int = Field(
        256, ge=16, description="Tokens of question + abstract; longer pairs are truncated."
    )
    max_train_lists: int | None = Field(
        None,
        ge=1,
        description="Train on a seeded sample of this many questions per seed (None: all; CPU demos).",
    )
    device: Transport[str | None] = Field(None, description="cuda, cpu…; default CUDA when present.")

    def settings(self) -> RerankSettings:
        same = ("loss", "margin", "list_size", "negatives", "epochs", "learning_rate", "warmup_ratio")
        rest = {name: getattr(self, name) for name in (*same, "weight_decay", "patience", "select_by")}
        return RerankSettings(batch_size=self.train_batch_size, **rest)


_I, _F, _S = pa.int32(), pa.float64(), pa.string()
SCHEMA = pa.schema(
    [
        SEED,
        pa.field("best_epoch", _I, nullable=False),
        pa.field("val_loss", _F, nullable=False),
        pa.field("val_mrr", _F, nullable=False),
        pa.field("train_lists", _I, nullable=False),
        pa.field("val_lists", _I, nullable=False),
        pa.field("model_dir", _S, nullable=False),
        pa.field("max_length", _I, nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(SEED)
LISTS_SCHEMA = pa.schema(
    [
        SEED,
        pa.field("record_id", _S, nullable=False),
        pa.field("part", _S, nullable=False),
        pa.field("negatives", _I, nullable=False),
        pa.field("used", pa.bool_(), nullable=False),
    ]
)


def inputs(ctx: StageContext[TrainRerankConfig]) -> dict[str, Any]:
    return base_model_inputs(ctx.config.base_model, ctx.base_dir, builtin_cross_encoder_path)


def _seeds(ctx: StageContext[TrainRerankConfig], _inputs: dict[str, Any]) -> TableSource:
    seeds = sorted(set(ctx.upstream["hybrid"].read(columns=["seed"]).column("seed").to_pylist()))
    return TableSource(rows_to_table([{"seed": s} for s in seeds], pa.schema([SEED])))


def candidates(
    ctx: StageContext[TrainRerankConfig], text: dict[str, str]
) -> dict[int, dict[str, list[Candidates]]]:
    """Each seed's questions by part, each with its candidates in rank order (``text``: record id → question)."""
    rows = ctx.upstream["hybrid"].read(columns=["query_id", "seed", "part", "method", "rank", "record_id"])
    methods = sorted(set(rows.column("method").to_pylist()))
    if methods and ctx.config.candidates_from not in methods:
        raise IrforgeError(
            f"train_rerank.candidates_from is {ctx.config.candidates_from!r}, but the hybrid artifact "
            f"{ctx.upstream['hybrid'].path} ranked with {methods} only: add it to hybrid.methods or pick one of them"
        )
    mine = rows.filter(pc.equal(rows["method"], ctx.config.candidates_from))
    ranked: dict[tuple[int, str, str], list[tuple[int, str]]] = defaultdict(list)
    for r in mine.to_pylist():
        ranked[(r["seed"], r["part"], r["query_id"])].append((r["rank"], r["record_id"]))
    out: dict[int, dict[str, list[Candidates]]] = defaultdict(lambda: {"train": [], "validation": []})
    for (seed, part, qid), hits in sorted(ranked.items()):
        out[seed][part].append(Candidates(qid, text[qid], tuple(rid for _, rid in sorted(hits))))
    return out


def card(config: TrainRerankConfig, seed: int, trained: Trained, train_n: int, val_n: int) -> str:
    """The model card: what was fine-tuned, on which lists, how, and how well it validated."""
    return "\n".join(
        [
            f"# spanish_sr cross-encoder reranker (seed {seed})",
            "",
            f"Fine-tuned from `{config.base_model}` (revision {config.revision or 'as loaded'}) as a "
            f"sentence-transformers CrossEncoder (one logit) on {train_n} lists of irforge's `spanish_sr` "
            f"flow (stage `train_rerank`, paper 004 §3.4): each question's own abstract and up to "
            f"{config.list_size - 1} negatives from the `{config.candidates_from}` first-stage candidates "
            f"({config.negatives}); {val_n} lists validated.",
            "",
            f"- loss: {config.loss}" + (f" (margin {config.margin})" if config.loss == "hinge" else ""),
            f"- epochs: {config.epochs} (best {trained.best_epoch}; early stopping on {config.select_by}, "
            f"patience {config.patience})",
            f"- {config.train_batch_size} lists per step, learning rate {config.learning_rate}, warm-up ratio "
            f"{config.warmup_ratio}, weight decay {config.weight_decay} (AdamW), max length {config.max_length}",
            f"- validation loss {trained.val_loss:.4f}, MRR of the positive in its list {trained.val_mrr:.4f}",
            "",
            "Input: question and abstract as a pair; a higher logit means more relevant.",
            "",
        ]
    )


def _one_seed(
    ctx: StageContext[TrainRerankConfig],
    seed: int,
    by_part: dict[str, list[Candidates]],
    abstracts: dict[str, str],
) -> tuple[dict[str, Any] | None, list[Any], list[Any]]:
    config = ctx.config
    if ctx.files_dir is None:
        raise IrforgeError("train_rerank: the engine gave no files folder to save the models in")
    val_lists = build_lists(by_part["validation"], abstracts, config.settings())
    train_lists = build_lists(by_part["train"], abstracts, config.settings())
    sizes = {t.record_id: len(t.abstracts) - 1 for t in (*train_lists, *val_lists)}
    if config.max_train_lists is not None and len(train_lists) > config.max_train_lists:
        rng = np.random.default_rng([seed, 2])
        pick = rng.permutation(len(train_lists))[: config.max_train_lists]
        train_lists = [train_lists[i] for i in sorted(int(i) for i in pick)]
    used = {t.record_id for t in (*train_lists, *val_lists)}
    lists = [
        {"seed": seed, "record_id": c.record_id, "part": part, "negatives": sizes.get(c.record_id, 0)}
        | {"used": c.record_id in used}
        for part in ("train", "validation")
        for c in by_part[part]
    ]
    if not train_lists or not val_lists:
        return None, lists, []
    # A head the checkpoint lacks (a plain encoder from the hub) is drawn from torch's global
    # generator while loading: seeded, the model depends on its seed, not on what ran before it
    # in this process (an earlier chunk's training, in a pool worker or inline).
    import torch  # noqa: PLC0415 -- torch and the adapter take seconds to import: when it trains

    from tasks.common.rerank.local import CrossEncoderReranker  # noqa: PLC0415

    torch.manual_seed(seed)
    reranker = CrossEncoderReranker(
        config.base_model, max_length=config.max_length, device=config.device, revision=config.revision
    )
    model = reranker.cross_encoder
    training = [c for c in by_part["train"] if c.record_id in used]
    trained = train(model, training, val_lists, abstracts, config.settings(), seed)
    directory = ctx.files_dir / str(seed)
    model.save(str(directory))
    drop_call_state(directory)
    (directory / "README.md").write_text(
        card(config, seed, trained, len(train_lists), len(val_lists)), "utf-8"
    )
    kept = {"seed": seed, "best_epoch": trained.best_epoch, "val_loss": trained.val_loss}
    kept |= {"val_mrr": trained.val_mrr, "train_lists": len(train_lists), "val_lists": len(val_lists)}
    return (
        kept | {"model_dir": str(seed), "max_length": config.max_length},
        lists,
        [{"seed": seed, **h} for h in trained.history],
    )


def process(chunk: pa.Table, ctx: StageContext[TrainRerankConfig]) -> ChunkResult:
    kept, excluded, lists, history = [], [], [], []
    pairs = ctx.upstream["questions"].read(columns=["record_id", "question", "abstract"]).to_pylist()
    abstracts = {p["record_id"]: p["abstract"] for p in pairs}
    by_seed = candidates(ctx, {p["record_id"]: p["question"] for p in pairs})
    for seed in chunk.column("seed").to_pylist():
        row, seed_lists, epochs = _one_seed(ctx, seed, by_seed[seed], abstracts)
        lists += seed_lists
        if row is None:
            parts = {
                p: sum(1 for r in seed_lists if r["part"] == p and r["negatives"])
                for p in ("train", "validation")
            }
            detail = f"seed {seed}: {parts['train']} training and {parts['validation']} validation lists with a negative"
            excluded.append({"seed": seed, "reason": "too_few_lists", "detail": detail})
            continue
        kept.append(row)
        history += epochs
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={
            "history": rows_to_table(history, HISTORY_SCHEMA),
            "lists": rows_to_table(lists, LISTS_SCHEMA),
        },
    )


def resources(config: TrainRerankConfig) -> Resources:
    """One GPU (and memory to fine-tune a cross-encoder) per seed where it trains on a GPU
    (:func:`~tasks.common.models.hub.on_gpu`); a CPU worker otherwise."""
    return Resources(num_gpus=1, memory_mb=8192) if on_gpu(config.device) else CPU


SPEC: StageSpec[TrainRerankConfig] = StageSpec(
    name="train_rerank",
    version=1,
    config_type=TrainRerankConfig,
    upstream=("hybrid", "questions"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("seed",),
    inputs=inputs,
    source=_seeds,
    process=process,
    resources=resources,
    chunk_rows=1,  # one seed a chunk: each fine-tuning on a worker (a GPU) of its own
    tables={"history": HISTORY_SCHEMA, "lists": LISTS_SCHEMA},
    description="Cross-encoder reranker fine-tuned listwise on the hybrid candidates, one model per seed.",
)
