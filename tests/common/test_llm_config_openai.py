"""Every LLMConfig key of engine openai reaches the server (tests/fakes/llm_server.py), through
``chat_model`` as a stage builds it: a changed setting changes what the server sees."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from irforge.config import validate_config
from irforge.errors import ConfigError
from tasks.common.llm.config import LLMConfig, chat_model
from tasks.common.llm.port import ChatFailure, ChatOutcome, ChatReply, ChatRequest, ReplyInvalid, Sampling
from tests.conftest import fake_key
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, llm_server

__all__ = ["llm_server"]  # the fixture

SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}
GRAMMAR = 'root ::= "{\\"score\\": 2}"'


def score(text: str) -> int:
    try:
        value = json.loads(text)["score"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ReplyInvalid("no score") from None
    if value not in (0, 1, 2):
        raise ReplyInvalid(f"score {value!r}")
    return int(value)


def ask(n: int = 1, *, grammar: bool = False) -> list[ChatRequest]:
    return [
        ChatRequest(
            custom_id=f"q{i}",
            messages=({"role": "user", "content": f"question {i}"},),
            sampling=Sampling(temperature=0.3, top_p=0.8, max_tokens=33, seed=5),
            json_schema=None if grammar else SCHEMA,
            grammar=GRAMMAR if grammar else None,
        )
        for i in range(n)
    ]


def run(server: FakeChat, requests: list[ChatRequest] | None = None, **settings: Any) -> list[ChatOutcome]:
    settings = {"engine": "openai", "model": DEFAULT_MODEL, "base_url": server.base_url, **settings}
    config = validate_config(LLMConfig, settings, "flow.yaml")
    return chat_model(config, Path(), Path()).run(requests or ask(), score)


def test_base_url_and_model_reach_the_server(llm_server: FakeChat) -> None:
    with FakeChat(models=("other-model",)) as other:
        (outcome,) = run(other, model="other-model")
    assert isinstance(outcome, ChatReply) and other.chats()[0].body["model"] == "other-model"
    assert llm_server.chats() == []  # only the configured server was asked


def test_api_key_env_names_the_variable_sent_as_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    key = fake_key("sk-", "config")
    monkeypatch.setenv("MY_LLM_KEY", key)
    with FakeChat(api_key=key) as server:
        (outcome,) = run(server, api_key_env="MY_LLM_KEY")
        assert isinstance(outcome, ChatReply)
        assert server.chats()[0].headers["authorization"] == f"Bearer {key}"


def test_sampling_reaches_the_request(llm_server: FakeChat) -> None:
    run(llm_server)  # the request's own sampling is what is sent (stages copy llm.sampling into it)
    body = llm_server.chats()[0].body
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.3, 0.8, 33, 5)


@pytest.mark.parametrize(
    ("mode", "sent"),
    [("json_schema", "json_schema"), ("json_object", "json_object"), ("none", None)],
)
def test_structured_output_reaches_the_request(llm_server: FakeChat, mode: str, sent: str | None) -> None:
    run(llm_server, structured_output=mode)
    assert (llm_server.chats()[0].body.get("response_format") or {}).get("type") == sent


@pytest.mark.parametrize("field", ["grammar", "guided_grammar", "none"])
def test_grammar_field_reaches_the_request(llm_server: FakeChat, field: str) -> None:
    run(llm_server, ask(grammar=True), grammar_field=field)
    body = llm_server.chats()[0].body
    assert {k for k in ("grammar", "guided_grammar", "structured_outputs") if k in body} == (
        set() if field == "none" else {field}
    )


@pytest.mark.parametrize("limit", [1, 3])
def test_max_concurrency_bounds_requests_in_flight(limit: int) -> None:
    with FakeChat(latency_s=0.1) as server:
        run(server, ask(6), max_concurrency=limit)
        assert server.max_in_flight == limit


def test_requests_per_second_spaces_requests(llm_server: FakeChat) -> None:
    started = time.monotonic()
    run(llm_server, ask(4), requests_per_second=20.0)
    assert time.monotonic() - started >= 3 / 20


@pytest.mark.parametrize(("max_attempts", "sent"), [(1, 1), (2, 2)])
def test_max_attempts_bounds_sends_on_5xx(llm_server: FakeChat, max_attempts: int, sent: int) -> None:
    llm_server.inject(500, times=5)
    (outcome,) = run(llm_server, max_attempts=max_attempts)
    assert isinstance(outcome, ChatFailure) and len(llm_server.chats()) == sent


@pytest.mark.parametrize(("retries", "sent"), [(0, 1), (2, 3)])
def test_max_invalid_retries_bounds_reasks(llm_server: FakeChat, retries: int, sent: int) -> None:
    llm_server.inject("bad_json", times=5)
    (outcome,) = run(llm_server, max_invalid_retries=retries)
    assert isinstance(outcome, ChatFailure) and outcome.reason == "invalid_reply"
    assert len(llm_server.chats()) == sent


def test_timeout_s_bounds_a_request() -> None:
    with FakeChat(slow_s=0.8) as server:
        server.inject("slow", times=2)
        (short,) = run(server, max_attempts=1, timeout_s=0.2)
        (long,) = run(server, max_attempts=1, timeout_s=5.0)
    assert isinstance(short, ChatFailure) and "timeout_s=0.2" in short.detail
    assert isinstance(long, ChatReply)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("batch_command", ["vllm"]),
        ("batch_extra_args", ["--dtype", "half"]),
        ("gguf", "m.gguf"),
        ("n_ctx", 512),
    ],
)
def test_keys_of_other_engines_are_refused(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"{key} does not apply to engine openai"):
        validate_config(LLMConfig, {"engine": "openai", key: value}, "flow.yaml")
