"""The search port: what the CURE mining stage needs from a search engine (CURE §2.3).

Two backends implement :class:`SearchBackend`: Elasticsearch 8.x in production
(:mod:`tasks.common.search.elastic`) and an embedded in-process engine, tantivy for the lexical
retrievers plus exact cosine kNN over the stored vectors with numpy
(:mod:`tasks.common.search.embedded`), the default on laptops and in CI. The same behavioural
tests run against both (``tests/common/test_search_conformance.py``).

Every retriever is batch-first (a list of queries in, one ranked list per query out) so
that an engine can use its batch path: ``msearch`` for Elasticsearch, one matrix product
for the embedded kNN. Ranked lists are ordered by score descending, ties broken by
``passage_id`` ascending, so that results are deterministic on every backend.

Scores are each engine's own: BM25 on tantivy is 2.2x Lucene's (a ``k1 + 1`` numerator;
same ranking) and Elasticsearch's cosine ``_score`` is ``(1 + cos) / 2``.
Rankings, not score values, are what the port promises; fusion (:mod:`tasks.common.search.fusion`)
only uses ranks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from irforge.errors import IrforgeError

F32 = npt.NDArray[np.float32]

PASSAGE_SCHEMA = pa.schema(
    [
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("vector", pa.list_(pa.float32()), nullable=False),
    ]
)
"""What :meth:`SearchBackend.add` takes: one row per passage, vectors unit-normalised."""


@dataclass(frozen=True, order=True)
class Hit:
    """One ranked result. ``rank`` counts from 1, as RRF does."""

    rank: int
    passage_id: str
    score: float


@dataclass
class IndexReport:
    """What a bulk load did: every input row is indexed or listed in ``failed`` with a reason."""

    indexed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (passage_id, reason)


class SearchError(IrforgeError):
    """A search engine refused or failed a request; the message names the engine and why."""


class SearchUnavailable(SearchError):
    """The backend cannot be used here (no server configured or reachable); says how to fix it."""


@runtime_checkable
class SearchBackend(Protocol):
    """A passage index with the four CURE mining retrievers."""

    name: str  # "embedded" or "elasticsearch": recorded in artifacts
    dims: int  # vector dimensions

    def add(self, batches: Iterable[pa.RecordBatch]) -> IndexReport:
        """Bulk index rows of :data:`PASSAGE_SCHEMA`; failed rows are reported, never dropped silently."""
        ...

    def finish(self) -> None:
        """End a bulk load: commit / refresh so that every added passage is searchable."""
        ...

    def count(self) -> int:
        """Passages searchable now."""
        ...

    def bm25(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        """BM25 ``match`` (any term, OR) of each text."""
        ...

    def phrase(self, texts: Sequence[str], slop: int, k: int) -> list[list[Hit]]:
        """``match_phrase`` with ``slop``: the text's terms in order, up to ``slop`` moves apart."""
        ...

    def fuzzy(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        """``match`` with ``fuzziness: AUTO`` (0 edits up to 2 chars, 1 up to 5, else 2)."""
        ...

    def knn(self, vectors: F32, k: int, num_candidates: int) -> list[list[Hit]]:
        """Nearest passages by cosine similarity, one row of ``vectors`` per query."""
        ...

    def close(self) -> None: ...


def vectors_column(vectors: F32) -> pa.ListArray:
    """A float32 matrix as the ``vector`` column of :data:`PASSAGE_SCHEMA`, with no Python
    object per number."""
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    flat = pa.array(matrix.reshape(-1), pa.float32())
    offsets = pa.array(np.arange(0, len(flat) + 1, max(1, matrix.shape[1]), dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, flat)


def ranked(ids: Sequence[str], scores: Sequence[float], k: int) -> list[Hit]:
    """The top ``k`` of (id, score) pairs: score descending, ties by passage id ascending."""
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))[:k]
    return [Hit(rank, ids[i], float(scores[i])) for rank, i in enumerate(order, start=1)]
