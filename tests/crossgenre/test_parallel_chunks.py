"""The crossgenre demo (flows/configs/crossgenre.yaml) up to ``pairs``, its chunks on a process
pool: the inline bytes, stage by stage (tests/parallel_harness.py).

``pairs`` augments train headlines with word vectors it writes into its ``files/``: built once
in the stage's process, they are the same file whichever process reads them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flows.registry import get_pipeline
from irforge.parallel import CPU, Resources
from tasks.crossgenre.stages import pairs
from tasks.crossgenre.stages.ingest import SPEC as INGEST
from tasks.crossgenre.stages.ingest import IngestConfig
from tasks.crossgenre.stages.journal_links import SPEC as JOURNAL_LINKS
from tasks.crossgenre.stages.journal_links import JournalLinksConfig
from tasks.crossgenre.stages.resolve import SPEC as RESOLVE
from tasks.crossgenre.stages.resolve import ResolveConfig
from tests.parallel_harness import ParallelCheck, assert_pool_gave_the_inline_bytes, check_parallel_chunks

CHUNK_ROWS = 3  # 15 pages, 12 claims: 4 or 5 chunks a stage
PARALLEL = {"ingest", "extract", "journal_links", "resolve", "candidates", "pairs"}
WHOLE_INPUT = {"claims", "distractors", "splits"}
# The demo's single_study asks the embedded llama.cpp server: one per process, so its chunks
# stay in the stage's process (tasks/common/llm/stage.py llm_resources).
INLINE_ONLY = {"single_study"}

pytestmark = pytest.mark.slow  # a process pool and a Prefect server


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ParallelCheck]:
    pipeline = get_pipeline("crossgenre")
    config, base_dir = pipeline.load(None)
    root = tmp_path_factory.mktemp("crossgenre-parallel")
    yield check_parallel_chunks(
        pipeline, config, base_dir, root, chunk_rows=CHUNK_ROWS, until="pairs", workers=2
    )


def test_every_chunked_stage_ran_in_several_chunks(check: ParallelCheck) -> None:
    assert check.parallel == PARALLEL and check.whole_input == WHOLE_INPUT
    assert check.inline_only == INLINE_ONLY
    assert all(check.chunks[name] >= 2 for name in PARALLEL | INLINE_ONLY), check.chunks
    assert {name: check.chunks[name] for name in WHOLE_INPUT} == dict.fromkeys(WHOLE_INPUT, 1)


def test_chunks_computed_on_the_pool_give_the_inline_bytes(check: ParallelCheck) -> None:
    assert_pool_gave_the_inline_bytes(check, PARALLEL)
    assert f"files/{pairs.VECTORS_FILE}" in check.compared["pairs"]  # augmented: vectors written


def test_whole_input_stages_stay_in_the_stage_process(check: ParallelCheck) -> None:
    assert set(check.pool_chunks) == PARALLEL


def test_remote_sources_with_a_per_process_pace_keep_their_chunks_in_one_process() -> None:
    inline = Resources(parallel=False)
    assert INGEST.resources_for(IngestConfig(feeds=["https://news.example.org/rss.xml"])) == inline
    assert INGEST.resources_for(IngestConfig(pages=["news"])) == CPU
    landing = JournalLinksConfig.model_validate({"landing_pages": {}})
    assert JOURNAL_LINKS.resources_for(landing) == inline
    assert JOURNAL_LINKS.resources_for(JournalLinksConfig()) == CPU
    assert RESOLVE.resources_for(ResolveConfig.model_validate({"pubmed": {"engine": "eutils"}})) == inline
    assert RESOLVE.resources_for(ResolveConfig()) == CPU
    contextual = {"augment": {"engine": "contextual", "device": "cuda"}}
    assert pairs.SPEC.resources_for(pairs.PairsConfig.model_validate(contextual)).num_gpus == 1
    assert pairs.SPEC.resources_for(pairs.PairsConfig()) == CPU
