"""Run parse → segment → filter on one labelled document and score it against its labels.

Words are ``\\w+`` tokens (NFKC, case-folded). The labelled blocks' words are aligned to the
words of the parsed article text with an LCS alignment (rapidfuzz ``Indel.opcodes``), so
every gold word is found or not in the article text, and every article word knows the
block it came from. A passage's word that aligns with nothing (``[formula]``, a repaired
character) takes the label of the nearest aligned word of the same passage.

A gold prose word is lost at the first stage that loses it: ``parse`` (not in the article
text; the rule is the reader's reason for the dropped text that holds most of the block,
see :class:`tasks.common.text.document.Dropped`), ``segment`` (in no passage) or
``filter`` (its passage failed a Gopher rule, named).
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from rapidfuzz.distance import Indel

from tasks.common.text.document import ArticleMeta, Dropped, InputRejected, ParsedArticle
from tasks.common.text.gopher import all_failures, check_many
from tasks.common.text.gopher_base import RuleFailure
from tasks.cure.quality.gold import GoldDoc
from tasks.cure.stages.filter import FilterConfig
from tasks.cure.stages.parse import BLOCK_SEPARATOR, ParseConfig, blocks_to_rows, read_article
from tasks.cure.stages.segment import SegmentConfig, segment_article

_WORD = re.compile(r"\w+")
#: A prose block is "lost" below this share of its words kept, "partly lost" below PARTLY.
LOST, PARTLY = 0.5, 0.9
#: Labelled chrome blocks of at least this many words are run through the filter rules
#: on their own: what the rules would catch if parse let them through.
PROBE_WORDS = 10


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


@dataclass(frozen=True)
class LostBlock:
    """A labelled prose block that lost words: where, how many, and which stage and rule."""

    block: int
    words: int
    lost: int
    stage: str
    rule: str
    text: str


@dataclass
class DocScore:
    """One document's figures (counts; the ratios are computed where they are printed)."""

    name: str
    fmt: str
    publisher: str
    prose_words: int = 0
    prose_words_kept: int = 0
    prose_blocks: int = 0
    prose_blocks_kept: int = 0
    passages: int = 0
    prose_passages: int = 0
    passage_words: int = 0
    passage_prose_words: int = 0
    lost: list[LostBlock] = field(default_factory=list)
    # The filter on its own: segmented passages by label, and what it dropped of each.
    filter_in: Counter[str] = field(default_factory=Counter)
    filter_dropped: Counter[str] = field(default_factory=Counter)
    prose_words_filtered: int = 0
    # Every rule each segmented passage fails (not only the first), with its label; and
    # every rule each labelled chrome block of PROBE_WORDS+ words would fail as a passage.
    rule_hits: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    chrome_probe: list[tuple[str, ...]] = field(default_factory=list)


@dataclass(frozen=True)
class Stages:
    parse: ParseConfig
    segment: SegmentConfig
    filter: FilterConfig


def score(doc: GoldDoc, stages: Stages) -> DocScore:
    """Run the three stages on ``doc`` in memory and score what they kept against its labels."""
    try:
        parsed = read_article(doc.data, doc.file, stages.parse)
    except InputRejected as err:  # the stage excludes the whole article: every block is lost
        parsed = ParsedArticle(ArticleMeta(), [], [Dropped(f"article excluded: {err.reason}", "")])
    rows = blocks_to_rows("doc", parsed, stages.parse.fix_text)
    article = BLOCK_SEPARATOR.join(r["text"] for r in rows)
    pieces = segment_article([r for r in rows if r["kind"] in stages.segment.kinds], stages.segment)
    failures = check_many([p.text for p in pieces], stages.filter)

    gold_words, gold_block = _gold_words(doc)
    art = [(m.start(), m.group()) for m in _WORD.finditer(unicodedata.normalize("NFKC", article).casefold())]
    g2a, a2g = _align_prose_first(
        gold_words, [doc.labels[b] == "prose" for b in gold_block], [w for _, w in art]
    )
    starts = [p.char_start for p in pieces]
    piece_of = [_piece_at(pieces, starts, offset) for offset, _ in art]
    label_of = [doc.labels[gold_block[g]] if g >= 0 else "" for g in a2g]

    result = DocScore(doc.name, doc.fmt, doc.publisher)
    _recall(result, doc, gold_block, g2a, piece_of, [f.rule if f else "" for f in failures], parsed.dropped)
    _precision(result, pieces, failures, piece_of, label_of, stages.filter)
    result.chrome_probe = [
        tuple(f.rule for f in all_failures(b.text, stages.filter))
        for b in doc.blocks
        if doc.labels[b.index] == "chrome" and len(b.text.split()) >= PROBE_WORDS
    ]
    return result


def _gold_words(doc: GoldDoc) -> tuple[list[str], list[int]]:
    tokens: list[str] = []
    owner: list[int] = []
    for block in doc.blocks:
        found = words(block.text)
        tokens += found
        owner += [block.index] * len(found)
    return tokens, owner


def _align_prose_first(gold: list[str], prose: list[bool], out: list[str]) -> tuple[list[int], list[int]]:
    """Align the output to the prose words first, then what is left to the chrome words.

    One alignment over all words may match an abstract's opening words to the title (a
    chrome block that says the same) just as well as to the abstract; a word the output
    holds once is the prose's when it can be.
    """
    g2o, o2g = [-1] * len(gold), [-1] * len(out)
    rest = list(range(len(out)))
    for want in (True, False):
        sub = [g for g in range(len(gold)) if prose[g] == want]
        s2r, _ = _align([gold[g] for g in sub], [out[o] for o in rest])
        for k, r in enumerate(s2r):
            if r >= 0:
                g2o[sub[k]], o2g[rest[r]] = rest[r], sub[k]
        rest = [o for o in rest if o2g[o] < 0]
    return g2o, o2g


def _align(a: list[str], b: list[str]) -> tuple[list[int], list[int]]:
    """Index maps a→b and b→a of an LCS alignment (-1: unaligned)."""
    a2b, b2a = [-1] * len(a), [-1] * len(b)
    for op in Indel.opcodes(a, b):
        if op.tag == "equal":
            for k in range(op.src_end - op.src_start):
                a2b[op.src_start + k] = op.dest_start + k
                b2a[op.dest_start + k] = op.src_start + k
    return a2b, b2a


def _piece_at(pieces: list[Any], starts: list[int], offset: int) -> int:
    i = bisect_right(starts, offset) - 1
    return i if i >= 0 and offset < pieces[i].char_end else -1


def _recall(
    result: DocScore,
    doc: GoldDoc,
    gold_block: list[int],
    g2a: list[int],
    piece_of: list[int],
    rule_of_piece: list[str],
    dropped: list[Dropped],
) -> None:
    per_block: dict[int, list[str]] = {}  # block → stage:rule of each of its words ("" = kept)
    for g, block in enumerate(gold_block):
        if doc.labels[block] != "prose":
            continue
        a = g2a[g]
        if a < 0:
            status = "parse"
        elif piece_of[a] < 0:
            status = "segment:not_in_a_passage"
        else:
            rule = rule_of_piece[piece_of[a]]
            status = f"filter:{rule}" if rule else ""
        per_block.setdefault(block, []).append(status)
    for block, statuses in per_block.items():
        kept = statuses.count("")
        result.prose_words += len(statuses)
        result.prose_words_kept += kept
        result.prose_blocks += 1
        result.prose_blocks_kept += kept >= LOST * len(statuses)
        result.prose_words_filtered += sum(s.startswith("filter:") for s in statuses)
        if kept < PARTLY * len(statuses):
            cause = Counter(s for s in statuses if s).most_common(1)[0][0]
            stage, _, rule = cause.partition(":")
            if stage == "parse":
                rule = _parse_reason(doc.blocks[block].text, dropped)
            text = doc.blocks[block].text
            result.lost.append(LostBlock(block, len(statuses), len(statuses) - kept, stage, rule, text))


@lru_cache(maxsize=4)
def _word_counts(dropped: tuple[Dropped, ...]) -> list[Counter[str]]:
    """Words of each dropped text, counted once per document (not once per lost block)."""
    return [Counter(words(d.text)) for d in dropped]


def _parse_reason(text: str, dropped: list[Dropped]) -> str:
    """The reason of the dropped text that holds most of ``text``'s words."""
    want = Counter(words(text))
    excluded = next((d.reason for d in dropped if d.reason.startswith("article excluded")), None)
    if excluded:
        return excluded
    best, reason = 0, "not read"
    for piece, counts in zip(dropped, _word_counts(tuple(dropped)), strict=True):
        overlap = sum((want & counts).values())
        if overlap > best:
            best, reason = overlap, piece.reason
    return reason if best >= 0.5 * sum(want.values()) else f"{reason}?" if best else reason


def _precision(
    result: DocScore,
    pieces: list[Any],
    failures: list[RuleFailure | None],
    piece_of: list[int],
    label_of: list[str],
    rules: FilterConfig,
) -> None:
    labels: dict[int, list[str]] = {}
    for a, piece in enumerate(piece_of):
        if piece >= 0:
            labels.setdefault(piece, []).append(label_of[a])
    for index, piece in enumerate(pieces):
        filled = _fill(labels.get(index, []))
        prose = filled.count("prose")
        label = "prose" if prose * 2 > len(filled) else "chrome"
        result.filter_in[label] += 1
        result.rule_hits.append((label, tuple(f.rule for f in all_failures(piece.text, rules))))
        if failures[index] is not None:
            result.filter_dropped[label] += 1
            continue
        result.passages += 1
        result.prose_passages += label == "prose"
        result.passage_words += len(filled)
        result.passage_prose_words += prose


def _fill(labels: list[str]) -> list[str]:
    """Unaligned words ("") take the label of the nearest aligned word before, else after."""
    out = list(labels)
    last = ""
    for i, label in enumerate(out):
        if label:
            last = label
        elif last:
            out[i] = last
    nxt = ""
    for i in range(len(out) - 1, -1, -1):
        if labels[i]:
            nxt = labels[i]
        elif not out[i]:
            out[i] = nxt or "chrome"
    return out
