"""Reranker port: the builtin cross-encoder (offline), the CrossEncoder adapter and the vLLM /score adapter.

The local adapter runs the real builtin model (all-MiniLM-L6-v2's encoder, random head) built
once per module into a temporary cache; its expected scores come from a plain
``sentence_transformers.CrossEncoder`` on the same directory, never from the adapter. The
remote adapter runs against ``tests/fakes/score_server.py`` (vLLM's /score protocol on loopback);
what it sent is read back from the server's records, and expected scores are the fake's own
:func:`~tests.fakes.score_server.fake_logit`.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sentence_transformers import CrossEncoder

from irforge.config import validate_config
from irforge.errors import ConfigError
from tasks.common.embed.local import model_files_digest
from tasks.common.rerank import config as reranker_config
from tasks.common.rerank.builtin import MINILM_CROSS_ENCODER, builtin_cross_encoder_path
from tasks.common.rerank.config import RerankerConfig, reranker_for
from tasks.common.rerank.local import CrossEncoderReranker
from tasks.common.rerank.port import Reranker, RerankerError, RerankerUnavailable, ScoredPairs
from tasks.common.rerank.vllm_score import VLLMScoreReranker
from tests.fakes.score_server import DEFAULT_MODEL, FakeScore, fake_logit, score_server, sigmoid

__all__ = ["score_server"]  # the fixture, used by parameter name below

SECRET = "vllm-irforge-test-3b9d2f7a-DO-NOT-LEAK"

QUERIES = [
    "lysis timing of phage lambda",
    "oral health related quality of life questionnaire in Dutch adults",
    "psoriasis",
    "home spirometry for patients with chronic obstructive pulmonary disease",
    "behavioural activation delivered by nurses",
    "lysis timing of phage lambda",
]
PASSAGES = [
    "The timing of host lysis by bacteriophage lambda varies between genetically identical cells, "
    "which makes it a good model of stochastic variation in gene expression.",
    "A Dutch translation of the oral health impact profile was validated in a sample of adults.",
    "Narrow-band UVB with calcipotriol cleared plaques faster than narrow-band UVB alone in a small "
    "randomised trial of adults with chronic plaque psoriasis; adverse events were mild. " * 3,
    "Spirometry at home was feasible.",
    "Nurses delivered eight sessions of behavioural activation to adults with depression in primary care.",
    "Holin proteins time the lysis.",
]


def expit(x: np.ndarray) -> np.ndarray:
    """The logistic function, written out (the oracle for ScoredPairs' scipy expit)."""
    return np.asarray(1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64))))


# -- the builtin model and the CrossEncoder adapter -----------------------------------------


@pytest.fixture(scope="module")
def offline() -> Iterator[None]:
    """No hub access in this module, as on a machine without network."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def builtin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def local(offline: None, builtin_dir: Path) -> CrossEncoderReranker:
    return CrossEncoderReranker(
        MINILM_CROSS_ENCODER, device="cpu", batch_size=2, builtin_cache_dir=builtin_dir
    )


@pytest.fixture(scope="module")
def plain(local: CrossEncoderReranker) -> CrossEncoder:
    """sentence-transformers itself on the same directory: the oracle."""
    assert local.path is not None
    model: CrossEncoder = CrossEncoder(str(local.path), device="cpu", max_length=512)
    return model


def raw_logits(
    model: CrossEncoder, queries: list[str], passages: list[str], batch_size: int = 32
) -> np.ndarray:
    pairs = list(zip(queries, passages, strict=True))
    return np.asarray(
        model.predict(
            pairs, batch_size=batch_size, activation_fn=torch.nn.Identity(), show_progress_bar=False
        ),
        dtype=np.float64,
    )


def test_the_rerankers_satisfy_the_port(local: CrossEncoderReranker) -> None:
    with VLLMScoreReranker("http://127.0.0.1:9", "m") as remote:
        rerankers: list[Reranker] = [local, remote]
        assert [r.engine for r in rerankers] == ["sentence-transformers", "vllm-score"]
        assert [r.model for r in rerankers] == [MINILM_CROSS_ENCODER, "m"]


def test_builtin_is_built_once_the_same_everywhere_and_says_it_is_meaningless(
    offline: None, local: CrossEncoderReranker, builtin_dir: Path, tmp_path: Path
) -> None:
    path = builtin_cross_encoder_path(MINILM_CROSS_ENCODER, builtin_dir)
    assert path == local.path and path.parent == builtin_dir
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert builtin_cross_encoder_path(MINILM_CROSS_ENCODER, builtin_dir) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt
    assert [p.name for p in builtin_dir.iterdir()] == [path.name]  # no staging directory left behind

    elsewhere = builtin_cross_encoder_path(MINILM_CROSS_ENCODER, tmp_path)
    assert elsewhere.name == path.name  # the name is a digest of the recipe and the source model
    assert model_files_digest(elsewhere) == model_files_digest(path)  # two builds: the same bytes

    config = json.loads((path / "config.json").read_text())
    assert len(config["id2label"]) == 1  # num_labels = 1
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert "mean nothing clinically" in config["irforge_note"]
    assert "mean nothing clinically" in (path / "README.md").read_text()
    assert "transformers_version" not in config


def test_builtin_loads_in_plain_sentence_transformers_offline(plain: CrossEncoder) -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert plain.num_labels == 1
    default = plain.predict([(QUERIES[0], PASSAGES[0])], show_progress_bar=False)  # the model's activation
    raw = raw_logits(plain, QUERIES[:1], PASSAGES[:1])
    np.testing.assert_allclose(default, expit(raw), rtol=1e-6)  # sigmoid: no activation in its config


def test_unknown_builtin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RerankerError, match="minilm-l6-cross-encoder"):
        builtin_cross_encoder_path("builtin:no-such-model", tmp_path)


def test_local_scores_are_raw_logits_and_their_sigmoid(
    local: CrossEncoderReranker, plain: CrossEncoder
) -> None:
    scored = local.score(QUERIES, PASSAGES)
    assert scored.logit.dtype == np.float64 and scored.logit.shape == (len(QUERIES),)
    np.testing.assert_allclose(scored.logit, raw_logits(plain, QUERIES, PASSAGES), atol=1e-5)
    np.testing.assert_allclose(scored.probability, expit(scored.logit), rtol=1e-12)
    assert len(np.unique(np.round(scored.logit, 4))) > 1  # the random head still tells pairs apart


def test_length_bucketing_keeps_input_order_and_matches_unbucketed_predict(
    local: CrossEncoderReranker, plain: CrossEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[list[tuple[str, str]]] = []
    real_predict = local._model.predict

    def spy(pairs: list[tuple[str, str]], **kwargs: Any) -> Any:
        batches.append(list(pairs))
        return real_predict(pairs, **kwargs)

    monkeypatch.setattr(local._model, "predict", spy)
    calls: list[tuple[int, int]] = []
    scored = local.score(QUERIES, PASSAGES, progress=lambda done, total: calls.append((done, total)))

    assert calls == [(2, 6), (4, 6), (6, 6)]  # batch_size 2
    # Batches went longest first: each batch's pairs are no longer than the previous batch's.
    token_counts = [local.token_lengths([q for q, _ in b], [p for _, p in b]).tolist() for b in batches]
    flat = [n for counts in token_counts for n in counts]
    assert flat == sorted(flat, reverse=True)
    assert batches[0][0] == (QUERIES[2], PASSAGES[2])  # the longest passage
    # Yet scores come back in input order, equal to plain CrossEncoder.predict in input order.
    np.testing.assert_allclose(scored.logit, raw_logits(plain, QUERIES, PASSAGES, batch_size=1), atol=1e-5)


def test_max_batch_tokens_caps_the_padded_size_of_a_batch(
    offline: None, builtin_dir: Path, plain: CrossEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgeted = CrossEncoderReranker(
        MINILM_CROSS_ENCODER, device="cpu", batch_size=8, max_length=64, max_batch_tokens=100,
        builtin_cache_dir=builtin_dir,
    )  # fmt: skip
    sizes: list[int] = []
    real_predict = budgeted._model.predict

    def spy(pairs: list[tuple[str, str]], **kwargs: Any) -> Any:
        lengths = budgeted.token_lengths([q for q, _ in pairs], [p for _, p in pairs])
        assert len(pairs) * int(lengths.max()) <= 100
        sizes.append(len(pairs))
        return real_predict(pairs, **kwargs)

    monkeypatch.setattr(budgeted._model, "predict", spy)
    scored = budgeted.score(QUERIES, PASSAGES)
    assert (
        sum(sizes) == len(QUERIES) and sizes[0] == 1 and max(sizes) > 1
    )  # long pairs alone, short ones together
    short = CrossEncoder(str(budgeted.path), device="cpu", max_length=64)
    np.testing.assert_allclose(scored.logit, raw_logits(short, QUERIES, PASSAGES), atol=1e-5)
    with pytest.raises(RerankerError, match="max_batch_tokens"):
        CrossEncoderReranker(
            MINILM_CROSS_ENCODER, max_length=64, max_batch_tokens=10, builtin_cache_dir=builtin_dir
        )


def test_max_length_truncates_and_is_described(offline: None, builtin_dir: Path) -> None:
    short = CrossEncoderReranker(
        MINILM_CROSS_ENCODER, device="cpu", max_length=12, builtin_cache_dir=builtin_dir
    )
    head = "stochastic lysis timing of phage lambda"
    scored = short.score([head, head], [head + " in controlled environments", head + " depends on holin"])
    # 12 tokens hold [CLS], the query, [SEP] and the passage's first tokens only: equal inputs, equal logits.
    assert short.token_lengths([head], [head + " depends on holin"]).tolist() == [12]
    np.testing.assert_allclose(scored.logit[0], scored.logit[1], atol=1e-6)
    assert short.describe()["max_length"] == 12
    with pytest.raises(RerankerError, match="exceeds"):
        CrossEncoderReranker(
            MINILM_CROSS_ENCODER, device="cpu", max_length=100_000, builtin_cache_dir=builtin_dir
        )


def test_bfloat16_autocast_is_close_to_float32_and_described(
    offline: None, local: CrossEncoderReranker, builtin_dir: Path
) -> None:
    bf16 = CrossEncoderReranker(
        MINILM_CROSS_ENCODER, device="cpu", precision="bfloat16", builtin_cache_dir=builtin_dir
    )
    np.testing.assert_allclose(
        bf16.score(QUERIES, PASSAGES).logit, local.score(QUERIES, PASSAGES).logit, atol=0.1
    )
    assert {k for k, v in bf16.describe().items() if local.describe()[k] != v} == {"precision"}


def test_local_describe_is_stable_and_free_of_paths(
    offline: None, local: CrossEncoderReranker, tmp_path: Path
) -> None:
    elsewhere = CrossEncoderReranker(
        MINILM_CROSS_ENCODER, device="cpu", batch_size=7, max_batch_tokens=4096, builtin_cache_dir=tmp_path
    )
    d = local.describe()
    assert elsewhere.describe() == d  # another cache directory, batch size and budget: same fingerprint
    assert d == {
        "engine": "sentence-transformers",
        "model": MINILM_CROSS_ENCODER,
        "revision": None,
        "files_digest": model_files_digest(elsewhere.path),  # type: ignore[arg-type]
        "max_length": 512,
        "precision": "float32",
        "activation": "none",
        "probability": "sigmoid",
    }
    text = json.dumps(d, allow_nan=False)
    assert str(tmp_path) not in text and "/" not in d["files_digest"] and ".cache" not in text


def test_a_local_directory_is_named_by_its_name_and_described_by_its_content(
    offline: None, local: CrossEncoderReranker, tmp_path: Path
) -> None:
    assert local.path is not None
    copy = tmp_path / "my-cross-encoder"
    copy.mkdir()
    for f in local.path.iterdir():
        (copy / f.name).symlink_to(f)
    reranker = CrossEncoderReranker(str(copy), device="cpu")
    assert reranker.model == "my-cross-encoder" and reranker.path == copy.resolve()
    assert reranker.describe()["files_digest"] == local.describe()["files_digest"]
    np.testing.assert_allclose(
        reranker.score(QUERIES[:2], PASSAGES[:2]).logit, local.score(QUERIES[:2], PASSAGES[:2]).logit
    )
    with pytest.raises(RerankerError, match="revision"):
        CrossEncoderReranker(str(copy), revision="abc")


def test_missing_directory_and_uncached_hub_model_are_named(offline: None, tmp_path: Path) -> None:
    with pytest.raises(RerankerError, match="no-such-model"):
        CrossEncoderReranker(str(tmp_path / "no-such-model"))
    with pytest.raises(RerankerUnavailable) as info:
        CrossEncoderReranker(cache_folder=tmp_path)  # the production default, not cached here
    assert "Alibaba-NLP/gte-multilingual-reranker-base" in str(info.value) and "HF_HUB_OFFLINE" in str(
        info.value
    )


def test_cuda_is_refused_without_a_gpu(offline: None, builtin_dir: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: asking for CUDA is legitimate here")
    with pytest.raises(RerankerUnavailable, match="CUDA"):
        CrossEncoderReranker(MINILM_CROSS_ENCODER, device="cuda", builtin_cache_dir=builtin_dir)


# -- ScoredPairs -----------------------------------------------------------------------------


def test_scored_pairs_are_read_only_float64_and_stable_at_extremes() -> None:
    scored = ScoredPairs.from_logits([-800.0, -1.0, 0.0, 1.0, 800.0])
    np.testing.assert_allclose(
        scored.probability, np.array([0.0, 1 / (1 + math.e), 0.5, 1 / (1 + 1 / math.e), 1.0])
    )
    assert np.isfinite(scored.probability).all()  # no overflow warning turned into NaN
    with pytest.raises(ValueError, match="read-only"):
        scored.logit[0] = 1.0
    with pytest.raises(RerankerError, match="pair #1"):
        ScoredPairs.from_logits([0.0, float("nan")])
    with pytest.raises(RerankerError, match="one output"):
        ScoredPairs.from_logits([[0.0, 1.0]])
    assert len(ScoredPairs.empty()) == 0


# -- the vLLM /score adapter against the fake server ------------------------------------------

Make = Callable[..., VLLMScoreReranker]


@pytest.fixture
def make(score_server: FakeScore) -> Iterator[Make]:
    built: list[VLLMScoreReranker] = []

    def build(**kwargs: Any) -> VLLMScoreReranker:
        kwargs.setdefault("base_url", score_server.url)
        kwargs.setdefault("model", DEFAULT_MODEL)
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("backoff_s", 0.001)
        kwargs.setdefault("timeout_s", 10.0)
        reranker = VLLMScoreReranker(**kwargs)
        built.append(reranker)
        return reranker

    yield build
    for reranker in built:
        reranker.close()


def expected_logits(queries: list[str], passages: list[str]) -> np.ndarray:
    return np.array([fake_logit(q, p) for q, p in zip(queries, passages, strict=True)])


def test_remote_sends_the_current_fields_and_asks_for_raw_logits(score_server: FakeScore, make: Make) -> None:
    scored = make().score(QUERIES, PASSAGES)
    (request,) = score_server.requests
    assert request.path == "/score" and request.status == 200
    assert set(request.body) == {"model", "queries", "documents", "use_activation"}
    assert request.body["use_activation"] is False and request.body["model"] == DEFAULT_MODEL
    assert request.side("queries") == QUERIES and request.side("documents") == PASSAGES
    np.testing.assert_allclose(scored.logit, expected_logits(QUERIES, PASSAGES))
    np.testing.assert_allclose(scored.probability, [sigmoid(x) for x in expected_logits(QUERIES, PASSAGES)])
    assert "authorization" not in request.headers  # VLLM_API_KEY unset: no key sent


@pytest.mark.parametrize("fields", [("data_1", "data_2"), ("text_1", "text_2")])
def test_remote_speaks_older_field_names_when_told(
    make: Make, score_server: FakeScore, fields: tuple[str, str]
) -> None:
    score_server.fields = fields
    with pytest.raises(RerankerError, match="fields") as info:
        make().score(QUERIES[:2], PASSAGES[:2])
    assert (
        not isinstance(info.value, RerankerUnavailable) and len(score_server.requests) == 1
    )  # 400: no retry
    scored = make(fields=fields).score(QUERIES[:2], PASSAGES[:2])
    assert score_server.requests[-1].side(fields[0]) == QUERIES[:2]
    np.testing.assert_allclose(scored.logit, expected_logits(QUERIES[:2], PASSAGES[:2]))


def test_remote_base_url_may_end_in_v1(score_server: FakeScore, make: Make) -> None:
    make(base_url=score_server.url + "/v1/").score(QUERIES[:1], PASSAGES[:1])
    assert score_server.requests[0].path == "/v1/score"


def test_remote_batches_requests_and_reports_progress(score_server: FakeScore, make: Make) -> None:
    queries = [f"query {i} about lysis" for i in range(10)]
    passages = [f"passage {i} about {'lysis ' * (i % 3)}timing" for i in range(10)]
    calls: list[tuple[int, int]] = []
    scored = make(batch_size=4, max_concurrency=3).score(
        queries, passages, progress=lambda d, t: calls.append((d, t))
    )
    sent = sorted(score_server.scored(), key=lambda r: queries.index(r.side("queries")[0]))
    assert [len(r.side("queries")) for r in sent] == [4, 4, 2]
    assert [q for r in sent for q in r.side("queries")] == queries
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and calls[-1] == (10, 10) and len(calls) == 3
    np.testing.assert_allclose(scored.logit, expected_logits(queries, passages))


def test_remote_keeps_to_its_concurrency_limit(score_server: FakeScore, make: Make) -> None:
    score_server.hold_s = 0.2
    queries, passages = QUERIES * 2, PASSAGES * 2
    scored = make(batch_size=2, max_concurrency=2).score(queries, passages)
    assert len(score_server.scored()) == 6
    assert score_server.max_in_flight <= 2
    np.testing.assert_allclose(scored.logit, expected_logits(queries, passages))


def test_remote_restores_order_by_index(score_server: FakeScore, make: Make) -> None:
    score_server.shuffle = True
    np.testing.assert_allclose(make().score(QUERIES, PASSAGES).logit, expected_logits(QUERIES, PASSAGES))


@pytest.mark.parametrize("fault", [429, 500, 503, "drop", "stall"])
def test_remote_retries_transient_failures(score_server: FakeScore, make: Make, fault: Any) -> None:
    score_server.stall_s = 2.0  # the client gives up after timeout_s
    score_server.inject(fault, times=2)
    scored = make(max_retries=2, timeout_s=0.5 if fault == "stall" else 10.0).score(QUERIES[:2], PASSAGES[:2])
    unanswered = fault in ("drop", "stall")
    assert [r.status for r in score_server.requests] == [None if unanswered else fault] * 2 + [200]
    np.testing.assert_allclose(scored.logit, expected_logits(QUERIES[:2], PASSAGES[:2]))


@pytest.mark.parametrize(
    ("fault", "match"), [(429, "HTTP 429"), (503, "HTTP 503"), ("drop", "connection failed")]
)
def test_remote_persistent_failures_are_unavailable(
    score_server: FakeScore, make: Make, fault: Any, match: str
) -> None:
    score_server.inject(fault, times=10)
    with pytest.raises(RerankerUnavailable, match=match):
        make(max_retries=2).score(QUERIES[:2], PASSAGES[:2])
    assert len(score_server.requests) == 3  # one try + two retries


@pytest.mark.parametrize(("fault", "match"), [(400, "HTTP 400"), (404, "404")])
def test_remote_refusals_are_not_retried(score_server: FakeScore, make: Make, fault: Any, match: str) -> None:
    score_server.inject(fault, times=10)
    with pytest.raises(RerankerError, match=match) as info:
        make(max_retries=3).score(QUERIES[:2], PASSAGES[:2])
    assert not isinstance(info.value, RerankerUnavailable) and len(score_server.requests) == 1


def test_remote_unknown_model_is_an_error(make: Make) -> None:
    with pytest.raises(RerankerError, match="served-model-name"):
        make(model="no-such-model").score(QUERIES[:1], PASSAGES[:1])


def test_remote_server_down_is_unavailable(score_server: FakeScore, make: Make) -> None:
    reranker = make(max_retries=1)
    score_server.stop()
    with pytest.raises(RerankerUnavailable, match=r"127\.0\.0\.1"):
        reranker.score(QUERIES[:1], PASSAGES[:1])


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (lambda p: {**p, "data": p["data"][:-1]}, r"3 scores for 4 pairs; missing pair #7"),
        (lambda p: {**p, "data": [{**d, "index": 0} for d in p["data"]]}, "pair #4 twice"),
        (lambda p: {**p, "data": [{**d, "score": "high"} for d in p["data"]]}, "score 'high'"),
        (lambda p: {**p, "data": [{**d, "score": float("nan")} for d in p["data"]]}, "score nan"),
        (lambda p: {**p, "data": [{**d, "index": 9} for d in p["data"]]}, "index 9"),
        (lambda p: {"object": "list"}, "'data'"),
    ],
    ids=["missing", "duplicate", "not-a-number", "nan", "out-of-range", "no-data"],
)
def test_remote_broken_answers_are_errors_naming_the_pair(
    score_server: FakeScore, make: Make, corrupt: Callable[[dict[str, Any]], dict[str, Any]], match: str
) -> None:
    answers = 0

    def second_only(payload: dict[str, Any]) -> dict[str, Any]:
        nonlocal answers
        answers += 1
        return corrupt(payload) if answers == 2 else payload

    score_server.mutate = second_only
    with pytest.raises(RerankerError, match=match):
        # batch_size 4, one request at a time: the second answer is for pairs #4-#7
        make(batch_size=4, max_concurrency=1).score(QUERIES + QUERIES[:2], PASSAGES + PASSAGES[:2])


def test_remote_key_is_sent_but_never_shown(
    score_server: FakeScore, make: Make, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("IRFORGE_TEST_SCORE_KEY", SECRET)
    score_server.api_key = SECRET
    good = make(api_key_env="IRFORGE_TEST_SCORE_KEY")
    good.score(QUERIES[:1], PASSAGES[:1])
    assert score_server.requests[0].headers["authorization"] == f"Bearer {SECRET}"

    score_server.api_key = "the-right-key"
    score_server.inject(503, times=1)  # a retry is logged: without the key
    reranker = make(api_key_env="IRFORGE_TEST_SCORE_KEY", max_retries=2)
    with pytest.raises(RerankerError) as info:
        reranker.score(QUERIES[:1], PASSAGES[:1])
    err = info.value
    assert not isinstance(err, RerankerUnavailable)  # 401: fix the key, retrying will not help
    assert [r.status for r in score_server.requests[1:]] == [503, 401]
    assert "401" in str(err) and "IRFORGE_TEST_SCORE_KEY" in str(err)
    link: BaseException | None = err
    while link is not None:
        assert SECRET not in str(link) and SECRET not in repr(link)
        link = link.__cause__ or link.__context__
    assert SECRET not in caplog.text and "retry 1 of 2" in caplog.text
    assert SECRET not in json.dumps(reranker.describe()) and SECRET not in repr(reranker)


def test_remote_unset_key_is_named_when_the_server_wants_one(score_server: FakeScore, make: Make) -> None:
    score_server.api_key = "needed"
    with pytest.raises(RerankerError, match="VLLM_API_KEY is unset"):
        make().score(QUERIES[:1], PASSAGES[:1])


def test_remote_truncation_is_sent_and_described(score_server: FakeScore, make: Make) -> None:
    reranker = make(truncate_prompt_tokens=512)
    reranker.score(QUERIES[:1], PASSAGES[:1])
    assert score_server.requests[0].body["truncate_prompt_tokens"] == 512
    assert reranker.describe()["max_length"] == 512


def test_remote_describe_is_about_the_model_not_the_server(make: Make) -> None:
    here = make(revision="0123456789abcdef0123456789abcdef01234567")
    elsewhere = make(
        base_url="http://gpu-host:8000", revision=here.revision, batch_size=8, max_concurrency=16
    )
    assert (
        here.describe()
        == elsewhere.describe()
        == {
            "engine": "vllm-score",
            "model": DEFAULT_MODEL,
            "revision": here.revision,
            "max_length": None,
            "activation": "none",
            "probability": "sigmoid",
        }
    )


def test_remote_config_is_checked(make: Make) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"base_url": "gpu-host:8000"}, "http"),
        ({"model": " "}, "model"),
        ({"fields": ("query", "document")}, "field pair"),
        ({"batch_size": 0}, "batch_size"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    ]
    for kwargs, match in cases:
        with pytest.raises(RerankerError, match=match):
            make(**kwargs)


def test_remote_url_credentials_are_not_repeated(make: Make) -> None:
    reranker = make(base_url="http://user:pa55word@127.0.0.1:9")
    assert "pa55word" not in reranker.base_url and "pa55word" not in repr(reranker)
    with pytest.raises(RerankerUnavailable) as info:
        reranker.score(QUERIES[:1], PASSAGES[:1])
    assert "pa55word" not in str(info.value)


# -- the pool stage's reranker config: every key acts or is refused (issue 14 §16) ------------


@pytest.fixture
def pool_reranker(score_server: FakeScore, tmp_path: Path) -> Iterator[Callable[..., Reranker]]:
    """``pool_reranker(**settings)``: what the pool stage builds from ``reranker:`` (engine vllm)."""

    def build(**settings: Any) -> Reranker:
        config = validate_config(
            RerankerConfig,
            {"engine": "vllm", "base_url": score_server.url, "model": DEFAULT_MODEL, **settings},
            "reranker config",
        )
        return reranker_for(config, tmp_path)

    yield build
    reranker_config._reranker.cache_clear()


def test_pool_vllm_max_length_reaches_the_server_and_changes_scores(
    score_server: FakeScore, pool_reranker: Callable[..., Reranker]
) -> None:
    # The query's words come at the end of a long passage: cut to 16 words, they are gone.
    query = "holin proteins time the lysis"
    passage = "Bacteriophage lambda " * 40 + "holin proteins time the lysis"
    long_scores = pool_reranker(max_length=512).score([query], [passage])
    short_scores = pool_reranker(max_length=16).score([query], [passage])
    sent = [r.body["truncate_prompt_tokens"] for r in score_server.scored()]
    assert sent == [512, 16]
    assert long_scores.logit[0] == fake_logit(query, passage) == 4.0
    assert short_scores.logit[0] == fake_logit(query, passage, 16) == -4.0
    with pytest.raises(RerankerError, match="max_model_len"):  # over the server's --max-model-len
        pool_reranker(max_length=1024).score([query], [passage])


def test_pool_vllm_batch_size_is_pairs_per_request(
    score_server: FakeScore, pool_reranker: Callable[..., Reranker]
) -> None:
    queries, passages = QUERIES * 2, PASSAGES * 2
    for batch_size in (5, 3):
        scored = pool_reranker(batch_size=batch_size).score(queries, passages)
        np.testing.assert_allclose(scored.logit, expected_logits(queries, passages))
    sizes = [len(r.side("queries")) for r in score_server.scored()]
    assert sorted(sizes[:3], reverse=True) == [5, 5, 2] and sorted(sizes[3:]) == [3, 3, 3, 3]


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"engine": "vllm", "base_url": "http://gpu:8000", "device": "cuda"}, "device"),
        ({"engine": "vllm", "base_url": "http://gpu:8000", "precision": "bfloat16"}, "precision"),
        ({"engine": "vllm", "base_url": "http://gpu:8000", "trust_remote_code": True}, "trust_remote_code"),
        ({"base_url": "http://gpu:8000"}, "base_url"),
        ({"api_key_env": "MY_KEY"}, "api_key_env"),
    ],
)
def test_pool_reranker_keys_that_cannot_act_are_refused(settings: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"reranker config: .*{key} does not apply to engine"):
        validate_config(RerankerConfig, settings, "reranker config")


# -- conformance: the same behaviour from both adapters ---------------------------------------


@pytest.fixture(params=["sentence-transformers", "vllm-score"])
def reranker(request: pytest.FixtureRequest, score_server: FakeScore) -> Iterator[Reranker]:
    if request.param == "sentence-transformers":
        yield request.getfixturevalue("local")
    else:
        with VLLMScoreReranker(score_server.url, DEFAULT_MODEL, batch_size=2, max_concurrency=2) as remote:
            yield remote


def test_conformance_order_progress_and_sigmoid(reranker: Reranker) -> None:
    calls: list[tuple[int, int]] = []
    scored = reranker.score(QUERIES, PASSAGES, progress=lambda d, t: calls.append((d, t)))
    assert scored.logit.dtype == scored.probability.dtype == np.float64
    assert scored.logit.shape == scored.probability.shape == (len(QUERIES),)
    np.testing.assert_allclose(scored.probability, expit(scored.logit), rtol=1e-12)
    assert calls[-1] == (6, 6) and [d for d, _ in calls] == sorted(d for d, _ in calls)
    # Pair i's score does not depend on the other pairs of the call, nor on their order.
    alone = np.array([reranker.score([q], [p]).logit[0] for q, p in zip(QUERIES, PASSAGES, strict=True)])
    np.testing.assert_allclose(scored.logit, alone, atol=1e-5)
    backwards = reranker.score(QUERIES[::-1], PASSAGES[::-1])
    np.testing.assert_allclose(backwards.logit[::-1], scored.logit, atol=1e-5)


def test_conformance_empty_call_gives_empty_scores(reranker: Reranker) -> None:
    calls: list[tuple[int, int]] = []
    scored = reranker.score([], [], progress=lambda d, t: calls.append((d, t)))
    assert len(scored) == 0 and scored.logit.dtype == np.float64 and calls == []


@pytest.mark.parametrize(
    ("queries", "passages", "match"),
    [
        (["a", ""], ["x", "y"], "query of pair #1 is empty"),
        (["a", "b"], ["x", "  "], "passage of pair #1 is empty"),
        (["a", None], ["x", "y"], "query of pair #1 is NoneType"),
        (["a", "b"], ["x"], "2 queries and 1 passages"),
        ("a query", ["x"], "one string"),
    ],
)
def test_conformance_bad_pairs_are_refused_by_position(
    reranker: Reranker, score_server: FakeScore, queries: Any, passages: Any, match: str
) -> None:
    with pytest.raises(RerankerError, match=match):
        reranker.score(queries, passages)
    assert score_server.requests == []  # refused before any request


def test_conformance_describe_is_json_without_places_or_secrets(
    reranker: Reranker, score_server: FakeScore
) -> None:
    d = reranker.describe()
    text = json.dumps(d, allow_nan=False)
    assert d["engine"] == reranker.engine and d["model"] == reranker.model
    assert d["activation"] == "none" and d["probability"] == "sigmoid" and "max_length" in d
    assert "127.0.0.1" not in text and "/tmp" not in text and "device" not in d and "batch_size" not in d
    assert reranker.describe() == d
