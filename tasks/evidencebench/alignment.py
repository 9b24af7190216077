"""Sliding-window alignment of study aspects with a paper's text elements (paper 002 App. C).

The pool (a paper's indexed sentences, 0 .. n-1) is cut into windows of
:data:`WINDOW_SIZE` elements every :data:`WINDOW_STRIDE` elements (:func:`windows`). One
chat request per (aspect, window) shows the aspect, the evidence summary as its context and
the window's elements numbered 0 .. len-1 *within the window*; the reply's ``DECISION:``
lists the chosen ones (:func:`parse_selection`). An element is a source of information for
an aspect when ANY window selects it.

Window-local numbers keep the check of a reply independent of where the window lies, so one
validator serves every window of the same length: a whole paper goes to the chat model in
at most two :func:`~tasks.common.llm.cache.cached_chat` calls (full windows, then a shorter last
one), which keeps a batch adapter at one or two jobs per paper. Replies with indices outside
the window, repeats or anything but a list are invalid: the chat model asks again, then the
request ends as a failure that :func:`align` returns under its ``custom_id`` for the stage
to quarantine.

:func:`alignment_cost` counts requests and prompt tokens (whitespace words) of a design, for
comparing the sliding window with one request per (aspect, sentence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tasks.common.llm.cache import ChatStats, ReplyCache, cached_chat
from tasks.common.llm.port import ChatFailure, ChatModel, ChatReply, ChatRequest, OnOutcome, Sampling
from tasks.evidencebench.grammars import selection_grammar
from tasks.evidencebench.llm_steps import Prompt, load_prompt, one_line
from tasks.evidencebench.parsers import decision_indices

WINDOW_SIZE = 10
WINDOW_STRIDE = 5


def windows(n: int, size: int = WINDOW_SIZE, stride: int = WINDOW_STRIDE) -> list[range]:
    """The windows over elements 0 .. n-1: starts 0, stride, 2*stride, ... until one reaches the end.

    Every element is in at least one window; the last window may be shorter; no window lies
    wholly inside the one before it. ``n = 0`` gives no window.
    """
    if n < 0:
        raise ValueError(f"a pool has no negative size ({n})")
    if size < 1 or not 1 <= stride <= size:
        raise ValueError(f"window size {size} and stride {stride}: need size >= 1 and 1 <= stride <= size")
    spans: list[range] = []
    start = 0
    while start < n:
        spans.append(range(start, min(start + size, n)))
        if start + size >= n:
            break
        start += stride
    return spans


def render_elements(texts: Sequence[str]) -> str:
    """A window's elements as ``i: text [End of text element i]`` lines, i from 0 (App. C, Figure 4)."""
    return "\n".join(f"{i}: {one_line(text)} [End of text element {i}]" for i, text in enumerate(texts))


def parse_selection(reply: str, window_len: int) -> tuple[int, ...]:
    """The indices after ``DECISION:``: a list like ``[0, 3]`` or ``[]``, each in 0 .. window_len-1, no repeats.

    Returned sorted. Anything after the list, a non-integer, an index outside the window or
    a repeated index is :class:`ReplyInvalid`.
    """
    outside = f"is outside the window, whose elements are numbered 0 to {window_len - 1}"
    chosen = decision_indices(reply, lambda index: outside if index >= window_len else None)
    return tuple(sorted(chosen))


@dataclass(frozen=True)
class SelectionValidator:
    """The validator of replies about windows of ``window_len`` elements."""

    window_len: int

    def __call__(self, reply: str) -> tuple[int, ...]:
        return parse_selection(reply, self.window_len)


@dataclass(frozen=True)
class AlignmentRequest:
    """The request about ``aspect_id`` and the pool elements in ``window``."""

    request: ChatRequest
    aspect_id: str
    window: range


def alignment_requests(
    aspects: Mapping[str, str],
    summary: str,
    pool: Sequence[str],
    *,
    size: int = WINDOW_SIZE,
    stride: int = WINDOW_STRIDE,
    prompt: Prompt | None = None,
    sampling: Sampling | None = None,
    constrain: bool = False,
    allow_empty: bool = True,
) -> list[AlignmentRequest]:
    """One request per (aspect, window), aspect by aspect; ``custom_id`` is ``<aspect id>@<start>-<stop>``.

    ``aspects`` maps aspect ids to their text. Empty ids, aspects, summary or pool elements
    are errors (a ValueError naming which). ``constrain`` attaches the GBNF grammar of a
    valid reply for the window's length (:func:`~tasks.evidencebench.grammars.selection_grammar`);
    ``allow_empty=False`` makes that grammar require at least one index.
    """
    if not summary.strip():
        raise ValueError("the evidence summary (the aspects' context) is empty")
    for aspect_id, text in aspects.items():
        if not aspect_id.strip():
            raise ValueError("an aspect id is empty")
        if not text.strip():
            raise ValueError(f"aspect {aspect_id!r} is empty")
    blank = [i for i, text in enumerate(pool) if not text.strip()]
    if blank:
        raise ValueError(f"pool element {blank[0]} is empty ({len(blank)} empty element(s) in all)")
    prompt = prompt or load_prompt("align")
    spans = windows(len(pool), size, stride)
    grammars = (
        {len(span): selection_grammar(len(span), allow_empty=allow_empty) for span in spans}
        if constrain
        else {}
    )
    return [
        AlignmentRequest(
            request=replace(
                prompt.request(
                    f"{aspect_id}@{span.start}-{span.stop}",
                    sampling,
                    aspect=one_line(text),
                    summary=summary.strip(),
                    elements=render_elements([pool[i] for i in span]),
                ),
                grammar=grammars.get(len(span)),
            ),
            aspect_id=aspect_id,
            window=span,
        )
        for aspect_id, text in aspects.items()
        for span in spans
    ]


@dataclass(frozen=True)
class Alignment:
    """What :func:`align` found.

    ``selected``: every aspect id → the pool indices selected by any window that answered
    (sorted; empty when none). ``failures``: ``custom_id`` → the failure of each (aspect,
    window) request that got no valid reply, to quarantine; ``failed_windows`` says which
    aspect and window each was. An aspect with a failed window is incomplete: its selection
    misses what that window would have said.
    """

    selected: dict[str, tuple[int, ...]]
    failures: dict[str, ChatFailure]
    failed_windows: dict[str, tuple[str, range]]
    stats: ChatStats = field(default_factory=ChatStats)

    @property
    def incomplete_aspects(self) -> frozenset[str]:
        """Aspects with at least one window that failed."""
        return frozenset(aspect_id for aspect_id, _ in self.failed_windows.values())

    def failure_rows(self, unit_id: str, order: Sequence[str]) -> list[dict[str, Any]]:
        """One row per failed request, by ``custom_id``: its aspect's index in ``order``, its
        window, why it failed and its raw reply (the ``failed_windows`` table of stage ``align``)."""
        rows = []
        for custom_id, failure in sorted(self.failures.items()):
            aspect_id, span = self.failed_windows[custom_id]
            rows.append(
                {
                    "unit_id": unit_id,
                    "custom_id": custom_id,
                    "aspect_index": list(order).index(aspect_id),
                    "window_start": span.start,
                    "window_stop": span.stop,
                    "reason": failure.reason,
                    "detail": failure.detail,
                    "raw_reply": failure.raw_text,
                    "attempts": failure.attempts,
                }
            )
        return rows

    def failure_detail(self, requests: int) -> str:
        """How many of ``requests`` failed, and why the first one did."""
        first = min(self.failures)
        why = f"{self.failures[first].reason}: {self.failures[first].detail}"
        return (
            f"{len(self.failures)} of {requests} window requests got no valid reply "
            f"(first {first}: {why}); see the failed_windows table"
        )


def align(
    model: ChatModel,
    cache: ReplyCache,
    aspects: Mapping[str, str],
    summary: str,
    pool: Sequence[str],
    *,
    on_outcome: OnOutcome | None = None,
    **design: Any,
) -> Alignment:
    """Align every aspect with the pool through ``model`` behind ``cache`` (nothing is paid twice).

    ``design``: the keywords of :func:`alignment_requests` (window size, stride, prompt,
    sampling, grammar). Every (aspect, window) request ends either in ``selected`` (its
    reply's indices, mapped back to pool indices) or in ``failures``.
    """
    planned = alignment_requests(aspects, summary, pool, **design)
    by_length: dict[int, list[AlignmentRequest]] = {}
    for item in planned:
        by_length.setdefault(len(item.window), []).append(item)
    picked: dict[str, set[int]] = {aspect_id: set() for aspect_id in aspects}
    failures: dict[str, ChatFailure] = {}
    failed_windows: dict[str, tuple[str, range]] = {}
    stats = ChatStats()
    for length, group in by_length.items():
        outcomes, group_stats = cached_chat(
            model, cache, [item.request for item in group], SelectionValidator(length), on_outcome
        )
        stats = stats + group_stats
        for item, outcome in zip(group, outcomes, strict=True):
            if isinstance(outcome, ChatReply):
                picked[item.aspect_id].update(item.window[i] for i in outcome.value)
            else:
                failures[outcome.custom_id] = outcome
                failed_windows[outcome.custom_id] = (item.aspect_id, item.window)
    return Alignment(
        selected={aspect_id: tuple(sorted(indices)) for aspect_id, indices in picked.items()},
        failures=failures,
        failed_windows=failed_windows,
        stats=stats,
    )


@dataclass(frozen=True)
class RequestCost:
    """Requests of a design and their prompt tokens (whitespace-separated words, an estimate)."""

    requests: int
    prompt_tokens: int

    @property
    def tokens_per_request(self) -> float:
        return self.prompt_tokens / self.requests if self.requests else 0.0


def request_cost(requests: Sequence[ChatRequest]) -> RequestCost:
    """How many ``requests`` and how many whitespace words their messages hold."""
    words = sum(len(message["content"].split()) for request in requests for message in request.messages)
    return RequestCost(requests=len(requests), prompt_tokens=words)


def alignment_cost(
    aspects: Mapping[str, str],
    summary: str,
    pool: Sequence[str],
    **design: Any,
) -> RequestCost:
    """The cost of aligning ``aspects`` with ``pool`` with ``design``, the keywords of
    :func:`alignment_requests` (windows of ``size`` every ``stride``, ``prompt``).

    ``size=1, stride=1`` is the design with one request per (aspect, sentence), the same
    prompt showing a single element.
    """
    planned = alignment_requests(aspects, summary, pool, **design)
    return request_cost([item.request for item in planned])


def design_costs(
    aspects: Mapping[str, str], summary: str, pool: Sequence[str], *, prompt: Prompt | None = None
) -> dict[str, RequestCost]:
    """``sliding_window`` (10 / 5) against ``per_sentence`` (one request per aspect and sentence)."""
    return {
        "sliding_window": alignment_cost(aspects, summary, pool, prompt=prompt),
        "per_sentence": alignment_cost(aspects, summary, pool, size=1, stride=1, prompt=prompt),
    }
