"""Hypothesis negation (paper 002, App. E.8): the negated hypotheses that
:func:`~tasks.evidencebench.baselines.negated_set` takes, written by an LLM (prompt
``prompts/evidencebench/negate.md``)."""

from __future__ import annotations

from collections.abc import Mapping

from tasks.common.llm.cache import ChatStats, ReplyCache, cached_chat
from tasks.common.llm.port import ChatFailure, ChatModel, ChatRequest, Sampling
from tasks.common.llm.stage import reply_failure
from tasks.evidencebench.baselines import normalised
from tasks.evidencebench.llm_steps import Prompt, load_prompt, one_line
from tasks.evidencebench.parsers import parse_hypothesis


def negation_request(
    custom_id: str, hypothesis: str, *, prompt: Prompt | None = None, sampling: Sampling | None = None
) -> ChatRequest:
    """App. E.8: the hypothesis rewritten to claim the opposite (the reply's ``HYPOTHESIS:`` line)."""
    if not hypothesis.strip():
        raise ValueError(f"{custom_id}: the hypothesis is blank")
    prompt = prompt or load_prompt("negate")
    return prompt.request(custom_id, sampling, hypothesis=one_line(hypothesis))


def negate(
    model: ChatModel,
    cache: ReplyCache,
    hypotheses: Mapping[str, str],
    *,
    prompt: Prompt | None = None,
    sampling: Sampling | None = None,
) -> tuple[dict[str, str], dict[str, ChatFailure], ChatStats]:
    """Negate every hypothesis (instance name → text) in one :func:`cached_chat` call.

    Replies are parsed by :func:`~tasks.evidencebench.parsers.parse_hypothesis`. A negation
    equal to its hypothesis (up to case and whitespace) is a failure (``invalid_reply``),
    checked after the call because a validator does not see which hypothesis it answers;
    such a reply stays cached, so a rerun fails it again instead of paying for it again.
    """
    names = list(hypotheses)
    requests = [negation_request(name, hypotheses[name], prompt=prompt, sampling=sampling) for name in names]
    outcomes, stats = cached_chat(model, cache, requests, parse_hypothesis)
    negations: dict[str, str] = {}
    failures: dict[str, ChatFailure] = {}
    for name, outcome in zip(names, outcomes, strict=True):
        if isinstance(outcome, ChatFailure):
            failures[name] = outcome
        elif normalised(outcome.value) == normalised(hypotheses[name]):
            failures[name] = reply_failure(outcome, "the negated hypothesis repeats the original")
        else:
            negations[name] = outcome.value
    return negations, failures, stats
