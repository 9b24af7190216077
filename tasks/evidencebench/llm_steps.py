"""EvidenceBench's LLM steps: their prompt files and the chat request each step sends.

One function per step builds the :class:`~tasks.common.llm.port.ChatRequest` from a prompt file in
``prompts/evidencebench/`` (written by us from paper 002's specifications); the strict
parser of each step's reply is in :mod:`tasks.evidencebench.parsers`.

Steps (paper 002): ``refine`` (App. H.2, keyword ``HINT:``), ``suitability`` (App. H.3,
``DECISION:`` experiment / results / both / neither), ``hypothesis_recover`` and
``hypothesis_trim`` (App. G, ``HYPOTHESIS:``), ``decompose`` (App. C.1 step 1,
``ASPECTS:``), ``leak_check`` (App. C.1 step 2, ``DECISION:`` yes / no), ``label``
(results / background / methods per aspect, ``LABELS:``), ``align`` (App. C, used by
:mod:`tasks.evidencebench.alignment`) and the retrieval and negation steps of App. E
(:mod:`tasks.evidencebench.llm_retrieval`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, Literal

from pydantic import Field

from irforge.errors import ConfigError
from tasks.common.llm.port import ChatRequest, Sampling
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


def prompt_field(what: str, step: Step) -> Any:
    """A stage config's optional prompt file for ``step`` (``what`` names it in the description)."""
    return Field(
        None,
        description=f"{what} prompt file relative to the config; default prompts/evidencebench/{step}.md.",
    )


def step_prompt(step: Step, path: str | None, base_dir: Path) -> Prompt:
    """The prompt a stage config names for ``step``: ``path`` (relative to the config) or the default one."""
    return load_prompt(step, None if path is None else base_dir / path)


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
        raise ValueError(f"citation {shown(citation)} does not occur in the paragraph")
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


def shown(text: str) -> str:
    """``text`` on one line, cut to 80 characters and quoted: how errors show a reply's words."""
    line = one_line(text)
    return repr(line if len(line) <= _SHOWN_CHARS else line[: _SHOWN_CHARS - 3] + "...")
