"""The encoder port: what the embedding and dense-retrieval stages need from a text encoder.

An :class:`Encoder` turns texts into unit-length float32 vectors, one row per text, so that
a dot product is the cosine similarity (what the search port's kNN expects). Two kinds of
text are told apart because instruction-tuned retrievers encode them differently:

- ``kind="query"`` prepends the encoder's *query prefix*, ``kind="passage"`` its *passage
  prefix*. A prefix is prepended verbatim (include the trailing space) and counts towards
  the model's sequence length.
- BGE v1.5 (``BAAI/bge-*-en-v1.5``) recommends :data:`BGE_QUERY_INSTRUCTION` on short queries
  that retrieve passages, and no prefix on the passages; the model card says v1.5 also works
  without it, at some cost in retrieval quality. E5 models want ``"query: "`` and
  ``"passage: "``. all-MiniLM-L6-v2 was trained without instructions: use none.
- Prefixes are configured, never guessed from the model name: a model's saved
  sentence-transformers prompts are not applied unless configured as prefixes, so
  :meth:`Encoder.describe` always says exactly what was prepended.

:meth:`Encoder.describe` is the encoder's part of a stage fingerprint: the engine,
the model id, its revision or a content digest of its local files, the dimensions, the
normalisation, both prefixes and the maximum sequence length. It never holds a credential,
and leaves out what only changes where or how fast the work runs (device, batch size,
server URL, timeouts), so a fingerprint is portable between a laptop and the GPU host.
Queries and passages are comparable only when both were encoded under equal descriptions
apart from the prefixes.

Texts must be non-empty strings. An empty passage or query is an upstream bug, and servers
disagree on it (OpenAI answers 400, a local model returns a meaningless vector), so both
adapters refuse it the same way, naming the position.
"""

from __future__ import annotations

import contextlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from irforge.errors import IrforgeError
from irforge.progress import meter

F32 = npt.NDArray[np.float32]
Kind = Literal["query", "passage"]
KINDS: tuple[Kind, ...] = ("query", "passage")

ProgressFn = Callable[[int, int], None]
"""``on_batch(done, total)``: called after each batch with the number of texts encoded so far
in this :meth:`Encoder.encode` call and the number of texts it was given."""

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
"""The query instruction BGE v1.5 English models recommend for short-query passage retrieval."""

NORMALIZATION = "l2"
"""What every encoder does to its output rows; recorded in :meth:`Encoder.describe`."""

UNIT_NORM_TOLERANCE = 1e-4
"""How far from 1 a row's float32 norm may be after normalisation (float32 rounding is ~1e-7)."""


class EncoderError(IrforgeError):
    """An encoder cannot be built or refused a request; the message says what to do.

    Never contains a credential.
    """


class EncoderUnavailable(EncoderError):
    """The model or the server cannot be reached here (not downloaded, no network, server down,
    still failing after the client's retries); the message names it and how to fix that."""


class Encoder(Protocol):
    """A text encoder producing unit-normalised float32 vectors.

    Attributes are read-only properties, so an adapter may compute one on first use (the
    remote encoder learns ``dims`` from the server when it is not configured). For the same
    reason this protocol is not ``runtime_checkable``: on Python 3.11 an ``isinstance`` check
    would evaluate those properties.
    """

    @property
    def name(self) -> str:
        """The engine: ``"sentence-transformers"`` or ``"openai-embeddings"``."""
        ...

    @property
    def model_id(self) -> str:
        """The model as configured: a hub id, a served model name, or a local directory's name."""
        ...

    @property
    def revision(self) -> str | None:
        """The model's revision (a hub commit) when known; None for local files and unknown revisions."""
        ...

    @property
    def dims(self) -> int:
        """Length of every vector :meth:`encode` returns."""
        ...

    def encode(self, texts: Sequence[str], *, kind: Kind, on_batch: ProgressFn | None = None) -> F32:
        """Encode ``texts`` (non-empty strings) as a C-contiguous float32 ``[len(texts), dims]``
        array of unit-length rows, in input order; ``[]`` gives a ``(0, dims)`` array."""
        ...

    def describe(self) -> dict[str, Any]:
        """What enters a fingerprint: JSON-serialisable, stable across instances, no credential."""
        ...


def check_kind(kind: str) -> Kind:
    if kind == "query":
        return "query"
    if kind == "passage":
        return "passage"
    raise EncoderError(f"unknown text kind {kind!r}: use 'query' or 'passage'")


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list; :class:`EncoderError` naming the first item that is not a non-empty string."""
    if isinstance(texts, str):
        raise EncoderError("encode() takes a sequence of texts, got one string: wrap it in a list")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise EncoderError(
                f"text #{i} is {type(text).__name__}, not a string: drop or fill missing texts before encoding"
            )
        if not text.strip():
            raise EncoderError(
                f"text #{i} is empty or blank: drop it before encoding (an empty text has no meaningful vector)"
            )
    return out


def empty(dims: int) -> F32:
    return np.zeros((0, dims), dtype=np.float32)


def batches(n: int, size: int) -> list[range]:
    """``range(n)`` cut into consecutive ranges of at most ``size`` items."""
    if size < 1:
        raise ValueError("batch size must be positive")
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def normalise_rows(matrix: npt.ArrayLike, *, source: str) -> F32:
    """A C-contiguous float32 copy of ``matrix`` (2-D) with every row scaled to unit length.

    Norms are computed in float64 so that the float32 result is within rounding of 1.
    A row with a non-finite value or a zero norm has no direction: :class:`EncoderError`
    naming ``source`` and the row, since a silent zero vector would rank arbitrarily.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2:
        raise EncoderError(f"{source} returned an array of shape {m.shape}, expected [texts, dims]")
    finite = np.isfinite(m).all(axis=1)
    if not finite.all():
        raise EncoderError(
            f"{source} returned a vector with NaN or infinite values for text #{int(np.argmin(finite))}: "
            "the model or server is broken (a half-precision overflow?); report it"
        )
    norms = np.linalg.norm(m, axis=1)
    # A norm below this cannot be scaled to 1 without amplifying noise: treat it as zero.
    tiny = norms <= math.sqrt(np.finfo(np.float32).tiny)
    if tiny.any():
        raise EncoderError(
            f"{source} returned a zero vector for text #{int(np.argmax(tiny))}: it has no direction to "
            "rank by; check that text and the model"
        )
    return np.ascontiguousarray(m / norms[:, None], dtype=np.float32)


class EncoderBase(ABC):
    """What both adapters share: the prefix by text kind, the input checks, the batches (in
    the order :meth:`_order` gives, ``on_batch`` after each) and the layout of :meth:`describe`.

    An adapter sets ``name``, ``model_id``, ``revision``, ``batch_size`` and both prefixes,
    and implements ``dims``, ``max_seq_length`` and :meth:`_encode_batch`.
    """

    name: str
    model_id: str
    revision: str | None
    batch_size: int
    query_prefix: str
    passage_prefix: str

    @property
    @abstractmethod
    def dims(self) -> int: ...

    @property
    @abstractmethod
    def max_seq_length(self) -> int | None: ...

    def encode(self, texts: Sequence[str], *, kind: Kind, on_batch: ProgressFn | None = None) -> F32:
        prefix = self.query_prefix if check_kind(kind) == "query" else self.passage_prefix
        items = check_texts(texts)
        if not items:
            return empty(self.dims)
        order = self._order(items)
        parts: list[tuple[list[int], F32]] = []
        encoded = meter(f"{kind} texts encoded", len(items))
        with self._serial():
            for batch in batches(len(items), self.batch_size):
                idx = order[batch.start : batch.stop]
                parts.append((idx, self._encode_batch([items[i] for i in idx], prefix)))
                encoded.advance(len(idx))
                if on_batch is not None:
                    on_batch(batch.stop, len(items))
        out = np.empty((len(items), parts[0][1].shape[1]), dtype=np.float32)
        for idx, vectors in parts:
            out[idx] = vectors
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "model": self.model_id,
            "revision": self.revision,
            **self._files(),
            "dims": self.dims,
            "normalization": NORMALIZATION,
            "query_prefix": self.query_prefix,
            "passage_prefix": self.passage_prefix,
            "max_seq_length": self.max_seq_length,
        }

    @abstractmethod
    def _encode_batch(self, texts: list[str], prefix: str) -> F32:
        """Unit rows for ``texts`` (non-empty) with ``prefix`` prepended to each."""

    def _order(self, texts: list[str]) -> list[int]:
        """The order texts are batched in (input order; local models sort by length)."""
        return list(range(len(texts)))

    def _serial(self) -> AbstractContextManager[object]:
        """Held while one call's batches run (a local model runs one call at a time)."""
        return contextlib.nullcontext()

    def _files(self) -> dict[str, Any]:
        """Fingerprint material of local model files; none for a server."""
        return {}
