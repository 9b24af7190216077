"""The epoch loop both trained models share: AdamW, linear warm-up then decay, early stopping (paper 004 §4.3).

Paper 004 §4.3 trains the dual encoder and the cross-attention reranker "with the same values
and method": AdamW, a warm-up, weight decay, early stopping on the validation set. The
schedule is ``transformers.get_linear_schedule_with_warmup``
(https://huggingface.co/docs/transformers/main_classes/optimizer_schedules). Epoch 0 is the
model before training; after every epoch the validation loss and MRR are measured, the epoch
best on ``select_by`` is kept (its weights restored at the end), and training stops after
``patience`` epochs without improvement.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from irforge.progress import meter
from tasks.common.embed.local import model_files_digest

if TYPE_CHECKING:
    import torch


def backward(value: torch.Tensor) -> float:
    """``value.backward()``, returning the loss as a float (a ``step`` of :func:`fit`)."""
    value.backward()  # type: ignore[no-untyped-call]
    return float(value.detach())


SelectBy = Literal["val_loss", "val_mrr"]
SEED = pa.field("seed", pa.int64(), nullable=False)
HISTORY_SCHEMA = pa.schema(
    [
        SEED,
        pa.field("epoch", pa.int32(), nullable=False),
        pa.field("train_loss", pa.float64()),  # null at epoch 0 (the model before training)
        pa.field("val_loss", pa.float64(), nullable=False),
        pa.field("val_mrr", pa.float64(), nullable=False),
    ]
)
"""A training stage's ``history`` side table: every epoch of every seed (:attr:`Trained.history`)."""


def base_model_inputs(name: str, base_dir: Path, builtin_path: Callable[[str], Path]) -> dict[str, Any]:
    """Fingerprint material of a base model: a digest of its files when it is local (a builtin
    model or a directory next to the config); a hub id is named by id and revision in the config."""
    if name.startswith("builtin:"):
        return {"base_model_files": model_files_digest(builtin_path(name))}
    local = base_dir / name
    return {"base_model_files": model_files_digest(local)} if local.is_dir() else {}


@dataclass(frozen=True)
class Schedule:
    """Optimiser and stopping settings common to both trainings (each one's settings extend it)."""

    epochs: int = 3
    learning_rate: float = 3e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    patience: int = 1
    select_by: SelectBy = "val_loss"


@dataclass
class Trained:
    """The best epoch of a run (1-based; 0 = the model before training was never beaten) and every epoch's numbers."""

    best_epoch: int
    val_loss: float
    val_mrr: float
    history: list[dict[str, Any]] = field(default_factory=list)


def fit(
    model: torch.nn.Module,
    epoch_batches: Callable[[int], Iterable[Any]],
    step: Callable[[Any], float],
    validate: Callable[[], tuple[float, float]],
    steps_per_epoch: int,
    s: Schedule,
) -> Trained:
    """Train ``model`` in place; ``step(batch)`` computes a batch's loss and its gradients
    (``backward``) and returns the loss; the model ends holding the best epoch's weights
    (module docstring)."""
    import torch  # noqa: PLC0415 -- heavy import
    from transformers import get_linear_schedule_with_warmup  # noqa: PLC0415

    optimizer = torch.optim.AdamW(model.parameters(), lr=s.learning_rate, weight_decay=s.weight_decay)
    total = max(1, steps_per_epoch * s.epochs)
    schedule = get_linear_schedule_with_warmup(optimizer, round(s.warmup_ratio * total), total)  # type: ignore[no-untyped-call]
    val_loss, val_mrr = validate()
    best = Trained(
        0, val_loss, val_mrr, [{"epoch": 0, "train_loss": None, "val_loss": val_loss, "val_mrr": val_mrr}]
    )
    best_state = copy.deepcopy(model.state_dict())
    steps = meter("training steps", total)  # beside the stage's rows (an early stop ends short)
    for epoch in range(1, s.epochs + 1):
        model.train()
        losses = []
        for batch in epoch_batches(epoch):
            optimizer.zero_grad()
            losses.append(step(batch))
            optimizer.step()
            schedule.step()
            steps.advance()
        val_loss, val_mrr = validate()
        train_loss = math.fsum(losses) / len(losses) if losses else None
        best.history.append(
            {"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss, "val_mrr": val_mrr}
        )
        if val_loss < best.val_loss if s.select_by == "val_loss" else val_mrr > best.val_mrr:
            best.best_epoch, best.val_loss, best.val_mrr = epoch, val_loss, val_mrr
            best_state = copy.deepcopy(model.state_dict())
        elif epoch - best.best_epoch >= s.patience:
            break
    model.load_state_dict(best_state)
    model.eval()
    return best
