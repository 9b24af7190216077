"""Question-vs-expert queries, tested per review as in paper 004 §5, Table 5.

The paired samples are one value of a metric per unit (a system: BM25, dense, hybrid, hybrid +
reranker, per model and seed — paper 004 pairs the rows of its Tables 3 and 4) for the
queries made from the research question and for the expert's outcome-term queries. The
differences are ``expert - question``, so a positive statistic means the expert queries
score higher.

Per (review, metric), with ``scipy.stats``:

1. Shapiro–Wilk (``shapiro``) on the differences; normal when ``p >= normality_alpha``.
2. Normal: the paired t-test (``ttest_rel(expert, question)``); else the Wilcoxon
   signed-rank test (``wilcoxon(expert, question)``, ``method="auto"``: exact for up to 50
   pairs without zeros or ties). Zero differences follow ``zero_method``: ``wilcox``
   (default, scipy's) drops them before ranking, ``pratt`` ranks them and then drops their
   ranks, ``zsplit`` splits their ranks between the two signs.
3. ``decision``: ``significant`` when ``p < alpha``, else ``not_significant``.

Stated outcomes where a test cannot run: fewer than 3 pairs (Shapiro–Wilk needs 3) →
``test = "none"``, ``decision = "too_few_pairs"``; every difference zero →
``test = "none"``, ``decision = "no_difference"`` (no test can reject; statistic and p are
null); every difference equal but not zero (within 1e-12, floating-point noise) →
normality is undefined (zero range) and the t statistic infinite, so Wilcoxon is used and
``note`` says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import IrforgeError

QUESTION: Final = "question"
_EQUAL: Final = 1e-12  # differences closer than this are equal (0.2 - 0.1 vs 0.3 - 0.2)
EXPERT: Final = "expert"

SCORES_SCHEMA: Final = pa.schema(
    [
        pa.field("review", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("unit", pa.string(), nullable=False),  # the system paired across query kinds
        pa.field("query_kind", pa.string(), nullable=False),  # question | expert
        pa.field("value", pa.float64(), nullable=False),
    ]
)
"""Input of :func:`compare_table`: one metric value per review, metric, unit and query kind."""

RESULT_SCHEMA: Final = pa.schema(
    [
        pa.field("review", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("mean_question", pa.float64(), nullable=False),
        pa.field("mean_expert", pa.float64(), nullable=False),
        pa.field("mean_difference", pa.float64(), nullable=False),
        pa.field("normality_statistic", pa.float64()),  # Shapiro-Wilk W; null when not run
        pa.field("normality_p", pa.float64()),
        pa.field("test", pa.string(), nullable=False),  # paired_t | wilcoxon | none
        pa.field("statistic", pa.float64()),
        pa.field("p_value", pa.float64()),
        pa.field("decision", pa.string(), nullable=False),
        pa.field("note", pa.string(), nullable=False),
    ]
)
"""One row per review and metric, laid out like paper 004 Table 5 (dataset, test, statistic, p)."""


class SignificanceConfig(StrictModel):
    alpha: float = Field(0.05, gt=0, lt=1, description="Significance level of the paired test.")
    normality_alpha: float = Field(
        0.05, gt=0, lt=1, description="Shapiro-Wilk level: p below it sends the pair to Wilcoxon."
    )
    zero_method: Literal["wilcox", "pratt", "zsplit"] = Field(
        "wilcox", description="Wilcoxon's treatment of zero differences (scipy.stats.wilcoxon)."
    )
    alternative: Literal["two-sided", "less", "greater"] = Field(
        "two-sided", description="Alternative hypothesis on expert - question."
    )


DEFAULT_CONFIG: Final = SignificanceConfig()


class SignificanceError(IrforgeError):
    """Scores that cannot be paired or tested; the message names the review and metric."""


@dataclass(frozen=True)
class PairedComparison:
    review: str
    metric: str
    n: int
    mean_question: float
    mean_expert: float
    mean_difference: float
    normality_statistic: float | None
    normality_p: float | None
    test: str
    statistic: float | None
    p_value: float | None
    decision: str
    note: str


def compare(
    question: Sequence[float],
    expert: Sequence[float],
    config: SignificanceConfig = DEFAULT_CONFIG,
    *,
    review: str = "",
    metric: str = "",
) -> PairedComparison:
    """Test ``expert`` against ``question`` (paired by position) as the module says."""
    where = f"review {review!r}, metric {metric!r}"
    if len(question) != len(expert):
        raise SignificanceError(f"{where}: {len(question)} question values but {len(expert)} expert values")
    q, e = np.asarray(question, dtype=np.float64), np.asarray(expert, dtype=np.float64)
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(e))):
        raise SignificanceError(f"{where}: a value is NaN or infinite")
    diff = e - q
    base: dict[str, Any] = {
        "review": review,
        "metric": metric,
        "n": len(diff),
        "mean_question": float(q.mean()) if len(q) else math.nan,
        "mean_expert": float(e.mean()) if len(e) else math.nan,
        "mean_difference": float(diff.mean()) if len(diff) else math.nan,
        "normality_statistic": None,
        "normality_p": None,
    }
    if len(diff) < 3:
        return PairedComparison(
            **base, test="none", statistic=None, p_value=None, decision="too_few_pairs",
            note=f"{len(diff)} pair(s): Shapiro-Wilk needs at least 3",
        )  # fmt: skip
    if not np.any(diff):
        return PairedComparison(
            **base, test="none", statistic=None, p_value=None, decision="no_difference",
            note="every paired difference is zero: no test can reject",
        )  # fmt: skip
    from scipy import stats  # type: ignore[import-untyped]  # noqa: PLC0415 -- seconds: when a test runs

    note = ""
    if np.allclose(diff, diff[0], rtol=0.0, atol=_EQUAL):
        test = "wilcoxon"
        note = "every difference is equal: normality undefined, t infinite; Wilcoxon used"
    else:
        normality = stats.shapiro(diff)
        base["normality_statistic"], base["normality_p"] = float(normality.statistic), float(normality.pvalue)
        test = "paired_t" if normality.pvalue >= config.normality_alpha else "wilcoxon"
    if test == "paired_t":
        result = stats.ttest_rel(e, q, alternative=config.alternative)
    else:
        result = stats.wilcoxon(e, q, zero_method=config.zero_method, alternative=config.alternative)
        zeros = int(np.count_nonzero(diff == 0))
        if zeros:
            note = f"{zeros} zero difference(s), zero_method={config.zero_method}"
    p = float(result.pvalue)
    return PairedComparison(
        **base,
        test=test,
        statistic=float(result.statistic),
        p_value=p,
        decision="significant" if p < config.alpha else "not_significant",
        note=note,
    )


def compare_table(scores: pa.Table, config: SignificanceConfig = DEFAULT_CONFIG) -> pa.Table:
    """One :data:`RESULT_SCHEMA` row per (review, metric) of ``scores`` (:data:`SCORES_SCHEMA`),
    sorted by review then metric; units are paired by name, in name order."""
    missing = [c for c in SCORES_SCHEMA.names if c not in scores.column_names]
    if missing:
        raise SignificanceError(f"scores table lacks column(s) {missing} (it has {scores.column_names})")
    groups: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for row in scores.select(SCORES_SCHEMA.names).to_pylist():
        review, metric, unit, kind, value = (row[c] for c in SCORES_SCHEMA.names)
        where = f"review {review!r}, metric {metric!r}, unit {unit!r}"
        if kind not in (QUESTION, EXPERT):
            raise SignificanceError(f"{where}: query_kind {kind!r} is not {QUESTION!r} or {EXPERT!r}")
        if value is None:
            raise SignificanceError(f"{where}: the {kind} value is missing")
        by_kind = groups.setdefault((review, metric), {}).setdefault(unit, {})
        if kind in by_kind:
            raise SignificanceError(f"{where}: two {kind} values")
        by_kind[kind] = float(value)
    results = []
    for (review, metric), units in sorted(groups.items()):
        for unit, by_kind in units.items():
            if len(by_kind) != 2:
                lacking = EXPERT if QUESTION in by_kind else QUESTION
                raise SignificanceError(
                    f"review {review!r}, metric {metric!r}, unit {unit!r}: no {lacking} value to pair with"
                )
        names = sorted(units)
        comparison = compare(
            [units[u][QUESTION] for u in names],
            [units[u][EXPERT] for u in names],
            config,
            review=review,
            metric=metric,
        )
        results.append(asdict(comparison))
    return pa.Table.from_pylist(results, schema=RESULT_SCHEMA) if results else RESULT_SCHEMA.empty_table()


__all__ = [
    "DEFAULT_CONFIG",
    "EXPERT",
    "QUESTION",
    "RESULT_SCHEMA",
    "SCORES_SCHEMA",
    "PairedComparison",
    "SignificanceConfig",
    "SignificanceError",
    "compare",
    "compare_table",
]
