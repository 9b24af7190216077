"""The reply cache: every paid chat request is answered at most once.

:func:`cached_chat` puts a :class:`~tasks.common.llm.port.ChatModel` behind a :class:`ReplyCache`.
A request's key (:func:`request_key`) is the sha256 of the canonical JSON of everything that
changes the reply: engine, model, the adapter's ``options()``, messages, sampling, the
JSON schema with its name, and the GBNF grammar. Not ``custom_id``: the same question asked
under two ids is one request. A request without a grammar keys as it did before grammars
existed (neither the grammar nor the adapter's ``grammar_field`` option enters its key), so
caches filled then stay valid. Only replies that passed validation are stored; they are
written as each one arrives, so a crash part-way through a long call loses nothing already
paid for, and a rerun sends only what is still unanswered. Failures are not stored: a rerun asks again.

Several workers sharing one cache file (a process pool, Ray workers) never send one request twice:
:func:`cached_chat` claims its misses as a batch before sending (``irforge/sqlite_cache.py``,
:meth:`~irforge.sqlite_cache.SqliteCache.fill`) and waits for those another worker claimed, using
its reply as a hit; a request that failed, or whose worker died (its lease lapsed), is claimed again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from irforge.fingerprint import canonical_json
from irforge.progress import meter
from irforge.sqlite_cache import SqliteCache
from tasks.common.llm.port import (
    ChatFailure,
    ChatModel,
    ChatModelError,
    ChatOutcome,
    ChatReply,
    ChatRequest,
    OnOutcome,
    ReplyInvalid,
    Validator,
)


def plain(value: Any) -> Any:
    """``value`` with every mapping turned into a dict and every tuple into a list (for JSON)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def request_key(engine: str, model: str, options: Mapping[str, Any], request: ChatRequest) -> str:
    """The cache key of ``request`` sent to ``model`` through adapter ``engine`` with ``options``."""
    if request.grammar is None:
        # Where a grammar would be sent changes nothing for a request that has none.
        options = {k: v for k, v in options.items() if k != "grammar_field"}
    material = {
        "engine": engine,
        "model": model,
        "options": plain(options),
        "messages": plain(request.messages),
        "sampling": request.sampling.model_dump(mode="json"),
        "json_schema": plain(request.json_schema),
        # The name is sent with the schema (OpenAI's json_schema.name) and may steer the reply.
        "schema_name": request.schema_name if request.json_schema is not None else None,
    }
    if request.grammar is not None:
        material["grammar"] = request.grammar
    return hashlib.sha256(canonical_json(material).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class StoredReply:
    """A validated reply as the cache keeps it (the value is recomputed by the validator)."""

    text: str
    model: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


class ReplyCache(SqliteCache[StoredReply]):
    """Validated replies by request key, in one SQLite file (WAL: one writer, many readers).

    ``put_many`` commits before it returns (``synchronous=FULL``), so a reply that was paid
    for survives a crash of the process right after. The first reply stored for a key is
    kept (a later one for the same key is ignored): reruns are stable. Safe to share
    between threads of one process; several processes may open the same file.
    """

    table = "replies"
    columns: ClassVar[Mapping[str, str]] = {
        "text": "TEXT NOT NULL",
        "model": "TEXT NOT NULL",
        "finish_reason": "TEXT NOT NULL",
        "prompt_tokens": "INTEGER NOT NULL",
        "completion_tokens": "INTEGER NOT NULL",
    }
    what = "reply cache"
    error = ChatModelError

    def _row(self, value: StoredReply) -> tuple[Any, ...]:
        return (value.text, value.model, value.finish_reason, value.prompt_tokens, value.completion_tokens)

    def _value(self, row: tuple[Any, ...]) -> StoredReply:
        return StoredReply(*row)


@dataclass(frozen=True)
class ChatStats:
    """What one :func:`cached_chat` call did.

    ``hits``: requests answered from the cache (each position counts); ``sent``: distinct
    requests sent to the model (a request repeated under several ids is sent once);
    ``replies`` / ``failures`` (by reason): how those sent requests ended; tokens and
    ``attempts`` (HTTP requests): what was paid in this call, so cache hits count 0.
    """

    hits: int = 0
    sent: int = 0
    replies: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 0

    def __add__(self, other: ChatStats) -> ChatStats:
        return ChatStats(
            hits=self.hits + other.hits,
            sent=self.sent + other.sent,
            replies=self.replies + other.replies,
            failures=dict(Counter(self.failures) + Counter(other.failures)),
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            attempts=self.attempts + other.attempts,
        )


def _from_cache(request: ChatRequest, stored: StoredReply, value: Any) -> ChatReply:
    return ChatReply(
        custom_id=request.custom_id,
        text=stored.text,
        value=value,
        model=stored.model,
        finish_reason=stored.finish_reason,
        prompt_tokens=stored.prompt_tokens,
        completion_tokens=stored.completion_tokens,
        attempts=0,
        cached=True,
    )


class _Sender:
    """Sends the misses of one :func:`cached_chat` call, in one or more ``model.run`` rounds."""

    def __init__(
        self,
        model: ChatModel,
        cache: ReplyCache,
        requests: Sequence[ChatRequest],
        positions: dict[str, list[int]],
        outcomes: list[ChatOutcome | None],
        validate: Validator,
        on_outcome: OnOutcome | None,
    ) -> None:
        self.model, self.cache, self.requests, self.positions = model, cache, requests, positions
        self.outcomes, self.validate, self.on_outcome = outcomes, validate, on_outcome
        self.key_of: dict[str, str] = {}  # custom_id sent -> key
        self.ended: dict[str, ChatOutcome] = {}  # key -> outcome of the request sent for it

    def send(self, keys: list[str]) -> None:
        to_send = [self.requests[self.positions[key][0]] for key in keys]
        self.key_of.update((r.custom_id, key) for r, key in zip(to_send, keys, strict=True))
        returned = self.model.run(to_send, self.validate, self.record)
        if [o.custom_id for o in returned] != [r.custom_id for r in to_send]:
            raise ChatModelError(
                f"{self.model.engine} returned {len(returned)} outcomes that do not match the {len(to_send)} "
                "requests sent, in order: the adapter is broken; report it (valid replies already seen are cached)"
            )
        for outcome in returned:
            if self.key_of[outcome.custom_id] not in self.ended:  # an adapter that skipped on_outcome
                self.record(outcome)

    def record(self, outcome: ChatOutcome) -> None:
        key = self.key_of.get(outcome.custom_id)
        if key is None or key in self.ended:
            raise ChatModelError(
                f"{self.model.engine} answered {outcome.custom_id!r}, which was not asked or was answered "
                "already: the adapter is broken; report it"
            )
        if isinstance(outcome, ChatReply):
            self.cache.put_many([(key, _stored(outcome))])
        self.ended[key] = outcome
        for i in self.positions[key]:
            self.hand_out(i, dataclasses.replace(outcome, custom_id=self.requests[i].custom_id))

    def hand_out(self, i: int, outcome: ChatOutcome) -> None:
        self.outcomes[i] = outcome
        if self.on_outcome is not None:
            self.on_outcome(outcome)


def cached_chat(
    model: ChatModel,
    cache: ReplyCache,
    requests: Sequence[ChatRequest],
    validate: Validator,
    on_outcome: OnOutcome | None = None,
) -> tuple[list[ChatOutcome], ChatStats]:
    """Answer ``requests`` through ``model``, paying only for those not in ``cache``.

    Cached replies are validated again (a stored text the validator now refuses is asked
    again) and come back with ``cached=True``, ``attempts=0`` and the token counts they
    were bought with. Misses are deduplicated by key (first occurrence order), claimed
    (:meth:`~irforge.sqlite_cache.SqliteCache.fill`) and sent in one ``model.run``; each
    valid reply is committed to the cache as it arrives, then handed out under every
    ``custom_id`` that asked it. Misses another worker has claimed are waited for and count
    as hits. ``on_outcome`` sees every outcome: the hits first, then the rest as they end; a
    :func:`irforge.progress.meter` counts them.
    Outcomes align with ``requests``.
    """
    ids = [r.custom_id for r in requests]
    if len(set(ids)) != len(ids):
        twice = next(i for i, n in Counter(ids).items() if n > 1)
        raise ValueError(f"custom_id {twice!r} is given twice: ids must be unique per call")
    engine, options = model.engine, model.options()
    keys = [request_key(engine, model.model, options, r) for r in requests]
    stored = cache.get_many(keys)
    values: dict[str, Any] = {}
    for key, reply in stored.items():
        with contextlib.suppress(ReplyInvalid):  # no longer valid (the validator changed): ask again
            values[key] = validate(reply.text)

    outcomes: list[ChatOutcome | None] = [None] * len(requests)
    positions: dict[str, list[int]] = {}  # key of a miss -> positions asking it, first occurrence order
    counted = meter("LLM requests", len(requests))  # shown beside the stage's rows

    def ended(outcome: ChatOutcome) -> None:
        counted.advance()
        if on_outcome is not None:
            on_outcome(outcome)

    sender = _Sender(model, cache, requests, positions, outcomes, validate, ended)
    for i, (key, request) in enumerate(zip(keys, requests, strict=True)):
        if key in values:
            sender.hand_out(i, _from_cache(request, stored[key], values[key]))
        else:
            positions.setdefault(key, []).append(i)

    refused = [key for key in positions if key in stored]  # the cache keeps them: never waited for
    waited = cache.fill([key for key in positions if key not in stored], sender.send, unclaimed=refused)
    late: list[str] = []  # stored by another worker, refused by this validator
    for key, reply in waited.items():
        try:
            value = validate(reply.text)
        except ReplyInvalid:
            late.append(key)
            continue
        for i in positions[key]:
            sender.hand_out(i, _from_cache(requests[i], reply, value))
    if late:
        sender.send(late)

    sent_outcomes = list(sender.ended.values())
    stats = ChatStats(
        hits=len(requests) - sum(len(positions[key]) for key in sender.ended),
        sent=len(sent_outcomes),
        replies=sum(isinstance(o, ChatReply) for o in sent_outcomes),
        failures=dict(Counter(o.reason for o in sent_outcomes if isinstance(o, ChatFailure))),
        prompt_tokens=sum(o.prompt_tokens for o in sent_outcomes),
        completion_tokens=sum(o.completion_tokens for o in sent_outcomes),
        attempts=sum(o.attempts for o in sent_outcomes),
    )
    return [o for o in outcomes if o is not None], stats


def _stored(reply: ChatReply) -> StoredReply:
    return StoredReply(
        text=reply.text,
        model=reply.model,
        finish_reason=reply.finish_reason,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
    )
