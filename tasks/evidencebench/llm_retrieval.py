"""LLM evidence-retrieval baselines of EvidenceBench (paper 002, §4.1 and App. E.1-E.5, E.8).

An :class:`LLMRetriever` is a :data:`~tasks.evidencebench.baselines.System`: for each task an
instance can be scored on (:func:`~tasks.evidencebench.baselines.task_sizes`: K is the exact
``optimal`` for the @optimal tasks, 10 for ER@10, 5 for Result-ER@5) it asks a chat model
for at most K sentences of the candidate pool, so the existing ER@K evaluation
(:func:`~tasks.evidencebench.baselines.evaluate`) scores it like any ranking baseline.

What a question shows and how its reply is parsed is :mod:`tasks.evidencebench.retrieval_format`:
a reply whose ``DECISION:`` list does not parse is retried by the adapter, then ends as a
:class:`~tasks.common.llm.port.ChatFailure` of that instance and task. A list *longer* than K is
not invalid: what to do with it is the strategy's business.

Strategies (``LLMRetriever.strategy``):

* ``"default"``: the whole paper in one request per task (Figure 7); a reply over K is cut
  to its first K indices (the order the model listed them in) and the cut is recorded.
  The paper itself never cuts (App. E.5 regenerates); this is the cheap variant, one
  request per task, kept to measure what regeneration buys.
* ``"regenerate"``: the same prompt, and a reply over K gets the regeneration message of
  App. E.5 (Figure 13) appended to the conversation (the prompt, the model's reply, the
  new user message), up to ``max_regenerations`` times; still over K after that, it is
  cut to its first K and recorded. This is what the paper does with the default prompt.
* ``"section"``: section by section (§4.1, App. E.4 Figures 11-12): step 1 asks for at
  most K elements of each section in turn (the same K for every section, as the paper
  says, so the union can exceed K); step 2 shows the union of step 1's picks, in pool
  order with their pool indices, and asks for the final K. When the union already has at
  most K elements, step 2 is skipped: dropping elements can never raise aspect recall,
  so its answer could not score better. Both steps regenerate like ``"regenerate"``
  (App. E.5 applies to any reply over the limit). The Result-ER tasks use this strategy
  in the paper (App. E.2, Figures 8-9) with a one-shot example that is not reproduced here.

Sections come from ``sentence_types_in_candidate_pool``
(:func:`~tasks.evidencebench.retrieval_format.sections`).

:meth:`LLMRetriever.select_all` sends the requests of many instances together: each round
(first asks, each regeneration, step 2) is one :func:`~tasks.common.llm.cache.cached_chat` call
per distinct validator, i.e. per distinct set of allowed indices (pool length for the whole
paper, section span, step-1 union). Validators see only the reply, so a check that needs
the request's indices can only be exact by grouping; exact checks let the adapter ask
again for an out-of-range index instead of caching it. Everything goes through the reply
cache: a rerun replays every round, regenerations included, without sending a request.
The cache keys on the conversation, not the id, so a regeneration (whose conversation
holds the earlier reply) is a new question; its ``custom_id`` ``<name>/<task>/<part>#regenN``
marks the attempt for logs and quarantine (part: ``paper``, ``section <start>-<stop>``,
``select``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, NamedTuple

from tasks.common.llm.cache import ChatStats, ReplyCache, cached_chat
from tasks.common.llm.port import ChatFailure, ChatModel, ChatReply, ChatRequest, Sampling
from tasks.evidencebench.baselines import pool_and_hypothesis, task_sizes
from tasks.evidencebench.llm_steps import DEFAULT_SAMPLING, Prompt, load_prompt
from tasks.evidencebench.retrieval_format import FOCUS, RetrievalValidator, render_pool_elements, sections
from tasks.evidencebench.selection import TASK_K, Task

Strategy = Literal["default", "section", "regenerate"]


@dataclass(frozen=True)
class RetrievalStats(ChatStats):
    """:class:`ChatStats` of every call, plus what the strategy did.

    ``calls``: :func:`cached_chat` calls made; ``regenerations``: regeneration requests
    (App. E.5) among those answered; ``truncated``: ``custom_id`` of each final reply that
    still listed more than K and was cut to its first K; ``skipped_select``: tasks of the
    section strategy whose step-1 union had at most K elements (no step 2 asked).
    """

    calls: int = 0
    regenerations: int = 0
    truncated: tuple[str, ...] = ()
    skipped_select: int = 0


class RetrievalRun(NamedTuple):
    """What :meth:`LLMRetriever.select_all` returns.

    ``selections``: instance → task → pool indices (at most K, in the model's order; the
    step-1 union ascending when step 2 was skipped) for every task that got an answer;
    ``failures``: instance → task → the failure that ended it (the first, when several
    requests of a task failed). A task is in exactly one of the two.
    """

    selections: dict[str, dict[Task, list[int]]]
    failures: dict[str, dict[Task, ChatFailure]]
    stats: RetrievalStats


class RetrievalFailed(ValueError):
    """A task of an instance got no valid reply (raised where a :data:`System` must answer everything)."""


@dataclass(frozen=True)
class _Ask:
    """One question about (instance, task, part) and the conversation that asks it."""

    name: str
    task: Task
    part: str  # "paper", "section <start>-<stop>", "select"
    k: int
    allowed: range | frozenset[int]
    messages: tuple[Mapping[str, str], ...]
    regenerations: int = 0

    @property
    def custom_id(self) -> str:
        attempt = f"#regen{self.regenerations}" if self.regenerations else ""
        return f"{self.name}/{self.task}/{self.part}{attempt}"


@dataclass
class _Round:
    """What a batch of questions ended in (replies cut to K where the strategy says)."""

    picks: dict[tuple[str, Task, str], tuple[int, ...]] = field(default_factory=dict)
    failures: dict[tuple[str, Task, str], ChatFailure] = field(default_factory=dict)
    stats: ChatStats = field(default_factory=ChatStats)
    calls: int = 0
    regenerations: int = 0
    truncated: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LLMRetriever:
    """An LLM evidence-retrieval system (App. E): ``(name, instance) -> {task: indices}``.

    ``strategy``: see the module docstring. ``max_regenerations``: regeneration requests
    per question before the reply is cut to K (``"regenerate"`` and ``"section"`` only).
    Prompt fields override ``prompts/evidencebench/retrieve*.md``; ``sampling`` is sent with
    every request (it enters the cache key).
    """

    model: ChatModel
    cache: ReplyCache
    strategy: Strategy = "default"
    sampling: Sampling = field(default_factory=lambda: DEFAULT_SAMPLING)
    max_regenerations: int = 3
    prompt: Prompt | None = None
    section_prompt: Prompt | None = None
    select_prompt: Prompt | None = None
    regenerate_prompt: Prompt | None = None

    def __post_init__(self) -> None:
        if self.strategy not in ("default", "section", "regenerate"):
            raise ValueError(f"unknown strategy {self.strategy!r}: default, section or regenerate")
        if self.max_regenerations < 0:
            raise ValueError(f"max_regenerations must be at least 0, got {self.max_regenerations}")

    def __call__(self, name: str, instance: Mapping[str, Any]) -> dict[Task, list[int]]:
        """One instance through :meth:`select_all`; a failed task raises :class:`RetrievalFailed`."""
        run = self.select_all({name: instance})
        failed = run.failures.get(name)
        if failed:
            task, failure = next(iter(failed.items()))
            raise RetrievalFailed(
                f"{name}: {task} got no valid reply ({failure.custom_id}: {failure.reason}, {failure.detail})"
            )
        return run.selections.get(name, {})

    def select_all(self, data: Mapping[str, Mapping[str, Any]]) -> RetrievalRun:
        """Every instance's tasks through the model, batched per round (see the module docstring).

        Instances are checked before anything is sent: a blank hypothesis, an empty or blank
        pool, or (section strategy) sentence types that do not match the pool raise ValueError.
        """
        plans = {name: self._plan(name, instance) for name, instance in data.items()}
        out = _Outcome(selections={name: {} for name in data})
        if self.strategy == "section":
            self._by_section(plans, out)
        else:
            self._whole_paper(plans, out)
        chat = {f.name: getattr(out.total.stats, f.name) for f in fields(ChatStats)}
        stats = RetrievalStats(
            **chat,
            calls=out.total.calls,
            regenerations=out.total.regenerations,
            truncated=tuple(sorted(out.total.truncated)),
            skipped_select=out.skipped_select,
        )
        return RetrievalRun(out.selections, out.failures, stats)

    def _whole_paper(self, plans: Mapping[str, _Plan], out: _Outcome) -> None:
        """Strategies default and regenerate: one question per task showing the whole pool."""
        prompt = self._prompt("retrieve")
        asks = [
            self._question(name, task, k, "paper", plan, range(len(plan.pool)), prompt)
            for name, plan in plans.items()
            for task, k in plan.sizes.items()
        ]
        out.settle(asks, self._ask(asks, out.total))

    def _by_section(self, plans: Mapping[str, _Plan], out: _Outcome) -> None:
        """Strategy section: step 1 per (task, section), then step 2 over each task's union when it exceeds K."""
        section_prompt, select_prompt = self._prompt("retrieve_section"), self._prompt("retrieve_select")
        step1 = self._ask(
            [
                self._question(name, task, k, _section_part(span), plan, span, section_prompt)
                for name, plan in plans.items()
                for task, k in plan.sizes.items()
                for span in plan.sections
            ],
            out.total,
        )
        finals: list[_Ask] = []
        for name, plan in plans.items():
            for task, k in plan.sizes.items():
                union: set[int] = set()
                for span in plan.sections:
                    key = (name, task, _section_part(span))
                    if key in step1.failures:
                        out.fail(name, task, step1.failures[key])
                    else:
                        union.update(step1.picks[key])
                if task in out.failures.get(name, {}):
                    continue
                if len(union) <= k:  # step 2 could only drop elements, never raise recall
                    out.selections[name][task] = sorted(union)
                    out.skipped_select += 1
                else:
                    finals.append(
                        self._question(name, task, k, "select", plan, frozenset(union), select_prompt)
                    )
        out.settle(finals, self._ask(finals, out.total))

    # -- internals ----------------------------------------------------------------------

    def _prompt(
        self, step: Literal["retrieve", "retrieve_section", "retrieve_select", "retrieve_regenerate"]
    ) -> Prompt:
        override = {
            "retrieve": self.prompt,
            "retrieve_section": self.section_prompt,
            "retrieve_select": self.select_prompt,
            "retrieve_regenerate": self.regenerate_prompt,
        }[step]
        return override or load_prompt(step)

    def _plan(self, name: str, instance: Mapping[str, Any]) -> _Plan:
        pool, hypothesis = pool_and_hypothesis(instance, name)
        spans: list[range] = []
        if self.strategy == "section":
            types = instance.get("sentence_types_in_candidate_pool")
            if not isinstance(types, list) or len(types) != len(pool):
                raise ValueError(
                    f"{name}: sentence_types_in_candidate_pool must list one type per pool sentence "
                    f"({len(pool)}), got {len(types) if isinstance(types, list) else type(types).__name__}"
                )
            spans = sections(types, name)
        return _Plan(hypothesis.strip(), pool, task_sizes(instance, name), spans)

    def _question(
        self,
        name: str,
        task: Task,
        k: int,
        part: str,
        plan: _Plan,
        allowed: range | frozenset[int],
        prompt: Prompt,
    ) -> _Ask:
        shown = allowed if isinstance(allowed, range) else sorted(allowed)
        request = prompt.request(
            "",
            self.sampling,
            hypothesis=plan.hypothesis,
            elements=render_pool_elements(plan.pool, shown),
            k=str(k),
            focus=FOCUS[TASK_K[task][0]],
        )
        return _Ask(name, task, part, k, allowed, request.messages)

    def _ask(self, asks: list[_Ask], total: _Round) -> _Round:
        """Every question to its end: a reply within K, a cut reply, or a failure; regenerating per strategy.

        A regeneration request that fails ends the question as that failure (the earlier
        over-K reply is not cut and kept instead: the failure must be seen, not hidden).
        """
        out = _Round()
        regenerate = self.strategy != "default"
        pending = asks
        while pending:
            groups: dict[RetrievalValidator, list[_Ask]] = {}
            for ask in pending:
                groups.setdefault(RetrievalValidator(ask.allowed), []).append(ask)
            following: list[_Ask] = []
            for validator, group in groups.items():
                requests = [
                    ChatRequest(custom_id=ask.custom_id, messages=ask.messages, sampling=self.sampling)
                    for ask in group
                ]
                outcomes, stats = cached_chat(self.model, self.cache, requests, validator)
                out.stats, out.calls = out.stats + stats, out.calls + 1
                out.regenerations += sum(1 for ask in group if ask.regenerations)
                for ask, outcome in zip(group, outcomes, strict=True):
                    key = (ask.name, ask.task, ask.part)
                    if isinstance(outcome, ChatFailure):
                        out.failures[key] = outcome
                        continue
                    assert isinstance(outcome, ChatReply)
                    picks: tuple[int, ...] = outcome.value
                    if len(picks) <= ask.k:
                        out.picks[key] = picks
                    elif regenerate and ask.regenerations < self.max_regenerations:
                        following.append(self._regeneration(ask, outcome.text))
                    else:
                        out.picks[key] = picks[: ask.k]
                        out.truncated.append(ask.custom_id)
            pending = following
        total.stats, total.calls = total.stats + out.stats, total.calls + out.calls
        total.regenerations += out.regenerations
        total.truncated.extend(out.truncated)
        return out

    def _regeneration(self, ask: _Ask, reply: str) -> _Ask:
        """App. E.5: the conversation so far, the model's reply, and the message saying it listed too many."""
        note = self._prompt("retrieve_regenerate").render(k=str(ask.k))
        messages = (*ask.messages, {"role": "assistant", "content": reply}, {"role": "user", "content": note})
        return replace(ask, messages=messages, regenerations=ask.regenerations + 1)


@dataclass(frozen=True)
class _Plan:
    """One instance, checked: its hypothesis, pool, task sizes and (section strategy) sections."""

    hypothesis: str
    pool: list[str]
    sizes: dict[Task, int]
    sections: list[range]


@dataclass
class _Outcome:
    """What :meth:`LLMRetriever.select_all` accumulates over its rounds."""

    selections: dict[str, dict[Task, list[int]]]
    failures: dict[str, dict[Task, ChatFailure]] = field(default_factory=dict)
    total: _Round = field(default_factory=_Round)
    skipped_select: int = 0

    def fail(self, name: str, task: Task, failure: ChatFailure) -> None:
        """Record the first failure of a task (later ones of the same task add nothing to act on)."""
        self.failures.setdefault(name, {}).setdefault(task, failure)

    def settle(self, asks: list[_Ask], answered: _Round) -> None:
        """Each question's task ends as its reply's picks or its failure."""
        for ask in asks:
            key = (ask.name, ask.task, ask.part)
            if key in answered.failures:
                self.fail(ask.name, ask.task, answered.failures[key])
            else:
                self.selections[ask.name][ask.task] = list(answered.picks[key])


def _section_part(span: range) -> str:
    return f"section {span.start}-{span.stop}"
