"""What every LLM stage shares: the cached call, the cost, kept rows and excluded rows.

An LLM stage is a config, a request builder and a reply parser (the ``format_input`` /
``format_output`` of distilabel's tasks: https://argilla-io.github.io/distilabel/1.1.0/sections/learn/tutorial/task).
:class:`LLMCalls` does the rest for one chunk: it sends each step's requests through the
reply cache at ``<cache_dir>/llm_replies.sqlite`` (:func:`ask`; the model validates and
re-asks), turns a request that ended without a valid reply into an excluded row
(:func:`failure_fields`: ``invalid_reply``, ``truncated`` or ``request_failed`` with the
raw reply), remembers each row's replies for the kept row's :data:`LLM_COST_FIELDS`, and
sums what was paid into the manifest's cost (:func:`llm_cost`).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from irforge.contents import accounting
from irforge.errors import IrforgeError
from irforge.parallel import CPU, Resources
from irforge.stage import ChunkResult, StageContext, exclusion_schema, rows_to_table
from tasks.common.llm.cache import ChatStats, ReplyCache, cached_chat
from tasks.common.llm.config import LLMConfig, chat_model, cost_usd
from tasks.common.llm.port import (
    ChatFailure,
    ChatModel,
    ChatOutcome,
    ChatReply,
    ChatRequest,
    ReplyInvalid,
    Validator,
)

REPLY_CACHE = "llm_replies.sqlite"
"""The reply cache's file in the run's cache folder, shared by every LLM stage."""

LLM_COST_FIELDS = (
    pa.field("engine", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("prompt_tokens", pa.int64(), nullable=False),
    pa.field("completion_tokens", pa.int64(), nullable=False),
    accounting(pa.field("attempts", pa.int32(), nullable=False)),
    accounting(pa.field("cached", pa.bool_(), nullable=False)),
)
"""Every LLM stage's last columns: which model answered and what its requests cost."""
_COST_NAMES = frozenset(field.name for field in LLM_COST_FIELDS)

Row = dict[str, Any]
"""A unit's row as a stage handles it: its input columns, then the columns its steps add."""
Check = Callable[[Row, ChatReply], Mapping[str, Any] | None]
"""Looks at a valid reply with its row: None keeps the row, else the excluded row's fields."""


def required(**types: pa.DataType) -> list[pa.Field]:
    """Columns that are never null, in the order given: ``required(unit_id=pa.string())``."""
    return [pa.field(name, kind, nullable=False) for name, kind in types.items()]


def kept_schema(*fields: pa.Field) -> pa.Schema:
    """The kept rows of an LLM stage: ``fields``, then :data:`LLM_COST_FIELDS`."""
    return pa.schema([*fields, *LLM_COST_FIELDS])


def failure_schema(
    *identity: pa.Field, step: bool = True, extra: Sequence[pa.Field] = (), attempts_required: bool = True
) -> pa.Schema:
    """The excluded rows of an LLM stage: ``reason``, ``detail``, the row's ``identity``, the
    ``step`` that excluded it, ``extra`` columns, the raw reply and the attempts it took."""
    return exclusion_schema(
        *identity,
        *([pa.field("step", pa.string(), nullable=False)] if step else []),
        *extra,
        pa.field("raw_reply", pa.string()),
        accounting(pa.field("attempts", pa.int32(), nullable=not attempts_required)),
    )


def llm_resources(llm: LLMConfig | None) -> Resources:
    """What one chunk of an LLM stage needs where it runs (``StageSpec.resources``), by engine
    (None, no LLM asked: a CPU worker).

    - ``llama-cpp``: the embedded server is started once per process and already answers the
      chunk's requests one after another; chunks in other processes would each start one (a
      model load, and its memory, per worker): they stay in the stage's process.
    - ``vllm-batch``: each chunk runs ``vllm run-batch`` on a GPU: one GPU per chunk.
    - ``openai``: a remote server; the chunks run in parallel, on CPU workers, unless
      ``requests_per_second`` is set: that limit holds within one process (a pool of workers
      would each send at that rate), so the chunks then stay in the stage's process.
    """
    if llm is None:
        return CPU
    if llm.engine == "llama-cpp":
        return Resources(parallel=False)
    if llm.engine == "vllm-batch":
        return Resources(num_gpus=1)
    return CPU if llm.requests_per_second is None else Resources(parallel=False)


def _folders(ctx: StageContext[Any]) -> tuple[Path, Path]:
    if ctx.cache_dir is None or ctx.files_dir is None:
        raise IrforgeError("no cache or work folder for the LLM replies (run the stage through the engine)")
    return ctx.cache_dir, ctx.files_dir


@contextlib.contextmanager
def llm_session(ctx: StageContext[Any], llm: LLMConfig) -> Iterator[tuple[ChatModel, ReplyCache]]:
    """The stage's chat model and the reply cache, open for several :func:`cached_chat` calls."""
    cache_dir, files_dir = _folders(ctx)
    model = chat_model(llm, ctx.base_dir, files_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with ReplyCache(cache_dir / REPLY_CACHE) as cache:
        yield model, cache


def ask(
    ctx: StageContext[Any], llm: LLMConfig, requests: Sequence[ChatRequest], validate: Validator
) -> tuple[list[ChatOutcome], ChatStats]:
    """``requests`` answered through the reply cache (no model is started for none)."""
    _folders(ctx)
    if not requests:
        return [], ChatStats()
    with llm_session(ctx, llm) as (model, cache):
        return cached_chat(model, cache, requests, validate)


def llm_cost(llm: LLMConfig, stats: ChatStats) -> dict[str, float]:
    """The manifest's cost entry for the requests behind ``stats``."""
    return {
        "requests_sent": stats.sent,
        "cache_hits": stats.hits,
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "usd": cost_usd(llm, stats.prompt_tokens, stats.completion_tokens),
    }


def failure_fields(step: str | None, outcome: ChatFailure) -> dict[str, Any]:
    """The excluded-row fields of a request that ended without a valid reply.

    With a ``step`` the detail starts with it and the row gets a ``step`` column."""
    if step is None:
        return {
            "reason": outcome.reason,
            "detail": outcome.detail,
            "raw_reply": outcome.raw_text,
            "attempts": outcome.attempts,
        }
    return {**failure_fields(None, outcome), "detail": f"{step}: {outcome.detail}", "step": step}


def reply_failure(reply: ChatReply, detail: str) -> ChatFailure:
    """A valid reply refused by a check that needs the request (``invalid_reply``, tokens kept).

    The reply stays cached, so a rerun refuses it again instead of paying for it again."""
    return ChatFailure(
        custom_id=reply.custom_id,
        reason="invalid_reply",
        detail=detail,
        raw_text=reply.text,
        attempts=reply.attempts,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
    )


def recheck(step: str, validator: Callable[[Row], Validator]) -> Check:
    """A :data:`Check` running ``validator(row)`` on the reply's text, for a rule that needs the
    request (the chat model's validator sees only the reply): what it refuses is ``invalid_reply``."""

    def check(row: Row, reply: ChatReply) -> Mapping[str, Any] | None:
        try:
            validator(row)(reply.text)
        except ReplyInvalid as err:
            return failure_fields(step, reply_failure(reply, str(err)))
        return None

    return check


def spent(*replies: ChatReply) -> dict[str, Any]:
    """What the replies of one unit cost together (``cached``: every one came from the cache)."""
    return {
        "prompt_tokens": sum(r.prompt_tokens for r in replies),
        "completion_tokens": sum(r.completion_tokens for r in replies),
        "attempts": sum(r.attempts for r in replies),
        "cached": all(r.cached for r in replies),
    }


def constrained(request: ChatRequest, grammar: str | None) -> ChatRequest:
    """``request`` with a GBNF grammar on its reply's form (servers without grammars ignore it)."""
    return request if grammar is None else replace(request, grammar=grammar)


class LLMCalls:
    """The LLM steps of one chunk of a stage, whose rows are dicts that gain columns step by step.

    :meth:`step` asks one request per row; a row whose request failed (or whose reply a
    :data:`Check` refuses) becomes an excluded row: the row's values of the columns of
    ``excluded_schema``, then the failure's fields. :meth:`result` writes each kept row as
    its values of the columns of ``schema``, the model that answered it last and what all of
    its replies cost (:data:`LLM_COST_FIELDS`), with the chunk's cost.
    """

    def __init__(
        self, ctx: StageContext[Any], llm: LLMConfig, schema: pa.Schema, excluded_schema: pa.Schema
    ) -> None:
        self.ctx, self.llm = ctx, llm
        self.schema, self.excluded_schema = schema, excluded_schema
        self.excluded: list[Row] = []
        self.stats = ChatStats()
        self._replies: dict[int, tuple[Row, dict[str | None, list[ChatReply]]]] = {}

    def session(self) -> contextlib.AbstractContextManager[tuple[ChatModel, ReplyCache]]:
        """The chat model and the reply cache, for a step that calls :func:`cached_chat` itself
        (its cost then goes to :attr:`stats`, its replies to :meth:`record`)."""
        return llm_session(self.ctx, self.llm)

    def ask(self, requests: Sequence[ChatRequest], validate: Validator) -> list[ChatOutcome]:
        """``requests`` through the reply cache; their cost is added to the chunk's."""
        outcomes, stats = ask(self.ctx, self.llm, requests, validate)
        self.stats = self.stats + stats
        return outcomes

    def step(
        self,
        step: str | None,
        rows: Sequence[Row],
        request: Callable[[Row], ChatRequest],
        validate: Validator,
        *,
        grammar: str | Callable[[Row], str | None] | None = None,
        into: str | None = None,
        check: Check | None = None,
    ) -> list[Row]:
        """One request per row (with ``grammar``, or ``grammar(row)``, on its reply where the
        server takes grammars) in one cached call; see :meth:`settle`."""
        requests = [constrained(request(row), grammar(row) if callable(grammar) else grammar) for row in rows]
        return self.settle(step, rows, self.ask(requests, validate), into=into, check=check)

    def settle(
        self,
        step: str | None,
        rows: Sequence[Row],
        outcomes: Sequence[ChatOutcome],
        *,
        into: str | None = None,
        check: Check | None = None,
    ) -> list[Row]:
        """The rows whose outcome is a valid reply that ``check`` keeps, each with the reply's
        value in column ``into``; the others are excluded, in row order.

        ``step`` names the step in an excluded row's ``detail`` and ``step`` (None: neither)."""
        answered: list[Row] = []
        for row, outcome in zip(rows, outcomes, strict=True):
            if isinstance(outcome, ChatFailure):
                self.exclude(row, **failure_fields(step, outcome))
                continue
            assert isinstance(outcome, ChatReply)
            self.record(row, step, [outcome])
            if into is not None:
                row[into] = outcome.value
            refused = check(row, outcome) if check is not None else None
            if refused is not None:
                self.exclude(row, **refused)
            else:
                answered.append(row)
        return answered

    def record(self, row: Row, step: str | None, replies: Sequence[ChatReply]) -> Row:
        """``replies`` answered ``row`` in ``step``: the kept row's model and cost count them.
        Returns ``row``."""
        self._replies.setdefault(id(row), (row, {}))[1][step] = list(replies)
        return row

    def exclude(self, row: Row, **fields: Any) -> None:
        """Exclude ``row``: its values of the excluded columns, then ``fields`` (``reason``, ``detail`` ...)."""
        self.excluded.append({**{n: row[n] for n in self.excluded_schema.names if n in row}, **fields})

    def kept(self, row: Row) -> Row:
        """``row`` as a kept row: its values of the kept columns, the model that answered its
        last step (the configured one without a reply) and what all its replies cost."""
        steps = list(self._replies.get(id(row), (row, {}))[1].values())
        last = steps[-1] if steps else []
        model = last[0].model if last else self.llm.model
        columns = {n: row[n] for n in self.schema.names if n not in _COST_NAMES}
        replies = [reply for step in steps for reply in step]
        return {**columns, "engine": self.llm.engine, "model": model, **spent(*replies)}

    def result(self, kept: Sequence[Row], **tables: pa.Table) -> ChunkResult:
        """The chunk's ``kept`` rows and excluded rows, side ``tables`` and cost."""
        return ChunkResult(
            rows_to_table([self.kept(row) for row in kept], self.schema),
            rows_to_table(self.excluded, self.excluded_schema),
            tables=tables,
            cost=llm_cost(self.llm, self.stats),
        )


_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)


def json_reply(text: str) -> Any:
    """A reply's JSON value; a Markdown code fence around it (models without constrained
    decoding often add one) is allowed. :class:`~tasks.common.llm.port.ReplyInvalid` if not JSON."""
    body = text.strip()
    fenced = _FENCE.match(body)
    try:
        return json.loads(fenced.group(1) if fenced else body)
    except json.JSONDecodeError as exc:
        raise ReplyInvalid(f"not JSON ({exc.msg} at char {exc.pos})") from None


def json_object(text: str, keys: frozenset[str]) -> dict[str, Any]:
    """A reply's JSON object (:func:`json_reply`) with exactly ``keys``; ReplyInvalid otherwise."""
    value = json_reply(text)
    if not isinstance(value, dict) or set(value) != keys:
        shown = ", ".join(f'"{k}": ...' for k in sorted(keys))
        raise ReplyInvalid(f"not the JSON object {{{shown}}}")
    return value
