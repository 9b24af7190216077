"""Chunks on a process pool and on Ray (flows/runners.py): same bytes, resume, placement.

The toy pipeline (tests/engine/toy_pipeline.py) logs, per computed chunk, its first id,
the process and the Ray node, so each test sees where and how often a chunk ran.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.runners import PrefectChunkRunner
from irforge.config import ExecutionConfig
from irforge.parallel import Resources
from tests.engine.toy_pipeline import (
    NUMBERS,
    SQUARE,
    TOY,
    NumbersConfig,
    SquareConfig,
    ToyConfig,
    ToyStages,
    chunks_logged,
    run_toy,
)

REPO = Path(__file__).resolve().parents[2]


def artifact_bytes(root: Path) -> dict[str, bytes]:
    """Every Parquet file of every published artifact under ``root``, by ``<stage>/<file>``
    (the log file's path is in the config, so fingerprints differ between roots)."""
    return {
        f"{p.parent.parent.name}/{p.name}": p.read_bytes()
        for p in sorted(root.glob("toy/*/*/*.parquet"))
        if not p.parent.name.startswith(".")
    }


def toy_config(log: Path, fail_flag: Path | None = None, square_log: Path | None = None) -> ToyConfig:
    flag = str(fail_flag) if fail_flag else None
    square = SquareConfig(log_file=str(square_log) if square_log else None)
    return ToyConfig(
        stages=ToyStages(numbers=NumbersConfig(log_file=str(log), fail_flag=flag), square=square)
    )


@pytest.fixture(scope="module")
def pool() -> Iterator[PrefectChunkRunner]:
    runner = PrefectChunkRunner(ExecutionConfig(runner="process", workers=2), "toy")
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def inline_bytes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("inline")
    run_toy(root, toy_config(root / "log"))
    return artifact_bytes(root)


def test_process_pool_gives_the_inline_bytes_from_several_processes(
    tmp_path: Path, pool: PrefectChunkRunner, inline_bytes: dict[str, bytes]
) -> None:
    log = tmp_path / "log"
    outcomes = run_toy(tmp_path, toy_config(log), runner=pool)
    assert artifact_bytes(tmp_path) == inline_bytes
    ran = chunks_logged(log)
    assert sorted(first for first, _, _ in ran) == list(range(0, 100, 10))  # each chunk once
    assert os.getpid() not in {pid for _, pid, _ in ran}  # in workers, not here
    assert outcomes["numbers"].manifest["chunks"]["total"] == 10


def test_the_bytes_do_not_depend_on_the_chunk_size(tmp_path: Path, inline_bytes: dict[str, bytes]) -> None:
    """``chunk_rows`` is not fingerprinted: 7-row chunks give the bytes of 10-row ones."""
    run_toy(tmp_path, toy_config(tmp_path / "log"), chunk_rows=7)
    assert artifact_bytes(tmp_path) == inline_bytes


def test_a_failed_chunk_keeps_the_others_and_the_rerun_computes_only_the_rest(
    tmp_path: Path, pool: PrefectChunkRunner, inline_bytes: dict[str, bytes]
) -> None:
    log, flag = tmp_path / "log", tmp_path / "fail"
    flag.write_text("55")
    with pytest.raises(RuntimeError, match="chunk with id 55 fails"):
        run_toy(tmp_path / "root", toy_config(log, flag), runner=pool)
    done_before = {first for first, _, _ in chunks_logged(log)}
    assert 50 not in done_before and done_before  # the failed chunk is missing, others were kept
    markers = sorted((tmp_path / "root" / "toy" / "numbers").glob(".work-*/chunk-*.json"))
    assert len(markers) == len(done_before)
    flag.unlink()  # the cause is gone; same config, same fingerprint
    log.unlink()
    outcomes = run_toy(tmp_path / "root", toy_config(log, flag), runner=pool)
    assert outcomes["numbers"].state == "resumed"
    assert {first for first, _, _ in chunks_logged(log)} == set(range(0, 100, 10)) - done_before


@pytest.mark.slow
def test_sigkill_of_a_pool_run_resumes_the_unfinished_chunks_only(
    tmp_path: Path, inline_bytes: dict[str, bytes]
) -> None:
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "tests.engine.toy_pipeline", str(tmp_path), str(log), "process"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True)
    work = tmp_path / "toy" / "numbers"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(work.glob(".work-*/chunk-*.json"))) < 3:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its pool workers, at once
    proc.wait()
    finished = {int(p.name.split("-")[1].split(".")[0]) for p in work.glob(".work-*/chunk-*.json")}
    assert 3 <= len(finished) < 10, "the run finished or stalled before it could be killed"
    before = len(chunks_logged(log))
    config = ToyConfig(stages=ToyStages(numbers=NumbersConfig(sleep_s=0.15, log_file=str(log))))
    resumed = run_toy(tmp_path, config)
    assert resumed["numbers"].state == "resumed"
    recomputed = {first // 10 for first, _, _ in chunks_logged(log)[before:]}
    assert not recomputed & finished and recomputed | finished == set(range(10))
    clean = tmp_path / "clean"
    run_toy(clean, config)
    assert artifact_bytes(tmp_path) == artifact_bytes(clean)


@pytest.mark.slow
def test_local_ray_gives_the_inline_bytes(tmp_path: Path, inline_bytes: dict[str, bytes]) -> None:
    runner = PrefectChunkRunner(ExecutionConfig(runner="ray", workers=2), "toy")
    try:
        run_toy(tmp_path, toy_config(tmp_path / "log"), runner=runner)
    finally:
        runner.close()
    assert artifact_bytes(tmp_path) == inline_bytes
    assert {node for _, _, node in chunks_logged(tmp_path / "log")} != {"-"}  # ran as Ray tasks


@pytest.mark.slow
def test_two_node_ray_cluster_equals_inline_and_places_gpu_chunks_on_the_gpu_node(
    tmp_path: Path, inline_bytes: dict[str, bytes]
) -> None:
    """``numbers`` (CPU) spreads over both nodes; ``square``, declared a GPU stage, runs only
    on the node that has a GPU (Ray's own accounting: no real GPU is needed)."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    gpu_node = cluster.add_node(num_cpus=1, num_gpus=1)
    cluster.wait_for_nodes()
    runner = PrefectChunkRunner(ExecutionConfig(runner="ray", ray_address=cluster.address), "toy")
    square = dataclasses.replace(SQUARE, resources=Resources(num_gpus=1, memory_mb=64))
    pipeline = dataclasses.replace(TOY, stages=(NUMBERS, square))
    config = toy_config(tmp_path / "numbers.log", square_log=tmp_path / "square.log")
    try:
        run_toy(tmp_path, config, runner=runner, pipeline=pipeline)
    finally:
        runner.close()
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
    assert len({node for _, _, node in chunks_logged(tmp_path / "numbers.log")}) == 2
    square_chunks = chunks_logged(tmp_path / "square.log")
    assert len(square_chunks) >= 2 and {node for _, _, node in square_chunks} == {gpu_node.node_id}
    assert artifact_bytes(tmp_path) == inline_bytes


def test_a_ray_cluster_gets_the_real_servers_url_and_no_secret(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.runners import make_task_runner

    monkeypatch.setenv("DEEPL_AUTH_KEY", "secret-not-to-travel")
    cluster = ExecutionConfig(runner="ray", ray_address="ray://head.example:10001")
    with temporary_settings({PREFECT_API_URL: "http://prefect.example:4200/api"}):
        runner = make_task_runner(cluster)
    env = runner.init_kwargs["runtime_env"]["env_vars"]  # type: ignore[attr-defined]
    assert env == {"PREFECT_API_URL": "http://prefect.example:4200/api"}
    with temporary_settings({PREFECT_API_URL: None}):
        runner = make_task_runner(cluster)
    assert runner.init_kwargs["runtime_env"]["env_vars"] == {}  # type: ignore[attr-defined]
    assert "without PREFECT_API_URL" in caplog.text


def _threads() -> tuple[int, int]:
    import torch

    return os.getpid(), torch.get_num_threads()


def test_pool_workers_share_the_cores_for_torchs_threads(pool: PrefectChunkRunner) -> None:
    from irforge.parallel import CPU, ChunkCall

    calls = iter([ChunkCall(i, f"toy.threads[{i}]", _threads, ()) for i in range(4)])
    got = dict(pool.run(calls, CPU))
    expected = int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // 2))
    assert {threads for _pid, threads in got.values()} == {expected}
    assert os.getpid() not in {pid for pid, _threads in got.values()}
