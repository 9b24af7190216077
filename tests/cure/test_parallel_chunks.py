"""The CURE demo (flows/configs/cure.yaml) up to ``judge``, its chunks on a process pool: the
inline bytes, stage by stage (tests/parallel_harness.py).

The LLM of translate and judge is tests/fakes/llm_server.py's FakeChat behind the ``openai``
engine: the demo's embedded llama.cpp server keeps those stages' chunks in one process
(``tasks/common/llm/stage.py`` ``llm_resources``), which would leave them unchecked here. The
encoder and the cross-encoder are the demo's real small models.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from flows.registry import get_pipeline
from irforge.config import validate_config
from irforge.parallel import CPU, Resources
from tasks.cure.stages.embed import SPEC as EMBED
from tasks.cure.stages.embed import EmbedConfig
from tasks.cure.stages.judge import SPEC as JUDGE
from tasks.cure.stages.judge import JudgeConfig
from tasks.cure.stages.pool import SPEC as POOL
from tasks.cure.stages.pool import PoolConfig
from tests.conftest import REPO
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, last_user_text
from tests.parallel_harness import ParallelCheck, assert_pool_gave_the_inline_bytes, check_parallel_chunks

DEMO = REPO / "flows" / "configs" / "cure.yaml"
CHUNK_ROWS = 5  # the demo's smallest chunked input is parse's 9 articles: 2 chunks or more
PASSAGE_CHUNK_ROWS = {"segment": 40, "filter": 40, "embed": 40}  # ~100 rows each: 3 chunks, not 20
PARALLEL = {"ingest", "parse", "segment", "filter", "translate", "embed", "mine", "pool", "judge"}
WHOLE_INPUT = {"annotations", "dedup", "index", "corpus"}


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    """A translation, or a judgement that depends on the prompt only (the same reply whichever
    process asks)."""
    text = last_user_text(body)
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
    if "translation" in schema.get("properties", {}):
        return {"translation": "[translated] " + text.rsplit("\n", 1)[-1][:120]}
    digest = hashlib.sha256(text.encode()).hexdigest()
    return {"explanation": f"prompt {digest[:16]}", "score": int(digest, 16) % 3}


def _config_data(server: FakeChat) -> dict[str, Any]:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    llm = {"engine": "openai", "base_url": server.base_url, "model": DEFAULT_MODEL, "timeout_s": 10.0}
    data["stages"]["translate"]["llm"] = {**llm, "sampling": {"temperature": 0, "max_tokens": 64}}
    data["stages"]["judge"]["llm"] = copy.deepcopy(llm)
    return dict(data)


pytestmark = pytest.mark.slow  # a process pool, a Prefect server, two small models: about a minute


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ParallelCheck]:
    pipeline = get_pipeline("cure")
    with pytest.MonkeyPatch.context() as env, FakeChat(answer=_answer) as server:
        env.delenv("DEEPL_AUTH_KEY", raising=False)  # engine auto: the LLM translates
        config = validate_config(pipeline.config_type, _config_data(server), "test config")
        root = tmp_path_factory.mktemp("cure-parallel")
        yield check_parallel_chunks(
            pipeline,
            config,
            DEMO.parent,
            root,
            chunk_rows=CHUNK_ROWS,
            stage_chunk_rows=PASSAGE_CHUNK_ROWS,
            until="judge",
            workers=2,
            threads=1,  # torch's threads, here and in each worker: no more threads than cores
        )


def test_every_chunked_stage_ran_in_several_chunks(check: ParallelCheck) -> None:
    assert check.parallel == PARALLEL and check.whole_input == WHOLE_INPUT and not check.inline_only
    assert all(check.chunks[name] >= 2 for name in PARALLEL), check.chunks
    assert {name: check.chunks[name] for name in WHOLE_INPUT} == dict.fromkeys(WHOLE_INPUT, 1)
    assert check.cache_writers == {"translate", "judge"}  # the LLM's replies


def test_chunks_computed_on_the_pool_give_the_inline_bytes(check: ParallelCheck) -> None:
    assert_pool_gave_the_inline_bytes(check, PARALLEL)
    assert "encoder.parquet" in check.compared["embed"]  # a side table, compared like the rows


def test_whole_input_stages_stay_in_the_stage_process(check: ParallelCheck) -> None:
    assert set(check.pool_chunks) == PARALLEL


def test_local_models_ask_for_a_gpu_only_on_one_and_the_embedded_llm_stays_in_one_process() -> None:
    on_cuda = Resources(num_gpus=1, memory_mb=2048)
    assert EMBED.resources_for(EmbedConfig.model_validate({"encoder": {"device": "cuda"}})) == on_cuda
    assert EMBED.resources_for(EmbedConfig.model_validate({"encoder": {"device": "cpu"}})) == CPU
    server = {"engine": "openai", "base_url": "http://gpu:8000/v1"}
    assert EMBED.resources_for(EmbedConfig.model_validate({"encoder": server})) == CPU
    assert POOL.resources_for(PoolConfig.model_validate({"reranker": {"device": "cuda:1"}})).num_gpus == 1
    assert POOL.resources_for(PoolConfig.model_validate({"reranker": {"engine": "vllm"}})) == CPU
    judge = {"pool": {"threshold": 0.42}}
    for engine, expected in (
        ("llama-cpp", Resources(parallel=False)),
        ("vllm-batch", Resources(num_gpus=1)),
        ("openai", CPU),
    ):
        config = JudgeConfig.model_validate({**judge, "llm": {"engine": engine}})
        assert JUDGE.resources_for(config) == expected, engine
    paced = JudgeConfig.model_validate({**judge, "llm": {"requests_per_second": 2.0}})
    assert not JUDGE.resources_for(paced).parallel  # a rate limit holds within one process
