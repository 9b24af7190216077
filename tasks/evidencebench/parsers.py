"""Strict parsers of the replies of EvidenceBench's LLM steps (paper 002; requests: :mod:`tasks.evidencebench.llm_steps`).

One parser per step turns a reply into a value or raises
:class:`~tasks.common.llm.port.ReplyInvalid` saying precisely what is wrong, so that the
chat model asks again and, past its retries, the request ends as a quarantined
:class:`~tasks.common.llm.port.ChatFailure` instead of a guessed value.

Replies are plain text with the paper's output keywords, not JSON: the prompts ask for
reasoning before the decision, as the paper's do. A keyword counts only at the start of a
line (Markdown bold around it is tolerated) and must occur exactly once. A parser that
needs facts about the request (the paragraph, the number of aspects) comes as a factory
returning a :data:`~tasks.common.llm.port.Validator`, because validators see only the reply text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Literal, get_args

from tasks.common.llm.port import ReplyInvalid, Validator
from tasks.evidencebench.llm_steps import one_line, shown

Suitability = Literal["experiment", "results", "both", "neither"]
SUITABLE: frozenset[Suitability] = frozenset({"results", "both"})
"""Suitability labels whose instances are kept (App. H.3)."""
AspectLabel = Literal["results", "background", "methods"]
MAX_HYPOTHESIS_CHARS = 1000
"""A hypothesis is one sentence or two; a longer one is a reply that lost the format."""

_NUMBERED = re.compile(r"(\d+)[.)]\s+(\S.*)")
_LABELLED = re.compile(r"(\d+)\s*[:.)]\s*(\S.*)")


def keyword_value(reply: str, keyword: str) -> str:
    """What follows ``keyword:`` up to the end of the reply, stripped.

    The keyword must start a line (leading spaces and Markdown bold allowed: ``**DECISION:**``)
    and occur once: zero or several occurrences are :class:`ReplyInvalid`.
    """
    pattern = re.compile(rf"^[ \t]*(?:\*\*)?{re.escape(keyword)}(?:\*\*)?[ \t]*:(?:\*\*)?", re.MULTILINE)
    found = list(pattern.finditer(reply))
    if not found:
        raise ReplyInvalid(f"no line starts with the keyword {keyword}:")
    if len(found) > 1:
        raise ReplyInvalid(f"the keyword {keyword}: starts {len(found)} lines; it must appear once")
    return reply[found[0].end() :].strip()


_INDEX_LIST = re.compile(r"\[(.*)\]", re.DOTALL)
_INDEX_ITEM = re.compile(r"\d+")


def decision_indices(reply: str, inside: Callable[[int], str | None]) -> list[int]:
    """The list after ``DECISION:`` (``[0, 3]`` or ``[]``, ending the reply), in reply order.

    Each item must be a non-negative integer, given once, and accepted by ``inside`` (which
    returns why an index is out of range, or None). Anything else is :class:`ReplyInvalid`.
    """
    value = keyword_value(reply, "DECISION")
    match = _INDEX_LIST.fullmatch(value)
    if match is None:
        raise ReplyInvalid(f"DECISION: {value[:80]!r} is not a list of indices like [0, 3] or []")
    inner = match.group(1).strip()
    chosen: list[int] = []
    for item in (part.strip() for part in inner.split(",")) if inner else ():
        if not _INDEX_ITEM.fullmatch(item):
            raise ReplyInvalid(f"DECISION: list item {item[:40]!r} is not a non-negative integer index")
        index = int(item)
        why = inside(index)
        if why is not None:
            raise ReplyInvalid(f"DECISION: index {index} {why}")
        if index in chosen:
            raise ReplyInvalid(f"DECISION: index {index} is given twice")
        chosen.append(index)
    return chosen


def _value_lines(reply: str, keyword: str) -> list[str]:
    return [line.strip() for line in keyword_value(reply, keyword).splitlines() if line.strip()]


def _single_line(reply: str, keyword: str) -> str:
    lines = _value_lines(reply, keyword)
    if not lines:
        raise ReplyInvalid(f"nothing after the keyword {keyword}:")
    if len(lines) > 1:
        raise ReplyInvalid(
            f"{len(lines)} lines after the keyword {keyword}: ({shown(' | '.join(lines))}); "
            "the answer must be one line and end the reply"
        )
    return lines[0]


def parse_refine(reply: str) -> tuple[str, ...]:
    """The sentences after ``HINT:``, one per line (App. H.2); at least one, none repeated."""
    sentences = _value_lines(reply, "HINT")
    if not sentences:
        raise ReplyInvalid("no sentence after the keyword HINT:")
    seen: set[str] = set()
    for i, sentence in enumerate(sentences, start=1):
        if sentence in seen:
            raise ReplyInvalid(f"sentence {i} ({shown(sentence)}) is given twice")
        seen.add(sentence)
    return tuple(sentences)


def refine_validator(paragraph: str, citation: str) -> Validator:
    """:func:`parse_refine` plus: every sentence is in ``paragraph`` verbatim (up to whitespace)
    and one of them contains ``citation`` (App. H.2: the citing sentence must be kept)."""
    text, marker = one_line(paragraph), one_line(citation)

    def validate(reply: str) -> tuple[str, ...]:
        sentences = parse_refine(reply)
        for i, sentence in enumerate(sentences, start=1):
            if one_line(sentence) not in text:
                raise ReplyInvalid(
                    f"sentence {i} ({shown(sentence)}) is not copied verbatim from the paragraph"
                )
        if not any(marker in one_line(s) for s in sentences):
            raise ReplyInvalid(f"no selected sentence contains the citation {shown(citation)}")
        return sentences

    return validate


def parse_suitability(reply: str) -> Suitability:
    """The label after ``DECISION:`` (App. H.3): experiment, results, both or neither (any case)."""
    value = _single_line(reply, "DECISION").lower()
    labels: tuple[Suitability, ...] = get_args(Suitability)
    for label in labels:
        if value == label:
            return label
    raise ReplyInvalid(f"DECISION: {shown(value)} is not one of {', '.join(labels)}")


def parse_hypothesis(reply: str) -> str:
    """The hypothesis after ``HYPOTHESIS:`` (App. G, both steps): one non-empty line."""
    hypothesis = _single_line(reply, "HYPOTHESIS")
    if len(hypothesis) > MAX_HYPOTHESIS_CHARS:
        raise ReplyInvalid(
            f"the hypothesis has {len(hypothesis)} characters, more than {MAX_HYPOTHESIS_CHARS}: "
            "it must be the central claim only"
        )
    return hypothesis


def _numbered_items(lines: list[str], keyword: str, pattern: re.Pattern[str]) -> list[str]:
    items: list[str] = []
    for line in lines:
        match = pattern.fullmatch(line)
        if match is None:
            raise ReplyInvalid(
                f"line {shown(line)} after {keyword}: is not numbered like '{len(items) + 1}.'"
            )
        number = int(match.group(1))
        if number != len(items) + 1:
            raise ReplyInvalid(
                f"item numbered {number} where {len(items) + 1} was due: number them 1, 2, 3, ..."
            )
        items.append(match.group(2).strip())
    return items


def parse_aspects(reply: str) -> tuple[str, ...]:
    """The study aspects after ``ASPECTS:``, numbered ``1.``, ``2.``, ... one per line (App. C.1 step 1)."""
    lines = _value_lines(reply, "ASPECTS")
    if not lines:
        raise ReplyInvalid("no aspect after the keyword ASPECTS:")
    aspects = _numbered_items(lines, "ASPECTS", _NUMBERED)
    seen: dict[str, int] = {}
    for number, aspect in enumerate(aspects, start=1):
        key = one_line(aspect).casefold()
        if key in seen:
            raise ReplyInvalid(f"aspects {seen[key]} and {number} are the same ({shown(aspect)})")
        seen[key] = number
    return tuple(aspects)


def parse_leak_check(reply: str) -> bool:
    """App. C.1 step 2: True when ``DECISION: yes`` (an aspect has information not in the
    summary: the instance is excluded), False for ``DECISION: no``."""
    value = _single_line(reply, "DECISION").lower()
    if value not in ("yes", "no"):
        raise ReplyInvalid(f"DECISION: {shown(value)} is neither yes nor no")
    return value == "yes"


def parse_labels(reply: str, n_aspects: int) -> tuple[AspectLabel, ...]:
    """One label per aspect after ``LABELS:``, as ``n: label`` lines for n = 1 .. ``n_aspects``."""
    lines = _value_lines(reply, "LABELS")
    items = _numbered_items(lines, "LABELS", _LABELLED)
    if len(items) != n_aspects:
        raise ReplyInvalid(f"{len(items)} labels for {n_aspects} aspects: label each aspect once, in order")
    choices: tuple[AspectLabel, ...] = get_args(AspectLabel)
    labels: list[AspectLabel] = []
    for number, item in enumerate(items, start=1):
        label = next((c for c in choices if c == item.lower()), None)
        if label is None:
            raise ReplyInvalid(f"aspect {number}: {shown(item)} is not one of {', '.join(choices)}")
        labels.append(label)
    return tuple(labels)


def labels_validator(n_aspects: int) -> Validator:
    """:func:`parse_labels` for requests about ``n_aspects`` aspects (group requests by that count)."""
    if n_aspects < 1:
        raise ValueError("an instance to label has at least one aspect")
    return functools.partial(parse_labels, n_aspects=n_aspects)
