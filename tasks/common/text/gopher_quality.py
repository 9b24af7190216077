"""The Gopher quality rules (arXiv 2112.11446, App. A.1.1) on one passage, in rule order.

What each rule measures, and where it differs from datatrove: docs/decisions/gopher-on-passages.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain

from tasks.common.text.gopher_base import LOWER, NALPHA, NTOK, NWORD, TOKS, WCHARS, Check, Chunk, Plan

#: The quality rules, in the order :func:`quality_checks` checks them (datatrove's).
QUALITY_RULES = (
    "min_words",
    "max_words",
    "min_mean_word_length",
    "max_mean_word_length",
    "max_hash_ratio",
    "max_ellipsis_ratio",
    "max_bullet_line_ratio",
    "max_ellipsis_line_ratio",
    "min_alpha_word_ratio",
    "stop_words",
)
_BULLETS = ("•", "-")  # what a bullet line starts with (datatrove's choice; the paper leaves it open)
_ELLIPSES = ("...", "…")


def quality_checks(text: str, chunks: list[str], entries: list[Chunk], p: Plan) -> Iterator[Check]:
    """(rule, value) of each quality rule, in check order; a measure that is undefined
    (no words, no lines) is not yielded, so its rules pass. Lazy: stop at the first failure."""
    b = p.bounds.get
    n_words = sum(map(NWORD, entries))
    yield b("min_words"), n_words
    yield b("max_words"), n_words
    if n_words:
        mean = sum(map(WCHARS, entries)) / n_words
        yield b("min_mean_word_length"), mean
        yield b("max_mean_word_length"), mean
    denom = n_words if p.ratio_words else sum(map(NTOK, entries))
    if denom:
        yield b("max_hash_ratio"), text.count("#") / denom
        yield b("max_ellipsis_ratio"), (text.count("...") + text.count("…")) / denom
    if p.lines:
        lines = text.splitlines()
        if lines:
            yield (
                b("max_bullet_line_ratio"),
                sum(ln.lstrip().startswith(_BULLETS) for ln in lines) / len(lines),
            )
            yield (
                b("max_ellipsis_line_ratio"),
                sum(ln.rstrip().endswith(_ELLIPSES) for ln in lines) / len(lines),
            )
    if denom:
        yield b("min_alpha_word_ratio"), sum(map(NALPHA, entries)) / denom
    stop = b("stop_words")
    if stop is not None:
        yield stop, _stop_words(chunks, entries, p, stop.limit)


def _stop_words(chunks: list[str], entries: list[Chunk], p: Plan, enough: float) -> int:
    """Stop words in the passage, or a lower bound of it that already reaches ``enough``."""
    # A stop word usually stands alone between spaces; such a chunk is exactly one
    # token, so counting chunks gives a lower bound that settles most passages.
    if p.stop_by_chunk:
        n_stop = _count(map(str.lower, chunks) if p.stop_lower else chunks, p)
        if n_stop >= enough:
            return n_stop
    return _count(chain.from_iterable(map(LOWER if p.stop_lower else TOKS, entries)), p)


def _count(words: Iterable[str], p: Plan) -> int:
    if p.stop_count:
        return sum(map(p.stop_words.__contains__, words))
    return len(p.stop_words.intersection(words))
