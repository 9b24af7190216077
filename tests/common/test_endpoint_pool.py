"""Several OpenAI-compatible servers behind one client (tasks/common/endpoints.py, issue 19 part 4).

Unit tests of the pool on a fake clock, then each adapter (chat, embeddings, /score) on two
real loopback fakes (tests/fakes/) where one dies mid-run: every request is answered once.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from flows.registry import get_pipeline
from irforge.config import validate_config
from irforge.fingerprint import fingerprint_view
from tasks.common.embed.config import EncoderConfig, encoder_for
from tasks.common.embed.port import EncoderUnavailable
from tasks.common.embed.remote import OpenAIEmbeddingsEncoder
from tasks.common.endpoints import EndpointPool, configured_urls
from tasks.common.llm.config import LLMConfig, chat_model
from tasks.common.llm.config import describe as describe_llm
from tasks.common.llm.openai_chat import OpenAIChatModel
from tasks.common.llm.port import ChatFailure, ChatReply, ChatRequest
from tasks.common.rerank.config import RerankerConfig, describe_reranker
from tasks.common.rerank.port import RerankerUnavailable
from tasks.common.rerank.vllm_score import VLLMScoreReranker
from tests.fakes.embed_server import DEFAULT_MODEL as EMBED_MODEL
from tests.fakes.embed_server import FakeEmbeddings
from tests.fakes.llm_server import DEFAULT_MODEL as CHAT_MODEL
from tests.fakes.llm_server import FakeChat
from tests.fakes.score_server import DEFAULT_MODEL as SCORE_MODEL
from tests.fakes.score_server import FakeScore, fake_logit

A, B, C = "http://user:s3cret@gpu-a:8000/v1", "http://gpu-b:8000/v1", "http://gpu-c:8000/v1"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pool_of(*urls: str, cooldown_s: float = 30.0) -> tuple[EndpointPool, Clock]:
    clock = Clock()
    return EndpointPool(urls, cooldown_s=cooldown_s, service="test server", clock=clock), clock


def closed_port_url(path: str = "/v1") -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


# -- the pool ------------------------------------------------------------------------------


def test_least_outstanding_wins_and_ties_go_round_robin() -> None:
    pool, _ = pool_of(A, B, C)
    chosen = []
    for _ in range(4):  # one at a time: all tie at 0 in flight
        with pool.lease() as lease:
            chosen.append(lease.endpoint.index)
    assert chosen == [0, 1, 2, 0]
    with pool.lease() as first, pool.lease() as second, pool.lease() as third:
        assert {first.endpoint.index, second.endpoint.index, third.endpoint.index} == {0, 1, 2}
        assert pool.outstanding() == (1, 1, 1)
    assert pool.outstanding() == (0, 0, 0)
    busy = [pool._acquire(), pool._acquire()]  # 1 and 2 in flight
    with pool.lease() as lease:
        assert lease.endpoint.index == 0  # the one with none in flight
    pool._release(busy[0], True)
    with pool.lease() as lease:
        assert lease.endpoint.index == busy[0].endpoint.index  # now the least loaded
    pool._release(busy[1], True)


def test_a_failed_send_takes_the_server_out_and_logs_its_public_url(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="irforge")
    pool, clock = pool_of(A, B)
    with pool.lease() as lease:
        assert lease.endpoint.index == 0
        lease.failed("cannot reach it")
    assert pool.out() == (True, False)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "http://gpu-a:8000/v1 taken out for 30 s (cannot reach it); 1 of 2 servers live" in caplog.text
    assert "s3cret" not in caplog.text
    for _ in range(5):
        with pool.lease() as lease:
            assert lease.endpoint.index == 1  # the other server takes every request
    clock.now += 29.9
    with pool.lease() as lease:
        assert lease.endpoint.index == 1  # still cooling down
    assert pool.free_failover(0) and not pool.free_failover(1)  # one free failover per other server


def test_after_the_cooldown_one_request_probes_the_server(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="irforge")
    pool, clock = pool_of(A, B, cooldown_s=5.0)
    with pool.lease() as lease:
        lease.failed("HTTP 503")
    clock.now += 5.0
    probe = pool._acquire()
    assert probe.endpoint.index == 0 and probe.probe
    with pool.lease() as lease:
        assert lease.endpoint.index == 1  # one probe at a time: the others go elsewhere
    probe.failed("HTTP 503 again")
    pool._release(probe, False)  # the probe failed: out for another cooldown
    assert pool.out() == (True, False)
    assert "http://gpu-a:8000/v1 taken out again for 5 s (HTTP 503 again)" in caplog.text
    clock.now += 4.0
    with pool.lease() as lease:
        assert lease.endpoint.index == 1
    clock.now += 1.0
    with pool.lease() as lease:
        assert lease.endpoint.index == 0 and lease.probe  # answered: the server is back
    assert pool.out() == (False, False)
    assert "test server http://gpu-a:8000/v1 is back" in caplog.records[-1].getMessage()
    assert caplog.records[-1].levelname == "WARNING" and caplog.records[-1].name == "irforge"


def test_a_send_left_by_an_exception_is_no_verdict() -> None:
    pool, _ = pool_of(A, B)
    with pytest.raises(KeyboardInterrupt), pool.lease():
        raise KeyboardInterrupt
    assert pool.outstanding() == (0, 0) and pool.out() == (False, False)


def test_all_down_waits_for_the_soonest_cooldown_at_most_the_backoff() -> None:
    pool, clock = pool_of(A, B, cooldown_s=10.0)
    with pool.lease() as lease:
        lease.failed("down")
    clock.now += 4.0
    with pool.lease() as lease:
        lease.failed("down")
    assert pool.out() == (True, True)
    assert not pool.free_failover(0)
    assert pool.retry_delay(60.0) == pytest.approx(6.0)  # A is back first, in 6 s
    assert pool.retry_delay(0.5) == 0.5  # never longer than the adapter's own backoff
    with pool.lease() as lease:
        assert lease.endpoint.index == 0 and lease.probe  # the retry goes to the one back soonest
        lease.failed("still down")
    assert pool.retry_delay(60.0) == pytest.approx(10.0)  # A's cooldown started again
    clock.now += 10.0
    assert pool.retry_delay(60.0) == 0.0  # both are due for their probe


def test_a_single_server_is_never_taken_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="irforge")
    pool, _ = pool_of(A)
    with pool.lease() as lease:
        lease.failed("down")
    assert pool.out() == (False,) and not pool.free_failover(0) and pool.retry_delay(1.5) == 1.5
    assert caplog.records == []


def test_configured_urls() -> None:
    assert configured_urls(A, None) == configured_urls(None, [A]) == (A,)
    assert configured_urls(None, None) == ()
    assert configured_urls(None, [A, " " + B]) == (A, B)
    for base_url, base_urls, match in [
        (A, [B], "base_url or base_urls, not both"),
        (None, [], "at least one"),
        (None, [A, B, A], r"twice \(#1 and #3\)"),
    ]:
        with pytest.raises(ValueError, match=match) as err:
            configured_urls(base_url, base_urls)
        assert "s3cret" not in str(err.value)


# -- configs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "settings"),
    [
        (LLMConfig, {"engine": "openai"}),
        (EncoderConfig, {"engine": "openai"}),
        (RerankerConfig, {"engine": "vllm"}),
    ],
)
def test_configs_take_base_url_or_base_urls_not_both(model: Any, settings: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="give base_url or base_urls, not both"):
        model(**settings, base_url=B, base_urls=[B, C])
    one, listed = model(**settings, base_url=B), model(**settings, base_urls=[B])
    assert configured_urls(one.base_url, one.base_urls) == configured_urls(listed.base_url, listed.base_urls)
    assert model(**settings, base_urls=[B, C], server_cooldown_s=5).base_urls == (B, C)


def test_base_urls_and_cooldown_are_refused_with_engines_they_do_not_act_on() -> None:
    with pytest.raises(ValidationError, match="base_urls does not apply to engine llama-cpp"):
        LLMConfig(engine="llama-cpp", base_urls=[B])
    with pytest.raises(ValidationError, match="server_cooldown_s does not apply"):
        RerankerConfig(server_cooldown_s=5)


def test_the_factories_spread_over_base_urls(tmp_path: Path) -> None:
    chat = chat_model(LLMConfig(base_urls=[A, B], server_cooldown_s=3), tmp_path, tmp_path)
    assert isinstance(chat, OpenAIChatModel)
    assert chat.base_url == "http://gpu-a:8000/v1, http://gpu-b:8000/v1" and chat._pool.cooldown_s == 3
    assert "s3cret" not in repr(chat)
    single = chat_model(LLMConfig(base_url=A), tmp_path, tmp_path)
    assert isinstance(single, OpenAIChatModel) and len(single._pool) == 1
    encoder = encoder_for(EncoderConfig(engine="openai", model=EMBED_MODEL, base_urls=[B, C]))
    assert isinstance(encoder, OpenAIEmbeddingsEncoder) and len(encoder._pool) == 2


def cure_fingerprints(**stages: dict[str, Any]) -> dict[str, str]:
    pipeline = get_pipeline("cure")
    data = yaml.safe_load(pipeline.default_config.read_text("utf-8"))
    for where, values in stages.items():
        node = data["stages"]
        for part in where.split("."):
            node = node.setdefault(part, {})
        node.clear()
        node.update(values)
    config = validate_config(pipeline.config_type, data, "cure.yaml")
    return {
        name: plan.fingerprint for name, plan in pipeline.plan(config, pipeline.default_config.parent).items()
    }


def test_the_server_list_never_enters_a_fingerprint(tmp_path: Path) -> None:
    llm = {"engine": "openai", "model": "Qwen/Qwen2.5-72B-Instruct-AWQ"}
    encoder = {"engine": "openai", "model": EMBED_MODEL}
    reranker = {"engine": "vllm", "model": SCORE_MODEL}

    def stages(urls: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {
            "judge.llm": {**llm, **urls},
            "translate.llm": {**llm, **urls},
            "embed.encoder": {**encoder, **urls},
            "pool.reranker": {**reranker, **urls},
        }

    one = cure_fingerprints(**stages({"base_url": B}))
    assert cure_fingerprints(**stages({"base_urls": [B]})) == one
    assert cure_fingerprints(**stages({"base_urls": [C, B], "server_cooldown_s": 2})) == one
    for model, settings in [(LLMConfig, llm), (EncoderConfig, encoder), (RerankerConfig, reranker)]:
        views = {
            str(fingerprint_view(model(**settings, **urls)))
            for urls in ({"base_url": B}, {"base_urls": [B, C]}, {"base_urls": [C], "server_cooldown_s": 1})
        }
        assert len(views) == 1 and "gpu-" not in views.pop()
    assert describe_llm(LLMConfig(base_url=B), tmp_path) == describe_llm(
        LLMConfig(base_urls=[B, C]), tmp_path
    )
    assert describe_reranker(RerankerConfig(engine="vllm", base_url=B), tmp_path) == describe_reranker(
        RerankerConfig(engine="vllm", base_urls=[B, C]), tmp_path
    )


# -- two real servers, one dies mid-run ---------------------------------------------------------


def chat_requests(n: int, prefix: str) -> list[ChatRequest]:
    messages = ({"role": "user", "content": f"{prefix}{i} relevant?"} for i in range(n))
    return [ChatRequest(custom_id=f"{prefix}{i}", messages=(m,)) for i, m in enumerate(messages)]


def test_chat_survives_a_server_dying_mid_run(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="irforge")
    with FakeChat(latency_s=0.02) as first, FakeChat(latency_s=0.02) as second:
        model = OpenAIChatModel(
            base_url=[first.base_url, second.base_url], model=CHAT_MODEL, max_concurrency=4,
            max_attempts=1, timeout_s=5.0, backoff_base_s=0.001, backoff_max_s=0.01,
        )  # fmt: skip
        warmup = model.run(chat_requests(8, "warm"), str)
        assert all(isinstance(o, ChatReply) for o in warmup)
        assert first.answered() and second.answered()  # both alive: the load is spread
        first.clear()
        second.clear()

        first.die_after(3)
        requests = chat_requests(40, "q")
        outcomes = model.run(requests, str)
        failed = [o for o in outcomes if isinstance(o, ChatFailure)]
        assert failed == [] and len(outcomes) == 40  # none lost (max_attempts=1: failovers are free)
        answered = first.answered() + second.answered()
        asked = sorted(r.user_text for r in answered)
        assert asked == sorted(r.messages[0]["content"] for r in requests)  # none paid twice
        assert len(first.answered()) == 3 and len(second.answered()) == 37  # the survivor took the rest
    assert f"chat server {first.base_url} taken out for 30 s" in caplog.text


def test_embeddings_survive_a_server_dying_mid_run(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="irforge")
    texts = [f"passage {i} about fibrinolysis" for i in range(40)]
    with FakeEmbeddings() as first, FakeEmbeddings() as second:
        encoder = OpenAIEmbeddingsEncoder(
            [first.base_url, second.base_url], EMBED_MODEL, batch_size=2, dims=64, max_retries=0
        )
        with encoder:
            encoder.encode(texts[:8], kind="passage")
            assert len(first.embedded()) == len(second.embedded()) == 2  # both alive: spread evenly
            first.clear()
            second.clear()

            first.die_after(3)
            vectors = encoder.encode(texts, kind="passage")
        assert vectors.shape == (40, 64)  # none lost
        sent = [tuple(r.inputs) for r in first.embedded() + second.embedded()]
        assert sorted(sent) == sorted(tuple(texts[i : i + 2]) for i in range(0, 40, 2))  # none paid twice
        assert len(first.embedded()) == 3 and len(second.embedded()) == 17  # the survivor took the rest
    assert f"embeddings server {first.base_url} taken out" in caplog.text


def test_score_survives_a_server_dying_mid_run(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="irforge")
    queries = [f"query {i % 5} lysis" for i in range(60)]
    passages = [f"passage {i} on lysis and query {i % 3}" for i in range(60)]
    with FakeScore(hold_s=0.02) as first, FakeScore(hold_s=0.02) as second:
        reranker = VLLMScoreReranker(
            [first.url, second.url], SCORE_MODEL, batch_size=2, max_concurrency=4, max_retries=0
        )
        with reranker:
            reranker.score(queries[:16], passages[:16])
            assert first.scored() and second.scored()  # both alive: the load is spread
            first.clear()
            second.clear()

            first.die_after(4)
            scored = reranker.score(queries, passages)
        assert list(scored.logit) == [fake_logit(q, p) for q, p in zip(queries, passages, strict=True)]
        sent = sorted(tuple(r.side("documents")) for r in first.scored() + second.scored())
        assert sent == sorted(tuple(passages[i : i + 2]) for i in range(0, 60, 2))  # once each
        assert len(first.scored()) == 4 and len(second.scored()) == 26
    assert f"score server {first.url} taken out" in caplog.text


# -- all servers down: one clear line naming them -------------------------------------------------


def test_all_servers_down_fail_each_adapter_with_one_line_naming_them() -> None:
    urls = [closed_port_url(), closed_port_url()]
    secret_urls = [u.replace("http://", "http://user:s3cret@") for u in urls]
    chat = OpenAIChatModel(
        base_url=secret_urls, model=CHAT_MODEL, max_attempts=2, backoff_base_s=0.001, backoff_max_s=0.01
    )
    [outcome] = chat.run(chat_requests(1, "q"), str)
    assert isinstance(outcome, ChatFailure) and outcome.reason == "request_failed"
    assert outcome.detail.startswith(f"gave up after 2 attempts on {urls[0]}, {urls[1]}; last: cannot reach")
    assert "\n" not in outcome.detail and "s3cret" not in outcome.detail and "Traceback" not in outcome.detail

    encoder = OpenAIEmbeddingsEncoder(secret_urls, EMBED_MODEL, dims=8, max_retries=1)
    with encoder, pytest.raises(EncoderUnavailable) as embed_err:
        encoder.encode(["lysis"], kind="query")
    message = str(embed_err.value)
    assert f"{urls[0]}, {urls[1]}" in message and "s3cret" not in message and "\n" not in message

    score_urls = [u.removesuffix("/v1") for u in secret_urls]
    reranker = VLLMScoreReranker(score_urls, SCORE_MODEL, max_retries=1, backoff_s=0.001)
    with reranker, pytest.raises(RerankerUnavailable) as score_err:
        reranker.score(["q"], ["p"])
    message = str(score_err.value)
    assert "still failing after 1 retries" in message and "s3cret" not in message
    assert all(u.removesuffix("/v1").replace("user:s3cret@", "") in message for u in score_urls)
