"""Chunk sizes for the runner (irforge/parallel.py ``rows_per_chunk``, irforge/engine.py ``_sized``):
cheap chunks grow on a pool, every worker gets one, and a resumed run keeps the chunks it began."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from irforge.parallel import CHUNKS_PER_WORKER, INLINE, MAX_GROWTH, ChunkCall, Resources, rows_per_chunk
from tests.engine.test_chunk_runners import artifact_bytes
from tests.engine.toy_pipeline import NumbersConfig, ToyConfig, ToyStages, chunks_logged, run_toy


def thousand(log: Path, fail_flag: Path | None = None) -> ToyConfig:
    flag = str(fail_flag) if fail_flag else None
    return ToyConfig(stages=ToyStages(numbers=NumbersConfig(count=1000, log_file=str(log), fail_flag=flag)))


class FakePool:
    """Calls one after another here, sized as if ``workers`` processes ran them."""

    description = "fake pool"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def run(self, calls: Iterable[ChunkCall], resources: Resources) -> Iterator[tuple[int, Any]]:
        return INLINE.run(calls, resources)


def test_inline_chunks_are_as_configured() -> None:
    assert rows_per_chunk(500, 200_000, 1) == 500


def test_cheap_chunks_grow_by_multiples_up_to_the_bound() -> None:
    assert rows_per_chunk(500, 200_000, 2) == 16 * 500  # 200k / (2 × 4) = 25k, bounded at 16×
    assert rows_per_chunk(10, 1000, 2) == 120  # 1000 / (2 × 4) = 125: the multiple of 10 below
    assert rows_per_chunk(10, 100, 2) == 10  # 12.5 a chunk: no whole multiple to grow by


@pytest.mark.parametrize("workers", [2, 3, 8, 16])
def test_every_worker_gets_a_chunk_and_growth_leaves_four_a_worker(workers: int) -> None:
    for configured, rows in itertools.product([1, 7, 500, 2000], [2, 9, 100, 2001, 3999, 50_000, 10**6]):
        size = rows_per_chunk(configured, rows, workers)
        chunks = -(-rows // size)
        if rows > configured:
            assert chunks >= min(workers, rows), (configured, rows, size)
        if size > configured:
            assert size % configured == 0 and size <= MAX_GROWTH * configured
            assert chunks >= workers * CHUNKS_PER_WORKER, (configured, rows, size)
        if rows <= configured:
            assert size == configured


def test_a_pool_run_gives_the_inline_bytes_in_grown_chunks(tmp_path: Path) -> None:
    inline, pool = tmp_path / "inline", tmp_path / "pool"
    run_toy(inline, thousand(tmp_path / "pool.log"))  # the log's path is in the config: the same
    (tmp_path / "pool.log").unlink()
    outcomes = run_toy(pool, thousand(tmp_path / "pool.log"), runner=FakePool(2))
    assert [first for first, _, _ in chunks_logged(tmp_path / "pool.log")] == list(range(0, 1000, 120))
    assert outcomes["numbers"].manifest["chunks"]["total"] == 9
    assert artifact_bytes(pool) == artifact_bytes(inline)


def test_a_resumed_run_keeps_the_chunks_it_began_with_on_another_runner(tmp_path: Path) -> None:
    log, flag = tmp_path / "log", tmp_path / "fail"
    flag.write_text("500")
    cfg = thousand(log, flag)
    with pytest.raises(RuntimeError, match="chunk with id 500 fails"):
        run_toy(tmp_path / "root", cfg, runner=FakePool(2))
    flag.unlink()
    log.unlink()
    outcomes = run_toy(tmp_path / "root", cfg)  # inline now: one worker
    assert outcomes["numbers"].state == "resumed"
    assert [first for first, _, _ in chunks_logged(log)][:5] == [480, 600, 720, 840, 960]
