"""The translate stage against a local server speaking DeepL's protocol, with the real client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from irforge.engine import StageOutcome
from irforge.pipeline import Selection
from tasks.translate.port import QuotaExceeded
from tests.conftest import REPO, run_cure
from tests.deepl_server import FakeDeepL, deepl_server

__all__ = ["deepl_server"]  # the fixture, used by parameter name below

ARTICLE = REPO / "data" / "demo" / "articles" / "demo2_dermatology_psoriasis_nbuvb.xml"
PASSAGE = "Narrowband ultraviolet B phototherapy is widely used for moderate plaque psoriasis."


def _queries(n: int) -> list[dict[str, Any]]:
    languages = ["en", "fr", "es"]
    return [
        {"id": f"r{i}", "query": f"Question number {i} about psoriasis phototherapy?", "language": languages[i % 3],
         "domains": "Dermatology", "status": "validated", "passage": PASSAGE, "doi": "10.5555/irforge.demo.2"}
        for i in range(n)
    ]  # fmt: skip


def _run(
    tmp_path: Path, n: int, selection: Selection | None = None, chunk_rows: int = 500
) -> dict[str, StageOutcome]:
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    (corpus / "a.xml").write_bytes(ARTICLE.read_bytes())
    (tmp_path / "export.json").write_text(json.dumps(_queries(n)))
    return run_cure(
        tmp_path / "artifacts",
        ["corpus"],
        tmp_path,
        selection,
        chunk_rows=chunk_rows,
        annotations={"sources": ["export.json"]},
        translate={"engine": "auto", "deepl": {"formality": "prefer_more", "max_network_retries": 0}},
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEEPL_AUTH_KEY", raising=False)
    out = _run(tmp_path, 3)
    art = out["translate"].artifact
    assert art.num_rows == 3 and all(r["original"] for r in art.read().to_pylist())
    assert art.excluded().column("reason").to_pylist() == ["no_translator"] * 6
    assert art.manifest["material"]["inputs"] == {"engine": "none"}
