"""The Gopher repetition rules (arXiv 2112.11446, Table A1) on one passage, in rule order.

What each rule measures, and where it differs from datatrove: docs/decisions/gopher-on-passages.md.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from itertools import chain, compress, pairwise
from operator import itemgetter

from tasks.common.text.gopher_base import TOKS, Check, Chunk, Plan

_PARA_SPLIT = re.compile(r"\n{2,}").split
_LINE_SPLIT = re.compile(r"\n+").split
# (split, rule on the share of repeated parts, rule on the share of their characters)
_PARTS = (
    (_PARA_SPLIT, "dup_para_frac", "dup_para_char_frac"),
    (_LINE_SPLIT, "dup_line_frac", "dup_line_char_frac"),
)
#: The paragraph and line rules, in the order :func:`repetition_checks` checks them
#: (Table A1's); the n-gram rules follow, by increasing n.
PARAGRAPH_RULES = tuple(rule for _, *rules in _PARTS for rule in rules)
_COUNT = itemgetter(1)
_TWO = 2

Gram = tuple[str, ...]


def repetition_checks(text: str, entries: list[Chunk], p: Plan) -> Iterator[Check]:
    """(rule, value) of each repetition rule, in check order; lazy: stop at the first failure.

    A fraction of characters is over ``len(text)``; an empty text passes.
    """
    n_chars = len(text)
    if not n_chars:
        return
    if p.paragraphs and "\n" in text:  # without a newline nothing repeats: every measure is 0
        stripped = text.strip()
        for split, frac_rule, chars_rule in _PARTS:
            parts = split(stripped)
            n_dup, dup_chars = _duplicates(parts)
            yield p.bounds.get(frac_rule), n_dup / len(parts)
            yield p.bounds.get(chars_rule), dup_chars / n_chars
    if p.max_n:
        yield from _ngram_checks(list(chain.from_iterable(map(TOKS, entries))), p, n_chars)


def _duplicates(parts: list[str]) -> tuple[int, int]:
    """(number of elements equal to an earlier one, their total characters)."""
    seen: set[str] = set()
    n = chars = 0
    for part in parts:
        if part in seen:
            n += 1
            chars += len(part)
        else:
            seen.add(part)
    return n, chars


def _ngram_checks(toks: list[str], p: Plan, n_chars: int) -> Iterator[Check]:
    """The top n-gram and repeated n-gram rules, n = 2 … p.max_n, in increasing n.

    Only n-grams that occur at least twice can score (beyond datatrove's one-off top
    n-gram, handled apart), and an (n+1)-gram can only repeat at a position where the
    n-grams at that position and the next both repeat. So after one pass over all
    bigrams, each larger n looks only at the few positions still in play (``cand``, in
    text order, with their n-grams in ``grams``).
    """
    n_toks = len(toks)
    if n_toks < 2 or not p.max_n:
        return
    cand, grams, counts = _repeated_bigrams(toks)
    n = 2
    while True:
        top = p.top.get(n)
        if top is not None and n_toks >= n:
            if counts:  # the first n-gram, in text order, with the highest count
                gram, count = max(counts.items(), key=_COUNT)
            else:  # nothing repeats: every n-gram occurs once, the first is "the most frequent"
                gram, count = tuple(toks[:n]), 1
            if count >= p.top_min_count:
                yield top, (sum(map(len, gram)) + n - 1) * count / n_chars
        dup = p.dup.get(n)
        if dup is not None and cand:
            yield dup, _repeated_chars(cand, grams, n) / n_chars
        if n >= p.max_n:
            return
        if not cand and p.top_min_count > 1:
            return  # nothing repeats any more: the remaining rules all measure 0
        n += 1
        if cand:  # positions where the n-gram may repeat, then keep those where it does
            cand, grams, counts = _repeated_extensions(toks, cand, n)


def _repeated_bigrams(toks: list[str]) -> tuple[list[int], list[Gram], dict[Gram, int]]:
    """(positions of bigrams that occur at least twice, those bigrams, counts of all bigrams);
    all empty when no bigram repeats."""
    pairs: list[Gram] = list(pairwise(toks))
    all_counts: Counter[Gram] = Counter(pairs)
    if len(all_counts) == len(pairs):  # no bigram repeats, so no longer n-gram does either
        return [], [], {}
    mask = list(map(_TWO.__le__, map(all_counts.__getitem__, pairs)))  # occurs at least twice
    return list(compress(range(len(pairs)), mask)), list(compress(pairs, mask)), all_counts


def _repeated_extensions(
    toks: list[str], cand: list[int], n: int
) -> tuple[list[int], list[Gram], dict[Gram, int]]:
    """From the positions of repeated (n-1)-grams: those of repeated n-grams, the n-grams, their counts."""
    in_play = set(cand)
    nxt = [i for i in cand if i + 1 in in_play]
    grams = [tuple(toks[i : i + n]) for i in nxt]
    counts = {g: c for g, c in Counter(grams).items() if c > 1}
    return (
        [i for i, g in zip(nxt, grams, strict=True) if g in counts],
        [g for g in grams if g in counts],
        counts,
    )


def _repeated_chars(cand: list[int], grams: list[Gram], n: int) -> int:
    """Characters of the n-grams that repeat an earlier one, scanning left to right.

    A repeat counts its characters and jumps n tokens. Positions outside ``cand`` hold
    unique n-grams: they can neither repeat nor be repeated, so skipping them changes nothing.
    """
    seen: set[Gram] = set()
    chars = free = 0
    for i, g in zip(cand, grams, strict=True):
        if i < free:
            continue
        if g in seen:
            chars += sum(map(len, g))
            free = i + n
        else:
            seen.add(g)
    return chars
