"""The OpenAI-compatible chat adapter and the reply cache.

The adapter runs the real ``openai`` client against ``tests/fakes/llm_server.py`` (the OpenAI chat
protocol on loopback, with scripted faults); what the client sent is read back from the
server's records. Backoffs are set to milliseconds so retries cost no wall time.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from irforge.progress import NullProgress, reporting
from tasks.common.llm.cache import ChatStats, ReplyCache, StoredReply, cached_chat, request_key
from tasks.common.llm.config import LLMConfig, chat_model, describe, grammar_field
from tasks.common.llm.openai_chat import OpenAIChatModel
from tasks.common.llm.port import (
    ChatFailure,
    ChatModel,
    ChatModelError,
    ChatOutcome,
    ChatReply,
    ChatRequest,
    ReplyInvalid,
    Sampling,
)
from tasks.common.llm.wire import grammar_fields, merge_fields, retry_after_s
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, llm_server

__all__ = ["llm_server"]  # the fixture, used by parameter name below

JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"explanation": {"type": "string"}, "score": {"type": "integer", "enum": [0, 1, 2]}},
    "required": ["explanation", "score"],
}


def judge(text: str) -> dict[str, Any]:
    """The judge's validator: a JSON object with a string explanation and a score in {0, 1, 2}."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ReplyInvalid(f"not JSON: {err}") from None
    if not isinstance(value, dict) or not isinstance(value.get("explanation"), str):
        raise ReplyInvalid("not an object with a string 'explanation'")
    if value.get("score") not in (0, 1, 2):
        raise ReplyInvalid(f"score {value.get('score')!r} is not 0, 1 or 2")
    return value


def ask(custom_id: str, question: str, **kwargs: Any) -> ChatRequest:
    kwargs.setdefault("json_schema", JUDGE_SCHEMA)
    messages = ({"role": "system", "content": "You judge relevance."}, {"role": "user", "content": question})
    return ChatRequest(custom_id=custom_id, messages=messages, **kwargs)


def questions(n: int, prefix: str = "q") -> list[ChatRequest]:
    return [ask(f"id-{i}", f"{prefix}{i} is this passage relevant") for i in range(n)]


Make = Callable[..., OpenAIChatModel]


@pytest.fixture
def make(llm_server: FakeChat) -> Make:
    """``make(**kwargs)``: a model on the fake server with millisecond backoffs and short timeouts."""

    def build(**kwargs: Any) -> OpenAIChatModel:
        kwargs.setdefault("base_url", llm_server.base_url)
        kwargs.setdefault("model", DEFAULT_MODEL)
        kwargs.setdefault("timeout_s", 5.0)
        kwargs.setdefault("max_attempts", 3)
        kwargs.setdefault("max_invalid_retries", 1)
        kwargs.setdefault("backoff_base_s", 0.001)
        kwargs.setdefault("backoff_max_s", 0.01)
        return OpenAIChatModel(**kwargs)

    return build


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# -- a normal run ----------------------------------------------------------------------


def test_replies_come_back_in_request_order_with_hooks_tokens_and_the_request_as_sent(
    make: Make, llm_server: FakeChat
) -> None:
    seen: list[str] = []
    progress: list[tuple[int, int]] = []
    model = make(progress=lambda done, total: progress.append((done, total)), max_concurrency=3)
    assert isinstance(model, ChatModel)
    requests = questions(7)
    sampling = Sampling(temperature=0.3, top_p=0.9, max_tokens=64, seed=11)
    requests[0] = ask("id-0", "q0 is this passage relevant", sampling=sampling)

    outcomes = model.run(requests, judge, lambda o: seen.append(o.custom_id))

    assert [o.custom_id for o in outcomes] == [r.custom_id for r in requests]
    assert sorted(seen) == sorted(r.custom_id for r in requests)
    assert progress[-1] == (7, 7) and [d for d, _ in progress] == list(range(1, 8))
    first = outcomes[0]
    assert isinstance(first, ChatReply) and not first.cached
    assert first.value == {"explanation": "judged: q0 is this passage relevant", "score": 2}
    assert first.text == json.dumps(first.value)
    assert (first.prompt_tokens, first.completion_tokens) == (3 + 5, len(first.text.split()))  # words
    assert (first.model, first.finish_reason, first.attempts) == (DEFAULT_MODEL, "stop", 1)

    bodies = {r.user_text: r.body for r in llm_server.chats()}
    assert len(bodies) == 7
    body = bodies["q0 is this passage relevant"]
    assert body["model"] == DEFAULT_MODEL
    assert body["messages"] == [dict(m) for m in requests[0].messages]
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.3, 0.9, 64, 11)
    assert bodies["q1 is this passage relevant"]["seed"] == 0  # the default sampling's seed
    assert llm_server.chats()[0].headers["authorization"] == "Bearer EMPTY"


def test_seed_none_is_not_sent(make: Make, llm_server: FakeChat) -> None:
    request = ask("a", "q", sampling=Sampling(seed=None))
    [outcome] = make().run([request], judge)
    assert isinstance(outcome, ChatReply)
    assert "seed" not in llm_server.chats()[0].body


def test_an_empty_list_sends_nothing(make: Make, llm_server: FakeChat) -> None:
    assert make().run([], judge) == []
    assert llm_server.requests == []


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            "json_schema",
            {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": JUDGE_SCHEMA, "strict": True},
            },
        ),
        ("json_object", {"type": "json_object", "schema": JUDGE_SCHEMA}),
        ("none", None),
    ],
)
def test_structured_output_field_in_each_mode(
    make: Make, llm_server: FakeChat, mode: str, expected: dict[str, Any] | None
) -> None:
    model = make(structured_output=mode)
    assert model.options() == {
        "structured_output": mode,
        "grammar_field": "none",
        "server": "openai-compatible",
    }
    outcomes = model.run(
        [ask("with", "with schema", schema_name="verdict"), ask("without", "no schema", json_schema=None)],
        judge,
    )
    assert all(isinstance(o, ChatReply) for o in outcomes)
    bodies = {r.user_text: r.body for r in llm_server.chats()}
    assert bodies["with schema"].get("response_format") == expected
    assert "response_format" not in bodies["no schema"]


GRAMMAR = 'root ::= "{\\"explanation\\": \\"g\\", \\"score\\": 2}"\n'


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("grammar", {"grammar": GRAMMAR}),
        ("guided_grammar", {"guided_grammar": GRAMMAR}),
        ("structured_outputs", {"structured_outputs": {"grammar": GRAMMAR}}),
        ("none", {}),
    ],
)
def test_grammar_field_in_each_mode(
    make: Make, llm_server: FakeChat, field: str, expected: dict[str, Any]
) -> None:
    model = make(grammar_field=field)
    assert model.options()["grammar_field"] == field
    outcomes = model.run(
        [
            ask("with", "with grammar", json_schema=None, grammar=GRAMMAR),
            ask("without", "no grammar", json_schema=None),
            ask("schema", "schema only"),
        ],
        judge,
    )
    assert all(isinstance(o, ChatReply) for o in outcomes)
    fields = ("grammar", "guided_grammar", "structured_outputs")
    bodies = {r.user_text: r.body for r in llm_server.chats()}
    assert {k: v for k, v in bodies["with grammar"].items() if k in fields} == expected
    assert "response_format" not in bodies["with grammar"]
    for other in ("no grammar", "schema only"):
        assert not set(bodies[other]) & set(fields)
    assert "response_format" in bodies["schema only"]  # the schema is still sent as before


def test_grammar_fields_merge_with_other_constraint_fields() -> None:
    body: dict[str, Any] = {"structured_outputs": {"json": {"type": "object"}}, "response_format": {"x": 1}}
    merge_fields(body, grammar_fields("structured_outputs", "g"))
    assert body == {
        "structured_outputs": {"json": {"type": "object"}, "grammar": "g"},
        "response_format": {"x": 1},
    }
    assert grammar_fields("none", "g") == {} and grammar_fields("grammar", None) == {}


def test_a_request_takes_a_schema_or_a_grammar_not_both() -> None:
    with pytest.raises(ValueError, match="both a JSON schema and a grammar"):
        ask("a", "q", grammar=GRAMMAR)
    with pytest.raises(ValueError, match="empty grammar"):
        ask("a", "q", json_schema=None, grammar=" ")


def test_missing_usage_counts_zero_tokens(make: Make) -> None:
    with FakeChat(usage=False) as server:
        [outcome] = make(base_url=server.base_url).run([ask("a", "q")], judge)
    assert isinstance(outcome, ChatReply)
    assert (outcome.prompt_tokens, outcome.completion_tokens) == (0, 0)


# -- faults that the retries absorb ------------------------------------------------------


@pytest.mark.parametrize(
    "fault", [429, 500, "slow", "drop", "bad_json", "out_of_range", "truncated", "no_content"]
)
def test_a_fault_once_ends_as_a_valid_reply_on_the_second_attempt(
    make: Make, llm_server: FakeChat, fault: Any
) -> None:
    llm_server.inject(fault, times=1, when="target")
    model = make(timeout_s=0.5)
    outcomes = model.run([ask("t", "target"), ask("o", "other")], judge)

    target, other = outcomes
    assert isinstance(target, ChatReply), target
    assert target.attempts == 2 and target.value["score"] == 2
    assert isinstance(other, ChatReply) and other.attempts == 1
    assert llm_server.asked().count("target") == 2
    if fault in ("bad_json", "out_of_range", "truncated", "no_content"):
        # The server answered twice: both answers were paid for.
        assert target.prompt_tokens == 2 * other.prompt_tokens
        assert target.completion_tokens > other.completion_tokens or fault == "no_content"


@pytest.mark.parametrize(
    ("fault", "reason", "sends", "raw_text", "says"),
    [
        (500, "request_failed", 3, None, "HTTP 500"),
        (429, "request_failed", 3, None, "HTTP 429"),
        ("slow", "request_failed", 3, None, "timeout_s=0.3"),
        ("drop", "request_failed", 3, None, "cannot reach"),
        ("bad_json", "invalid_reply", 2, "Sure! The passage is relevant, score 2.", "not JSON"),
        ("out_of_range", "invalid_reply", 2, '{"explanation": "judged: target", "score": 7}', "score 7"),
        ("truncated", "truncated", 2, '{"explanation": "judge', "max_tokens=512"),
        ("no_content", "invalid_reply", 2, None, "no text"),
    ],
)
def test_a_persistent_fault_ends_as_the_right_failure(
    make: Make, llm_server: FakeChat, fault: Any, reason: str, sends: int, raw_text: str | None, says: str
) -> None:
    llm_server.inject(fault, times=100, when="target")
    [outcome] = make(timeout_s=0.3).run([ask("t", "target")], judge)

    assert isinstance(outcome, ChatFailure), outcome
    assert (outcome.custom_id, outcome.reason, outcome.raw_text) == ("t", reason, raw_text)
    assert outcome.attempts == sends == len(llm_server.chats())
    assert says in outcome.detail
    if reason != "request_failed":  # answered, so paid
        assert outcome.prompt_tokens == 2 * (3 + 1)  # two asks of system + "target"


def test_transport_retries_are_per_ask(make: Make, llm_server: FakeChat) -> None:
    """An invalid reply is asked again with a fresh transport budget; attempts count every send."""
    llm_server.inject(500, times=2, when="target")
    llm_server.inject("bad_json", times=1, when="target")
    llm_server.inject(500, times=2, when="target")
    [outcome] = make(max_attempts=3, max_invalid_retries=1).run([ask("t", "target")], judge)
    assert isinstance(outcome, ChatReply)
    assert outcome.attempts == 6 == len(llm_server.chats())


def test_4xx_is_not_retried_and_carries_the_servers_message(make: Make, llm_server: FakeChat) -> None:
    llm_server.inject(400, times=5, when="target")
    [outcome] = make().run([ask("t", "target")], judge)
    assert isinstance(outcome, ChatFailure)
    assert (outcome.reason, outcome.attempts, outcome.raw_text) == ("request_failed", 1, None)
    assert "HTTP 400: injected fault 400" in outcome.detail and "not retried" in outcome.detail
    assert len(llm_server.chats()) == 1


def test_an_unknown_model_fails_once_with_the_servers_wording(make: Make, llm_server: FakeChat) -> None:
    outcomes = make(model="no-such-model").run(questions(2), judge)
    for outcome in outcomes:
        assert isinstance(outcome, ChatFailure)
        assert (outcome.reason, outcome.attempts) == ("request_failed", 1)
        assert "The model `no-such-model` does not exist." in outcome.detail
    assert len(llm_server.chats()) == 2


def test_an_unreachable_server_ends_as_request_failed(make: Make) -> None:
    [outcome] = make(base_url=closed_port_url(), max_attempts=2).run([ask("t", "target")], judge)
    assert isinstance(outcome, ChatFailure)
    assert (outcome.reason, outcome.attempts) == ("request_failed", 2)
    assert "cannot reach http://127.0.0.1:" in outcome.detail


def test_retry_after_is_honoured(make: Make) -> None:
    with FakeChat(retry_after="1") as server:
        server.inject(429, times=1)
        started = time.monotonic()
        [outcome] = make(base_url=server.base_url, backoff_max_s=5.0).run([ask("t", "target")], judge)
        waited = time.monotonic() - started
    assert isinstance(outcome, ChatReply) and outcome.attempts == 2
    assert waited >= 1.0  # the server's wait, far above the millisecond backoff


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Thu, 01 Jan 1970 00:00:00 GMT"}, 0.0),  # a date in the past: no wait
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-1"}, None),
        ({}, None),
    ],
)
def test_retry_after_header_forms(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_s(headers) == expected


def test_retry_after_as_a_future_http_date() -> None:
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    wait = retry_after_s({"retry-after": when})
    assert wait is not None and 25 < wait <= 30


# -- concurrency and pacing --------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 3])
def test_concurrency_limit_is_respected(make: Make, limit: int) -> None:
    with FakeChat(latency_s=0.1) as server:
        outcomes = make(base_url=server.base_url, max_concurrency=limit).run(questions(9), judge)
        assert all(isinstance(o, ChatReply) for o in outcomes)
        assert server.max_in_flight == limit


def test_requests_per_second_spaces_request_starts(make: Make, llm_server: FakeChat) -> None:
    started = time.monotonic()
    outcomes = make(requests_per_second=20.0, max_concurrency=5).run(questions(5), judge)
    assert all(isinstance(o, ChatReply) for o in outcomes)
    assert time.monotonic() - started >= 4 / 20  # four gaps of 50 ms between five starts


# -- validation ------------------------------------------------------------------------


def test_the_validator_runs_even_when_the_server_ignores_the_schema(make: Make) -> None:
    """The server answers score 7 although json_schema allows 0-2: the reply is still refused."""
    with FakeChat(answer=lambda body: {"explanation": "ignored the schema", "score": 7}) as server:
        [outcome] = make(base_url=server.base_url, max_invalid_retries=2).run([ask("t", "q")], judge)
        assert server.chats()[0].body["response_format"]["type"] == "json_schema"
    assert isinstance(outcome, ChatFailure)
    assert (outcome.reason, outcome.attempts) == ("invalid_reply", 3)
    assert outcome.raw_text == '{"explanation": "ignored the schema", "score": 7}'
    assert "score 7 is not 0, 1 or 2" in outcome.detail


def test_a_validator_bug_propagates_after_handing_on_what_ended(make: Make, llm_server: FakeChat) -> None:
    def buggy(text: str) -> Any:
        if "boom" in text:
            raise KeyError("bug in the validator")
        return judge(text)

    seen: list[ChatOutcome] = []
    requests = [*questions(3), ask("bad", "boom")]
    with pytest.raises(KeyError, match="bug in the validator"):
        make(max_concurrency=1).run(requests, buggy, seen.append)
    assert [o.custom_id for o in seen] == ["id-0", "id-1", "id-2"]


def test_bad_requests_are_refused_before_sending(make: Make, llm_server: FakeChat) -> None:
    model = make()
    with pytest.raises(ValueError, match="custom_id 'a' is given twice"):
        model.run([ask("a", "x"), ask("a", "y")], judge)
    with pytest.raises(ValueError, match="has no messages"):
        model.run([ChatRequest("a", ())], judge)
    with pytest.raises(ValueError, match="message #0 must be"):
        model.run([ChatRequest("a", ({"role": "user"},))], judge)
    assert llm_server.requests == []


# -- threads and event loops -------------------------------------------------------------


def test_run_works_from_a_worker_thread_and_refuses_a_running_loop(make: Make) -> None:
    model = make()
    result: list[list[ChatOutcome]] = []
    worker = threading.Thread(target=lambda: result.append(model.run(questions(2), judge)))
    worker.start()
    worker.join(timeout=30)
    assert len(result) == 1 and all(isinstance(o, ChatReply) for o in result[0])

    async def inside_a_loop() -> None:
        model.run(questions(1), judge)

    with pytest.raises(ChatModelError, match=r"asyncio\.to_thread"):
        asyncio.run(inside_a_loop())


# -- configuration and secrets -----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"base_url": "localhost:8000"}, "not an http(s) URL"),
        ({"model": " "}, "no chat model"),
        ({"structured_output": "grammar"}, "structured_output 'grammar'"),
        ({"grammar_field": "guided_json"}, "grammar_field 'guided_json'"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"requests_per_second": 0.0}, "requests_per_second"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_invalid_retries": -1}, "max_invalid_retries"),
        ({"backoff_base_s": 2.0, "backoff_max_s": 1.0}, "backoff_base_s"),
    ],
)
def test_bad_configuration_is_refused(make: Make, kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ChatModelError, match=re.escape(says)):
        make(**kwargs)


def test_the_key_and_url_never_leak(make: Make) -> None:
    good, wrong = "sk-good-secret-111", "sk-wrong-secret-222"
    with FakeChat(api_key=good) as server:
        model = make(base_url=server.base_url, api_key=wrong)
        # A refused key stops the run (every request would fail alike).
        with pytest.raises(ChatModelError) as refused:
            model.run([ask("t", "q")], judge)
        assert server.chats()[0].headers["authorization"] == f"Bearer {wrong}"
        # The server echoes the presented key in its 401 message; the adapter scrubs it.
        assert "Incorrect API key provided: <api key>." in str(refused.value)
        assert wrong not in str(refused.value)

        [ok] = make(base_url=server.base_url, api_key=good).run([ask("t", "q")], judge)
        assert isinstance(ok, ChatReply)

    # A URL may carry credentials too: they stay out of what the model shows.
    leaky = make(base_url="http://user:url-password@127.0.0.1:9/v1", api_key=wrong)
    for shown in (model, leaky):
        for text in (json.dumps(shown.options()), repr(shown), shown.base_url):
            assert wrong not in text and "url-password" not in text
    with pytest.raises(ChatModelError) as err:
        make(base_url="ftp://user:url-password@host/v1", api_key=wrong)
    assert "url-password" not in str(err.value) and wrong not in str(err.value)


# -- the request key ---------------------------------------------------------------------


def test_request_key_ignores_the_id_and_covers_what_changes_the_reply() -> None:
    options = {"structured_output": "json_schema", "server": "openai-compatible"}
    base = ask("a", "q")
    key = request_key("openai", "m", options, base)
    assert key == request_key("openai", "m", dict(options), ask("other-id", "q"))
    variants = [
        request_key("vllm-batch", "m", options, base),
        request_key("openai", "m2", options, base),
        request_key("openai", "m", {**options, "structured_output": "none"}, base),
        request_key("openai", "m", options, ask("a", "q2")),
        request_key("openai", "m", options, ask("a", "q", sampling=Sampling(seed=1))),
        request_key("openai", "m", options, ask("a", "q", sampling=Sampling(temperature=0.5))),
        request_key("openai", "m", options, ask("a", "q", json_schema={"type": "object"})),
        request_key("openai", "m", options, ask("a", "q", json_schema=None)),
        request_key("openai", "m", options, ask("a", "q", schema_name="other")),
    ]
    assert len({key, *variants}) == len(variants) + 1
    assert (
        request_key("openai", "m", options, ask("a", "q", json_schema=None, schema_name="x")) == variants[7]
    )


def test_request_key_covers_the_grammar_and_keeps_grammarless_keys() -> None:
    old_options = {"structured_output": "json_schema", "server": "openai-compatible"}
    options = {**old_options, "grammar_field": "grammar"}
    plain_request = ask("a", "q", json_schema=None)
    # A request without a grammar keys as before grammars existed, whatever the grammar field.
    assert request_key("openai", "m", options, plain_request) == request_key(
        "openai", "m", old_options, plain_request
    )
    assert request_key("openai", "m", {**options, "grammar_field": "none"}, plain_request) == request_key(
        "openai", "m", options, plain_request
    )
    keys = {
        request_key("openai", "m", options, plain_request),
        request_key("openai", "m", options, ask("a", "q", json_schema=None, grammar='root ::= "x"')),
        request_key("openai", "m", options, ask("a", "q", json_schema=None, grammar='root ::= "y"')),
        request_key(
            "openai",
            "m",
            {**options, "grammar_field": "none"},
            ask("a", "q", json_schema=None, grammar='root ::= "y"'),
        ),
    }
    assert len(keys) == 4


def test_llm_config_resolves_the_grammar_field_and_fingerprints_it(tmp_path: Path) -> None:
    auto = {engine: LLMConfig(engine=engine) for engine in ("openai", "vllm-batch", "llama-cpp")}
    assert {e: grammar_field(c) for e, c in auto.items()} == {
        "openai": "none",
        "vllm-batch": "none",
        "llama-cpp": "grammar",
    }
    vllm = LLMConfig(engine="openai", grammar_field="structured_outputs", base_url="http://gpu:8000/v1")
    assert grammar_field(vllm) == "structured_outputs"
    assert describe(auto["llama-cpp"], tmp_path)["grammar_field"] == "grammar"
    assert describe(auto["openai"], tmp_path)["grammar_field"] == "none"
    assert describe(vllm, tmp_path)["grammar_field"] == "structured_outputs"

    adapter = chat_model(vllm, tmp_path, tmp_path)
    assert isinstance(adapter, OpenAIChatModel) and adapter.options()["grammar_field"] == "structured_outputs"
    batch = chat_model(LLMConfig(engine="vllm-batch", grammar_field="guided_grammar"), tmp_path, tmp_path)
    assert batch.options()["grammar_field"] == "guided_grammar"
    assert chat_model(auto["vllm-batch"], tmp_path, tmp_path).options()["grammar_field"] == "none"


# -- the reply cache ---------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[ReplyCache]:
    with ReplyCache(tmp_path / "replies.sqlite") as c:
        yield c


def test_reply_cache_persists_keeps_the_first_reply_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "replies.sqlite"
    first, second = StoredReply("one", "m", "stop", 3, 4), StoredReply("two", "m", "stop", 5, 6)
    with ReplyCache(path) as c:
        c.put_many({"k": first})
        c.put_many([("k", second), ("j", second)])
        assert len(c) == 2
    with ReplyCache(path) as c:
        assert c.get_many(["k", "j", "absent", "k"]) == {"k": first, "j": second}
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_second_call_sends_nothing_and_reports_nothing_paid(
    make: Make, llm_server: FakeChat, cache: ReplyCache
) -> None:
    model = make()
    requests = questions(4)
    first, stats = cached_chat(model, cache, requests, judge)
    assert all(isinstance(o, ChatReply) and not o.cached for o in first)
    assert (stats.hits, stats.sent, stats.replies, stats.failures, stats.attempts) == (0, 4, 4, {}, 4)
    assert stats.prompt_tokens == sum(o.prompt_tokens for o in first) > 0
    sent = len(llm_server.chats())

    seen: list[ChatOutcome] = []
    again, stats2 = cached_chat(model, cache, requests, judge, seen.append)
    assert len(llm_server.chats()) == sent
    assert stats2 == ChatStats(hits=4)
    assert [o.custom_id for o in seen] == [r.custom_id for r in requests]
    for old, new in zip(first, again, strict=True):
        assert isinstance(old, ChatReply) and isinstance(new, ChatReply)
        assert (new.cached, new.attempts) == (True, 0)
        assert (new.text, new.value, new.custom_id) == (old.text, old.value, old.custom_id)
        assert (new.prompt_tokens, new.completion_tokens) == (old.prompt_tokens, old.completion_tokens)


class Counted(NullProgress):
    def __init__(self, into: list[tuple[str, int, int]]) -> None:
        self.into = into

    def units(self, unit: str, done: int, total: int) -> None:
        self.into.append((unit, done, total))


def test_duplicates_are_sent_once_and_answered_under_every_id(
    make: Make, llm_server: FakeChat, cache: ReplyCache
) -> None:
    requests = [ask("a", "same"), ask("b", "other"), ask("c", "same"), ask("d", "same")]
    seen: list[str] = []
    counted: list[tuple[str, int, int]] = []
    with reporting(Counted(counted)):  # as inside a stage's chunk: the bar counts every request
        outcomes, stats = cached_chat(make(), cache, requests, judge, lambda o: seen.append(o.custom_id))
    assert counted == [("LLM requests", n, 4) for n in range(5)]
    assert sorted(llm_server.asked()) == ["other", "same"]
    assert [o.custom_id for o in outcomes] == ["a", "b", "c", "d"]
    assert sorted(seen) == ["a", "b", "c", "d"]
    assert {o.text for o in outcomes if isinstance(o, ChatReply)} == {
        '{"explanation": "judged: same", "score": 2}',
        '{"explanation": "judged: other", "score": 2}',
    }
    assert (stats.hits, stats.sent, stats.replies, stats.attempts) == (0, 2, 2, 2)
    assert len(cache) == 2


def test_failures_are_not_cached_and_are_asked_again(
    make: Make, llm_server: FakeChat, cache: ReplyCache
) -> None:
    llm_server.inject("bad_json", times=2, when="q1 ")
    llm_server.inject(400, times=1, when="q2 ")
    outcomes, stats = cached_chat(make(), cache, questions(3), judge)
    assert [type(o).__name__ for o in outcomes] == ["ChatReply", "ChatFailure", "ChatFailure"]
    assert stats.failures == {"invalid_reply": 1, "request_failed": 1}
    assert (stats.sent, stats.replies, stats.attempts) == (3, 1, 1 + 2 + 1)
    assert len(cache) == 1

    llm_server.clear()
    outcomes, stats = cached_chat(make(), cache, questions(3), judge)
    assert sorted(llm_server.asked()) == ["q1 is this passage relevant", "q2 is this passage relevant"]
    assert all(isinstance(o, ChatReply) for o in outcomes)
    assert (stats.hits, stats.sent, stats.replies) == (1, 2, 2)


def test_a_cached_reply_that_no_longer_validates_is_asked_again(
    make: Make, llm_server: FakeChat, cache: ReplyCache
) -> None:
    cached_chat(make(), cache, questions(2), judge)

    def stricter(text: str) -> Any:
        value = judge(text)
        if "q1" in value["explanation"]:
            raise ReplyInvalid("q1 is now refused")
        return value

    llm_server.clear()
    llm_server.answer = lambda body: {"explanation": "a new answer", "score": 1}
    outcomes, stats = cached_chat(make(), cache, questions(2), stricter)
    assert llm_server.asked() == ["q1 is this passage relevant"]
    assert (stats.hits, stats.sent) == (1, 1)
    assert isinstance(outcomes[1], ChatReply) and outcomes[1].value["score"] == 1
    assert len(cache) == 2  # the stored reply stays: the first one for a key is kept


@pytest.mark.parametrize("crash", [RuntimeError, KeyboardInterrupt])
def test_a_crash_mid_run_keeps_the_replies_already_received(
    make: Make, llm_server: FakeChat, cache: ReplyCache, crash: type[BaseException]
) -> None:
    requests = [*questions(4), ask("last", "boom")]
    armed = True

    def validator(text: str) -> Any:
        if armed and "boom" in text:
            raise crash("the process dies here")
        return judge(text)

    with pytest.raises(crash):
        cached_chat(make(max_concurrency=1), cache, requests, validator)
    kept = len(cache)
    assert kept >= 1  # answered before the crash, and committed as they arrived

    armed = False
    llm_server.clear()
    outcomes, stats = cached_chat(make(), cache, requests, validator)
    assert all(isinstance(o, ChatReply) for o in outcomes)
    assert (stats.hits, stats.sent) == (kept, len(requests) - kept)
    assert "boom" in llm_server.asked() and len(llm_server.asked()) == len(requests) - kept


def test_cached_chat_refuses_duplicate_ids(make: Make, cache: ReplyCache) -> None:
    with pytest.raises(ValueError, match="custom_id 'a' is given twice"):
        cached_chat(make(), cache, [ask("a", "x"), ask("a", "y")], judge)


def test_chat_stats_add_up() -> None:
    one = ChatStats(hits=1, sent=2, replies=1, failures={"truncated": 1}, prompt_tokens=5, attempts=3)
    two = ChatStats(sent=1, failures={"truncated": 2, "invalid_reply": 1}, completion_tokens=7, attempts=1)
    assert one + two == ChatStats(
        hits=1,
        sent=3,
        replies=1,
        failures={"truncated": 3, "invalid_reply": 1},
        prompt_tokens=5,
        completion_tokens=7,
        attempts=4,
    )
