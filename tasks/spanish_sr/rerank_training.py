"""Fine-tuning a cross-encoder reranker on lists of one positive and M negatives (paper 004 §3.4, §4.3).

Paper 004 §3.4: the reranker reads ``[CLS] question [SEP] abstract [SEP]`` and is trained
listwise on lists of one relevant abstract (the question's own) and 49 non-relevant ones
taken from the first stage's candidates (as Lu et al. 2022b, "Zero-shot hybrid retrieval and
reranking models for biomedical literature", CLEF 2022). Losses, per list of logits
``s_0`` (the positive) … ``s_M``:

- ``listwise``: softmax cross-entropy, ``−log(exp s_0 / Σ_j exp s_j)`` (``torch.log_softmax``);
- ``bce``: binary cross-entropy on every pair, label 1 for the positive and 0 for the
  negatives (``binary_cross_entropy_with_logits``) — the loss the paper reports it kept;
- ``hinge``: pairwise, the mean over negatives of ``max(0, margin − (s_0 − s_j))``.

Negatives (:func:`build_lists`): the question's first-stage candidates other than its own
abstract, in rank order, the first ``list_size − 1`` (``top``), or a seeded draw of them
from the candidates (``sample``, a new draw per epoch). A question with fewer candidates
gets a shorter list; one with none is not trained on. Each list is one forward pass (and
its gradients are accumulated list by list), so memory holds one list, not a batch.

Validation (dropout off): the mean loss over the validation lists and the MRR of the
positive in its list, a tie counted against it (rank = 1 + negatives scoring ≥ the
positive), so an untrained model with constant scores does not look perfect. The epoch loop
is :func:`tasks.spanish_sr.training_loop.fit`. Determinism: ``torch.manual_seed(seed)``;
batch order and sampled negatives from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from tasks.spanish_sr.training_loop import Schedule, Trained, backward, fit

if TYPE_CHECKING:
    import torch
    from sentence_transformers import CrossEncoder

Loss = Literal["listwise", "bce", "hinge"]
Negatives = Literal["top", "sample"]


@dataclass(frozen=True)
class RerankSettings(Schedule):
    """What one reranker training needs besides the data (see ``TrainRerankConfig``)."""

    loss: Loss = "listwise"
    margin: float = 1.0
    list_size: int = 50
    negatives: Negatives = "top"
    batch_size: int = 4


@dataclass(frozen=True)
class Candidates:
    """One question and its first-stage ranking: the positive record and the others, best first."""

    record_id: str
    question: str
    ranked: tuple[str, ...]


@dataclass(frozen=True)
class TrainingList:
    """A question, its own abstract (index 0 of ``abstracts``) and its negatives."""

    record_id: str
    question: str
    abstracts: tuple[str, ...]


def build_lists(
    candidates: Sequence[Candidates],
    abstracts: Mapping[str, str],
    s: RerankSettings,
    rng: np.random.Generator | None = None,
) -> list[TrainingList]:
    """Lists of ``1 + min(list_size − 1, candidates)`` abstracts (module docstring); questions
    without a negative are left out (the caller reports them)."""
    out = []
    for c in candidates:
        others = [rid for rid in c.ranked if rid != c.record_id and rid in abstracts]
        want = s.list_size - 1
        if s.negatives == "sample" and rng is not None and len(others) > want:
            chosen = sorted(int(i) for i in rng.choice(len(others), size=want, replace=False))
            others = [others[i] for i in chosen]
        others = others[:want]
        if others:
            texts = (abstracts[c.record_id], *(abstracts[rid] for rid in others))
            out.append(TrainingList(c.record_id, c.question, texts))
    return out


def list_logits(model: CrossEncoder, item: TrainingList) -> torch.Tensor:
    """The logits of one list's pairs, positive first (one forward pass per list, padded to
    its own longest pair, so a list's scores never depend on its batch)."""
    import torch  # noqa: PLC0415

    raw = model.preprocess([(item.question, a) for a in item.abstracts])
    features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in raw.items()}
    out: torch.Tensor = model(features)["scores"].view(-1)
    return out


def list_loss(logits: torch.Tensor, s: RerankSettings) -> torch.Tensor:
    """The ``s.loss`` of one list's logits (positive at index 0)."""
    import torch  # noqa: PLC0415
    from torch.nn import functional  # noqa: PLC0415

    if s.loss == "listwise":
        return -torch.log_softmax(logits, dim=0)[0]
    if s.loss == "bce":
        labels = torch.zeros_like(logits)
        labels[0] = 1.0
        return functional.binary_cross_entropy_with_logits(logits, labels)
    return torch.clamp(s.margin - (logits[0] - logits[1:]), min=0).mean()


def positive_rr(logits: torch.Tensor) -> float:
    """Reciprocal rank of the positive (index 0), ties counted against it."""
    return 1.0 / (1 + int((logits[1:] >= logits[0]).sum()))


def validate(model: CrossEncoder, lists: Sequence[TrainingList], s: RerankSettings) -> tuple[float, float]:
    """``(mean loss, MRR of the positive)`` over ``lists`` with dropout off."""
    import torch  # noqa: PLC0415

    model.eval()
    losses, rrs = [], []
    with torch.no_grad():
        for item in lists:
            logits = list_logits(model, item)
            losses.append(float(list_loss(logits, s)))
            rrs.append(positive_rr(logits))
    return math.fsum(losses) / len(lists), math.fsum(rrs) / len(rrs)


def step(model: CrossEncoder, batch: Sequence[TrainingList], s: RerankSettings) -> float:
    """Gradients of the batch's mean list loss, accumulated one list at a time (memory: one
    list's activations, not the batch's); returns the loss."""
    total = 0.0
    for item in batch:
        total += backward(list_loss(list_logits(model, item), s) / len(batch))
    return total


def train(
    model: CrossEncoder,
    train_candidates: Sequence[Candidates],
    val_lists: Sequence[TrainingList],
    abstracts: Mapping[str, str],
    s: RerankSettings,
    seed: int,
) -> Trained:
    """Fine-tune ``model`` in place on lists rebuilt each epoch; it ends holding the best epoch's weights."""
    import torch  # noqa: PLC0415

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    def batches(_epoch: int) -> list[list[TrainingList]]:
        lists = build_lists(train_candidates, abstracts, s, rng)
        order = [lists[i] for i in rng.permutation(len(lists))]
        return [order[i : i + s.batch_size] for i in range(0, len(order), s.batch_size)]

    per_epoch = math.ceil(len(train_candidates) / s.batch_size)
    return fit(
        model,
        batches,
        lambda b: step(model, b, s),
        lambda: validate(model, val_lists, s),
        per_epoch,
        s,
    )
