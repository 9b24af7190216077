"""What the Gopher quality and repetition rules share: the memoised tokens, the plan, the failure.

Each rule is a :class:`Bound` (its code, threshold and direction); a check yields
``(bound, measured value)`` pairs in rule order and :func:`first_breach` turns the first
one past its bound into a :class:`RuleFailure`. docs/decisions/gopher-on-passages.md says
what the rules measure and why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

from tasks.common.text.spacy_tokenizer import chunk_tokens

__all__ = [
    "Bound",
    "Chunk",
    "Plan",
    "RuleFailure",
    "chunk_entries",
    "clear_token_cache",
    "first_breach",
    "tokenize",
]


@dataclass(frozen=True)
class RuleFailure:
    """The first rule a text failed: its code (see ``gopher.RULES``), the measured value and the bound."""

    rule: str
    value: float
    threshold: float


@dataclass(frozen=True, slots=True)
class Bound:
    """A rule that is on: a text fails when its measure is above ``limit`` (below, for a ``floor``)."""

    rule: str
    limit: float
    floor: bool = False


Check = tuple[Bound | None, float]  # a rule (None: switched off) and what the text measures for it


def first_breach(checks: Iterable[Check]) -> RuleFailure | None:
    """The first check whose value is past its bound (later checks are not evaluated)."""
    for bound, value in checks:
        if bound is not None and (value < bound.limit if bound.floor else value > bound.limit):
            return RuleFailure(bound.rule, float(value), float(bound.limit))
    return None


@dataclass(frozen=True, slots=True)
class Plan:
    """``GopherRules`` unpacked for the hot loop."""

    bounds: dict[str, Bound]  # rule code → bound, for the quality and paragraph/line rules that are on
    top: dict[int, Bound]  # n → bound of the top n-gram rule, in increasing n
    dup: dict[int, Bound]  # n → bound of the repeated n-gram rule, in increasing n
    stop_words: frozenset[str]
    stop_count: bool  # count occurrences (else distinct stop words)
    stop_lower: bool  # match case-insensitively
    stop_by_chunk: bool  # a chunk equal to a stop word is always exactly that one token
    ratio_words: bool  # per-word ratios (else per token)
    top_min_count: int
    lines: bool  # some line rule of the quality block is on
    paragraphs: bool  # some paragraph or line repetition rule is on
    max_n: int  # the largest n of an n-gram rule that is on (0: none)


# One chunk's tokens and counts, memoised:
# (tokens, lower-cased tokens, n_tokens, n_words, characters in words, n_alphabetic_words).
Chunk = tuple[tuple[str, ...], tuple[str, ...], int, int, int, int]


def _analyse(chunk: str) -> Chunk:
    toks = chunk_tokens(chunk)
    n_words = wchars = n_alpha = 0
    for t in toks:
        if any(map(str.isalnum, t)):  # a word: holds a letter or a digit
            n_words += 1
            wchars += len(t)
            if any(map(str.isalpha, t)):  # an alphabetic word
                n_alpha += 1
    lower = tuple(t.lower() for t in toks)
    return toks, (toks if lower == toks else lower), len(toks), n_words, wchars, n_alpha


class _ChunkCache(dict[str, Chunk]):
    """Memo of chunk → tokens and counts; cleared when it grows past ``limit`` entries."""

    limit = 100_000  # a few tens of MB at most

    def __missing__(self, chunk: str) -> Chunk:
        if len(self) >= self.limit:
            self.clear()
        v = self[chunk] = _analyse(chunk)
        return v


_CACHE = _ChunkCache()
TOKS = itemgetter(0)
LOWER = itemgetter(1)
NTOK = itemgetter(2)
NWORD = itemgetter(3)
WCHARS = itemgetter(4)
NALPHA = itemgetter(5)


def chunk_entries(chunks: list[str]) -> list[Chunk]:
    """The memoised tokens and counts of each whitespace chunk."""
    return list(map(_CACHE.__getitem__, chunks))


def clear_token_cache() -> None:
    """Forget the memoised chunk tokenisations (benchmarks use it to start cold)."""
    _CACHE.clear()


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` (spaCy's blank English tokenizer, re-implemented in spacy_tokenizer.py)."""
    return list(chain.from_iterable(map(TOKS, map(_CACHE.__getitem__, text.split()))))
