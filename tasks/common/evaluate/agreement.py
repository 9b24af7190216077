"""Agreement between raters of relevance labels (CURE §2.3: Fleiss' κ of 0.691 between two
annotators and the dataset's labels).

Input: one row per label, ``query_id, passage_id, rater, label`` with labels 0/1/2; an item
is a (query, passage) pair. Output (:class:`Agreement`):

- for each pair of raters (names sorted, each pair once): Cohen's κ
  (``sklearn.metrics.cohen_kappa_score``, unweighted by default; ``weights="linear"`` or
  ``"quadratic"`` for the ordinal variants) and the 3x3 confusion matrix on the items both
  labelled;
- Fleiss' κ (``statsmodels.stats.inter_rater.fleiss_kappa`` on ``aggregate_raters`` counts)
  over all raters, on the items **every** rater labelled; the others are counted as skipped;
- κ is ``None`` where it is undefined: no shared item, or chance agreement of 1 (every label
  given is the same one, so there is no disagreement to beat).

A rater labelling an item twice, a missing value or a label outside 0/1/2 is an error that
names the row. :attr:`Agreement.agreement` and :attr:`Agreement.confusion` give the result
as Arrow tables (:data:`AGREEMENT_SCHEMA`, :data:`CONFUSION_SCHEMA`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import pyarrow as pa

from irforge.errors import IrforgeError

LABELS: Final = (0, 1, 2)
ALL_RATERS: Final = "all"
"""``rater_a`` and ``rater_b`` of the Fleiss' κ row of :data:`AGREEMENT_SCHEMA`."""

AGREEMENT_SCHEMA: Final = pa.schema(
    [
        pa.field("rater_a", pa.string(), nullable=False),
        pa.field("rater_b", pa.string(), nullable=False),
        pa.field("measure", pa.string(), nullable=False),  # cohen_kappa | fleiss_kappa
        pa.field("kappa", pa.float64()),  # null: undefined
        pa.field("items", pa.int64(), nullable=False),
    ]
)
CONFUSION_SCHEMA: Final = pa.schema(
    [
        pa.field("rater_a", pa.string(), nullable=False),
        pa.field("rater_b", pa.string(), nullable=False),
        pa.field("label_a", pa.int8(), nullable=False),
        pa.field("label_b", pa.int8(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
    ]
)

Item = tuple[str, str]  # (query_id, passage_id)
Weights = Literal["linear", "quadratic"] | None


class AgreementError(IrforgeError):
    """Labels cannot be compared as given; the message names the row and why."""


@dataclass(frozen=True)
class PairAgreement:
    """Cohen's κ of two raters on the items both labelled, and their confusion matrix
    (``confusion[i][j]``: items ``rater_a`` labelled ``i`` and ``rater_b`` labelled ``j``)."""

    rater_a: str
    rater_b: str
    items: int
    kappa: float | None
    confusion: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Agreement:
    raters: tuple[str, ...]
    items: int  # distinct items labelled by at least one rater
    pairs: tuple[PairAgreement, ...]
    fleiss_kappa: float | None
    fleiss_items: int  # items every rater labelled: the ones Fleiss' κ uses
    skipped_items: int  # items some rater did not label: left out of Fleiss' κ

    @property
    def agreement(self) -> pa.Table:
        """One row per rater pair (``cohen_kappa``) and one ``fleiss_kappa`` row (raters ``all``)."""
        rows = [
            {
                "rater_a": p.rater_a,
                "rater_b": p.rater_b,
                "measure": "cohen_kappa",
                "kappa": p.kappa,
                "items": p.items,
            }
            for p in self.pairs
        ]
        rows.append(
            {
                "rater_a": ALL_RATERS,
                "rater_b": ALL_RATERS,
                "measure": "fleiss_kappa",
                "kappa": self.fleiss_kappa,
                "items": self.fleiss_items,
            }
        )
        return pa.Table.from_pylist(rows, schema=AGREEMENT_SCHEMA)

    @property
    def confusion(self) -> pa.Table:
        """Every cell of every pair's confusion matrix, zeros included."""
        rows = [
            {
                "rater_a": p.rater_a,
                "rater_b": p.rater_b,
                "label_a": a,
                "label_b": b,
                "count": p.confusion[i][j],
            }
            for p in self.pairs
            for (i, a), (j, b) in itertools.product(enumerate(LABELS), repeat=2)
        ]
        return pa.Table.from_pylist(rows, schema=CONFUSION_SCHEMA)


def agreement(labels: pa.Table, *, weights: Weights = None) -> Agreement:
    """Cohen's κ per rater pair, Fleiss' κ over all raters, confusion matrices (see the module)."""
    by_rater = _labels_by_rater(labels)
    raters = tuple(sorted(by_rater))
    items = set().union(*by_rater.values()) if by_rater else set()
    pairs = tuple(_pair(a, b, by_rater, weights) for a, b in itertools.combinations(raters, 2))
    common = sorted(set.intersection(*(set(by_rater[r]) for r in raters))) if len(raters) >= 2 else []
    kappa = None
    if common:
        matrix = np.array([[by_rater[r][item] for r in raters] for item in common])
        if len(np.unique(matrix)) > 1:  # a single category everywhere: chance agreement is 1
            # statsmodels and scikit-learn take seconds to import: only when κ is computed.
            from statsmodels.stats.inter_rater import (  # type: ignore[import-untyped]  # noqa: PLC0415
                aggregate_raters,
                fleiss_kappa,
            )

            counts, _ = aggregate_raters(matrix, n_cat=len(LABELS))
            kappa = _defined(fleiss_kappa(counts, method="fleiss"))
    return Agreement(
        raters=raters,
        items=len(items),
        pairs=pairs,
        fleiss_kappa=kappa,
        fleiss_items=len(common),
        skipped_items=len(items) - len(common),
    )


def _pair(a: str, b: str, by_rater: dict[str, dict[Item, int]], weights: Weights) -> PairAgreement:
    shared = sorted(set(by_rater[a]) & set(by_rater[b]))
    first = [by_rater[a][item] for item in shared]
    second = [by_rater[b][item] for item in shared]
    from sklearn.metrics import cohen_kappa_score, confusion_matrix  # type: ignore[import-untyped]  # noqa: PLC0415

    confusion = confusion_matrix(first, second, labels=list(LABELS)) if shared else np.zeros((3, 3), int)
    kappa = None
    if shared and len(set(first) | set(second)) > 1:  # one label throughout: chance agreement is 1
        kappa = _defined(cohen_kappa_score(first, second, labels=list(LABELS), weights=weights))
    return PairAgreement(a, b, len(shared), kappa, tuple(tuple(int(n) for n in row) for row in confusion))


def _labels_by_rater(labels: pa.Table) -> dict[str, dict[Item, int]]:
    missing = [c for c in ("query_id", "passage_id", "rater", "label") if c not in labels.column_names]
    if missing:
        raise AgreementError(f"labels table lacks column(s) {missing} (it has {labels.column_names})")
    by_rater: dict[str, dict[Item, int]] = {}
    columns: Sequence[list[object]] = [
        labels.column(c).to_pylist() for c in ("query_id", "passage_id", "rater", "label")
    ]
    for i, (qid, pid, rater, label) in enumerate(zip(*columns, strict=True)):
        where = f"labels row {i} (query {qid!r}, passage {pid!r}, rater {rater!r})"
        if not (isinstance(qid, str) and isinstance(pid, str) and isinstance(rater, str)):
            raise AgreementError(f"{where}: query_id, passage_id and rater must be strings")
        if isinstance(label, bool) or label not in LABELS:
            raise AgreementError(f"{where}: label {label!r} is not one of {list(LABELS)}")
        assert isinstance(label, int)
        given = by_rater.setdefault(rater, {})
        if (qid, pid) in given:
            raise AgreementError(f"{where}: the rater labelled this pair twice")
        given[qid, pid] = label
    return by_rater


def _defined(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


__all__ = [
    "AGREEMENT_SCHEMA",
    "ALL_RATERS",
    "CONFUSION_SCHEMA",
    "Agreement",
    "AgreementError",
    "PairAgreement",
    "agreement",
]
