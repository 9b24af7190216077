"""The pool cut-off: which stored cross-encoder pairs form a query's candidate pool (CURE §2.3).

Scores are stored, cut-offs are views: :func:`apply_cutoff` is the one place a cut-off is
applied, by the judge (through ``pool_view`` in ``tasks/cure/stages/pool.py``) and by the run report
(``tasks/cure/report/judging.py``), so the report counts the pools the judge was given.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from irforge.config import StrictModel


class PoolCutoff(StrictModel):
    """A view on stored scores: which pairs form a query's candidate pool."""

    threshold: float = Field(0.42, description="CURE's cut-off; on the probability scale by default.")
    scale: Literal["probability", "logit"] = "probability"
    max_per_query: int | None = Field(None, ge=1, description="Keep at most the N best pairs of a query.")

    @property
    def probability(self) -> float:
        """The threshold on the probability scale (the sigmoid of a logit threshold)."""
        return self.threshold if self.scale == "probability" else 1.0 / (1.0 + math.exp(-self.threshold))


def apply_cutoff(pairs: pa.Table, cutoff: PoolCutoff) -> pa.Table:
    """Pairs at or above the threshold on ``cutoff.scale``, at most ``max_per_query`` per query
    (best ranks), sorted by query then rank. ``pairs`` needs ``query_id``, ``rank`` and the scale's column.
    """
    table = pairs.filter(pc.greater_equal(pairs.column(cutoff.scale), cutoff.threshold))
    table = table.sort_by([("query_id", "ascending"), ("rank", "ascending")])
    if cutoff.max_per_query is not None and table.num_rows:
        qids = np.asarray(table.column("query_id").to_pylist(), dtype=object)
        first = np.r_[True, qids[1:] != qids[:-1]]
        starts = np.maximum.accumulate(np.where(first, np.arange(len(qids)), 0))
        table = table.filter(pa.array(np.arange(len(qids)) - starts < cutoff.max_per_query))
    return table
