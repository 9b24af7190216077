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
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch


def backward(value: torch.Tensor) -> float:
    """``value.backward()``, returning the loss as a float (a ``step`` of :func:`fit`)."""
    value.backward()  # type: ignore[no-untyped-call]
    return float(value.detach())


SelectBy = Literal["val_loss", "val_mrr"]


@dataclass(frozen=True)
class Schedule:
    """Optimiser and stopping settings common to both trainings."""

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
    for epoch in range(1, s.epochs + 1):
        model.train()
        losses = []
        for batch in epoch_batches(epoch):
            optimizer.zero_grad()
            losses.append(step(batch))
            optimizer.step()
            schedule.step()
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
