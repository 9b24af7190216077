"""Statistics of the spanish_sr release card: the cleaning funnel and the records per year range.

The funnel is read from the manifests of ``ingest``, ``clean`` and ``questions`` (their
``counts``: units in, kept, excluded per reason), never recomputed. The per-year table is
paper 004 Table 1 (§3.1: records obtained, average abstract length, average title length
per range of publication years) on the released corpus; lengths are whitespace-separated
words (``str.split``), the paper does not say how it counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from irforge.artifacts import Artifact

FUNNEL: Final = (
    ("ingest", "records read (a file that cannot be read counts once)", "records ingested"),
    ("clean", "records cleaned", "records kept (the corpus)"),
    ("questions", "records turned into questions", "question–abstract pairs"),
)
"""The flow's filters from exported records to question pairs: stage, what enters, what is kept."""
UNKNOWN_YEAR: Final = "unknown year"
OTHER_YEARS: Final = "other years"


@dataclass(frozen=True)
class FunnelStep:
    stage: str
    entering: str  # what its units are
    kept_label: str
    units_in: int
    kept: int
    excluded: Mapping[str, int]  # reason → units, sorted by reason


def funnel(upstream: Mapping[str, Artifact]) -> list[FunnelStep]:
    """One step per :data:`FUNNEL` stage, from its manifest's counts."""
    steps = []
    for stage, entering, kept_label in FUNNEL:
        counts = upstream[stage].manifest["counts"]
        reasons = {str(r): int(n) for r, n in sorted(counts["excluded_by_reason"].items())}
        steps.append(
            FunnelStep(
                stage, entering, kept_label, int(counts["units_in"]), int(counts["units_kept"]), reasons
            )
        )
    return steps


@dataclass(frozen=True)
class YearRange:
    label: str
    records: int
    abstract_words: float | None  # mean; None without records
    title_words: float | None


def bin_label(start: int, end: int) -> str:
    return str(start) if start == end else f"{start}-{end}"


def year_table(rows: Iterable[Mapping[str, Any]], bins: Sequence[tuple[int, int]]) -> list[YearRange]:
    """Records and mean abstract / title length in words per year range (``year``, ``title``,
    ``abstract`` of each row). Columns: each range, then ``other years`` (a known year outside
    every range, shown only when there is one), then ``unknown year`` (always)."""
    groups: dict[str, list[tuple[int, int]]] = {bin_label(s, e): [] for s, e in bins}
    groups[OTHER_YEARS], groups[UNKNOWN_YEAR] = [], []
    for row in rows:
        year = row["year"]
        label = UNKNOWN_YEAR if year is None else OTHER_YEARS
        for start, end in bins:
            if year is not None and start <= year <= end:
                label = bin_label(start, end)
                break
        groups[label].append((len((row["abstract"] or "").split()), len((row["title"] or "").split())))
    table = []
    for label, lengths in groups.items():
        if label == OTHER_YEARS and not lengths:
            continue
        n = len(lengths)
        table.append(
            YearRange(
                label,
                n,
                sum(a for a, _t in lengths) / n if n else None,
                sum(t for _a, t in lengths) / n if n else None,
            )
        )
    return table
