"""The evidencebench demo pair up to ``select``, its chunks on a process pool: the inline bytes,
stage by stage (tests/parallel_harness.py).

The LLM of refine, hypothesis, decompose, align and label is tests/fakes/llm_server.py's
FakeChat behind the ``openai`` engine, answering as tests/evidencebench/test_build_stages.py
scripts it (the demo's embedded llama.cpp server keeps those stages' chunks in one process).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flows.registry import get_pipeline
from irforge.parallel import CPU, Resources
from tasks.evidencebench.stages.align import SPEC as ALIGN
from tasks.evidencebench.stages.align import AlignConfig
from tests.evidencebench.test_build_stages import answer_with, write_config
from tests.fakes.llm_server import FakeChat
from tests.parallel_harness import ParallelCheck, assert_pool_gave_the_inline_bytes, check_parallel_chunks

CHUNK_ROWS = 1  # papers gets 3 cited papers, refine 3 summaries, align and label 2: one a chunk
STAGE_CHUNK_ROWS = {"harvest": 5}  # its 12 review sentences
PARALLEL = {"papers", "refine", "hypothesis", "decompose", "align", "label", "select"}
INLINE_ONLY = {"harvest"}  # Resources(parallel=False): its chunks only sort rows harvested in source

pytestmark = pytest.mark.slow  # a process pool and a Prefect server


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ParallelCheck]:
    pipeline = get_pipeline("evidencebench")
    with FakeChat(answer=answer_with()) as server:
        folder = tmp_path_factory.mktemp("evidencebench-parallel")
        config, base_dir = pipeline.load(write_config(server, folder))
        yield check_parallel_chunks(
            pipeline,
            config,
            base_dir,
            folder / "artifacts",
            chunk_rows=CHUNK_ROWS,
            stage_chunk_rows=STAGE_CHUNK_ROWS,
            until="select",
            workers=2,
        )


def test_every_chunked_stage_ran_in_several_chunks(check: ParallelCheck) -> None:
    assert check.parallel == PARALLEL and check.inline_only == INLINE_ONLY and not check.whole_input
    assert all(check.chunks[name] >= 2 for name in PARALLEL | INLINE_ONLY), check.chunks
    assert check.cache_writers == {"refine", "hypothesis", "decompose", "align", "label"}


def test_chunks_computed_on_the_pool_give_the_inline_bytes(check: ParallelCheck) -> None:
    assert_pool_gave_the_inline_bytes(check, PARALLEL)


def test_a_stage_declared_inline_keeps_its_chunks_in_the_stage_process(check: ParallelCheck) -> None:
    assert set(check.pool_chunks) == PARALLEL
    assert check.resources["harvest"] == Resources(parallel=False)


def test_llm_stages_follow_their_engine() -> None:
    for engine, expected in (
        ("llama-cpp", Resources(parallel=False)),
        ("vllm-batch", Resources(num_gpus=1)),
        ("openai", CPU),
    ):
        assert ALIGN.resources_for(AlignConfig.model_validate({"llm": {"engine": engine}})) == expected
