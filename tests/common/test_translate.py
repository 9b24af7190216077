"""Translator port, translation cache and the DeepL adapter.

The adapter runs the real ``deepl`` client against ``tests/fakes/deepl_server.py`` (DeepL's
protocol on loopback); what the client sent is read back from the server's records.
Retries are set to 0 or 1: the backoff sleeps about 1 s before a first retry.

DeepL's own mock server (``deepl-mock``, https://github.com/DeepLcom/deepl-mock) is not
published on the npm registry (``npm view deepl-mock``: 404), so CI, which reaches only the
registries, cannot install it; the fake follows its behaviour where ours depends on it
(a held request that never answers: its ``no-response-count``; 413 for a request over the
size limit, which DeepL's API counts with the headers).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import deepl
import deepl.http_client
import pytest

from irforge.errors import ConfigError, IrforgeError
from irforge.fingerprint import canonical_json
from tasks.common.translate.deepl import DeepLTranslator
from tasks.common.translate.deepl_requests import DEFAULT_REQUEST_BYTES, MAX_REQUEST_BYTES, json_size_of
from tasks.common.translate.port import (
    AuthorizationFailed,
    CacheStats,
    QuotaExceeded,
    RateLimited,
    Refused,
    RequestTooLarge,
    Translation,
    TranslationCache,
    TranslationError,
    Translator,
    TranslatorUnavailable,
    cache_key,
    cached_translate,
    cached_translate_each,
    plan_batches,
)
from tests.fakes.deepl_server import FakeDeepL, deepl_server

__all__ = ["deepl_server"]  # the fixture, used by parameter name below

Server = tuple[str, FakeDeepL]


@pytest.fixture(autouse=True)
def _restore_retry_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter sets the library's process-wide retry count; put it back after each test."""
    monkeypatch.setattr(deepl.http_client, "max_network_retries", deepl.http_client.max_network_retries)


Make = Callable[..., DeepLTranslator]


@pytest.fixture
def make(deepl_server: Server) -> Iterator[Make]:
    """``make(**kwargs)`` builds a translator on the fake server (right key, 0 retries)."""
    url, server = deepl_server
    built: list[DeepLTranslator] = []

    def build(auth_key: str = server.auth_key, **kwargs: Any) -> DeepLTranslator:
        kwargs.setdefault("server_url", url)
        kwargs.setdefault("max_network_retries", 0)
        translator = DeepLTranslator(auth_key, **kwargs)
        built.append(translator)
        return translator

    yield build
    for t in built:
        t.close()


def _texts(n: int, prefix: str = "query") -> list[str]:
    return [f"{prefix} {i}" for i in range(n)]


# -- what goes over the wire ---------------------------------------------------------


def test_request_carries_key_header_and_explicit_languages(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    translator = make(formality="prefer_less")
    assert isinstance(translator, Translator)

    out = translator.translate(["blood pressure", "acute otitis"], "en", "fr")
    assert out == [
        Translation("[FR] blood pressure", 14, "en"),
        Translation("[FR] acute otitis", 12, "en"),
    ]
    (req,) = server.requests
    assert (req.method, req.path, req.status) == ("POST", "/v2/translate", 200)
    assert req.headers["authorization"] == f"DeepL-Auth-Key {server.auth_key}"
    assert req.headers["content-type"] == "application/json"
    assert req.headers["user-agent"].startswith(f"deepl-python/{deepl.__version__}")
    assert "irforge/" in req.headers["user-agent"]
    assert req.body == {
        "text": ["blood pressure", "acute otitis"],
        "source_lang": "EN",
        "target_lang": "FR",
        "formality": "prefer_less",
        "show_billed_characters": True,
    }


@pytest.mark.parametrize(
    ("source", "target", "code"), [("fr", "en", "EN-US"), ("en", "es", "ES"), ("es", "fr", "FR")]
)
def test_target_codes(make: Make, deepl_server: Server, source: str, target: str, code: str) -> None:
    _, server = deepl_server
    (out,) = make(formality="prefer_more", model_type="prefer_quality_optimized").translate(
        ["texte"], source, target
    )
    assert out.text == f"[{code}] texte"
    assert out.detected_source == source
    body = server.requests[-1].body
    assert (body["source_lang"], body["target_lang"]) == (source.upper(), code)
    assert body["formality"] == "prefer_more"  # prefer_* is accepted even for EN-US (no formality there)
    assert body["model_type"] == "prefer_quality_optimized"


def test_english_variant_and_bad_settings(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    make(english_variant="EN-GB").translate(["hola"], "es", "en")
    assert server.requests[-1].body["target_lang"] == "EN-GB"
    with pytest.raises(ConfigError, match="prefer_less"):
        make(formality="more")
    with pytest.raises(TranslationError, match="unsupported target"):
        make().translate(["x"], "en", "de")
    with pytest.raises(TranslationError, match="nothing to translate"):
        make().translate(["x"], "fr", "fr")
    assert len(server.requests) == 1


def test_empty_texts_are_not_sent(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    translator = make()
    assert translator.translate([], "en", "fr") == []
    assert translator.translate([""], "en", "fr") == [Translation("", 0, None)]
    assert server.requests == []
    out = translator.translate(["", "a", ""], "en", "fr")
    assert [t.text for t in out] == ["", "[FR] a", ""]
    assert server.requests[-1].texts == ["a"]


def test_120_texts_make_three_requests(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    texts = _texts(120)
    out = make().translate(texts, "en", "fr")
    assert [t.text for t in out] == [f"[FR] {t}" for t in texts]
    assert [len(r.texts) for r in server.requests] == [50, 50, 20]
    assert sum(t.billed_characters for t in out) == sum(len(t) for t in texts) == server.character_count


def test_long_texts_are_split_by_the_default_120_kib_body_limit(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    # 5000 x "é" is 5000 characters but 30002 bytes in the JSON body (\u00e9 escapes).
    texts = [f"{i:02d}" + "é" * 5000 for i in range(20)]
    out = make().translate(texts, "fr", "es")
    assert [t.text for t in out] == [f"[ES] {t}" for t in texts]
    assert all(r.status == 200 and r.body_bytes <= DEFAULT_REQUEST_BYTES for r in server.requests)
    assert [len(r.texts) for r in server.requests] == [4, 4, 4, 4, 4]  # a 5th text would pass 120 KiB
    assert [t for r in server.requests for t in r.texts] == texts

    # The adapter's size estimate is the body the client really sends, byte for byte.
    assert all(json_size_of(r.body) == r.body_bytes for r in server.requests)

    server.clear()  # ASCII: 12 texts of 10 000 characters fit in 120 KiB, 13 do not
    texts = [f"{i:02d}" + "x" * 9998 for i in range(40)]
    make().translate(texts, "en", "fr")
    assert [len(r.texts) for r in server.requests] == [12, 12, 12, 4]
    assert max(r.body_bytes for r in server.requests) <= DEFAULT_REQUEST_BYTES
    assert max(r.request_bytes for r in server.requests) < 128 * 1024  # DeepL counts the headers too

    server.clear()  # the limit is a setting: 8 KiB bodies carry 2 of these texts
    texts = [f"{i:02d}" + "x" * 2998 for i in range(5)]
    make(max_request_bytes=8 * 1024).translate(texts, "en", "fr")
    assert [len(r.texts) for r in server.requests] == [2, 2, 1]
    assert max(r.body_bytes for r in server.requests) <= 8 * 1024


def test_a_text_over_the_limit_alone_is_refused_before_sending(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    with pytest.raises(RequestTooLarge, match=r"text #1 .* split it"):
        make().translate(["short", "x" * (MAX_REQUEST_BYTES + 1)], "en", "fr")
    assert server.requests == []
    with pytest.raises(ConfigError, match="headers too"):  # DeepL's 128 KiB is for the whole request
        make(max_request_bytes=128 * 1024)
    with pytest.raises(ConfigError, match="timeout_s"):
        make(timeout_s=0)


def test_a_413_chunk_is_halved_and_every_text_is_paid_once(tmp_path: Path) -> None:
    # The server takes 20 000-byte requests, fewer than the adapter assumes (120 KiB): 413s.
    texts = [f"{i:02d} " + "x" * 4995 for i in range(10)]
    texts.insert(4, "big " + "y" * 25_000)  # over the server's limit even alone
    with FakeDeepL(max_request_bytes=20_000) as server, TranslationCache(tmp_path / "c.sqlite") as cache:
        translator = DeepLTranslator(server.auth_key, server_url=server.url, max_network_retries=0)
        outcomes, stats = cached_translate_each(translator, cache, texts, "en", "fr")
        paid = [t for r in server.translated() for t in r.texts]
        assert sorted(paid) == sorted(texts[:4] + texts[5:])  # every text once; 413s are not paid
        assert {r.status for r in server.requests} == {200, 413}
        assert all(r.request_bytes <= 20_000 for r in server.translated())
        big = outcomes[4]
        assert isinstance(big, Refused) and big.reason == "too_large" and "HTTP 413" in big.detail
        assert [o.text for o in outcomes if isinstance(o, Translation)] == [
            f"[FR] {t}" for t in texts if t != texts[4]
        ]
        assert (stats.sent_texts, stats.refused, len(cache)) == (10, 1, 10)

        server.clear()  # a rerun pays for nothing: the refused text is tried again, and refused again
        again, stats = cached_translate_each(translator, cache, texts, "en", "fr")
        assert again == outcomes and server.translated() == [] and stats.hits == 10
        with pytest.raises(RequestTooLarge, match="text #4"):
            cached_translate(translator, cache, texts, "en", "fr")
        translator.close()


@pytest.mark.slow
def test_a_hung_server_fails_within_the_timeout(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    server.inject("hang", 10)  # never answers, like deepl-mock's no-response sessions
    settings = deepl.http_client.max_network_retries, deepl.http_client.min_connection_timeout
    started = time.monotonic()
    with pytest.raises(TranslatorUnavailable, match=r"timeout_s 1\.5 s") as info:
        make(timeout_s=1.5, max_network_retries=5).translate(["a"], "en", "fr")
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 1.5 + 1.0, elapsed  # the client's own retries took ~70 s
    assert "\n" not in str(info.value) and [r.status for r in server.requests] == [None]
    assert (deepl.http_client.max_network_retries, deepl.http_client.min_connection_timeout) == settings


@pytest.mark.slow
def test_retries_stop_at_the_timeout(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    server.inject(503, 10)
    started = time.monotonic()
    with pytest.raises(TranslatorUnavailable, match=r"HTTP 503 after 1 retry \(timeout_s 2 s"):
        make(timeout_s=2.0, max_network_retries=5).translate(["a"], "en", "fr")
    assert time.monotonic() - started < 2.0 + 0.5
    assert [r.status for r in server.requests] == [503, 503]  # after ~1 s, 1.6 s more would pass 2 s


def test_usage(make: Make) -> None:
    translator = make()
    translator.translate(["abc", "de"], "en", "fr")
    assert translator.usage() == (5, 500000)


# -- glossary -------------------------------------------------------------------------


def _glossary_csv(tmp_path: Path, name: str, rows: list[tuple[str, str]]) -> Path:
    path = tmp_path / name
    lines = ["source_term,target_term", *(f"{s},{t}" for s, t in rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_glossary_created_once_and_passed_by_id(make: Make, deepl_server: Server, tmp_path: Path) -> None:
    _, server = deepl_server
    en_fr = _glossary_csv(
        tmp_path, "en-fr.csv", [("heart attack", "infarctus du myocarde"), ("stroke", "AVC")]
    )
    translator = make(glossaries={"en-fr": en_fr})
    options = translator.options()
    assert set(options["glossary"]) == {"en-fr"}

    first = translator.translate(["risk of heart attack", "stroke unit"], "en", "fr")
    translator.translate(["after a stroke"], "en", "fr")
    translator.translate(["stroke"], "en", "es")  # no es dictionary: no glossary

    assert [t.text for t in first] == ["[FR] risk of infarctus du myocarde", "[FR] AVC unit"]
    (created,) = server.requests_to("/v3/glossaries", "POST")
    assert created.body["dictionaries"] == [
        {
            "source_lang": "EN",
            "target_lang": "FR",
            "entries": "heart attack\tinfarctus du myocarde\nstroke\tAVC",
            "entries_format": "tsv",
        }
    ]
    (glossary_id,) = server.glossaries
    sent = [r.body.get("glossary_id") for r in server.requests_to("/v2/translate")]
    assert sent == [glossary_id, glossary_id, None]
    assert all(r.body["source_lang"] == "EN" for r in server.requests_to("/v2/translate"))

    # Another run with the same content reuses the glossary; a changed file makes a new one.
    again = make(glossaries={("en", "fr"): en_fr})
    again.translate(["stroke"], "en", "fr")
    assert again.options() == options
    assert len(server.requests_to("/v3/glossaries", "POST")) == 1
    changed = _glossary_csv(tmp_path, "en-fr-2.csv", [("stroke", "accident vasculaire cérébral")])
    other = make(glossaries={"en-fr": changed})
    assert other.options()["glossary"] != options["glossary"]
    assert other.translate(["stroke"], "en", "fr")[0].text == "[FR] accident vasculaire cérébral"
    assert len(server.glossaries) == 2


def test_glossary_csv_errors(make: Make, tmp_path: Path) -> None:
    bad_header = tmp_path / "bad.csv"
    bad_header.write_text("en,fr\nstroke,AVC\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="source_term,target_term"):
        make(glossaries={"en-fr": bad_header})
    conflict = _glossary_csv(tmp_path, "c.csv", [("stroke", "AVC"), ("stroke", "attaque")])
    with pytest.raises(ConfigError, match="line 3"):
        make(glossaries={"en-fr": conflict})
    with pytest.raises(ConfigError, match="cannot read"):
        make(glossaries={"en-fr": tmp_path / "missing.csv"})
    with pytest.raises(ConfigError, match="en-de"):
        make(glossaries={"en-de": conflict})


# -- errors ---------------------------------------------------------------------------


def test_429_then_success_is_retried_by_the_library(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    server.inject(429, 1)
    texts = _texts(3)
    out = make(max_network_retries=1).translate(texts, "en", "fr")
    assert [t.text for t in out] == [f"[FR] {t}" for t in texts]
    assert [r.status for r in server.requests] == [429, 200]


def test_quota_exceeded(make: Make, deepl_server: Server) -> None:
    _, server = deepl_server
    server.inject(456)
    with pytest.raises(QuotaExceeded, match="quota") as info:
        make(max_network_retries=3).translate(["a"], "en", "fr")
    assert isinstance(info.value, IrforgeError)
    assert len(server.requests) == 1  # 456 is not retried

    limited = FakeDeepL(character_limit=10)  # the quota running out for real
    with limited:
        translator = DeepLTranslator(limited.auth_key, server_url=limited.url, max_network_retries=0)
        translator.translate(["12345678"], "en", "fr")
        with pytest.raises(QuotaExceeded):
            translator.translate(["123"], "en", "fr")
        translator.close()


@pytest.mark.parametrize("where", ["constructor", "env"])
def test_wrong_key_is_rejected_without_showing_it(
    deepl_server: Server, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    url, server = deepl_server
    secret = "s3cret-wrong-key-0123:fx"
    if where == "env":
        monkeypatch.setenv("DEEPL_AUTH_KEY", secret)
        monkeypatch.setenv("DEEPL_SERVER_URL", url)
        translator = DeepLTranslator.from_env(max_network_retries=0)
    else:
        translator = DeepLTranslator(secret, server_url=url, max_network_retries=0)
    with pytest.raises(AuthorizationFailed) as info:
        translator.translate(["a"], "en", "fr")
    translator.close()
    err: BaseException | None = info.value
    assert "403" in str(info.value) and "DEEPL_AUTH_KEY" in str(info.value)
    assert "\n" not in str(info.value)
    while err is not None:  # the server echoes the key: nothing in the chain may carry it
        assert secret not in str(err) and secret not in repr(err)
        err = err.__cause__ or err.__context__
    assert secret in server.requests[0].headers["authorization"]  # it was sent, just not shown
    assert secret not in repr(translator) and secret not in canonical_json(translator.options())


def test_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPL_AUTH_KEY", raising=False)
    with pytest.raises(AuthorizationFailed, match="DEEPL_AUTH_KEY is not set"):
        DeepLTranslator.from_env()
    with pytest.raises(AuthorizationFailed, match="no DeepL auth key"):
        DeepLTranslator("  ")


def test_server_kind_in_options(deepl_server: Server) -> None:
    url, _ = deepl_server
    free = DeepLTranslator("k:fx")
    pro = DeepLTranslator("k")
    local = DeepLTranslator("k", server_url=url.replace("http://", "http://user:pw@") + "/")
    assert free.options()["server"] == {"kind": "free"}
    assert pro.options()["server"] == {"kind": "pro"}
    assert local.options()["server"] == {"kind": "custom", "url": url}
    for t in (free, pro, local):
        t.close()


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (500, TranslatorUnavailable),
        (503, TranslatorUnavailable),
        ("drop", TranslatorUnavailable),
        (429, RateLimited),
    ],
)
def test_failures_beyond_the_retry_budget(
    make: Make, deepl_server: Server, fault: int | str, error: type[TranslationError]
) -> None:
    _, server = deepl_server
    server.inject(fault, 2)  # type: ignore[arg-type]
    with pytest.raises(error, match="after 1 retry") as info:
        make(max_network_retries=1).translate(["a"], "en", "fr")
    assert "\n" not in str(info.value)
    assert [r.status for r in server.requests] == ([None, None] if fault == "drop" else [fault, fault])


def test_unreachable_server() -> None:
    with FakeDeepL() as gone:
        url = gone.url
    translator = DeepLTranslator("k", server_url=url, max_network_retries=0)
    with pytest.raises(TranslatorUnavailable, match="cannot reach"):
        translator.translate(["a"], "en", "fr")
    translator.close()


# -- cache ----------------------------------------------------------------------------


def test_plan_batches() -> None:
    assert plan_batches([], 50, 100) == []
    assert plan_batches([1] * 5, 2, 100) == [range(0, 2), range(2, 4), range(4, 5)]
    assert plan_batches([40, 40, 40], 50, 90) == [range(0, 2), range(2, 3)]
    assert plan_batches([500, 1], 50, 90) == [range(0, 1), range(1, 2)]


def test_cache_key_covers_the_request() -> None:
    base = cache_key("a", "en", "fr", "deepl", {"formality": None})
    assert base == cache_key("a", "en", "fr", "deepl", {"formality": None})
    assert (
        len(
            {
                base,
                cache_key("b", "en", "fr", "deepl", {"formality": None}),
                cache_key("a", "en", "es", "deepl", {"formality": None}),
                cache_key("a", "es", "fr", "deepl", {"formality": None}),
                cache_key("a", "en", "fr", "llm", {"formality": None}),
                cache_key("a", "en", "fr", "deepl", {"formality": "prefer_more"}),
            }
        )
        == 6
    )


def test_cache_file_is_wal_and_shared(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "translations.sqlite"
    with TranslationCache(path) as writer, TranslationCache(path) as reader:
        writer.put_many({"k1": Translation("x", 1, "en")})
        writer.put_many([("k1", Translation("other", 9, None)), ("k2", Translation("y", 2, None))])
        assert reader.get_many(["k1", "k2", "k3"]) == {
            "k1": Translation("x", 1, "en"),  # the first result stored is kept
            "k2": Translation("y", 2, None),
        }
        assert len(reader) == 2
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with TranslationCache(path) as again:
        assert again.get_many(f"k{i}" for i in range(2000)).keys() == {"k1", "k2"}


def test_second_run_sends_nothing(make: Make, deepl_server: Server, tmp_path: Path) -> None:
    _, server = deepl_server
    texts = _texts(70)
    with TranslationCache(tmp_path / "c.sqlite") as cache:
        first, stats = cached_translate(make(), cache, texts, "en", "fr")
        chars = sum(len(t) for t in texts)
        assert stats == CacheStats(
            hits=0, misses=70, sent_characters=chars, billed_characters=chars, sent_texts=70
        )
        assert len(server.translated()) == 2

    with TranslationCache(tmp_path / "c.sqlite") as cache:  # a new process, same file
        second, stats = cached_translate(make(), cache, texts, "en", "fr")
    assert second == first
    assert stats == CacheStats(hits=70, misses=0, sent_characters=0, billed_characters=0, sent_texts=0)
    assert len(server.requests) == 2

    with TranslationCache(tmp_path / "c.sqlite") as cache:  # other options: other keys
        _, stats = cached_translate(make(formality="prefer_more"), cache, texts[:3], "en", "fr")
    assert stats.hits == 0 and len(server.requests) == 3


def test_duplicates_are_sent_once(make: Make, deepl_server: Server, tmp_path: Path) -> None:
    _, server = deepl_server
    texts = ["otitis", "asthma", "otitis", "eczema", "asthma"]
    with TranslationCache(tmp_path / "c.sqlite") as cache:
        cache.put_many(
            {cache_key("eczema", "en", "es", "deepl", make().options()): Translation("[X] eczema", 6, None)}
        )
        out, stats = cached_translate(make(), cache, texts, "en", "es")
    assert [t.text for t in out] == ["[ES] otitis", "[ES] asthma", "[ES] otitis", "[X] eczema", "[ES] asthma"]
    assert [r.texts for r in server.requests] == [["otitis", "asthma"]]
    assert stats == CacheStats(hits=1, misses=4, sent_characters=12, billed_characters=12, sent_texts=2)


def test_crash_mid_run_then_rerun_pays_only_for_the_rest(
    make: Make, deepl_server: Server, tmp_path: Path
) -> None:
    _, server = deepl_server
    texts = _texts(180)
    server.inject(456, after=2)  # the 3rd batch runs out of quota
    with TranslationCache(tmp_path / "c.sqlite") as cache, pytest.raises(QuotaExceeded):
        cached_translate(make(), cache, texts, "en", "fr")
    paid_before = [t for r in server.translated() for t in r.texts]
    assert paid_before == texts[:100]
    assert [r.status for r in server.requests] == [200, 200, 456]

    server.clear()
    with TranslationCache(tmp_path / "c.sqlite") as cache:
        out, stats = cached_translate(make(), cache, texts, "en", "fr")
    sent = [t for r in server.requests for t in r.texts]
    assert sent == texts[100:]
    assert [len(r.texts) for r in server.requests] == [50, 30]
    assert [t.text for t in out] == [f"[FR] {t}" for t in texts]
    assert (stats.hits, stats.misses, stats.sent_texts) == (100, 80, 80)
    assert stats.billed_characters == sum(len(t) for t in texts[100:])


def test_cached_translate_checks_the_engine_answer(tmp_path: Path) -> None:
    class Broken:
        engine = "broken"

        def options(self) -> dict[str, object]:
            return {}

        def translate(self, texts: object, source: str, target: str) -> list[Translation]:
            return []

    with (
        TranslationCache(tmp_path / "c.sqlite") as cache,
        pytest.raises(TranslationError, match="0 translations"),
    ):
        cached_translate(Broken(), cache, ["a"], "en", "fr")
    with TranslationCache(tmp_path / "c.sqlite") as cache:
        assert len(cache) == 0
