"""``irforge quality cure``: score parse → segment → filter on the labelled passage set.

Prints, per document and per format: prose recall (word- and paragraph-weighted), passage
precision (share of kept passages that are prose; and word-weighted), every prose block
the stages lost with the stage and rule; then each Gopher rule on its own (how many prose
and chrome passages it would drop) and what the filter dropped of each. The last line is
the summary, and the floors (issue 18's targets) decide the exit status.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lxml import etree
from rich.console import Console
from rich.table import Table

from irforge.errors import IrforgeError
from tasks.common.text.document import InputRejected
from tasks.common.text.gopher import RULES
from tasks.common.text.sniff import sniff
from tasks.cure.quality.blocks import html_blocks, jats_blocks
from tasks.cure.quality.gold import load_gold
from tasks.cure.quality.measure import PROBE_WORDS, DocScore, Stages, score


@dataclass(frozen=True)
class Floors:
    """The lowest acceptable figures, in percent (the targets of docs/passage-quality.md)."""

    jats_recall: float = 99.5
    jats_precision: float = 99.5
    html_recall: float = 98.0
    html_precision: float = 98.0
    filter_max_prose_dropped: float = 1.0
    filter_min_chrome_dropped: float = 90.0


@dataclass(frozen=True)
class Totals:
    recall: float
    paragraph_recall: float
    precision: float
    word_precision: float


def block_listing(path: Path) -> list[str]:
    """The source blocks of one article file, as a labeller reads them (tab-separated lines)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise IrforgeError(f"{path}: cannot read: {err.strerror}") from None
    try:
        sniffed = sniff(path.name, data)
    except InputRejected as err:
        raise IrforgeError(f"{path}: not an article file: {err.detail}") from None
    try:
        found = jats_blocks(data) if sniffed.format == "jats" else html_blocks(data, sniffed.encoding)
    except (etree.LxmlError, ValueError) as err:
        raise IrforgeError(f"{path}: not readable as {sniffed.format}: {err}") from None
    head = f"# {path.name}: {len(found)} blocks (index, words, where, text)"
    return [head, *(f"{b.index}\t{len(b.text.split())}\t{b.where}\t{b.text}" for b in found)]


def score_all(gold: Path, stages: Stages, only: str | None = None) -> list[DocScore]:
    docs = [d for d in load_gold(gold) if only is None or only in d.name]
    return [score(doc, stages) for doc in docs]


def totals(scores: list[DocScore]) -> Totals:
    def pct(num: int, den: int) -> float:
        return 100.0 * num / den if den else 100.0

    return Totals(
        recall=pct(sum(s.prose_words_kept for s in scores), sum(s.prose_words for s in scores)),
        paragraph_recall=pct(sum(s.prose_blocks_kept for s in scores), sum(s.prose_blocks for s in scores)),
        precision=pct(sum(s.prose_passages for s in scores), sum(s.passages for s in scores)),
        word_precision=pct(sum(s.passage_prose_words for s in scores), sum(s.passage_words for s in scores)),
    )


def filter_figures(scores: list[DocScore]) -> tuple[float, float]:
    """(% of prose words the filter dropped, % of chrome passages reaching it that it dropped)."""
    prose = sum(s.prose_words for s in scores)
    chrome_in = sum(s.filter_in["chrome"] for s in scores)
    chrome_out = sum(s.filter_dropped["chrome"] for s in scores)
    return (
        100.0 * sum(s.prose_words_filtered for s in scores) / prose if prose else 0.0,
        100.0 * chrome_out / chrome_in if chrome_in else 100.0,
    )


def summary_line(scores: list[DocScore]) -> str:
    parts = []
    for fmt in ("jats", "html"):
        of = [s for s in scores if s.fmt == fmt]
        if of:
            t = totals(of)
            parts.append(f"{fmt.upper()} recall {t.recall:.1f}% precision {t.precision:.1f}%")
    return " | ".join(parts)


def failed_floors(scores: list[DocScore], floors: Floors) -> list[str]:
    out = []
    for fmt in ("jats", "html"):
        of = [s for s in scores if s.fmt == fmt]
        if not of:
            continue
        t = totals(of)
        for what, value in (("recall", t.recall), ("precision", t.precision)):
            floor = getattr(floors, f"{fmt}_{what}")
            if value < floor:
                out.append(f"{fmt.upper()} {what} {value:.2f}% < {floor}%")
    prose_dropped, chrome_dropped = filter_figures(scores)
    if prose_dropped >= floors.filter_max_prose_dropped:
        out.append(f"filter drops {prose_dropped:.2f}% of prose >= {floors.filter_max_prose_dropped}%")
    if chrome_dropped < floors.filter_min_chrome_dropped:
        out.append(f"filter drops {chrome_dropped:.1f}% of chrome < {floors.filter_min_chrome_dropped}%")
    return out


def print_report(scores: list[DocScore], console: Console, *, lost_text: int = 90) -> None:
    console.print(_documents(scores))
    lost = [(s.name, b) for s in scores for b in s.lost]
    if lost:
        table = Table(title=f"Prose blocks lost ({len(lost)})", title_justify="left")
        for column in ("document", "block", "words", "lost", "stage", "rule", "text"):
            table.add_column(column, justify="right" if column in ("block", "words", "lost") else "left")
        for name, b in lost:
            text = b.text if len(b.text) <= lost_text else b.text[: lost_text - 1] + "…"
            table.add_row(name, str(b.block), str(b.words), str(b.lost), b.stage, b.rule, text)
        console.print(table)
    console.print(_rules(scores))
    prose_dropped, chrome_dropped = filter_figures(scores)
    console.print(
        f"filter: drops {prose_dropped:.2f}% of labelled prose words and "
        f"{chrome_dropped:.1f}% of the chrome passages that parse and segment let through",
        highlight=False,
    )


def _documents(scores: list[DocScore]) -> Table:
    table = Table(title="Passage quality per document", title_justify="left")
    for column in ("document", "publisher", "format", "prose words", "recall", "¶ recall", "passages",
                   "precision", "word prec.", "lost"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("document", "publisher", "format") else "right")
    for s in scores:
        t = totals([s])
        table.add_row(
            s.name, s.publisher, s.fmt, str(s.prose_words), f"{t.recall:.1f}%", f"{t.paragraph_recall:.1f}%",
            str(s.passages), f"{t.precision:.1f}%", f"{t.word_precision:.1f}%", str(len(s.lost)),
        )  # fmt: skip
    for fmt in ("jats", "html"):
        of = [s for s in scores if s.fmt == fmt]
        if of:
            t = totals(of)
            publishers = len({s.publisher for s in of})
            table.add_row(
                f"[b]all {fmt.upper()}[/b] ({len(of)})", f"{publishers} publishers", fmt,
                str(sum(s.prose_words for s in of)), f"{t.recall:.2f}%", f"{t.paragraph_recall:.2f}%",
                str(sum(s.passages for s in of)), f"{t.precision:.2f}%", f"{t.word_precision:.2f}%",
                str(sum(len(s.lost) for s in of)),
            )  # fmt: skip
    return table


def _rules(scores: list[DocScore]) -> Table:
    """Each Gopher rule on its own over every segmented passage: what it would drop."""
    hits: dict[str, Counter[str]] = {rule: Counter() for rule in RULES}
    seen: Counter[str] = Counter()
    for s in scores:
        for label, failed in s.rule_hits:
            seen[label] += 1
            for rule in failed:
                hits[rule][label] += 1
        for failed in s.chrome_probe:
            seen["probe"] += 1
            for rule in failed:
                hits[rule]["probe"] += 1
    table = Table(
        title=(
            f"Each filter rule alone: on the {seen['prose']} prose and {seen['chrome']} chrome passages that reach "
            f"the filter, and on all {seen['probe']} labelled chrome blocks of {PROBE_WORDS}+ words"
        ),
        title_justify="left",
    )
    for column in ("rule", "prose dropped", "chrome dropped", "chrome blocks it would drop"):
        table.add_column(column, justify="left" if column == "rule" else "right")
    for rule, counter in hits.items():
        if counter:
            probe = f"{counter['probe']} ({100 * counter['probe'] / max(seen['probe'], 1):.0f}%)"
            table.add_row(rule, str(counter["prose"]), str(counter["chrome"]), probe)
    return table
