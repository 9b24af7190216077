"""EvidenceBench's LLM steps: their prompts as chat requests, and strict parsers of the replies.

One function per step builds the :class:`~tasks.common.llm.port.ChatRequest` from a prompt file in
``prompts/`` (written by us from paper 002's specifications) and one parser per step turns
a reply into a value or raises :class:`~tasks.common.llm.port.ReplyInvalid` saying precisely what
is wrong, so that the chat model asks again and, past its retries, the request ends as a
quarantined :class:`~tasks.common.llm.port.ChatFailure` instead of a guessed value.

Steps (paper 002): ``refine`` (App. H.2, keyword ``HINT:``), ``suitability`` (App. H.3,
``DECISION:`` experiment / results / both / neither), ``hypothesis_recover`` and
``hypothesis_trim`` (App. G, ``HYPOTHESIS:``), ``decompose`` (App. C.1 step 1,
``ASPECTS:``), ``leak_check`` (App. C.1 step 2, ``DECISION:`` yes / no), ``label``
(results / background / methods per aspect, ``LABELS:``) and ``align`` (App. C, used by
:mod:`tasks.evidencebench.alignment`).

Replies are plain text with the paper's output keywords, not JSON: the prompts ask for
reasoning before the decision, as the paper's do. A keyword counts only at the start of a
line (Markdown bold around it is tolerated) and must occur exactly once. A parser that
needs facts about the request (the paragraph, the number of aspects) comes as a factory
returning a :data:`~tasks.common.llm.port.Validator`, because validators see only the reply text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Literal, get_args

from irforge.errors import ConfigError
from tasks.common.llm.port import ChatRequest, ReplyInvalid, Sampling, Validator
from tasks.common.llm.prompt import PROMPTS_DIR, load_template

DEFAULT_SAMPLING = Sampling(temperature=0.0, top_p=1.0, max_tokens=1024, seed=0)
"""Greedy and seeded (repeatable where the server allows); room for the reasoning the prompts ask for."""

Step = Literal[
    "refine",
    "suitability",
    "hypothesis_recover",
    "hypothesis_trim",
    "decompose",
    "leak_check",
    "align",
    "label",
    "retrieve",
    "retrieve_section",
    "retrieve_select",
    "retrieve_regenerate",
    "negate",
]
PLACEHOLDERS: dict[Step, frozenset[str]] = {
    "refine": frozenset({"paragraph", "citation"}),
    "suitability": frozenset({"summary"}),
    "hypothesis_recover": frozenset({"context", "summary"}),
    "hypothesis_trim": frozenset({"context", "hypothesis"}),
    "decompose": frozenset({"paper_id", "summary", "sentences"}),
    "leak_check": frozenset({"summary", "aspects"}),
    "align": frozenset({"aspect", "summary", "elements"}),
    "label": frozenset({"summary", "aspects"}),
    "retrieve": frozenset({"hypothesis", "elements", "k", "focus"}),
    "retrieve_section": frozenset({"hypothesis", "elements", "k", "focus"}),
    "retrieve_select": frozenset({"hypothesis", "elements", "k", "focus"}),
    "retrieve_regenerate": frozenset({"k"}),
    "negate": frozenset({"hypothesis"}),
}
"""Every placeholder of each step's prompt; a prompt file must use exactly these."""

Suitability = Literal["experiment", "results", "both", "neither"]
SUITABLE: frozenset[Suitability] = frozenset({"results", "both"})
"""Suitability labels whose instances are kept (App. H.3)."""
AspectLabel = Literal["results", "background", "methods"]
MAX_HYPOTHESIS_CHARS = 1000
"""A hypothesis is one sentence or two; a longer one is a reply that lost the format."""

_NUMBERED = re.compile(r"(\d+)[.)]\s+(\S.*)")
_LABELLED = re.compile(r"(\d+)\s*[:.)]\s*(\S.*)")
_SHOWN_CHARS = 80


# -- prompts --------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """A step's prompt file: the template (header comment removed) and the file's sha256.

    The sha256 belongs in the fingerprint of the stage that uses the prompt: editing the
    file then reruns the stage.
    """

    step: Step
    path: Path
    sha256: str
    template: Template

    def render(self, **values: str) -> str:
        """The user message with every placeholder filled; all of them, and only them, are required."""
        names = PLACEHOLDERS[self.step]
        missing, unknown = sorted(names - set(values)), sorted(set(values) - names)
        if missing or unknown:
            raise ValueError(
                f"prompt {self.path.name}: values missing for {missing}, unknown values {unknown}; "
                f"it takes exactly {sorted(names)}"
            )
        return self.template.substitute(values)

    def request(self, custom_id: str, sampling: Sampling | None = None, **values: str) -> ChatRequest:
        """One chat request whose only (user) message is the rendered prompt; replies are plain text."""
        message = {"role": "user", "content": self.render(**values)}
        return ChatRequest(custom_id=custom_id, messages=(message,), sampling=sampling or DEFAULT_SAMPLING)


def load_prompt(step: Step, path: Path | str | None = None) -> Prompt:
    """The prompt of ``step``: ``prompts/evidencebench/<step>.md`` unless ``path`` names another file.

    :class:`~irforge.errors.ConfigError` when the file cannot be read, is not UTF-8, has a
    stray ``$`` or does not use exactly the step's :data:`PLACEHOLDERS`.
    """
    if step not in PLACEHOLDERS:
        raise ConfigError(f"unknown EvidenceBench step {step!r}; steps: {', '.join(PLACEHOLDERS)}")
    if path is None:
        return _default_prompt(step)
    return _read_prompt(step, Path(path))


@functools.cache
def _default_prompt(step: Step) -> Prompt:
    return _read_prompt(step, PROMPTS_DIR / "evidencebench" / f"{step}.md")


def _read_prompt(step: Step, path: Path) -> Prompt:
    loaded = load_template(path, f"{step} prompt")
    names, expected = set(loaded.template.get_identifiers()), PLACEHOLDERS[step]
    if names != expected:
        raise ConfigError(
            f"{step} prompt {path}: placeholders {sorted('$' + n for n in names)} but the step fills "
            f"exactly {sorted('$' + n for n in expected)}"
        )
    return Prompt(step=step, path=path, sha256=loaded.sha256, template=loaded.template)


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) turned into one space."""
    return " ".join(text.split())


def numbered(items: Sequence[str]) -> str:
    """``items`` as ``1. first`` / ``2. second`` lines (how the prompts show aspects)."""
    return "\n".join(f"{i}. {one_line(item)}" for i, item in enumerate(items, start=1))


def _require(what: str, text: str) -> str:
    if not text.strip():
        raise ValueError(f"{what} is empty")
    return text.strip()


def _require_items(what: str, items: Sequence[str]) -> list[str]:
    if not items:
        raise ValueError(f"no {what} given")
    empty = [i for i, item in enumerate(items) if not item.strip()]
    if empty:
        raise ValueError(f"{what} #{empty[0]} is empty")
    return list(items)


# -- requests -------------------------------------------------------------------------


def refine_request(
    custom_id: str,
    paragraph: str,
    citation: str,
    *,
    prompt: Prompt | None = None,
    sampling: Sampling | None = None,
) -> ChatRequest:
    """App. H.2: extract the paragraph's sentences about the cited paper's own experiments and observations.

    ``citation`` is the marker of the cited paper as written in ``paragraph`` (the reply must keep it).
    """
    paragraph, citation = _require("paragraph", paragraph), _require("citation", citation)
    if citation not in paragraph:
        raise ValueError(f"citation {_shown(citation)} does not occur in the paragraph")
    prompt = prompt or load_prompt("refine")
    return prompt.request(custom_id, sampling, paragraph=paragraph, citation=citation)


def suitability_request(
    custom_id: str, summary: str, *, prompt: Prompt | None = None, sampling: Sampling | None = None
) -> ChatRequest:
    """App. H.3: does the summary describe the experiment, its results, both or neither?"""
    prompt = prompt or load_prompt("suitability")
    return prompt.request(custom_id, sampling, summary=_require("summary", summary))


def recover_hypothesis_request(
    custom_id: str,
    context: str,
    summary: str,
    *,
    prompt: Prompt | None = None,
    sampling: Sampling | None = None,
) -> ChatRequest:
    """App. G step 1: the hypothesis the summary was written to support, from the review's context."""
    prompt = prompt or load_prompt("hypothesis_recover")
    return prompt.request(
        custom_id, sampling, context=_require("context", context), summary=_require("summary", summary)
    )


def trim_hypothesis_request(
    custom_id: str,
    context: str,
    hypothesis: str,
    *,
    prompt: Prompt | None = None,
    sampling: Sampling | None = None,
) -> ChatRequest:
    """App. G step 2: the recovered hypothesis cut down to its central claim, without evidence."""
    prompt = prompt or load_prompt("hypothesis_trim")
    return prompt.request(
        custom_id,
        sampling,
        context=_require("context", context),
        hypothesis=_require("hypothesis", hypothesis),
    )


def decompose_request(
    custom_id: str,
    paper_id: str,
    summary: str,
    sentences: Sequence[str],
    *,
    prompt: Prompt | None = None,
    sampling: Sampling | None = None,
) -> ChatRequest:
    """App. C.1 step 1: the summary split into study aspects, with the paper's sentences for the granularity rule."""
    prompt = prompt or load_prompt("decompose")
    pool = "\n".join(one_line(s) for s in _require_items("sentence", sentences))
    return prompt.request(
        custom_id,
        sampling,
        paper_id=_require("paper_id", paper_id),
        summary=_require("summary", summary),
        sentences=pool,
    )


def aspects_request(
    step: Literal["leak_check", "label"],
    custom_id: str,
    summary: str,
    aspects: Sequence[str],
    *,
    prompt: Prompt | None = None,
    sampling: Sampling | None = None,
) -> ChatRequest:
    """The summary and its numbered aspects, asked about by ``step``.

    ``leak_check`` (App. C.1 step 2): does any aspect carry information that the summary
    does not state? ``label``: each aspect labelled results, background or methods
    (results aspects form the Result-ER set).
    """
    prompt = prompt or load_prompt(step)
    return prompt.request(
        custom_id,
        sampling,
        summary=_require("summary", summary),
        aspects=numbered(_require_items("aspect", aspects)),
    )


# -- parsers --------------------------------------------------------------------------


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
            f"{len(lines)} lines after the keyword {keyword}: ({_shown(' | '.join(lines))}); "
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
            raise ReplyInvalid(f"sentence {i} ({_shown(sentence)}) is given twice")
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
                    f"sentence {i} ({_shown(sentence)}) is not copied verbatim from the paragraph"
                )
        if not any(marker in one_line(s) for s in sentences):
            raise ReplyInvalid(f"no selected sentence contains the citation {_shown(citation)}")
        return sentences

    return validate


def parse_suitability(reply: str) -> Suitability:
    """The label after ``DECISION:`` (App. H.3): experiment, results, both or neither (any case)."""
    value = _single_line(reply, "DECISION").lower()
    labels: tuple[Suitability, ...] = get_args(Suitability)
    for label in labels:
        if value == label:
            return label
    raise ReplyInvalid(f"DECISION: {_shown(value)} is not one of {', '.join(labels)}")


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
                f"line {_shown(line)} after {keyword}: is not numbered like '{len(items) + 1}.'"
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
            raise ReplyInvalid(f"aspects {seen[key]} and {number} are the same ({_shown(aspect)})")
        seen[key] = number
    return tuple(aspects)


def parse_leak_check(reply: str) -> bool:
    """App. C.1 step 2: True when ``DECISION: yes`` (an aspect has information not in the
    summary: the instance is excluded), False for ``DECISION: no``."""
    value = _single_line(reply, "DECISION").lower()
    if value not in ("yes", "no"):
        raise ReplyInvalid(f"DECISION: {_shown(value)} is neither yes nor no")
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
            raise ReplyInvalid(f"aspect {number}: {_shown(item)} is not one of {', '.join(choices)}")
        labels.append(label)
    return tuple(labels)


def labels_validator(n_aspects: int) -> Validator:
    """:func:`parse_labels` for requests about ``n_aspects`` aspects (group requests by that count)."""
    if n_aspects < 1:
        raise ValueError("an instance to label has at least one aspect")
    return functools.partial(parse_labels, n_aspects=n_aspects)


def _shown(text: str) -> str:
    line = one_line(text)
    return repr(line if len(line) <= _SHOWN_CHARS else line[: _SHOWN_CHARS - 3] + "...")
