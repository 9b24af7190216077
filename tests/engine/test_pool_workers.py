"""What a chunk costs on the process pool beyond its work (flows/runners.py ``_PoolTaskRunner``):
Prefect's settings and client are built once per worker, not per task run, and each chunk is
still a task run of its own on the server (what the UI shows)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from flows.runners import PrefectChunkRunner
from irforge.config import ExecutionConfig
from irforge.parallel import CPU, ChunkCall


@pytest.fixture(scope="module")
def pool() -> Iterator[PrefectChunkRunner]:
    runner = PrefectChunkRunner(ExecutionConfig(runner="process", workers=2), "pool")
    yield runner
    runner.close()


def _worker_state() -> tuple[int, int, int, str | None]:
    from prefect.context import SettingsContext, SyncClientContext
    from prefect.settings import PREFECT_API_URL

    settings, client = SettingsContext.get(), SyncClientContext.get()
    assert settings is not None and client is not None
    return os.getpid(), id(settings), id(client.client), PREFECT_API_URL.value()


def _calls(fn: Any, n: int, stage: str = "state") -> Iterator[ChunkCall]:
    return iter([ChunkCall(i, f"{stage}[{i}]", fn, ()) for i in range(n)])


def test_a_worker_builds_prefects_settings_and_client_once(pool: PrefectChunkRunner) -> None:
    states = [state for _i, state in pool.run(_calls(_worker_state, 8), CPU)]
    by_pid: dict[int, set[tuple[int, int]]] = {}
    for pid, settings, client, _url in states:
        by_pid.setdefault(pid, set()).add((settings, client))
    assert os.getpid() not in by_pid
    assert all(len(seen) == 1 for seen in by_pid.values()), by_pid  # one of each per worker
    assert {url for *_rest, url in states} != {None}  # the driver's server, not one of their own


def _nothing() -> None:
    return None


def _task_runs(names: list[str]) -> list[Any]:
    """The completed task runs of these names on the server (it records them from events, a
    moment after they ran)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    found: list[Any] = []
    deadline = time.monotonic() + 30
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            found = client.read_task_runs(task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=names)))
            if len(found) == len(names) and all(r.state and r.state.is_completed() for r in found):
                break
            time.sleep(0.5)
    return sorted(found, key=lambda r: str(r.name))


def test_each_chunk_is_still_a_task_run_on_the_server(pool: PrefectChunkRunner) -> None:
    stage = f"probe{uuid.uuid4().hex[:8]}"
    assert [i for i, _ in pool.run(_calls(_nothing, 3, stage), CPU)] != []
    found = _task_runs([f"pool.{stage}[{i}]" for i in range(3)])
    assert [r.name for r in found] == [f"pool.{stage}[{i}]" for i in range(3)]
    assert all(r.state is not None and r.state.is_completed() for r in found)


POOL: list[PrefectChunkRunner] = []  # the module's pool, for the stage task below


def _stage(stage: str) -> None:
    """A stage task run submitting two chunks, as flows/run.py's ``stage`` task does."""
    assert len(list(POOL[0].run(_calls(_nothing, 2, stage), CPU))) == 2


def test_each_stages_chunks_show_under_that_stage(pool: PrefectChunkRunner) -> None:
    """Prefect serializes the submitting context once a runner: chunks of a later stage would
    name the first stage's task run as their parent."""
    from prefect import task
    from prefect.cache_policies import NO_CACHE

    POOL[:] = [pool]
    stage_task = task(name="stage", cache_policy=NO_CACHE, persist_result=False)(_stage)
    tag = uuid.uuid4().hex[:8]
    parents = {}
    for stage in (f"a{tag}", f"b{tag}"):
        state = stage_task(stage, return_state=True)
        parents[stage] = state.state_details.task_run_id
    for stage, parent in parents.items():
        found = _task_runs([f"pool.{stage}[{i}]" for i in range(2)])
        assert len(found) == 2
        assert all({p.id for p in r.task_inputs["__parents__"]} == {parent} for r in found), stage


def test_a_prestarted_pool_has_its_workers_before_the_first_chunk() -> None:
    import multiprocessing

    before = {p.pid for p in multiprocessing.active_children()}
    runner = PrefectChunkRunner(ExecutionConfig(runner="process", workers=2), "pool")
    try:
        thread = runner.prestart()
        assert thread is not None
        thread.join(120)
        spawned = {p.pid for p in multiprocessing.active_children()} - before
        assert len(spawned) == 2  # both workers, no chunk submitted yet
        states = [state for _i, state in runner.run(_calls(_worker_state, 4), CPU)]
        assert {pid for pid, *_rest in states} <= spawned
    finally:
        runner.close()
    assert PrefectChunkRunner(ExecutionConfig(runner="ray"), "pool").prestart() is None
