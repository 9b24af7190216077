"""The reranker port on a sentence-transformers ``CrossEncoder`` run in this process.

``model`` is one of:

- a Hugging Face Hub id, by default :data:`DEFAULT_MODEL` (``Alibaba-NLP/gte-multilingual-reranker-base``,
  the reranker CURE pooled with; 306M parameters, a custom architecture that needs
  ``trust_remote_code``), optionally pinned to a ``revision``;
- a local model directory (anything that exists on disk, or looks like a path);
- ``builtin:minilm-l6-cross-encoder``: the small offline cross-encoder of
  :mod:`tasks.common.rerank.builtin` (random head: its scores mean nothing), for demos and tests.

A hub id is first loaded from the local cache only (no network); only when it is not cached
and ``HF_HUB_OFFLINE`` is not set is the hub asked, once and with a timeout, before the
download, so that a machine without network fails in seconds with one clear error instead
of minutes of retries (the same policy as :mod:`tasks.common.embed.local`, in :mod:`tasks.common.models.hub`).

Scores are raw logits: ``predict`` runs with an identity activation, whatever activation the
model's config names (see :mod:`tasks.common.rerank.port`). ``max_length`` is explicit (512 by
default, as the GTE model card's example): the GTE reranker reads up to 8192 tokens, and
a passage longer than ``max_length`` tokens (query included) is truncated.

Length-bucketed batching. The pairs of one :meth:`CrossEncoderReranker.score` call are sorted
by their exact token count (the model's own tokenizer, truncated to ``max_length``), longest
first, and cut into batches in that order, so a batch pads to nearly its own length; scores
are put back in input order. ``batch_size`` caps the pairs of a batch; ``max_batch_tokens``
(optional) also caps its padded size (pairs x longest pair), so batches of short pairs grow
and batches of long pairs shrink, which keeps a GPU busy without running out of memory.
A pair's logit can differ in the last float bits with the other pairs of its batch (padding
changes the kernels' shapes), never more.

Device: CUDA when torch sees a GPU, else the CPU, unless ``device`` says otherwise.
``precision`` ``"bfloat16"`` or ``"float16"`` runs the model under ``torch.autocast`` (for GPUs
with half-precision tensor cores; logits move by up to ~1e-2); it changes scores, so it
enters :meth:`CrossEncoderReranker.describe`; the device does not (CPU and CUDA differ by
float rounding only), so a fingerprint is the same on a laptop and on the GPU host.

Fingerprint material (:meth:`CrossEncoderReranker.describe`): the engine, the model id, the
commit of a hub snapshot or a content digest of a local directory (the builtin model
included: :func:`tasks.common.embed.local.model_files_digest`), the effective ``max_length``, the
precision, and what the scores are.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from sentence_transformers import CrossEncoder

from irforge.progress import meter
from tasks.common.embed.local import model_files_digest
from tasks.common.models import hub
from tasks.common.models.hub import ModelErrors, load_from_hub, locate_model, one_line, snapshot_commit
from tasks.common.rerank.builtin import MINILM_CROSS_ENCODER, builtin_cross_encoder_path
from tasks.common.rerank.port import F64, ProgressFn, RerankerBase, RerankerError, RerankerUnavailable

ENGINE = "sentence-transformers"
DEFAULT_MODEL = "Alibaba-NLP/gte-multilingual-reranker-base"
DEFAULT_MAX_LENGTH = 512
Precision = Literal["float32", "bfloat16", "float16"]
I64 = npt.NDArray[np.int64]
_AUTOCAST: dict[str, torch.dtype] = {"bfloat16": torch.bfloat16, "float16": torch.float16}
_LENGTH_CHUNK = 4096  # pairs tokenised at once to sort them: bounds the memory of the token ids
_ERRORS = ModelErrors(RerankerError, RerankerUnavailable, alternative=f"{MINILM_CROSS_ENCODER!r} for a demo")


class CrossEncoderReranker(RerankerBase):
    """The :class:`~tasks.common.rerank.port.Reranker` port on a sentence-transformers ``CrossEncoder``.

    ``trust_remote_code`` None means: True for :data:`DEFAULT_MODEL` (its architecture is
    custom code on the hub; pin ``revision`` to the commit you reviewed), False otherwise.
    ``cache_folder`` is the hub cache (default: ``SENTENCE_TRANSFORMERS_HOME``, else the
    Hugging Face cache); ``builtin_cache_dir`` where builtin models are built. One reranker
    may be shared between threads: calls to :meth:`score` run one at a time.
    """

    engine: str = ENGINE

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        max_length: int = DEFAULT_MAX_LENGTH,
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
        device: str | None = None,
        precision: Precision = "float32",
        trust_remote_code: bool | None = None,
        revision: str | None = None,
        cache_folder: str | Path | None = None,
        builtin_cache_dir: str | Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise RerankerError(f"batch_size must be at least 1, got {batch_size}")
        if max_length < 1:
            raise RerankerError(f"max_length must be at least 1, got {max_length}")
        if max_batch_tokens is not None and max_batch_tokens < max_length:
            raise RerankerError(
                f"max_batch_tokens ({max_batch_tokens}) must hold at least one pair of max_length "
                f"({max_length}) tokens"
            )
        if precision != "float32" and precision not in _AUTOCAST:
            raise RerankerError(f"precision must be float32, bfloat16 or float16, got {precision!r}")
        model = model.strip()
        if not model:
            raise RerankerError(
                f"no model given: use a hub id such as {DEFAULT_MODEL!r}, a directory or {MINILM_CROSS_ENCODER!r}"
            )
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.precision: Precision = precision
        self.device = hub.select_device(device, _ERRORS)
        self._trust_remote_code = model == DEFAULT_MODEL if trust_remote_code is None else trust_remote_code
        self._cache_folder = (
            str(cache_folder) if cache_folder is not None else os.environ.get("SENTENCE_TRANSFORMERS_HOME")
        )
        self._lock = threading.Lock()
        self._files_digest: str | None = None

        # self.path is the local model directory (None for a hub id); the model id is its name
        self.path, self.model = locate_model(
            model,
            revision,
            lambda name: builtin_cross_encoder_path(name, builtin_cache_dir),
            _ERRORS,
            holds="the model's config.json and weights",
        )

        self._model = (
            self._load_local(self.path, max_length)
            if self.path is not None
            else self._load_hub(model, revision, max_length)
        )
        self.revision = None if self.path is not None else self._resolve_commit(model, revision)
        if self._model.num_labels != 1:
            raise RerankerError(
                f"model {self.model} has {self._model.num_labels} outputs: pooling needs a cross-encoder "
                "with one relevance logit (num_labels=1)"
            )

    # -- the port ---------------------------------------------------------------------

    @property
    def cross_encoder(self) -> CrossEncoder:
        """The loaded ``sentence_transformers.CrossEncoder``, e.g. to fine-tune it in place."""
        return self._model

    @property
    def max_length(self) -> int:
        value = self._model.max_seq_length
        if value is None:  # not reached: the constructor always sets it
            raise RerankerError(f"model {self.model} has no maximum sequence length")
        return int(value)

    def _logits(self, qs: list[str], ps: list[str], progress: ProgressFn | None) -> F64:
        logits = np.empty(len(qs), dtype=np.float64)
        with self._lock:
            lengths = self.token_lengths(qs, ps)
            order = np.argsort(-lengths, kind="stable")  # longest first; ties keep input order
            done, scored = 0, meter("pairs scored", len(qs))
            for batch in self._batches(lengths[order]):
                idx = order[batch]
                logits[idx] = self._predict([(qs[i], ps[i]) for i in idx], self._source())
                done += len(idx)
                scored.advance(len(idx))
                if progress is not None:
                    progress(done, len(qs))
        return logits

    def _source(self) -> str:
        return f"model {self.model}"

    def _described(self) -> dict[str, Any]:
        if self.path is not None and self._files_digest is None:
            self._files_digest = model_files_digest(self.path)
        return {
            "files_digest": self._files_digest,
            "max_length": self.max_length,
            "precision": self.precision,
        }

    # -- extras -----------------------------------------------------------------------

    def token_lengths(self, queries: Sequence[str], passages: Sequence[str]) -> I64:
        """Tokens of each pair as the model reads it (special tokens included, truncated to max_length)."""
        out = np.empty(len(queries), dtype=np.int64)
        for start in range(0, len(queries), _LENGTH_CHUNK):
            stop = min(start + _LENGTH_CHUNK, len(queries))
            encoded = self._model.tokenizer(
                list(queries[start:stop]),
                list(passages[start:stop]),
                truncation=True,
                max_length=self.max_length,
                return_attention_mask=False,
                return_token_type_ids=False,
            )
            out[start:stop] = [len(ids) for ids in encoded["input_ids"]]
        return out

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(model={self.model!r}, device={self.device!r}, precision={self.precision!r})"

    # -- internals --------------------------------------------------------------------

    def _batches(self, sorted_lengths: I64) -> Iterator[slice]:
        """Consecutive slices of the length-sorted pairs (longest first): at most ``batch_size``
        pairs, and at most ``max_batch_tokens`` padded tokens when set."""
        start, n = 0, len(sorted_lengths)
        while start < n:
            size = self.batch_size
            if self.max_batch_tokens is not None:
                size = max(1, min(size, self.max_batch_tokens // int(sorted_lengths[start])))
            yield slice(start, min(start + size, n))
            start += size

    def _predict(self, pairs: list[tuple[str, str]], source: str) -> F64:
        autocast = (
            torch.autocast(device_type=self.device.split(":")[0], dtype=_AUTOCAST[self.precision])
            if self.precision in _AUTOCAST
            else contextlib.nullcontext()
        )
        with autocast:
            raw = self._model.predict(
                pairs,
                batch_size=len(pairs),
                activation_fn=torch.nn.Identity(),
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        scores = np.asarray(raw, dtype=np.float64)
        if scores.shape != (len(pairs),):
            raise RerankerError(
                f"{source} returned scores of shape {scores.shape} for {len(pairs)} pairs: a cross-encoder "
                "for pooling must have exactly one output"
            )
        return scores

    def _construct(
        self, source: str, *, revision: str | None, local_files_only: bool, max_length: int
    ) -> CrossEncoder:
        ce: CrossEncoder = CrossEncoder(
            source,
            device=self.device,
            max_length=max_length,
            trust_remote_code=self._trust_remote_code,
            revision=revision,
            local_files_only=local_files_only,
            cache_folder=self._cache_folder,
        )
        limit = getattr(ce.config, "max_position_embeddings", None)
        if isinstance(limit, int) and max_length > limit:
            raise RerankerError(
                f"max_length {max_length} exceeds what {self.model} can read ({limit} tokens)"
            )
        ce.max_seq_length = max_length
        return ce

    def _load_local(self, path: Path, max_length: int) -> CrossEncoder:
        try:
            return self._construct(str(path), revision=None, local_files_only=True, max_length=max_length)
        except (OSError, ValueError, KeyError) as exc:
            raise RerankerError(
                f"cannot load a cross-encoder from {path}: {one_line(exc)}; it needs at least config.json "
                "(a *ForSequenceClassification architecture), the weights and the tokenizer files, as saved "
                "by save_pretrained"
            ) from exc

    def _load_hub(self, repo_id: str, revision: str | None, max_length: int) -> CrossEncoder:
        return load_from_hub(
            lambda local_only: self._construct(
                repo_id, revision=revision, local_files_only=local_only, max_length=max_length
            ),
            repo_id,
            revision,
            self._cache_folder,
            _ERRORS,
            download_errors=(OSError, ValueError),
        )

    def _resolve_commit(self, repo_id: str, revision: str | None) -> str | None:
        """The commit of the cached snapshot that was loaded, so a branch name is pinned."""
        return snapshot_commit(repo_id, revision, self._cache_folder, ("config.json",))
