"""Fine-tuning a sentence-transformers dual encoder on (question, abstract) pairs (paper 004 §3.3.3, §4.3).

One siamese encoder (shared weights) encodes questions and abstracts. Losses:

- ``mnrl``: sentence-transformers' ``MultipleNegativesRankingLoss`` (in-batch negatives, the
  sampling paper 004 §3.3.3 describes);
- ``contrastive``: paper 004's equation (2), per pair ``1 − cos`` for a positive and
  ``max(0, cos − margin)`` for a negative, averaged. That is exactly torch's
  ``cosine_embedding_loss`` (https://pytorch.org/docs/stable/generated/torch.nn.CosineEmbeddingLoss.html);
  sentence-transformers' ``ContrastiveLoss`` squares both terms, so it is not used. Each
  training pair gets ``negatives`` random other abstracts per epoch (seeded draw).

The loop is plain torch (:func:`tasks.spanish_sr.training_loop.fit`: AdamW, linear warm-up
then decay, early stopping): ``SentenceTransformerTrainer`` and ``fit`` need ``accelerate``,
which irforge does not install. Determinism: ``torch.manual_seed(seed)``, batch order and negatives from
``numpy.random.default_rng(seed)``. Early stopping: after each epoch the validation loss
(fixed batches, no dropout) and the validation self-retrieval MRR (each validation question
against every validation abstract, ties by position) are measured; the epoch best on
``select_by`` is kept, and training stops after ``patience`` epochs without improvement.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tasks.common.embed.local import builtin_model_path
from tasks.common.embed.port import EncoderError, EncoderUnavailable
from tasks.common.models.hub import ModelErrors, load_from_hub, locate_model, select_device
from tasks.spanish_sr.training_loop import Schedule, Trained, backward, fit

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

Loss = Literal["mnrl", "contrastive"]
ERRORS = ModelErrors(EncoderError, EncoderUnavailable, alternative="'builtin:all-MiniLM-L6-v2'")


@dataclass(frozen=True)
class Settings(Schedule):
    """What one training run needs besides the data (see ``TrainDenseConfig``)."""

    loss: Loss = "mnrl"
    margin: float = 0.5
    negatives: int = 1
    batch_size: int = 32
    max_seq_length: int | None = None


def split(count: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """``(train rows, validation rows)`` of ``count`` pairs sorted by id: a seeded permutation,
    its first ``round(fraction · count)`` rows (at least 1 when ``count ≥ 2``) validate; both ascending."""
    order = np.random.default_rng(seed).permutation(count)
    size = min(count - 1, max(1, round(fraction * count))) if count >= 2 else 0
    return sorted(int(i) for i in order[size:]), sorted(int(i) for i in order[:size])


def load_model(name: str, revision: str | None, device: str | None) -> SentenceTransformer:
    """A sentence-transformers model from ``builtin:…``, a directory or a hub id (cache first)."""
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415 -- heavy import

    where = select_device(device, ERRORS)
    path, _ = locate_model(name, revision, builtin_model_path, ERRORS, holds="the model's config.json")
    if path is not None:
        return SentenceTransformer(str(path), device=where)

    def construct(local_only: bool) -> SentenceTransformer:
        return SentenceTransformer(name, device=where, revision=revision, local_files_only=local_only)

    return load_from_hub(construct, name, revision, None, ERRORS, download_errors=(OSError,))


def _features(model: SentenceTransformer, texts: Sequence[str]) -> dict[str, torch.Tensor]:
    import torch  # noqa: PLC0415

    raw = model.preprocess(list(texts))
    return {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in raw.items()}


def _embed(model: SentenceTransformer, texts: Sequence[str]) -> torch.Tensor:
    out: torch.Tensor = model(_features(model, texts))["sentence_embedding"]
    return out


def _loss_fn(
    model: SentenceTransformer, s: Settings
) -> Callable[[Sequence[str], Sequence[str], Sequence[float]], torch.Tensor]:
    """``loss(questions, abstracts, labels)``; labels are 1 / −1 (contrastive) and ignored by MNRL."""
    import torch  # noqa: PLC0415
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss  # noqa: PLC0415

    mnrl = MultipleNegativesRankingLoss(model)

    def loss(questions: Sequence[str], abstracts: Sequence[str], labels: Sequence[float]) -> torch.Tensor:
        if s.loss == "mnrl":
            feats = [_features(model, questions), _features(model, abstracts)]
            out: torch.Tensor = mnrl(feats, torch.zeros(len(questions)))
            return out
        target = torch.tensor(labels, dtype=torch.float32, device=model.device)
        return torch.nn.functional.cosine_embedding_loss(
            _embed(model, questions), _embed(model, abstracts), target, margin=s.margin
        )

    return loss


def _examples(
    pairs: Sequence[tuple[str, str]], s: Settings, rng: np.random.Generator
) -> list[tuple[str, str, float]]:
    """The epoch's examples in a seeded order: the pairs, plus (contrastive) random negatives."""
    examples = [(q, a, 1.0) for q, a in pairs]
    if s.loss == "contrastive" and len(pairs) > 1:
        for i, (q, _) in enumerate(pairs):
            for _ in range(s.negatives):
                j = int(rng.integers(len(pairs) - 1))
                examples.append((q, pairs[j + (j >= i)][1], -1.0))
    return [examples[i] for i in rng.permutation(len(examples))]


def _batches(examples: list[tuple[str, str, float]], size: int) -> list[list[tuple[str, str, float]]]:
    return [examples[i : i + size] for i in range(0, len(examples), size)]


def validate(
    model: SentenceTransformer, pairs: Sequence[tuple[str, str]], s: Settings, seed: int
) -> tuple[float, float]:
    """``(validation loss, validation self-retrieval MRR)`` with dropout off and fixed batches."""
    import torch  # noqa: PLC0415

    loss = _loss_fn(model, s)
    examples = _examples(pairs, s, np.random.default_rng([seed, 1]))
    model.eval()
    with torch.no_grad():
        losses = [
            float(loss([e[0] for e in b], [e[1] for e in b], [e[2] for e in b])) * len(b)
            for b in _batches(examples, s.batch_size)
        ]
    questions = model.encode([q for q, _ in pairs], normalize_embeddings=True, convert_to_numpy=True)
    abstracts = model.encode([a for _, a in pairs], normalize_embeddings=True, convert_to_numpy=True)
    return math.fsum(losses) / len(examples), self_mrr(np.asarray(questions) @ np.asarray(abstracts).T)


def self_mrr(scores: np.ndarray[Any, Any]) -> float:
    """Mean reciprocal rank of row ``i``'s own column ``i`` (ties: the lower column ranks first)."""
    own = np.diag(scores)[:, None]
    cols = np.arange(scores.shape[1])
    ahead = (scores > own) | ((scores == own) & (cols[None, :] < cols[:, None]))
    return float(np.mean(1.0 / (ahead.sum(axis=1) + 1)))


def train(
    model: SentenceTransformer,
    train_pairs: Sequence[tuple[str, str]],
    val_pairs: Sequence[tuple[str, str]],
    s: Settings,
    seed: int,
) -> Trained:
    """Fine-tune ``model`` in place; it ends holding the best epoch's weights (module docstring)."""
    import torch  # noqa: PLC0415

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    if s.max_seq_length is not None:
        model.max_seq_length = s.max_seq_length
    loss = _loss_fn(model, s)
    per_epoch = math.ceil(
        len(train_pairs) * (1 + (s.negatives if s.loss == "contrastive" else 0)) / s.batch_size
    )
    return fit(
        model,
        lambda _epoch: _batches(_examples(train_pairs, s, rng), s.batch_size),
        lambda b: backward(loss([e[0] for e in b], [e[1] for e in b], [e[2] for e in b])),
        lambda: validate(model, val_pairs, s, seed),
        per_epoch,
        s,
    )


def save(model: SentenceTransformer, directory: Path, card: str) -> None:
    """The weights (safetensors) and sentence-transformers config under ``directory``, with ``README.md`` = ``card``."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save(str(directory), create_model_card=False)
    drop_call_state(directory)
    (directory / "README.md").write_text(card, encoding="utf-8")


CALL_STATE = (
    *("max_length", "stride", "truncation_strategy", "pad_to_multiple_of"),
    *("is_local", "local_files_only"),
)
"""Keys a fast tokenizer writes into ``tokenizer_config.json`` from its last call's truncation
and padding, or from how it was loaded (``local_files_only`` turns true in a process that first
imported huggingface_hub under ``HF_HUB_OFFLINE``), not from the model: they differ by process."""


def drop_call_state(directory: Path) -> None:
    """Saved model files that depend on the model only (a chunk's bytes, whatever ran before it)."""
    path = directory / "tokenizer_config.json"
    if path.is_file():
        config = json.loads(path.read_text(encoding="utf-8"))
        kept = {k: v for k, v in config.items() if k not in CALL_STATE}
        path.write_text(
            json.dumps(kept, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
        )
