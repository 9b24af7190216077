"""Every parallel stage of a flow gives, chunk by chunk on a process pool, the bytes it gives inline.

:func:`check_parallel_chunks` runs a registered pipeline's stages one after another in this
process (``irforge.parallel.INLINE``, as ``execute_step`` does by default) with chunks small
enough that each chunked stage has several, then recomputes every stage alone
(``Step(plan, force=True)``) on one :class:`flows.runners.PrefectChunkRunner` (Prefect's
process pool, ``workers`` processes, warm from one stage to the next). For each stage whose
chunks may run in parallel (``StageSpec.resources_for(config).parallel``) it compares, file by
file, every Parquet file of the artifact (``part-*``, ``excluded``, side tables) and every
file under ``files/`` with what the inline run left; the other stages (whole-input ones, and
``Resources(parallel=False)``) only have to run again, in this process.

A stage whose run wrote to the request caches (``<root>/cache``: LLM replies, translations,
HTTP answers) is recomputed inline once more first, and that is the reference: a recompute
finds every reply cached (``cached`` true, no attempt), as the pool's will, while the first
run paid for them. The runner is wrapped to record which chunks it was handed and which
process computed each, so a test can tell the chunks that went to the pool from those that
stayed in the stage's process (``Resources(parallel=False)``, whole-input stages).

torch's kernels split their sums over as many threads as the process has (every core by
default), and a model trained with another thread count is other bytes: ``threads`` pins the
count here and in every worker alike (and two workers on two cores then do not oversubscribe
them).

Nothing here names a flow: each flow's ``tests/<flow>/test_parallel_chunks.py`` gives its
pipeline, config and chunk sizes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.runners import PrefectChunkRunner
from irforge.artifacts import EXCLUDED, FILES, Artifact, ArtifactStore
from irforge.config import ExecutionConfig
from irforge.parallel import ChunkCall, Resources
from irforge.pipeline import FlowConfig, Pipeline, Selection, Step, execute_step, select_steps

CACHE_DIR = "cache"  # where execute_step puts the request caches: <store root>/cache


def artifact_bytes(artifact: Artifact) -> dict[str, bytes]:
    """Every Parquet file of ``artifact`` (parts, excluded rows, side tables) and every file under
    its ``files/``, by path relative to the artifact (the manifest, with its times, left out)."""
    out = {p.name: p.read_bytes() for p in sorted(artifact.path.glob("*.parquet"))}
    files = artifact.path / FILES
    if files.is_dir():
        out |= {
            p.relative_to(artifact.path).as_posix(): p.read_bytes() for p in files.rglob("*") if p.is_file()
        }
    assert EXCLUDED in out and any(name.startswith("part-") for name in out), sorted(out)
    return out


def _cache_state(root: Path) -> dict[str, str]:
    """A digest of every request-cache file but SQLite's shared-memory index (readers write it)."""
    folder = root / CACHE_DIR
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith("-shm")
    }


@contextlib.contextmanager
def _numeric_threads(threads: int | None) -> Iterator[None]:
    """``threads`` threads for torch's kernels here and, through the variables OpenMP and MKL read
    when a process starts, in the pool's workers started meanwhile (None: the defaults). A model
    trained with another thread count is other bytes: the reference and the pool must agree."""
    if threads is None:
        yield
        return
    import torch

    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    saved, before = {name: os.environ.get(name) for name in names}, torch.get_num_threads()
    os.environ.update(dict.fromkeys(names, str(threads)))
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _in_process(fn: Any, *args: Any) -> tuple[int, Any]:
    """``fn(*args)`` and the id of the process that computed it (what a pool worker runs)."""
    return os.getpid(), fn(*args)


class RecordingRunner:
    """A chunk runner that hands the calls to ``runner``, recording per stage the chunks handed
    over and the processes that computed them."""

    def __init__(self, runner: PrefectChunkRunner) -> None:
        self.runner = runner
        self.chunks: dict[str, list[int]] = defaultdict(list)
        self.pids: dict[str, set[int]] = defaultdict(set)

    @property
    def description(self) -> str:
        return f"recorded {self.runner.description}"

    def run(self, calls: Iterable[ChunkCall], resources: Resources) -> Iterator[tuple[int, Any]]:
        stage = ""

        def wrapped() -> Iterator[ChunkCall]:
            nonlocal stage
            for call in calls:
                stage = call.name.split("[", 1)[0]
                self.chunks[stage].append(call.index)
                yield ChunkCall(call.index, call.name, functools.partial(_in_process, call.fn), call.args)

        for index, (pid, result) in self.runner.run(wrapped(), resources):
            self.pids[stage].add(pid)
            yield index, result


@dataclass
class ParallelCheck:
    """What :func:`check_parallel_chunks` saw, stage by stage (flow order)."""

    stages: list[str] = field(default_factory=list)
    whole_input: set[str] = field(default_factory=set)
    inline_only: set[str] = field(default_factory=set)  # chunked, declared Resources(parallel=False)
    parallel: set[str] = field(default_factory=set)  # chunked, parallel: recomputed on the pool
    resources: dict[str, Resources] = field(default_factory=dict)
    chunks: dict[str, int] = field(default_factory=dict)  # the inline run's chunk count
    chunks_recomputed: dict[str, int] = field(default_factory=dict)  # the recompute's
    pool_chunks: dict[str, list[int]] = field(default_factory=dict)  # chunk indexes the pool was handed
    pool_pids: dict[str, set[int]] = field(default_factory=dict)  # processes that computed them
    cache_writers: set[str] = field(default_factory=set)
    compared: dict[str, list[str]] = field(default_factory=dict)  # parallel stage -> its files compared
    differing: dict[str, list[str]] = field(default_factory=dict)  # parallel stage -> files that differ
    seconds: dict[str, tuple[float, float]] = field(default_factory=dict)  # stage -> (inline, recompute)


def _differing(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> list[str]:
    names = sorted(set(before) | set(after))
    return [n for n in names if before.get(n) != after.get(n)]


def check_parallel_chunks(
    pipeline: Pipeline,
    config: FlowConfig,
    base_dir: Path,
    root: Path,
    *,
    chunk_rows: int,
    stage_chunk_rows: Mapping[str, int] | None = None,
    until: str | None = None,
    workers: int = 2,
    threads: int | None = None,
) -> ParallelCheck:
    """Run ``pipeline`` inline (``until`` a stage), then recompute each stage on a process pool of
    ``workers``, with ``chunk_rows`` rows a chunk (``stage_chunk_rows``: per stage instead) and
    ``threads`` threads a process for torch (None: its default, every core)."""
    store = ArtifactStore(root)
    steps = select_steps(pipeline, pipeline.plan(config, base_dir), Selection(until=until), store)
    sizes = dict(stage_chunk_rows or {})

    def execution(name: str, runner: str) -> ExecutionConfig:
        rows = sizes.get(name, chunk_rows)
        return config.execution.model_copy(update={"chunk_rows": rows, "runner": runner, "workers": workers})

    check = ParallelCheck()
    with _numeric_threads(threads):
        reference = {step.name: _run_inline(step, store, pipeline.name, execution, check) for step in steps}
        pool = PrefectChunkRunner(execution("", "process"), pipeline.name)
        recording = RecordingRunner(pool)
        try:
            for step in steps:
                _recompute(step, store, pipeline.name, execution, recording, check, reference[step.name])
        finally:
            pool.close()
    check.pool_chunks = {name: sorted(found) for name, found in recording.chunks.items()}
    check.pool_pids = dict(recording.pids)
    return check


def _run_inline(
    step: Step,
    store: ArtifactStore,
    flow: str,
    execution: Callable[[str, str], ExecutionConfig],
    check: ParallelCheck,
) -> dict[str, bytes]:
    """Run ``step`` inline, record what it is and did; its bytes when it is a parallel stage."""
    before, started = _cache_state(store.root), time.perf_counter()
    outcome = execute_step(step, store, flow, execution(step.name, "inline"))
    check.seconds[step.name] = (time.perf_counter() - started, 0.0)
    spec = step.plan.spec
    check.stages.append(step.name)
    check.chunks[step.name] = outcome.manifest["chunks"]["total"]
    check.resources[step.name] = spec.resources_for(step.plan.context.config)
    if spec.whole_input:
        check.whole_input.add(step.name)
    elif check.resources[step.name].parallel:
        check.parallel.add(step.name)
    else:
        check.inline_only.add(step.name)
    if _cache_state(store.root) != before:
        check.cache_writers.add(step.name)
    return artifact_bytes(outcome.artifact) if step.name in check.parallel else {}


def _recompute(
    step: Step,
    store: ArtifactStore,
    flow: str,
    execution: Callable[[str, str], ExecutionConfig],
    runner: RecordingRunner,
    check: ParallelCheck,
    expected: dict[str, bytes],
) -> None:
    """Recompute ``step`` on the recording pool; a parallel stage's bytes are compared with the
    inline reference (recomputed inline first when the first run filled a request cache). The
    others run in this process either way: only their chunk counts are recorded (an index's
    files, for one, are named at random)."""
    forced = Step(step.plan, force=True)
    started = time.perf_counter()
    parallel = step.name in check.parallel
    if parallel and step.name in check.cache_writers:
        expected = artifact_bytes(execute_step(forced, store, flow, execution(step.name, "inline")).artifact)
    outcome = execute_step(forced, store, flow, execution(step.name, "process"), runner=runner)
    check.chunks_recomputed[step.name] = outcome.manifest["chunks"]["total"]
    check.seconds[step.name] = (check.seconds[step.name][0], time.perf_counter() - started)
    if not parallel:
        return
    got = artifact_bytes(outcome.artifact)
    check.compared[step.name] = sorted(got)
    differing = _differing(expected, got)
    if differing:
        check.differing[step.name] = differing


def assert_pool_gave_the_inline_bytes(check: ParallelCheck, parallel: set[str]) -> None:
    """Every chunk recomputed, the ``parallel`` stages' on the pool, in order, in other processes
    than this one, and every file the same bytes as inline."""
    assert check.differing == {}
    assert check.chunks_recomputed == check.chunks
    for name in parallel:
        assert check.pool_chunks[name] == list(range(check.chunks[name])), name
        assert check.pool_pids[name] and os.getpid() not in check.pool_pids[name], name
