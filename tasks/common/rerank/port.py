"""The reranker port: what cross-encoder pooling (CURE §2.3, "Candidate Identification") needs
from a cross-encoder.

A :class:`Reranker` scores query-passage *pairs*: pair ``i`` is ``(queries[i], passages[i])``,
so the caller decides which pairs to score (CURE scores every English query against every
passage of its domain) and can cut the work into resumable chunks.

Raw logits, and the sigmoid of them. A cross-encoder with one output ends in a logit;
sentence-transformers' ``CrossEncoder.predict`` and vLLM's ``/score`` apply an activation to
it by default (the one the model's config names, else a sigmoid), the GTE reranker's model
card prints raw logits, and CURE's pooling threshold (0.42) does not say which scale it is
on. So adapters ask their engine for the raw logit, never an
activated score, and :class:`ScoredPairs` carries both the logit and its sigmoid, computed
here in float64 with a numerically stable sigmoid (:func:`scipy.special.expit`). Thresholds
are applied later, at read time, on whichever scale the pooling config names.

:meth:`Reranker.describe` is the reranker's part of a stage fingerprint: the
engine, the model id, its revision or a content digest of its local files, the maximum
sequence length and what the scores are (raw logits, sigmoid probabilities). It never holds
a credential, and leaves out what only changes where or how fast the work runs (device,
batch size, concurrency, server URL, timeouts).

Texts must be non-empty strings. An empty query or passage is an upstream bug, and engines
disagree on it (a local model scores ``[CLS] [SEP] passage`` happily, vLLM refuses the whole
request), so both adapters refuse it the same way, naming the pair.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from irforge.errors import IrforgeError

F64 = npt.NDArray[np.float64]

ProgressFn = Callable[[int, int], None]
"""``progress(done, total)``: called after each batch with the number of pairs scored so far in
this :meth:`Reranker.score` call and the number of pairs it was given."""

ACTIVATION = "none"
"""The activation adapters ask their engine for, recorded in :meth:`Reranker.describe`: none, so
scores are the model's raw logits."""

PROBABILITY = "sigmoid"
"""How :attr:`ScoredPairs.probability` is derived from the logit; recorded in :meth:`Reranker.describe`."""


class RerankerError(IrforgeError):
    """A reranker cannot be built or refused a request; the message says what to do.

    Never contains a credential.
    """


class RerankerUnavailable(RerankerError):
    """The model or the server cannot be reached here (not downloaded, no network, server down,
    still failing after the retries); rerunning later may help."""


def _frozen(values: F64) -> F64:
    out: F64 = np.array(values, dtype=np.float64, copy=True)
    out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)  # eq would compare arrays element-wise: compare .logit instead
class ScoredPairs:
    """Scores of pairs, in the order the pairs were given: two read-only float64 arrays of one
    length, the raw ``logit`` and ``probability = sigmoid(logit)``.

    Build it with :meth:`from_logits`, which checks the logits and computes the probabilities.
    """

    logit: F64
    probability: F64

    def __post_init__(self) -> None:
        for name in ("logit", "probability"):
            value = getattr(self, name)
            if not isinstance(value, np.ndarray) or value.dtype != np.float64 or value.ndim != 1:
                raise TypeError(f"ScoredPairs.{name} must be a 1-D float64 numpy array")
        if self.logit.shape != self.probability.shape:
            raise ValueError(
                f"ScoredPairs: {self.logit.shape[0]} logits but {self.probability.shape[0]} probabilities"
            )

    @classmethod
    def from_logits(cls, logits: npt.ArrayLike, *, source: str = "the reranker") -> ScoredPairs:
        """Raw logits (1-D, one per pair) and their sigmoid.

        A NaN or infinite logit cannot be ranked or thresholded: :class:`RerankerError` naming
        ``source`` and the pair (a half-precision overflow, or a broken server).
        """
        values = np.asarray(logits, dtype=np.float64)
        if values.ndim != 1:
            raise RerankerError(
                f"{source} returned scores of shape {values.shape}, expected one score per pair: "
                "a cross-encoder for pooling must have exactly one output (num_labels=1)"
            )
        finite = np.isfinite(values)
        if not finite.all():
            raise RerankerError(
                f"{source} returned a NaN or infinite score for pair #{int(np.argmin(finite))}: the model "
                "or server is broken (a half-precision overflow?); report it"
            )
        from scipy.special import expit  # type: ignore[import-untyped]  # noqa: PLC0415 -- scipy: when scores come

        return cls(logit=_frozen(values), probability=_frozen(expit(values)))

    @classmethod
    def empty(cls) -> ScoredPairs:
        return cls.from_logits(np.zeros(0))

    def __len__(self) -> int:
        return int(self.logit.shape[0])


class Reranker(Protocol):
    """A cross-encoder scoring query-passage pairs with raw logits.

    Attributes are read-only properties (an adapter may compute them); for the same reason
    this protocol is not ``runtime_checkable``.
    """

    @property
    def engine(self) -> str:
        """``"sentence-transformers"`` or ``"vllm-score"``."""
        ...

    @property
    def model(self) -> str:
        """The model as configured: a hub id, a served model name, a builtin name or a local
        directory's name (never its location)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What enters a fingerprint: JSON-serialisable, stable across instances and machines,
        no credential, no path, no URL, no device or batch size."""
        ...

    def score(
        self, queries: Sequence[str], passages: Sequence[str], progress: ProgressFn | None = None
    ) -> ScoredPairs:
        """Score pair ``i = (queries[i], passages[i])`` for every ``i``, in input order.

        Both sequences hold non-empty strings and have one length; ``[]`` and ``[]`` give
        empty scores without any model call.
        """
        ...


def check_pairs(queries: Sequence[str], passages: Sequence[str]) -> tuple[list[str], list[str]]:
    """Both sides as lists; :class:`RerankerError` naming the first pair that is not two
    non-empty strings, or the lengths when they differ."""
    for side, texts in (("queries", queries), ("passages", passages)):
        if isinstance(texts, str):
            raise RerankerError(
                f"score() takes sequences of texts, got one string as {side}: wrap it in a list"
            )
    qs, ps = list(queries), list(passages)
    if len(qs) != len(ps):
        raise RerankerError(
            f"score() pairs queries[i] with passages[i], but got {len(qs)} queries and {len(ps)} passages: "
            "repeat the query once per passage it is scored against"
        )
    for i, (query, passage) in enumerate(zip(qs, ps, strict=True)):
        for side, text in (("query", query), ("passage", passage)):
            if not isinstance(text, str):
                raise RerankerError(
                    f"the {side} of pair #{i} is {type(text).__name__}, not a string: drop or fill "
                    "missing texts before scoring"
                )
            if not text.strip():
                raise RerankerError(
                    f"the {side} of pair #{i} is empty or blank: drop it before scoring (an empty "
                    "text has no meaningful relevance score)"
                )
    return qs, ps


def describe_scores() -> dict[str, str]:
    """The part of every :meth:`Reranker.describe` that says what the scores are."""
    return {"activation": ACTIVATION, "probability": PROBABILITY}


class RerankerBase(ABC):
    """What both adapters share: the pair checks, the scores built from logits and the layout
    of :meth:`describe`. An adapter sets ``engine``, ``model`` and ``revision`` and implements
    :meth:`_logits`, :meth:`_source` and :meth:`_described`."""

    engine: str
    model: str
    revision: str | None

    def score(
        self, queries: Sequence[str], passages: Sequence[str], progress: ProgressFn | None = None
    ) -> ScoredPairs:
        qs, ps = check_pairs(queries, passages)
        if not qs:
            return ScoredPairs.empty()
        return ScoredPairs.from_logits(self._logits(qs, ps, progress), source=self._source())

    def describe(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "model": self.model,
            "revision": self.revision,
            **self._described(),
            **describe_scores(),
        }

    @abstractmethod
    def _logits(self, queries: list[str], passages: list[str], progress: ProgressFn | None) -> F64:
        """The raw logit of every pair (at least one), in input order."""

    @abstractmethod
    def _source(self) -> str:
        """Who computed the scores, as error messages name it."""

    @abstractmethod
    def _described(self) -> dict[str, Any]:
        """The adapter's own fingerprint material (model files, maximum length, precision)."""
