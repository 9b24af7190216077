"""Reciprocal Rank Fusion of the mining retrievers' ranked lists, computed client side.

CURE fuses its four retrievers with RRF, ``k = 60``. Elasticsearch's server-side ``rrf``
retriever needs an Enterprise licence, so fusion happens here, on :class:`~tasks.common.search.port.Hit`
lists from any backend, and only ranks enter it (scores of different engines are not
comparable): a passage scores ``sum over the lists holding it of 1 / (k + rank)``, ranks
counting from 1. Each retriever's rank and score are kept on the fused hit, so they can be
stored as columns.

Ties (equal fused score) are frequent: two passages with swapped ranks in two lists tie
exactly. They are broken explicitly, so that fusion is deterministic and independent of
the order of the lists: first by the best (smallest) individual rank — a passage some
retriever put first beats one that two retrievers put third — then by ``passage_id``
ascending, the port's rule. Fused scores are summed with :func:`math.fsum` (correctly
rounded), so the same multiset of ranks gives bit-identical scores whatever the order of
the retrievers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tasks.common.search.port import Hit

DEFAULT_K = 60
"""RRF rank constant, as in CURE and in the RRF paper (Cormack et al., 2009)."""


@dataclass(frozen=True)
class FusedHit:
    """A passage after fusion, with what every retriever said about it (``None``: not in its list)."""

    passage_id: str
    score: float
    rank: int  # fused rank, from 1
    ranks: dict[str, int | None]
    scores: dict[str, float | None]


def rrf(
    ranked_lists: Mapping[str, Sequence[Hit]], k: int = DEFAULT_K, top: int | None = None
) -> list[FusedHit]:
    """Fuse ``{retriever name: ranked hits}``; the first ``top`` fused hits (all when ``None``).

    Uses each hit's own ``rank`` (from 1). Raises ``ValueError`` for ``k < 1``, ``top < 0``,
    a rank below 1, or a passage listed twice by one retriever.
    """
    if k < 1:
        raise ValueError(f"RRF k must be at least 1, got {k}")
    if top is not None and top < 0:
        raise ValueError(f"top must be None or at least 0, got {top}")
    names = list(ranked_lists)
    ranks: dict[str, dict[str, int]] = {}  # passage -> {retriever: rank}, only where listed
    scores: dict[str, dict[str, float]] = {}
    for name, hits in ranked_lists.items():
        for hit in hits:
            if hit.rank < 1:
                raise ValueError(f"RRF: {name} ranks {hit.passage_id!r} at {hit.rank}; ranks count from 1")
            seen = ranks.setdefault(hit.passage_id, {})
            if name in seen:
                raise ValueError(f"RRF: {name} lists {hit.passage_id!r} twice")
            seen[name] = hit.rank
            scores.setdefault(hit.passage_id, {})[name] = hit.score
    fused = sorted(
        ((math.fsum(1.0 / (k + r) for r in by.values()), min(by.values()), pid) for pid, by in ranks.items()),
        key=lambda f: (-f[0], f[1], f[2]),
    )
    if top is not None:
        fused = fused[:top]
    return [
        FusedHit(
            passage_id=pid,
            score=score,
            rank=rank,
            ranks={name: ranks[pid].get(name) for name in names},
            scores={name: scores[pid].get(name) for name in names},
        )
        for rank, (score, _, pid) in enumerate(fused, start=1)
    ]
