"""Workers sharing one cache file never pay twice for one request (issue 19, part 1).

Real OS processes (``multiprocessing`` 'spawn') share one cache file and one fake server
(``tests/fakes/llm_server.py``, ``tests/fakes/deepl_server.py``) and go through the real
``cached_chat`` / ``cached_translate_each``; the claim protocol is ``irforge/sqlite_cache.py``.
Each race also runs with claims off, to show that the same setup then pays twice.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Sequence
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from tasks.common.llm.cache import ReplyCache, StoredReply, cached_chat, request_key
from tasks.common.llm.openai_chat import OpenAIChatModel
from tasks.common.llm.port import ChatFailure, ChatOutcome, ChatReply, ChatRequest, ReplyInvalid
from tasks.common.translate.deepl import DeepLTranslator
from tasks.common.translate.port import Translation, TranslationCache, cached_translate_each
from tests import spawned
from tests.fakes.deepl_server import FakeDeepL
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, last_user_text

CTX = spawned.CTX
N = 50
WAIT_S = spawned.WAIT_S


def question(i: int) -> str:
    return f"q{i} is this passage relevant"


def ask(i: int, custom_id: str | None = None) -> ChatRequest:
    messages = (
        {"role": "system", "content": "You judge relevance."},
        {"role": "user", "content": question(i)},
    )
    return ChatRequest(custom_id=custom_id or f"id-{i}", messages=messages)


def judge(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ReplyInvalid(f"not JSON: {err}") from None
    if not isinstance(value, dict) or value.get("score") not in (0, 1, 2):
        raise ReplyInvalid("not a judgement")
    return value


def model_on(base_url: str) -> OpenAIChatModel:
    return OpenAIChatModel(
        base_url=base_url,
        model=DEFAULT_MODEL,
        max_concurrency=4,
        timeout_s=20.0,
        max_attempts=1,
        max_invalid_retries=0,
    )


def numbered_server(latency_s: float) -> FakeChat:
    """A fake whose every reply carries a serial number: two requests never get the same text."""
    serial = itertools.count()
    return FakeChat(
        answer=lambda body: {"explanation": f"{last_user_text(body)} #{next(serial)}", "score": 2},
        latency_s=latency_s,
    )


def orders() -> list[list[int]]:
    """Two different orders of the N keys (their first halves overlap by about half)."""
    return [random.Random(seed).sample(range(N), N) for seed in (19, 91)]


def _chat_worker(
    name: str, base_url: str, path: str, claims: bool, order: list[int], barrier: Barrier, out: Queue[Any]
) -> None:
    """One worker process: the N questions in ``order``, in two ``cached_chat`` calls."""
    model = model_on(base_url)
    replies: dict[str, str] = {}
    hits = sent = 0
    with ReplyCache(path, claims=claims) as cache:
        barrier.wait(WAIT_S)
        for part in (order[: N // 2], order[N // 2 :]):
            outcomes, stats = cached_chat(model, cache, [ask(i) for i in part], judge)
            replies.update((o.custom_id, o.text) for o in outcomes if isinstance(o, ChatReply))
            hits, sent = hits + stats.hits, sent + stats.sent
    out.put((name, replies, hits, sent))


class SlowTranslator:
    """A translator that takes ``delay_s`` longer per request, so that two workers overlap."""

    def __init__(self, inner: DeepLTranslator, delay_s: float) -> None:
        self.inner, self.delay_s, self.engine = inner, delay_s, inner.engine

    def options(self) -> dict[str, Any]:
        return self.inner.options()

    def translate(self, texts: Sequence[str], source: str, target: str) -> list[Translation]:
        time.sleep(self.delay_s)
        return self.inner.translate(texts, source, target)


def _deepl_worker(
    name: str,
    url: str,
    auth_key: str,
    path: str,
    claims: bool,
    order: list[int],
    barrier: Barrier,
    out: Queue[Any],
) -> None:
    """One worker process: N texts in ``order``, in two ``cached_translate_each`` calls of 5-text chunks."""
    translated: dict[int, str] = {}
    hits = sent = 0
    with DeepLTranslator(auth_key, server_url=url, max_network_retries=0) as deepl:
        translator = SlowTranslator(deepl, 0.02)
        with TranslationCache(path, claims=claims) as cache:
            barrier.wait(WAIT_S)
            for part in (order[: N // 2], order[N // 2 :]):
                texts = [f"text {i}" for i in part]
                outcomes, stats = cached_translate_each(
                    translator, cache, texts, "en", "fr", max_batch_texts=5
                )
                translated.update(
                    (i, o.text) for i, o in zip(part, outcomes, strict=True) if isinstance(o, Translation)
                )
                hits, sent = hits + stats.hits, sent + stats.sent_texts
    out.put((name, translated, hits, sent))


def race(target: Any, *args: Any) -> dict[str, tuple[Any, ...]]:
    """``target(name, *args, order, barrier, queue)`` in two spawned processes, one order each."""
    return spawned.race(target, {name: (*args, order) for name, order in zip("ab", orders(), strict=True)})


# -- two processes, one cache ---------------------------------------------------------------


@pytest.mark.parametrize("claims", [True, False], ids=["claims", "no-claims"])
def test_two_processes_send_each_chat_request_once(tmp_path: Path, claims: bool) -> None:
    with numbered_server(latency_s=0.03) as server:
        results = race(_chat_worker, server.base_url, str(tmp_path / "replies.sqlite"), claims)
        asked = Counter(server.asked())
    (replies_a, hits_a, sent_a), (replies_b, hits_b, sent_b) = results["a"], results["b"]
    assert set(replies_a) == set(replies_b) == {f"id-{i}" for i in range(N)}
    if not claims:  # the race is real: without claims both pay for the keys they both miss at once
        assert sum(asked.values()) > N and max(asked.values()) == 2
        assert replies_a != replies_b
        return
    assert asked == Counter(question(i) for i in range(N))  # each distinct request exactly once
    assert replies_a == replies_b  # the other worker's reply, not a second one (replies are numbered)
    assert (sent_a + sent_b, hits_a + hits_b) == (N, N)
    assert sent_a > 0 and sent_b > 0  # both did part of the work


@pytest.mark.parametrize("claims", [True, False], ids=["claims", "no-claims"])
def test_two_processes_translate_each_text_once(tmp_path: Path, claims: bool) -> None:
    with FakeDeepL() as server:
        path = str(tmp_path / "translations.sqlite")
        results = race(_deepl_worker, server.url, server.auth_key, path, claims)
        sent_texts = Counter(t for r in server.translated() for t in r.texts)
    (done_a, hits_a, sent_a), (done_b, hits_b, sent_b) = results["a"], results["b"]
    assert done_a == done_b == {i: f"[FR] text {i}" for i in range(N)}
    if not claims:
        assert sum(sent_texts.values()) > N and max(sent_texts.values()) == 2
        return
    assert sent_texts == Counter(f"text {i}" for i in range(N))
    assert (sent_a + sent_b, hits_a + hits_b) == (N, N)


# -- dead owners, live owners, failed requests ---------------------------------------------


def _claim_and_die(path: str, keys: list[str], lease_s: float) -> None:
    """Claim ``keys`` and die at once: no release, no close, no heartbeat left."""
    cache = ReplyCache(path, lease_s=lease_s)
    mine, _ = cache.claim_missing(keys)
    os._exit(0 if mine == keys else 3)


def keys_of(model: OpenAIChatModel, requests: list[ChatRequest]) -> list[str]:
    return [request_key(model.engine, model.model, model.options(), r) for r in requests]


def test_a_dead_owners_claim_is_taken_over_when_its_lease_ends(tmp_path: Path) -> None:
    path = tmp_path / "replies.sqlite"
    with FakeChat() as server:
        model = model_on(server.base_url)
        requests = [ask(i) for i in range(5)]
        child = CTX.Process(target=_claim_and_die, args=(str(path), keys_of(model, requests), 1.0))
        child.start()
        child.join(WAIT_S)
        assert child.exitcode == 0
        with sqlite3.connect(path) as conn:
            (lease_end,) = conn.execute("SELECT MAX(expires_at) FROM replies_claims").fetchone()
        assert lease_end > time.time()  # still live when the survivor starts

        with ReplyCache(path) as cache:
            outcomes, stats = cached_chat(model, cache, requests, judge)
        assert time.time() >= lease_end  # it waited for the lease, then sent
        assert all(isinstance(o, ChatReply) and not o.cached for o in outcomes)
        assert (stats.hits, stats.sent) == (0, 5)
        assert Counter(server.asked()) == Counter(question(i) for i in range(5))
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT COUNT(*) FROM replies_claims").fetchone() == (0,)


def test_a_live_owner_keeps_its_claim_past_the_lease_and_the_waiter_uses_its_reply(tmp_path: Path) -> None:
    path = tmp_path / "replies.sqlite"
    with FakeChat() as server:
        model = model_on(server.base_url)
        (key,) = keys_of(model, [ask(0)])
        stored = StoredReply('{"explanation": "from the owner", "score": 1}', DEFAULT_MODEL, "stop", 3, 4)
        with ReplyCache(path, lease_s=0.2) as owner, ReplyCache(path) as waiter:
            assert owner.claim_missing([key]) == ([key], [])
            slow = threading.Timer(1.0, owner.put_many, [{key: stored}])  # 5 leases: the heartbeat renews
            slow.start()
            outcomes, stats = cached_chat(model, waiter, [ask(0, "mine")], judge)
            slow.join()
        assert server.asked() == []
        assert (stats.hits, stats.sent) == (1, 0)
        (reply,) = outcomes
        assert (
            isinstance(reply, ChatReply) and reply.cached and reply.value["explanation"] == "from the owner"
        )


def test_a_failed_request_releases_its_claim_and_the_waiter_sends_it_itself(tmp_path: Path) -> None:
    path = tmp_path / "replies.sqlite"
    with FakeChat(latency_s=0.3) as server:
        server.inject(400, times=1, when="q7 ")
        first: list[ChatOutcome] = []
        with ReplyCache(path) as cache_a, ReplyCache(path) as cache_b:
            worker_a = threading.Thread(
                target=lambda: first.extend(
                    cached_chat(model_on(server.base_url), cache_a, [ask(7)], judge)[0]
                )
            )
            worker_a.start()
            deadline = time.monotonic() + 10
            while not server.asked() and time.monotonic() < deadline:  # a's request is in flight
                time.sleep(0.01)
            outcomes, stats = cached_chat(model_on(server.base_url), cache_b, [ask(7)], judge)
            worker_a.join()
        assert server.asked() == [question(7), question(7)]  # a's, which failed, then b's
        assert isinstance(first[0], ChatFailure) and first[0].reason == "request_failed"
        assert isinstance(outcomes[0], ChatReply) and not outcomes[0].cached
        assert (stats.hits, stats.sent, stats.replies) == (0, 1, 1)


def test_a_crash_while_sending_releases_the_claims_at_once(tmp_path: Path) -> None:
    path = tmp_path / "replies.sqlite"
    with ReplyCache(path) as one, ReplyCache(path) as two:

        def crash(keys: list[str]) -> None:
            assert keys == ["k1", "k2"]
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            one.fill(["k1", "k2"], crash)
        assert two.claim_missing(["k1", "k2", "k3"]) == (["k1", "k2", "k3"], [])
        assert one.claim_missing(["k1", "k4"]) == (["k4"], ["k1"])  # k1 is two's now
        one.release(["k4"])


def test_one_worker_pays_one_claim_transaction_per_call_and_none_when_all_hit(tmp_path: Path) -> None:
    with FakeChat() as server, ReplyCache(tmp_path / "replies.sqlite") as cache:
        model = model_on(server.base_url)
        writes: list[str] = []
        cache._conn.set_trace_callback(lambda sql: writes.append(sql) if sql == "BEGIN IMMEDIATE" else None)
        _, stats = cached_chat(model, cache, [ask(i) for i in range(10)], judge)
        assert (stats.sent, len(writes)) == (10, 1 + 10)  # the claim, then one commit per reply
        writes.clear()
        _, stats = cached_chat(model, cache, [ask(i) for i in range(10)], judge)
        assert (stats.hits, writes) == (10, [])
        assert len(server.asked()) == 10


def _open_new_files_at_once(name: str, folder: str, files: int, barrier: Barrier, out: Queue[Any]) -> None:
    for i in range(files):
        barrier.wait(WAIT_S)
        ReplyCache(Path(folder) / f"cache-{i}.sqlite").close()
    out.put((name, files))


def test_processes_opening_a_new_cache_file_at_once_all_get_it(tmp_path: Path) -> None:
    """Pool workers start together and open the same fresh cache: switching it to WAL must wait
    for the others, not fail with "database is locked"."""
    got = spawned.race(_open_new_files_at_once, {f"w{i}": (str(tmp_path), 15) for i in range(4)})
    assert got == {f"w{i}": (15,) for i in range(4)}
