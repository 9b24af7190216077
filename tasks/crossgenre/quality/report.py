"""``irforge quality crossgenre``: the page stages scored on a labelled folder of real pages.

Per page: headline, language, the reported study's identifier, the outcome (kept, or the
stage and reason that dropped it) and whether it is the labelled one; each wrong page with
the stage, rule and detail that decided it. Totals:

- **headline**: the extracted headline equals the labelled one (NFKC, case, quotes, spaces);
- **language**: the primary language subtag equals the labelled one;
- **study identifier**: of the pages labelled ``claim``, those whose reported study's DOI /
  PMID / URL is among the identifiers the stages found (the kept work's, when kept);
- **single-study decision**: of the pages that reach single_study, those it keeps when
  labelled ``claim`` and drops otherwise;
- **non-report pages dropped**: of the pages labelled as not reporting one study, those
  some stage drops;
- **claims kept**: of the pages labelled ``claim``, those kept end to end.

The floors (issue 27) decide the exit status.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from tasks.crossgenre.quality.measure import PageResult


@dataclass(frozen=True)
class Floors:
    """The lowest acceptable figures, in percent (issue 27)."""

    headline: float = 97.0
    identifier: float = 95.0
    decision: float = 95.0
    non_report_dropped: float = 90.0


@dataclass(frozen=True)
class Figure:
    name: str
    right: int
    total: int

    @property
    def pct(self) -> float:
        return 100.0 * self.right / self.total if self.total else 100.0

    def text(self) -> str:
        return f"{self.name} {self.right}/{self.total} ({self.pct:.1f} %)"


def figures(results: list[PageResult]) -> dict[str, Figure]:
    claims = [r for r in results if r.gold.claim]
    decided = [r for r in results if r.stage in ("", "single_study")]
    negatives = [r for r in results if not r.gold.claim]
    return {
        "headline": Figure("headline", sum(r.headline_right for r in results), len(results)),
        "language": Figure("language", sum(r.language_right for r in results), len(results)),
        "identifier": Figure("study identifier", sum(r.identifier_right for r in claims), len(claims)),
        "decision": Figure(
            "single-study decision", sum(r.kept == r.gold.claim for r in decided), len(decided)
        ),
        "non_report_dropped": Figure(
            "non-report pages dropped", sum(not r.kept for r in negatives), len(negatives)
        ),
        "claims_kept": Figure("claims kept", sum(r.kept and r.identifier_right for r in claims), len(claims)),
    }


def failed_floors(results: list[PageResult], floors: Floors) -> list[str]:
    found = figures(results)
    return [
        f"{found[name].text()} < {floor:.1f} %"
        for name, floor in vars(floors).items()
        if found[name].pct < floor
    ]


def right(result: PageResult) -> bool:
    """The page ended where its label says (kept with the reported study, or dropped)."""
    return result.kept and result.identifier_right if result.gold.claim else not result.kept


def outcome(result: PageResult) -> str:
    return "kept" if result.kept else f"{result.stage}: {result.reason}"


def decided_by(results: list[PageResult]) -> Counter[str]:
    """How many pages each stage/rule decided (kept or dropped)."""
    return Counter(f"{r.stage or 'single_study'}:{r.rule or r.reason}" for r in results)


def print_report(results: list[PageResult], console: Console, *, detail_chars: int = 160) -> None:
    table = Table(title="Labelled pages", show_lines=False)
    for name in ("page", "lang", "headline", "label", "outcome", "rule", "right"):
        table.add_column(name, overflow="fold")
    for r in results:
        table.add_row(
            r.gold.file.removesuffix(".gz").removesuffix(".html")[:40],
            f"{r.language or '-'}{'' if r.language_right else ' ✗'}",
            "✓" if r.headline_right else f"✗ {r.headline[:50]!r}",
            r.gold.expected.removeprefix("excluded:"),
            outcome(r),
            r.rule or "-",
            "✓" if right(r) else "✗",
        )
    console.print(table)
    wrong = [r for r in results if not right(r) or not r.headline_right]
    for r in wrong:
        console.print(
            f"[bold]{r.gold.file}[/bold] labelled {r.gold.expected} ({r.gold.kind}); "
            f"{outcome(r)}, rule {r.rule or '-'}: {r.detail[:detail_chars]}",
            highlight=False,
        )
        if not r.headline_right:
            console.print(f"    headline {r.headline!r}, labelled {r.gold.headline!r}", highlight=False)
    counts = decided_by(results)
    console.print("decided by: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), highlight=False)


def summary_line(results: list[PageResult]) -> str:
    found = figures(results)
    return f"{len(results)} pages: " + "; ".join(f.text() for f in found.values())
