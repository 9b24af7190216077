"""What an LLM evidence-retrieval question shows and what its reply must be (paper 002, App. C, E.1-E.4).

The prompt shows the pool as ``i: text [End of text element i]`` lines (the element format
of App. C, :func:`render_pool_elements`), ``i`` being the *pool* index, so a reply's indices
are the selection itself. Every reply ends with ``DECISION: [i, j, ...]`` (App. E.1-E.4),
parsed strictly by :func:`parse_retrieval`. The aspect group of a task (all aspects, or
results only for the Result-ER tasks, App. E.2) is the prompt's ``$focus`` sentence
(:data:`FOCUS`); the section strategy cuts the pool with :func:`sections`. Used by
:mod:`tasks.evidencebench.llm_retrieval`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tasks.evidencebench.llm_steps import one_line
from tasks.evidencebench.parsers import decision_indices
from tasks.evidencebench.selection import AspectGroup

SENTENCE_TYPES: frozenset[str] = frozenset({"section_name", "abstract", "normal_paragraph"})

FOCUS: dict[AspectGroup, str] = {
    "all": (
        "Look for the experiment that bears on the hypothesis and for the details of it (what was "
        "studied, how, on whom, what was measured and what was found) that together make the "
        "strongest evidence."
    ),
    "results": (
        "Look only for experimental results and the analyses of those results that bear on the "
        "hypothesis; do not pick background, motivation or methods."
    ),
}
"""The ``$focus`` sentence of each aspect group (App. E.1 for all aspects, App. E.2 for results)."""


def render_pool_elements(pool: Sequence[str], indices: Iterable[int]) -> str:
    """The elements ``indices`` of ``pool`` as ``i: text [End of text element i]`` lines, i the pool index."""
    return "\n".join(f"{i}: {one_line(pool[i])} [End of text element {i}]" for i in indices)


def parse_retrieval(reply: str, allowed: Iterable[int]) -> tuple[int, ...]:
    """The indices after ``DECISION:``, in the order the reply lists them.

    The value must be a list like ``[3, 17]`` or ``[]`` and end the reply; each item a
    non-negative integer in ``allowed`` (the indices the request showed), none repeated.
    Any other reply is :class:`ReplyInvalid`. The length is not checked: a list longer than
    K is a valid parse that the strategy cuts or regenerates.
    """
    shown = allowed if isinstance(allowed, range | frozenset) else frozenset(allowed)
    not_shown = f"is not one of the text elements shown ({_span(shown)})"
    chosen = decision_indices(reply, lambda index: None if index in shown else not_shown)
    return tuple(chosen)


def _span(shown: range | frozenset[int]) -> str:
    if isinstance(shown, range):
        return f"{shown.start} to {shown.stop - 1}" if shown else "none"
    listed = sorted(shown)
    return ", ".join(map(str, listed[:20])) + (", ..." if len(listed) > 20 else "")


@dataclass(frozen=True)
class RetrievalValidator:
    """The validator of replies about the elements ``allowed`` (hashable: requests are grouped by it)."""

    allowed: range | frozenset[int]

    def __call__(self, reply: str) -> tuple[int, ...]:
        return parse_retrieval(reply, self.allowed)


def sections(types: Sequence[str], name: str = "instance") -> list[range]:
    """The pool cut into sections by ``sentence_types_in_candidate_pool`` (App. E.4's natural sections).

    A run of ``section_name`` elements (a title, possibly followed by subtitles) starts a
    section that holds them and the paragraphs after them; a run of ``abstract`` elements is
    a section of its own; paragraphs before the first title (an untitled introduction) are
    one too. Consecutive titles stay together so no section is a bare title. The spans are
    contiguous, in order and cover the pool.
    """
    unknown = sorted({t for t in types if t not in SENTENCE_TYPES}, key=str)
    if unknown:
        raise ValueError(f"{name}: unknown sentence types {unknown[:5]}; expected {sorted(SENTENCE_TYPES)}")
    starts: list[int] = []
    for i, kind in enumerate(types):
        before = types[i - 1] if i else None
        if (
            i == 0
            or (kind == "section_name" and before != "section_name")
            or ((kind == "abstract") != (before == "abstract"))
        ):
            starts.append(i)
    if not starts:
        return []
    ends = [*starts[1:], len(types)]
    return [range(a, b) for a, b in zip(starts, ends, strict=True)]
