"""Gopher quality and repetition heuristics on one passage (arXiv 2112.11446, App. A, Table A1).

CURE applied "a selection" of them to its passages (paper 001 §2). Every rule is here,
switchable (``None`` turns it off) and thresholded by :class:`GopherRules`;
:func:`first_failure` names the first rule (in :data:`RULES` order) a passage fails, with
the value it measured and the threshold. The rules themselves are in
:mod:`tasks.common.text.gopher_quality` and :mod:`tasks.common.text.gopher_repetition`;
what they measure, why the word floor is a passage floor, and where we differ from
datatrove: docs/decisions/gopher-on-passages.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from itertools import chain
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.common.text.gopher_base import Bound, Plan, RuleFailure, chunk_entries, first_breach
from tasks.common.text.gopher_quality import QUALITY_RULES, quality_checks
from tasks.common.text.gopher_repetition import PARAGRAPH_RULES, repetition_checks
from tasks.common.text.spacy_tokenizer import SPECIALS

__all__ = [
    "DATATROVE_REASONS",
    "DUP_NGRAM_SIZES",
    "RULES",
    "SCIENCE_STOP_WORDS",
    "STOP_WORDS",
    "TOP_NGRAM_SIZES",
    "GopherRules",
    "all_failures",
    "check_many",
    "first_failure",
]

#: The 8 stop words of Gopher (App. A.1.1): a passage needs at least two of them.
STOP_WORDS: Final[tuple[str, ...]] = ("the", "be", "to", "of", "and", "that", "have", "with")

#: Gopher's 8 plus the English function words that carry scientific prose: a Results
#: sentence often has none of "the, to, with, that" but has "in, was, of, and, for"
#: (docs/decisions/passage-quality.md, measured on data/passage_gold).
SCIENCE_STOP_WORDS: Final[tuple[str, ...]] = (
    *STOP_WORDS, "a", "an", "in", "on", "for", "by", "from", "as", "at", "is", "are", "was",
    "were", "or", "than", "this", "these", "which", "we", "not", "between", "after", "compared",
)  # fmt: skip

#: n of the "top n-gram" rules and of the "duplicate n-gram" rules (Table A1).
TOP_NGRAM_SIZES: Final[tuple[int, ...]] = (2, 3, 4)
DUP_NGRAM_SIZES: Final[tuple[int, ...]] = (5, 6, 7, 8, 9, 10)

# Rules whose threshold is one GopherRules field.
_FIELD_RULES: Final[tuple[str, ...]] = (*QUALITY_RULES, *PARAGRAPH_RULES)
_THRESHOLD_FIELD: Final[dict[str, str]] = {"stop_words": "min_stop_words"}  # where the names differ

#: Every rule code, in the order :func:`first_failure` checks them.
RULES: Final[tuple[str, ...]] = (
    *_FIELD_RULES,
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


# A rule's threshold: never negative; ``None`` switches the rule off.
Count = Annotated[int | None, Field(ge=0)]
Limit = Annotated[float | None, Field(ge=0)]


def _limit(default: float, description: str) -> Any:
    """A rule's threshold field (one line per rule below)."""
    return Field(default, description=description)


class GopherRules(BaseModel):
    """Thresholds of the Gopher heuristics; ``None`` switches a rule off.

    Defaults are the paper's, except the word floor (a passage floor, not the document
    floor) and three measurement choices (docs/decisions/gopher-on-passages.md).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- quality rules ----------------------------------------------------------------
    # Gopher's floor is 50 words per *document*; CURE's passages average ~77 words and many
    # complete paragraphs have 15-50, so the floor is 10 (it drops fragments only).
    min_words: Count = _limit(10, "Drop if fewer words (tokens with a letter or digit) than this.")
    max_words: Count = _limit(100_000, "Drop if more words than this.")
    min_mean_word_length: Limit = _limit(3, "Drop if the mean word length (characters) is below this.")
    max_mean_word_length: Limit = _limit(10, "Drop if the mean word length (characters) is above this.")
    max_hash_ratio: Limit = _limit(0.1, "Drop if occurrences of '#' per word (see ratio_basis) exceed this.")
    max_ellipsis_ratio: Limit = _limit(0.1, "Drop if '...' or '…' per word (see ratio_basis) exceed this.")
    max_bullet_line_ratio: Limit = _limit(0.9, "Drop if more than this share of lines start with '•' or '-'.")
    max_ellipsis_line_ratio: Limit = _limit(0.3, "Drop if over this share of lines end with '...' or '…'.")
    min_alpha_word_ratio: Limit = _limit(0.8, "Drop if under this share of words contain a letter.")
    min_stop_words: Count = _limit(2, "Drop if fewer stop words than this are found (see stop_word_mode).")
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
    dup_line_frac: Limit = _limit(0.3, "Drop if over this share of lines repeat an earlier line.")
    dup_para_frac: Limit = _limit(0.3, "Drop if over this share of paragraphs repeat an earlier one.")
    dup_line_char_frac: Limit = _limit(0.2, "Drop if repeated lines hold over this share of the text.")
    dup_para_char_frac: Limit = _limit(0.2, "Drop if repeated paragraphs hold over this share of the text.")
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


# --------------------------------------------------------------------------------------
# Checking
# --------------------------------------------------------------------------------------


def first_failure(text: str, rules: GopherRules) -> RuleFailure | None:
    """The first rule (in :data:`RULES` order) that ``text`` fails, or None if it passes all."""
    return _check(text, _plan(rules))


def check_many(texts: Sequence[str], rules: GopherRules) -> list[RuleFailure | None]:
    """:func:`first_failure` for each text, in order (the filter stage's batch entry point)."""
    p = _plan(rules)
    return [_check(t, p) for t in texts]


def all_failures(text: str, rules: GopherRules) -> list[RuleFailure]:
    """Every rule ``text`` fails, in :data:`RULES` order (the filter stops at the first):
    how ``irforge quality`` weighs each rule on its own."""
    p = _plan(rules)
    chunks = text.split()
    entries = chunk_entries(chunks)
    checks = chain(quality_checks(text, chunks, entries, p), repetition_checks(text, entries, p))
    return [f for f in (first_breach((check,)) for check in checks) if f is not None]


def _check(text: str, p: Plan) -> RuleFailure | None:
    chunks = text.split()
    entries = chunk_entries(chunks)
    return first_breach(chain(quality_checks(text, chunks, entries, p), repetition_checks(text, entries, p)))


def _plan(rules: GopherRules) -> Plan:
    # Only GopherRules' own fields matter (a stage config may subclass it).
    return _plan_from_json(GopherRules.model_dump_json(rules, include=set(GopherRules.model_fields)))


@lru_cache(maxsize=64)
def _plan_from_json(payload: str) -> Plan:
    r = GopherRules.model_validate_json(payload)
    bounds: dict[str, Bound] = {}
    for rule in _FIELD_RULES:
        field = _THRESHOLD_FIELD.get(rule, rule)
        limit = getattr(r, field)
        if limit is not None:
            bounds[rule] = Bound(rule, limit, floor=field.startswith("min_"))
    top = _ngram_bounds("top_{}gram_char_frac", r.top_ngram_char_frac)
    dup = _ngram_bounds("dup_{}gram_char_frac", r.dup_ngram_char_frac)
    stop_words = frozenset(w.lower() if r.stop_word_ignore_case else w for w in r.stop_words)
    return Plan(
        bounds=bounds,
        top=top,
        dup=dup,
        stop_words=stop_words,
        stop_count=r.stop_word_mode == "count",
        stop_lower=r.stop_word_ignore_case,
        stop_by_chunk=_chunk_is_token(stop_words, r.stop_word_ignore_case),
        ratio_words=r.ratio_basis == "words",
        top_min_count=r.top_ngram_min_count,
        lines=not {"max_bullet_line_ratio", "max_ellipsis_line_ratio"}.isdisjoint(bounds),
        paragraphs=not set(PARAGRAPH_RULES).isdisjoint(bounds),
        max_n=max((*top, *dup), default=0),
    )


def _ngram_bounds(rule: str, limits: dict[int, float | None]) -> dict[int, Bound]:
    return {n: Bound(rule.format(n), t) for n, t in sorted(limits.items()) if t is not None}


def _chunk_is_token(words: frozenset[str], lower: bool) -> bool:
    """Whether a whitespace chunk that (case-folded if ``lower``) equals one of ``words`` is
    always exactly one token: true for purely alphabetic words without a special case."""
    if not all(w.isalpha() for w in words):
        return False
    return not any((k.lower() if lower else k) in words and v != (k,) for k, v in SPECIALS.items())
