"""The spanish_sr demo config (flows/configs/spanish_sr.yaml) on 40 of its CT-EBM-SP abstracts up
to ``train_rerank`` (shorter texts and lists: CPU seconds), its chunks on a process pool: the
inline bytes, stage by stage (tests/parallel_harness.py).

Two seeds, so that each training stage and ``hybrid`` have two chunks (one per seed): each
seed's model, saved under the artifact's ``files/<seed>/``, is the same bytes whichever process
trained it. ``clean`` runs in two chunks and finds its duplicates across them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.registry import get_pipeline
from irforge.config import validate_config
from irforge.parallel import CPU, Resources
from tasks.spanish_sr.stages.train_dense import SPEC as TRAIN_DENSE
from tasks.spanish_sr.stages.train_dense import TrainDenseConfig
from tasks.spanish_sr.stages.train_rerank import SPEC as TRAIN_RERANK
from tasks.spanish_sr.stages.train_rerank import TrainRerankConfig
from tests.conftest import REPO
from tests.parallel_harness import ParallelCheck, assert_pool_gave_the_inline_bytes, check_parallel_chunks
from tests.spanish_sr.conftest import CT_EBM_SP

DEMO = REPO / "flows" / "configs" / "spanish_sr.yaml"
RECORDS = 40
SEEDS = [42, 43]
STAGE_CHUNK_ROWS = {"clean": 20, "questions": 20}  # 40 records; training, hybrid: a seed a chunk
PARALLEL = {"clean", "questions", "train_dense", "hybrid", "train_rerank"}
WHOLE_INPUT = {"ingest", "bm25"}

pytestmark = pytest.mark.slow  # a process pool, a Prefect server, two fine-tunings a stage


def _config_data(records: Path) -> dict[str, Any]:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["stages"]["ingest"]["sources"][0]["path"] = str(records)
    data["stages"]["train_dense"] |= {"seeds": SEEDS, "max_seq_length": 64}
    data["stages"]["train_rerank"] |= {"list_size": 4, "max_length": 64, "max_train_lists": 16}
    return dict(data)


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ParallelCheck]:
    folder = tmp_path_factory.mktemp("spanish_sr-parallel")
    records = folder / "ct-ebm-sp"
    records.mkdir()
    for path in sorted(CT_EBM_SP.glob("*.txt"))[:RECORDS]:
        shutil.copy(path, records / path.name)
    pipeline = get_pipeline("spanish_sr")
    config = validate_config(pipeline.config_type, _config_data(records), "test config")
    yield check_parallel_chunks(
        pipeline,
        config,
        DEMO.parent,
        folder / "artifacts",
        chunk_rows=1,
        stage_chunk_rows=STAGE_CHUNK_ROWS,
        until="train_rerank",
        workers=2,
        threads=1,  # torch's threads change a trained model's bytes: one, here and in each worker
    )


def test_every_chunked_stage_ran_in_several_chunks(check: ParallelCheck) -> None:
    assert check.parallel == PARALLEL and check.whole_input == WHOLE_INPUT and not check.inline_only
    assert {name: check.chunks[name] for name in PARALLEL} == {
        "clean": 2,
        "questions": 2,
        "train_dense": 2,
        "hybrid": 2,
        "train_rerank": 2,
    }
    assert {name: check.chunks[name] for name in WHOLE_INPUT} == dict.fromkeys(WHOLE_INPUT, 1)


def test_chunks_computed_on_the_pool_give_the_inline_bytes(check: ParallelCheck) -> None:
    assert_pool_gave_the_inline_bytes(check, PARALLEL)
    for stage in ("train_dense", "train_rerank"):  # each seed's saved model is compared too
        assert {f"files/{seed}/README.md" for seed in SEEDS} <= set(check.compared[stage])
        assert any(name.startswith(f"files/{SEEDS[1]}/") and name.endswith(".safetensors")
                   for name in check.compared[stage])  # fmt: skip


def test_whole_input_stages_stay_in_the_stage_process(check: ParallelCheck) -> None:
    assert set(check.pool_chunks) == PARALLEL


def test_training_asks_for_a_gpu_only_on_one() -> None:
    on_gpu = Resources(num_gpus=1, memory_mb=8192)
    assert TRAIN_DENSE.resources_for(TrainDenseConfig(device="cuda")) == on_gpu
    assert TRAIN_DENSE.resources_for(TrainDenseConfig(device="cpu")) == CPU
    assert TRAIN_RERANK.resources_for(TrainRerankConfig(device="cuda:0")) == on_gpu
    assert TRAIN_RERANK.resources_for(TrainRerankConfig(device="cpu")) == CPU
