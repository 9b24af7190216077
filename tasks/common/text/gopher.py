"""Gopher quality and repetition heuristics on one passage (Rae et al. 2021, App. A, Table A1).

CURE applies "a selection" of the Gopher heuristics to passages of ~77 words. This module
applies all of them, each switchable (``None`` turns a rule off) and thresholded by
:class:`GopherRules`, and says which rule dropped a passage and what it measured.

Rules, in check order (:data:`RULES`; :func:`first_failure` reports the first that fails)
------------------------------------------------------------------------------------------
Quality (App. A.1.1), on the word tokens of the passage:

``min_words`` / ``max_words``
    number of words (tokens holding a letter or a digit) below / above the bound.
``min_mean_word_length`` / ``max_mean_word_length``
    mean length of those words, in characters, outside [min, max].
``max_hash_ratio`` / ``max_ellipsis_ratio``
    occurrences of ``#`` / of ``...`` or ``…`` in the raw text, per word (see
    ``ratio_basis``), above the bound.
``max_bullet_line_ratio``
    fraction of lines (``str.splitlines``) whose first non-blank character is a bullet
    (``•`` or ``-``, the two datatrove recognises) above the bound.
``max_ellipsis_line_ratio``
    fraction of lines whose last non-blank characters are ``...`` or ``…`` above the bound.
``min_alpha_word_ratio``
    fraction of words holding at least one alphabetic character below the bound.
``stop_words``
    fewer than ``min_stop_words`` of the 8 Gopher stop words (distinct words, or
    occurrences, see ``stop_word_mode``).

Repetition (App. A.1.1 and Table A1); a fraction of characters is over ``len(text)``:

``dup_para_frac`` / ``dup_para_char_frac``
    paragraphs (split on blank lines) that repeat an earlier paragraph: their share of
    paragraphs / their characters' share of the text.
``dup_line_frac`` / ``dup_line_char_frac``
    the same for lines (split on newlines).
``top_{n}gram_char_frac`` (n = 2, 3, 4)
    characters (tokens joined by single spaces) of the most frequent n-gram times its
    count. The most frequent n-gram is the first one, in text order, with the highest
    count; it counts only if it occurs at least ``top_ngram_min_count`` times.
``dup_{n}gram_char_frac`` (n = 5 … 10)
    characters (token characters, no spaces) of the n-grams that repeat an earlier
    n-gram, scanning left to right and jumping past each repeat so that overlapping
    repeats are not counted twice.

The quality rules come first, then the repetition rules in Table A1's order; within each
block the order is datatrove's, so the first failing rule names the same reason datatrove
gives (:data:`DATATROVE_REASONS`). The costly n-gram rules come last, so most passages
that fail are decided by cheap counts.

Tokenisation
------------
datatrove tokenises with spaCy's blank English tokenizer. We do not load spaCy:
:mod:`tasks.common.text.spacy_tokenizer` re-implements its algorithm in plain Python (spaCy
stays the test oracle). Each chunk's tokens and counts are memoised here, so a batch
costs about one dictionary lookup per word.

What the counts are made of:

* **token**: one unit of the tokenisation above, punctuation included.
* **word**: a token holding at least one letter or digit (``str.isalnum``); a
  **symbol-only token** is any other token (``(``, ``,``, ``±``, ``•``, ``...``).
* **alphabetic word**: a token holding at least one ``str.isalpha`` character.
* **bullet line**: a line whose first non-blank character is ``•`` or ``-``.
* **line**: an element of ``str.splitlines()`` for the quality rules, of the stripped
  text split on runs of ``\\n`` for the repetition rules; **paragraph**: the stripped
  text split on two or more ``\\n``.

Deliberate differences from datatrove 0.10.1 (``GopherQualityFilter`` +
``GopherRepetitionFilter``)
---------------------------------------------------------------------------------------
Switchable ones; :meth:`GopherRules.datatrove_compatible` sets all three to datatrove's
choice:

1. ``ratio_basis="words"``: the hash, ellipsis and alphabetic ratios are per *word*, as
   the paper states ("symbol-to-word ratio", "80% of words in a document contain at
   least one alphabetic character"). datatrove divides by all tokens, punctuation
   included, so an ordinary scientific paragraph with brackets, commas and citations
   falls under 80% "alphabetic words": on the bundled samples datatrove drops about
   half of the running-text paragraphs for that alone.
2. ``top_ngram_min_count=2``: the top n-gram rules measure repetition only. datatrove
   also scores an n-gram that occurs once: in a text where nothing repeats, its first
   n-gram counts as "the most frequent", so a short passage that opens with long words
   (``"Internal consistency measured ..."``) is dropped, a hidden length floor of about
   25 words under the passage word floor.
3. ``stop_word_ignore_case=True``: ``The`` counts as ``the``; datatrove matches tokens
   case-sensitively.

Fixed ones:

4. Word = token with a letter or digit. datatrove's word is a token with a character
   outside its own punctuation list, which lacks e.g. ``•``, ``†``, ``‘``, ``±``, ``°``,
   ``−``, ``●`` and ``×``: such a lone symbol is a one-character word there.
5. Undefined measures pass: with no words the mean-length and per-word ratio rules do
   not apply (the word floor rejects empty text first); datatrove divides by zero or
   compares NaN when its word floor is off.
6. A threshold of 0 is a threshold; only ``None`` switches a rule off (datatrove skips
   falsy thresholds).
7. Repetition lines and paragraphs come from the stripped text, so a leading plus a
   trailing newline is not a "duplicated empty line" (datatrove drops ``"\\nabc\\n"``
   for ``dup_line_frac``).
8. Repeated n-grams (5-10) are compared as token tuples; datatrove joins the tokens
   without a separator, so ``("ab", "c")`` and ``("a", "bc")`` collide there.
9. Tokenizer gaps: spaCy's special-case matcher also matches across whitespace, where
   one match can block another (``"( :}"``); letter classes differ from spaCy's
   hand-made script ranges outside Latin, Greek and Cyrillic.

With the datatrove-compatible rules, keep/drop decisions agree with datatrove on every
one of the 51,350 benchmark passages (``bench/bench_filter.py``). With the defaults they
differ only through 1-3 (we keep more; we drop nothing that datatrove keeps there).

What the rules do not catch: a reference-list entry whose title holds two stop words
("... Noise in timing and precision of gene activities ...") passes with the defaults;
datatrove drops it through difference 1, together with half of the real paragraphs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, compress, pairwise
from operator import itemgetter
from typing import Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.common.text.spacy_tokenizer import SPECIALS, chunk_tokens

__all__ = [
    "DATATROVE_REASONS",
    "RULES",
    "STOP_WORDS",
    "GopherRules",
    "RuleFailure",
    "check_many",
    "clear_token_cache",
    "first_failure",
    "tokenize",
]

# --------------------------------------------------------------------------------------
# Rules and configuration
# --------------------------------------------------------------------------------------

#: The 8 stop words of Gopher (App. A.1.1): a passage needs at least two of them.
STOP_WORDS: Final[tuple[str, ...]] = ("the", "be", "to", "of", "and", "that", "have", "with")

#: n of the "top n-gram" rules and of the "duplicate n-gram" rules (Table A1).
TOP_NGRAM_SIZES: Final[tuple[int, ...]] = (2, 3, 4)
DUP_NGRAM_SIZES: Final[tuple[int, ...]] = (5, 6, 7, 8, 9, 10)

#: Every rule code, in the order :func:`first_failure` checks them.
RULES: Final[tuple[str, ...]] = (
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
    "dup_para_frac",
    "dup_para_char_frac",
    "dup_line_frac",
    "dup_line_char_frac",
    *(f"top_{n}gram_char_frac" for n in TOP_NGRAM_SIZES),
    *(f"dup_{n}gram_char_frac" for n in DUP_NGRAM_SIZES),
)

#: Our rule code → the reason datatrove's filters give for the same rule.
DATATROVE_REASONS: Final[dict[str, str]] = {
    "min_words": "gopher_short_doc",
    "max_words": "gopher_long_doc",
    "min_mean_word_length": "gopher_below_avg_threshold",
    "max_mean_word_length": "gopher_above_avg_threshold",
    "max_hash_ratio": "gopher_too_many_hashes",
    "max_ellipsis_ratio": "gopher_too_many_ellipsis",
    "max_bullet_line_ratio": "gopher_too_many_bullets",
    "max_ellipsis_line_ratio": "gopher_too_many_end_ellipsis",
    "min_alpha_word_ratio": "gopher_below_alpha_threshold",
    "stop_words": "gopher_enough_stop_words",
    "dup_para_frac": "dup_para_frac",
    "dup_para_char_frac": "dup_para_char_frac",
    "dup_line_frac": "dup_line_frac",
    "dup_line_char_frac": "dup_line_char_frac",
    **{f"top_{n}gram_char_frac": f"top_{n}_gram" for n in TOP_NGRAM_SIZES},
    **{f"dup_{n}gram_char_frac": f"duplicated_{n}_n_grams" for n in DUP_NGRAM_SIZES},
}


def _default_top_ngrams() -> dict[int, float | None]:
    return {2: 0.2, 3: 0.18, 4: 0.16}


def _default_dup_ngrams() -> dict[int, float | None]:
    return {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}


class GopherRules(BaseModel):
    """Thresholds of the Gopher heuristics; ``None`` switches a rule off.

    Defaults are the paper's, except the word floor (a passage floor, not the document
    floor) and three measurement choices documented in the module docstring.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- quality rules ----------------------------------------------------------------
    # Gopher's floor is 50 words per *document*. CURE filters passages (~77 words on
    # average, many short but complete paragraphs of 15-50 words), which a floor of 50
    # would drop wholesale; 10 words only removes fragments (headings, "Checkpoint",
    # a lone figure label).
    min_words: int | None = Field(
        10, ge=0, description="Drop if fewer words (tokens with a letter or digit) than this."
    )
    max_words: int | None = Field(100_000, ge=0, description="Drop if more words than this.")
    min_mean_word_length: float | None = Field(
        3, ge=0, description="Drop if the mean word length (characters) is below this."
    )
    max_mean_word_length: float | None = Field(
        10, ge=0, description="Drop if the mean word length (characters) is above this."
    )
    max_hash_ratio: float | None = Field(
        0.1, ge=0, description="Drop if occurrences of '#' per word (see ratio_basis) exceed this."
    )
    max_ellipsis_ratio: float | None = Field(
        0.1, ge=0, description="Drop if occurrences of '...' or '…' per word (see ratio_basis) exceed this."
    )
    max_bullet_line_ratio: float | None = Field(
        0.9, ge=0, description="Drop if the fraction of lines starting with '•' or '-' exceeds this."
    )
    max_ellipsis_line_ratio: float | None = Field(
        0.3, ge=0, description="Drop if the fraction of lines ending with '...' or '…' exceeds this."
    )
    min_alpha_word_ratio: float | None = Field(
        0.8, ge=0, description="Drop if the fraction of words with an alphabetic character is below this."
    )
    min_stop_words: int | None = Field(
        2, ge=0, description="Drop if fewer stop words than this are found (see stop_word_mode)."
    )
    stop_words: tuple[str, ...] = Field(STOP_WORDS, description="The stop words (Gopher's 8 by default).")
    # "at least two of the following English words" (App. A.1.1) reads as two *different*
    # words: "the ... the" is one of them, not two. "count" counts occurrences instead.
    stop_word_mode: Literal["distinct", "count"] = Field(
        "distinct",
        description="'distinct': number of different stop words present; 'count': number of occurrences.",
    )
    stop_word_ignore_case: bool = Field(
        True, description="Match stop words case-insensitively ('The' counts as 'the'); datatrove does not."
    )
    ratio_basis: Literal["words", "tokens"] = Field(
        "words",
        description=(
            "Denominator of the hash, ellipsis and alphabetic ratios: 'words' (the paper) or "
            "'tokens' (all tokens, punctuation included, as datatrove)."
        ),
    )

    # -- repetition rules (Table A1) ------------------------------------------------------
    dup_line_frac: float | None = Field(
        0.3, ge=0, description="Drop if the fraction of lines that repeat an earlier line exceeds this."
    )
    dup_para_frac: float | None = Field(
        0.3, ge=0, description="Drop if the fraction of paragraphs that repeat an earlier one exceeds this."
    )
    dup_line_char_frac: float | None = Field(
        0.2, ge=0, description="Drop if the characters in repeated lines exceed this fraction of the text."
    )
    dup_para_char_frac: float | None = Field(
        0.2,
        ge=0,
        description="Drop if the characters in repeated paragraphs exceed this fraction of the text.",
    )
    top_ngram_char_frac: dict[int, float | None] = Field(
        default_factory=_default_top_ngrams,
        description=(
            "n (2-4) → drop if the most frequent n-gram's characters times its count exceed this "
            "fraction of the text; a missing n or None switches that n off."
        ),
    )
    top_ngram_min_count: int = Field(
        2,
        ge=1,
        description=(
            "The most frequent n-gram is scored only if it occurs at least this often (2: repetition "
            "only; 1: as datatrove, which also scores a text's first n-gram when nothing repeats)."
        ),
    )
    dup_ngram_char_frac: dict[int, float | None] = Field(
        default_factory=_default_dup_ngrams,
        description=(
            "n (5-10) → drop if the characters in n-grams that repeat an earlier n-gram exceed this "
            "fraction of the text; a missing n or None switches that n off."
        ),
    )

    @field_validator("top_ngram_char_frac")
    @classmethod
    def _top_sizes(cls, v: dict[int, float | None]) -> dict[int, float | None]:
        return _check_sizes(v, TOP_NGRAM_SIZES)

    @field_validator("dup_ngram_char_frac")
    @classmethod
    def _dup_sizes(cls, v: dict[int, float | None]) -> dict[int, float | None]:
        return _check_sizes(v, DUP_NGRAM_SIZES)

    @classmethod
    def datatrove_compatible(cls, **overrides: Any) -> Self:
        """Rules that measure what datatrove 0.10.1 measures (differences 1-3 switched back).

        Thresholds stay ours (e.g. the passage word floor) unless overridden.
        """
        base: dict[str, Any] = {
            "ratio_basis": "tokens",
            "top_ngram_min_count": 1,
            "stop_word_ignore_case": False,
            "stop_word_mode": "distinct",
        }
        return cls(**(base | overrides))


def _check_sizes(v: dict[int, float | None], allowed: tuple[int, ...]) -> dict[int, float | None]:
    bad = sorted(set(v) - set(allowed))
    if bad:
        raise ValueError(f"n-gram sizes {bad} not in {list(allowed)}")
    for n, t in v.items():
        if t is not None and t < 0:
            raise ValueError(f"threshold for n={n} is negative: {t}")
    return v


@dataclass(frozen=True)
class RuleFailure:
    """The first rule a text failed: its code (see :data:`RULES`), the measured value and the bound."""

    rule: str
    value: float
    threshold: float


# One chunk's tokens and counts, memoised:
# (tokens, lower-cased tokens, n_tokens, n_words, characters in words, n_alphabetic_words).
_Chunk = tuple[tuple[str, ...], tuple[str, ...], int, int, int, int]


def _analyse(chunk: str) -> _Chunk:
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


class _ChunkCache(dict[str, _Chunk]):
    """Memo of chunk → tokens and counts; cleared when it grows past ``limit`` entries."""

    limit = 100_000  # a few tens of MB at most

    def __missing__(self, chunk: str) -> _Chunk:
        if len(self) >= self.limit:
            self.clear()
        v = self[chunk] = _analyse(chunk)
        return v


_CACHE = _ChunkCache()
_TOKS = itemgetter(0)
_LOWER = itemgetter(1)
_NTOK = itemgetter(2)
_NWORD = itemgetter(3)
_WCHARS = itemgetter(4)
_NALPHA = itemgetter(5)
_COUNT = itemgetter(1)
_TWO = 2


def clear_token_cache() -> None:
    """Forget the memoised chunk tokenisations (benchmarks use it to start cold)."""
    _CACHE.clear()


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` (spaCy-blank-English-like; see the module docstring)."""
    return list(chain.from_iterable(map(_TOKS, map(_CACHE.__getitem__, text.split()))))


# --------------------------------------------------------------------------------------
# Rule evaluation
# --------------------------------------------------------------------------------------

_PARA_SPLIT = re.compile(r"\n{2,}").split
_LINE_SPLIT = re.compile(r"\n+").split
_BULLETS = ("•", "-")  # what a bullet line starts with (datatrove's choice; the paper leaves it open)
_ELLIPSES = ("...", "…")


@dataclass(frozen=True)
class _Plan:
    """GopherRules unpacked for the hot loop (thresholds as plain attributes)."""

    min_words: int | None
    max_words: int | None
    min_mean: float | None
    max_mean: float | None
    max_hash: float | None
    max_ellipsis: float | None
    max_bullet: float | None
    max_ellipsis_line: float | None
    min_alpha: float | None
    min_stop: int | None
    stop_words: frozenset[str]
    stop_count: bool
    stop_lower: bool
    stop_by_chunk: bool
    ratio_words: bool
    dup_para: float | None
    dup_para_char: float | None
    dup_line: float | None
    dup_line_char: float | None
    top: dict[int, float]
    top_min_count: int
    dup: dict[int, float]
    lines: bool
    paragraphs: bool
    max_n: int


@lru_cache(maxsize=64)
def _plan_from_json(payload: str) -> _Plan:
    r = GopherRules.model_validate_json(payload)
    top = {n: t for n, t in sorted(r.top_ngram_char_frac.items()) if t is not None}
    dup = {n: t for n, t in sorted(r.dup_ngram_char_frac.items()) if t is not None}
    para_rules = (r.dup_para_frac, r.dup_para_char_frac, r.dup_line_frac, r.dup_line_char_frac)
    stop_words = frozenset(w.lower() if r.stop_word_ignore_case else w for w in r.stop_words)
    return _Plan(
        min_words=r.min_words,
        max_words=r.max_words,
        min_mean=r.min_mean_word_length,
        max_mean=r.max_mean_word_length,
        max_hash=r.max_hash_ratio,
        max_ellipsis=r.max_ellipsis_ratio,
        max_bullet=r.max_bullet_line_ratio,
        max_ellipsis_line=r.max_ellipsis_line_ratio,
        min_alpha=r.min_alpha_word_ratio,
        min_stop=r.min_stop_words,
        stop_words=stop_words,
        stop_count=r.stop_word_mode == "count",
        stop_lower=r.stop_word_ignore_case,
        stop_by_chunk=_chunk_is_token(stop_words, r.stop_word_ignore_case),
        ratio_words=r.ratio_basis == "words",
        dup_para=r.dup_para_frac,
        dup_para_char=r.dup_para_char_frac,
        dup_line=r.dup_line_frac,
        dup_line_char=r.dup_line_char_frac,
        top=top,
        top_min_count=r.top_ngram_min_count,
        dup=dup,
        lines=r.max_bullet_line_ratio is not None or r.max_ellipsis_line_ratio is not None,
        paragraphs=any(x is not None for x in para_rules),
        max_n=max((*top, *dup), default=0),
    )


def _chunk_is_token(words: frozenset[str], lower: bool) -> bool:
    """Whether a whitespace chunk that (case-folded if ``lower``) equals one of ``words`` is
    always exactly one token: true for purely alphabetic words without a special case."""
    if not all(w.isalpha() for w in words):
        return False
    return not any((k.lower() if lower else k) in words and v != (k,) for k, v in SPECIALS.items())


def _plan(rules: GopherRules) -> _Plan:
    # Only GopherRules' own fields matter (a stage config may subclass it).
    return _plan_from_json(GopherRules.model_dump_json(rules, include=set(GopherRules.model_fields)))


def _fail(rule: str, value: float, threshold: float) -> RuleFailure:
    return RuleFailure(rule, float(value), float(threshold))


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


def _ngram_failure(toks: list[str], p: _Plan, n_chars: int) -> RuleFailure | None:
    """The top n-gram and repeated n-gram rules, n = 2 … p.max_n, in increasing n.

    Only n-grams that occur at least twice can score (beyond datatrove's one-off top
    n-gram, handled apart), and an (n+1)-gram can only repeat at a position where the
    n-grams at that position and the next both repeat. So after one pass over all
    bigrams, each larger n looks only at the few positions still in play (``cand``, in
    text order, with their n-grams in ``grams``).
    """
    n_toks = len(toks)
    if n_toks < 2 or not p.max_n:
        return None
    pairs: list[tuple[str, ...]] = list(pairwise(toks))
    all_counts: Counter[tuple[str, ...]] = Counter(pairs)
    if len(all_counts) == len(pairs):  # no bigram repeats, so no longer n-gram does either
        counts: dict[tuple[str, ...], int] = {}
        cand: list[int] = []
        grams: list[tuple[str, ...]] = []
    else:
        counts = all_counts
        mask = list(map(_TWO.__le__, map(all_counts.__getitem__, pairs)))  # occurs at least twice
        cand = list(compress(range(len(pairs)), mask))
        grams = list(compress(pairs, mask))
    n = 2
    while True:
        limit = p.top.get(n)
        if limit is not None and n_toks >= n:
            if counts:  # the first n-gram, in text order, with the highest count
                gram, count = max(counts.items(), key=_COUNT)
            else:  # nothing repeats: every n-gram occurs once, the first is "the most frequent"
                gram, count = tuple(toks[:n]), 1
            if count >= p.top_min_count:
                v = (sum(map(len, gram)) + n - 1) * count / n_chars
                if v > limit:
                    return _fail(f"top_{n}gram_char_frac", v, limit)
        limit = p.dup.get(n)
        if limit is not None and cand:
            # Scan left to right; a repeat of an n-gram already seen counts its characters
            # and jumps n tokens. Positions outside ``cand`` hold unique n-grams: they can
            # neither repeat nor be repeated, so skipping them changes nothing.
            seen: set[tuple[str, ...]] = set()
            chars = free = 0
            for i, g in zip(cand, grams, strict=True):
                if i < free:
                    continue
                if g in seen:
                    chars += sum(map(len, g))
                    free = i + n
                else:
                    seen.add(g)
            v = chars / n_chars
            if v > limit:
                return _fail(f"dup_{n}gram_char_frac", v, limit)
        if n >= p.max_n:
            return None
        if not cand and p.top_min_count > 1:
            return None  # nothing repeats any more: the remaining rules all measure 0
        # Positions where the (n+1)-gram may repeat, then keep those where it does.
        if cand:
            in_play = set(cand)
            nxt = [i for i in cand if i + 1 in in_play]
            n += 1
            grams = [tuple(toks[i : i + n]) for i in nxt]
            counts = {g: c for g, c in Counter(grams).items() if c > 1}
            cand = [i for i, g in zip(nxt, grams, strict=True) if g in counts]
            grams = [g for g in grams if g in counts]
        else:
            n += 1


def _count_stop_words(words: Iterable[str], p: _Plan) -> int:
    if p.stop_count:
        return sum(map(p.stop_words.__contains__, words))
    return len(p.stop_words.intersection(words))


def _check(text: str, p: _Plan) -> RuleFailure | None:
    chunks = text.split()
    entries = list(map(_CACHE.__getitem__, chunks))
    n_words = sum(map(_NWORD, entries))

    # -- quality ------------------------------------------------------------------------
    if p.min_words is not None and n_words < p.min_words:
        return _fail("min_words", n_words, p.min_words)
    if p.max_words is not None and n_words > p.max_words:
        return _fail("max_words", n_words, p.max_words)
    if n_words:
        mean = sum(map(_WCHARS, entries)) / n_words
        if p.min_mean is not None and mean < p.min_mean:
            return _fail("min_mean_word_length", mean, p.min_mean)
        if p.max_mean is not None and mean > p.max_mean:
            return _fail("max_mean_word_length", mean, p.max_mean)
    denom = n_words if p.ratio_words else sum(map(_NTOK, entries))
    if denom:
        if p.max_hash is not None and "#" in text:
            v = text.count("#") / denom
            if v > p.max_hash:
                return _fail("max_hash_ratio", v, p.max_hash)
        if p.max_ellipsis is not None and ("..." in text or "…" in text):
            v = (text.count("...") + text.count("…")) / denom
            if v > p.max_ellipsis:
                return _fail("max_ellipsis_ratio", v, p.max_ellipsis)
    if p.lines:
        lines = text.splitlines()
        if lines:
            if p.max_bullet is not None:
                v = sum(ln.lstrip().startswith(_BULLETS) for ln in lines) / len(lines)
                if v > p.max_bullet:
                    return _fail("max_bullet_line_ratio", v, p.max_bullet)
            if p.max_ellipsis_line is not None:
                v = sum(ln.rstrip().endswith(_ELLIPSES) for ln in lines) / len(lines)
                if v > p.max_ellipsis_line:
                    return _fail("max_ellipsis_line_ratio", v, p.max_ellipsis_line)
    if p.min_alpha is not None and denom:
        v = sum(map(_NALPHA, entries)) / denom
        if v < p.min_alpha:
            return _fail("min_alpha_word_ratio", v, p.min_alpha)
    if p.min_stop is not None:
        # A stop word usually stands alone between spaces; such a chunk is exactly one
        # token, so counting chunks gives a lower bound that settles most passages.
        n_stop = -1
        if p.stop_by_chunk:
            n_stop = _count_stop_words(map(str.lower, chunks) if p.stop_lower else chunks, p)
        if n_stop < p.min_stop:
            n_stop = _count_stop_words(
                chain.from_iterable(map(_LOWER if p.stop_lower else _TOKS, entries)), p
            )
            if n_stop < p.min_stop:
                return _fail("stop_words", n_stop, p.min_stop)

    # -- repetition -------------------------------------------------------------------------
    n_chars = len(text)
    if not n_chars:
        return None
    if p.paragraphs and "\n" in text:
        stripped = text.strip()
        paras = _PARA_SPLIT(stripped)
        n_dup, dup_chars = _duplicates(paras)
        if p.dup_para is not None and n_dup / len(paras) > p.dup_para:
            return _fail("dup_para_frac", n_dup / len(paras), p.dup_para)
        if p.dup_para_char is not None and dup_chars / n_chars > p.dup_para_char:
            return _fail("dup_para_char_frac", dup_chars / n_chars, p.dup_para_char)
        lines = _LINE_SPLIT(stripped)
        n_dup, dup_chars = _duplicates(lines)
        if p.dup_line is not None and n_dup / len(lines) > p.dup_line:
            return _fail("dup_line_frac", n_dup / len(lines), p.dup_line)
        if p.dup_line_char is not None and dup_chars / n_chars > p.dup_line_char:
            return _fail("dup_line_char_frac", dup_chars / n_chars, p.dup_line_char)
    if not p.max_n:
        return None
    return _ngram_failure(list(chain.from_iterable(map(_TOKS, entries))), p, n_chars)


def first_failure(text: str, rules: GopherRules) -> RuleFailure | None:
    """The first rule (in :data:`RULES` order) that ``text`` fails, or None if it passes all."""
    return _check(text, _plan(rules))


def check_many(texts: Sequence[str], rules: GopherRules) -> list[RuleFailure | None]:
    """:func:`first_failure` for each text, in order (the filter stage's batch entry point)."""
    p = _plan(rules)
    return [_check(t, p) for t in texts]
