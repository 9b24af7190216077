"""The cited papers' candidate pools as the stages after ``papers`` read them.

The ``papers`` artifact holds one row per (paper, pool element) and a ``citations`` side
table saying which summary cites which paper; the decompose, align and select stages need,
for a chunk of summaries, each one's paper id and its pool in element order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from irforge.artifacts import Artifact

SUMMARY_FIELDS = (
    pa.field("unit_id", pa.string(), nullable=False),
    pa.field("review_id", pa.string(), nullable=False),
    pa.field("cited_ref_id", pa.string(), nullable=False),
    pa.field("summary", pa.string(), nullable=False),
    pa.field("suitability", pa.string(), nullable=False),
    pa.field("hypothesis", pa.string(), nullable=False),
)
"""A summary's identity and texts, the first columns from ``decompose`` on."""


@dataclass(frozen=True)
class PaperPool:
    """One paper's text elements in pool order (``texts[i]`` is element ``i``) and their types."""

    paper_id: str
    texts: tuple[str, ...]
    types: tuple[str, ...]


def citing_papers(papers: Artifact) -> dict[str, str]:
    """Summary ``unit_id`` → the ``paper_id`` of the paper it cites (only papers with a pool)."""
    table = papers.read(table="citations", columns=["unit_id", "paper_id"])
    return dict(zip(table.column("unit_id").to_pylist(), table.column("paper_id").to_pylist(), strict=True))


def paper_pools(papers: Artifact, paper_ids: Iterable[str]) -> dict[str, PaperPool]:
    """The pools of ``paper_ids`` (those in the artifact), elements sorted by ``element_index``."""
    wanted = sorted(set(paper_ids))
    if not wanted:
        return {}
    # Read only the chunk's papers: the artifact holds the full text of every cited paper.
    table = papers.read(
        columns=["paper_id", "element_index", "element_type", "text"], filters=[("paper_id", "in", wanted)]
    )
    table = table.sort_by([("paper_id", "ascending"), ("element_index", "ascending")])
    grouped: dict[str, tuple[list[str], list[str]]] = {}
    for paper_id, text, kind in zip(
        table.column("paper_id").to_pylist(),
        table.column("text").to_pylist(),
        table.column("element_type").to_pylist(),
        strict=True,
    ):
        texts, types = grouped.setdefault(paper_id, ([], []))
        texts.append(text)
        types.append(kind)
    return {key: PaperPool(key, tuple(texts), tuple(types)) for key, (texts, types) in grouped.items()}
