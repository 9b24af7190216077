"""The translate stage against a local server speaking DeepL's protocol, with the real client,
and (``engine: auto`` without a key) against the OpenAI-protocol fake LLM of tests/fakes/llm_server.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from flows.registry import get_pipeline
from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.pipeline import Selection
from tasks.common.translate.port import QuotaExceeded
from tests.conftest import REPO, run_cure
from tests.fakes.deepl_server import FakeDeepL, deepl_server
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, last_user_text

__all__ = ["deepl_server"]  # the fixture, used by parameter name below

ARTICLE = REPO / "data" / "demo" / "articles" / "demo2_dermatology_psoriasis_nbuvb.xml"
PASSAGE = "Narrowband ultraviolet B phototherapy is widely used for moderate plaque psoriasis."


DEEPL = {"formality": "prefer_more", "max_network_retries": 0}


def _queries(n: int, texts: dict[int, str] | None = None) -> list[dict[str, Any]]:
    languages = ["en", "fr", "es"]
    texts = texts or {}
    return [
        {"id": f"r{i}", "query": texts.get(i, f"Question number {i} about psoriasis phototherapy?"),
         "language": languages[i % 3], "domains": "Dermatology", "status": "validated", "passage": PASSAGE,
         "doi": "10.5555/irforge.demo.2"}
        for i in range(n)
    ]  # fmt: skip


def _write_inputs(tmp_path: Path, n: int, texts: dict[int, str] | None = None) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    (corpus / "a.xml").write_bytes(ARTICLE.read_bytes())
    (tmp_path / "export.json").write_text(json.dumps(_queries(n, texts)))


def _run(
    tmp_path: Path,
    n: int,
    selection: Selection | None = None,
    chunk_rows: int = 500,
    translate: dict[str, Any] | None = None,
    texts: dict[int, str] | None = None,
) -> dict[str, StageOutcome]:
    _write_inputs(tmp_path, n, texts)
    return run_cure(
        tmp_path / "artifacts",
        ["corpus"],
        tmp_path,
        selection,
        chunk_rows=chunk_rows,
        annotations={"sources": ["export.json"]},
        translate=translate or {"engine": "auto", "deepl": DEEPL},
    )


@pytest.fixture
def deepl_env(deepl_server: tuple[str, FakeDeepL], monkeypatch: pytest.MonkeyPatch) -> FakeDeepL:
    url, server = deepl_server
    monkeypatch.setenv("DEEPL_AUTH_KEY", server.auth_key)
    monkeypatch.setenv("DEEPL_SERVER_URL", url)
    return server


def test_each_query_gets_three_languages_original_kept(tmp_path: Path, deepl_env: FakeDeepL) -> None:
    out = _run(tmp_path, 6)
    rows = out["translate"].artifact.read().to_pylist()
    assert len(rows) == 18 and out["translate"].artifact.excluded().num_rows == 0
    by_query: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_query.setdefault(r["query_id"], {})[r["language"]] = r
    for langs in by_query.values():
        assert set(langs) == {"en", "fr", "es"}
        (original,) = [r for r in langs.values() if r["original"]]
        assert original["engine"] == "original" and original["billed_characters"] == 0
        for r in langs.values():
            if not r["original"]:
                assert r["engine"] == "deepl" and r["source_language"] == original["language"]
                assert (
                    r["text"] != original["text"] and original["text"] in r["text"]
                )  # the fake server's output
                assert "irforge-test-key" not in (r["engine_options"] or "")
    sent = deepl_env.translated()
    assert {(q.body["source_lang"], q.body["target_lang"]) for q in sent} == {
        ("EN", "FR"), ("EN", "ES"), ("FR", "EN-US"), ("FR", "ES"), ("ES", "EN-US"), ("ES", "FR")
    }  # fmt: skip
    cost = out["translate"].manifest["cost"]
    assert cost["texts_sent"] == 12 and cost["billed_characters"] == sum(
        len(t) for q in sent for t in q.texts
    )
    assert "irforge-test-key" not in json.dumps(out["translate"].manifest)


def test_rerun_and_forced_rerun_send_nothing_again(tmp_path: Path, deepl_env: FakeDeepL) -> None:
    _run(tmp_path, 6)
    before = len(deepl_env.translated())
    assert _run(tmp_path, 6)["translate"].state == "reused"
    forced = _run(tmp_path, 6, Selection(only="translate"))["translate"]
    assert forced.state == "computed"
    assert len(deepl_env.translated()) == before  # every text came from the request cache
    assert forced.manifest["cost"]["cache_hits"] == 12 and forced.manifest["cost"]["texts_sent"] == 0


def test_quota_stops_the_stage_and_a_rerun_pays_only_for_the_rest(
    tmp_path: Path, deepl_env: FakeDeepL
) -> None:
    # 30 queries x 2 translations; a chunk of 9 units = 3 queries = 6 requests (one per language
    # pair). The 9th request, in the second chunk, answers 456.
    deepl_env.inject(456, times=1, after=8)
    with pytest.raises(QuotaExceeded):
        _run(tmp_path, 30, chunk_rows=9)
    paid_before = [t for q in deepl_env.translated() for t in q.texts]
    work = next((tmp_path / "artifacts" / "cure" / "translate").glob(".work-*"))
    assert list(work.glob("chunk-*.json")), "finished chunks are kept"
    out = _run(tmp_path, 30, chunk_rows=9)
    assert out["translate"].state == "resumed"
    paid_after = [t for q in deepl_env.translated() for t in q.texts][len(paid_before) :]
    assert len(paid_before) + len(paid_after) == 60  # each text paid exactly once
    assert not set(paid_before) & set(paid_after)
    assert out["translate"].manifest["chunks"]["resumed"] == 1
    assert out["translate"].manifest["cost"]["cache_hits"] == 2  # paid in the failed chunk, not paid again
    assert out["translate"].artifact.num_rows == 90


def test_without_a_key_the_missing_languages_are_excluded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("DEEPL_AUTH_KEY", raising=False)
    out = _run(tmp_path, 3)
    art = out["translate"].artifact
    assert art.num_rows == 3 and all(r["original"] for r in art.read().to_pylist())
    assert art.excluded().column("reason").to_pylist() == ["no_translator"] * 6
    assert art.manifest["material"]["inputs"] == {"engine": "auto", "deepl": {"glossary": None}}
    (warning,) = [r for r in caplog.records if r.name == "irforge.translate"]
    assert warning.levelno == logging.WARNING and "nothing is translated" in warning.getMessage()


# -- engine auto: the switch to the LLM is said, and does not make the stage stale (issue 14 §15)


def _translate_fingerprint(tmp_path: Path, translate: dict[str, Any]) -> str:
    _write_inputs(tmp_path, 6)
    pipeline = get_pipeline("cure")
    data = {"stages": {"ingest": {"sources": ["corpus"]}, "annotations": {"sources": ["export.json"]},
                       "translate": translate}}  # fmt: skip
    plans = pipeline.plan(validate_config(pipeline.config_type, data, "test config"), tmp_path)
    return plans["translate"].fingerprint


def test_auto_without_a_key_keeps_the_fingerprint_and_says_which_engine_ran(
    tmp_path: Path, deepl_env: FakeDeepL, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return {"translation": "[llm] " + last_user_text(body).rsplit("\n", 1)[-1][:120]}

    with FakeChat(answer=answer) as chat:
        llm = {"engine": "openai", "base_url": chat.base_url, "model": DEFAULT_MODEL,
               "sampling": {"max_tokens": 64}, "max_attempts": 1}  # fmt: skip
        translate = {"engine": "auto", "deepl": DEEPL, "llm": llm}
        with_key = _translate_fingerprint(tmp_path, translate)
        first = _run(tmp_path, 6, translate=translate)["translate"]
        assert first.state == "computed" and first.manifest["cost"]["translated_by_deepl"] == 12
        assert "translated_by_llm" not in first.manifest["cost"]

        monkeypatch.delenv("DEEPL_AUTH_KEY")
        assert _translate_fingerprint(tmp_path, translate) == with_key
        assert not [r for r in caplog.records if r.name == "irforge.translate"]
        again = _run(tmp_path, 6, translate=translate)["translate"]
        assert again.state == "reused" and again.artifact.path == first.artifact.path
        assert chat.requests == []  # nothing was translated again, by no engine

        forced = _run(tmp_path, 6, Selection(only="translate"), translate=translate)["translate"]
        assert forced.state == "computed" and len(chat.requests) == 12
    (warning,) = [r for r in caplog.records if r.name == "irforge.translate"]
    assert (
        warning.levelno == logging.WARNING
        and "the LLM (translate.llm) translates instead" in warning.getMessage()
    )
    assert (
        forced.manifest["cost"]["translated_by_llm"] == 12
        and "translated_by_deepl" not in forced.manifest["cost"]
    )
    rows = [r for r in forced.artifact.read().to_pylist() if not r["original"]]
    assert {r["engine"] for r in rows} == {"llm"} and all("[llm]" in r["text"] for r in rows), rows[0]


def test_pinned_engines_are_other_configs(tmp_path: Path) -> None:
    fingerprints = {
        _translate_fingerprint(tmp_path, {"engine": engine, "deepl": DEEPL})
        for engine in ("auto", "deepl", "none")
    }
    assert len(fingerprints) == 3


# -- DeepL's request size from the stage config (issue 14 §14) --------------------------------


def test_request_size_is_set_from_the_config_and_a_too_large_text_is_excluded(
    tmp_path: Path, deepl_env: FakeDeepL
) -> None:
    # 12 queries of ~2 KB: 8 KB requests carry 3 or 4 of them; query r3 (English, 9 KB) fits none.
    texts = {i: f"Question {i} " + " ".join(["about psoriasis phototherapy"] * 70) for i in range(12)}
    texts[3] = "Question 3 " + "x" * 9000
    out = _run(
        tmp_path,
        12,
        texts=texts,
        translate={"engine": "deepl", "deepl": {**DEEPL, "max_request_bytes": 8192}},
    )
    art = out["translate"].artifact
    sent = deepl_env.requests_to("/v2/translate")
    assert sent and all(r.status == 200 and r.body_bytes <= 8192 for r in sent)
    assert max(len(r.texts) for r in sent) > 1  # batched, not one text a request
    assert sorted(t for r in sent for t in r.texts) == sorted([t for i, t in texts.items() if i != 3] * 2)
    excluded = art.excluded().to_pylist()
    assert [(r["source_text"], r["reason"]) for r in excluded] == [(texts[3], "too_large")] * 2
    assert "max_request_bytes" in excluded[0]["detail"] and art.num_rows == 12 * 3 - 2
    assert out["translate"].manifest["cost"]["translated_by_deepl"] == 22
