"""The stage contract: fingerprints, reuse, selective recomputation, atomicity, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from irforge.artifacts import ArtifactStore
from irforge.engine import StageOutcome
from irforge.errors import AccountingError, IrforgeError
from irforge.pipeline import Selection
from irforge.stage import ChunkResult, StageSpec
from irforge.status import flow_status
from tests.conftest import REPO
from tests.engine.toy_pipeline import (
    NUMBERS,
    TOY,
    NumbersConfig,
    SquareConfig,
    ToyConfig,
    ToyStages,
    chunks_logged,
    run_toy,
)


def config(count: int = 100, limit: int = 5000, log: Path | None = None) -> ToyConfig:
    numbers = NumbersConfig(count=count, log_file=str(log) if log else None)
    return ToyConfig(stages=ToyStages(numbers=numbers, square=SquareConfig(limit=limit)))


def _run_alone(stage: StageSpec[Any], root: Path, **execution: Any) -> StageOutcome:
    """``stage`` as the only stage of a toy flow, with these ``execution`` settings."""
    from irforge.pipeline import Pipeline, execute_step, select_steps

    pipeline = Pipeline(name="toy", config_type=ToyConfig, stages=(stage,), default_config=Path("x"))
    cfg = config()
    cfg = cfg.model_copy(update={"execution": cfg.execution.model_copy(update=execution)})
    store = ArtifactStore(root)
    (step,) = select_steps(pipeline, pipeline.plan(cfg, root), Selection(), store)
    return execute_step(step, store, "toy", cfg.execution)


def test_artifact_layout_manifest_and_row_accounting(tmp_path: Path) -> None:
    out = run_toy(tmp_path, config())
    numbers = out["numbers"].artifact
    assert numbers.path == tmp_path / "toy" / "numbers" / numbers.fingerprint
    assert (numbers.path / "excluded.parquet").is_file() and numbers.parts
    m = numbers.manifest
    # 0..99: the 15 multiples of 7 (0, 7, ..., 98) are excluded, 85 kept.
    assert m["counts"]["rows_in"] == 100
    assert m["counts"]["rows_out"] == 85
    assert m["counts"]["excluded_by_reason"] == {"multiple_of_7": 15}
    assert m["chunks"] == {"total": 10, "resumed": 0}
    assert m["material"]["config"]["count"] == 100
    assert numbers.excluded().column("id").to_pylist() == list(range(0, 100, 7))
    square = out["square"].artifact
    assert square.manifest["material"]["upstream"] == {"numbers": numbers.fingerprint}
    # squares above 5000: ids 71..99 not multiple of 7
    too_big = [i for i in range(71, 100) if i % 7]
    assert square.excluded().column("id").to_pylist() == too_big
    assert square.num_rows == 85 - len(too_big)


def test_second_run_reuses_everything(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    first = run_toy(tmp_path, config(log=log))
    calls = log.read_text().splitlines()
    second = run_toy(tmp_path, config(log=log))
    assert {o.state for o in second.values()} == {"reused"}
    assert log.read_text().splitlines() == calls  # nothing processed again
    assert {k: o.artifact.path for k, o in first.items()} == {k: o.artifact.path for k, o in second.items()}


def test_config_change_recomputes_that_stage_and_downstream_only(tmp_path: Path) -> None:
    first = run_toy(tmp_path, config(limit=5000))
    changed = run_toy(tmp_path, config(limit=100))
    assert changed["numbers"].state == "reused"
    assert changed["square"].state == "computed"
    assert changed["square"].artifact.fingerprint != first["square"].artifact.fingerprint
    upstream_change = run_toy(tmp_path, config(count=50, limit=100))
    assert upstream_change["numbers"].state == "computed"
    assert upstream_change["square"].state == "computed"  # its upstream fingerprint changed


def test_from_only_until_force_recompute_exactly_what_they_say(tmp_path: Path) -> None:
    run_toy(tmp_path, config())
    assert {k: o.state for k, o in run_toy(tmp_path, config(), Selection(from_stage="square")).items()} == {
        "numbers": "reused",
        "square": "computed",
    }
    assert {k: o.state for k, o in run_toy(tmp_path, config(), Selection(from_stage="numbers")).items()} == {
        "numbers": "computed",
        "square": "computed",
    }
    assert {k: o.state for k, o in run_toy(tmp_path, config(), Selection(only="numbers")).items()} == {
        "numbers": "computed"
    }
    assert {k: o.state for k, o in run_toy(tmp_path, config(), Selection(until="numbers")).items()} == {
        "numbers": "reused"
    }
    forced = run_toy(tmp_path, config(), Selection(force=True))
    assert {o.state for o in forced.values()} == {"computed"}


def test_leftovers_of_a_killed_assembly_are_removed(tmp_path: Path) -> None:
    fp = TOY.plan(config(), tmp_path)["numbers"].fingerprint
    stage_dir = tmp_path / "toy" / "numbers"
    for name in (f".tmp-{fp}-dead0001", f".trash-{fp}-dead0002"):
        (stage_dir / name).mkdir(parents=True)
        (stage_dir / name / "part-00000.parquet").write_bytes(b"half")
    run_toy(tmp_path, config())
    assert sorted(p.name for p in stage_dir.iterdir() if not p.name.startswith((".lock", ".contents"))) == [
        fp
    ]


def test_only_needs_upstream_artifacts(tmp_path: Path) -> None:
    with pytest.raises(IrforgeError, match="upstream stage numbers has no artifact"):
        run_toy(tmp_path, config(), Selection(only="square"))
    with pytest.raises(IrforgeError, match="no stage 'nope'"):
        run_toy(tmp_path, config(), Selection(from_stage="nope"))


def test_status_fresh_stale_missing_names_what_changed(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    before = {s.stage: s.state for s in flow_status(TOY, config(), tmp_path, store)}
    assert before == {"numbers": "missing", "square": "missing"}
    out = run_toy(tmp_path, config(limit=5000))
    # run_toy does not write run records (flows do): record what a flow run would.
    (tmp_path / "toy").mkdir(exist_ok=True)
    (tmp_path / "toy" / "latest.json").write_text(
        json.dumps({k: o.artifact.fingerprint for k, o in out.items()})
    )
    statuses = {s.stage: s for s in flow_status(TOY, config(limit=100), tmp_path, store)}
    assert statuses["numbers"].state == "fresh"
    assert statuses["square"].state == "stale"
    assert statuses["square"].changed == ["config limit: 5000 -> 100"]
    statuses = {s.stage: s for s in flow_status(TOY, config(count=10), tmp_path, store)}
    assert statuses["numbers"].changed == ["config count: 100 -> 10"]
    assert statuses["square"].changed == ["upstream numbers changed"]


def test_accounting_error_when_a_stage_loses_rows(tmp_path: Path) -> None:
    def lossy(chunk: pa.Table, ctx: object) -> ChunkResult:
        return ChunkResult(chunk.slice(1).append_column("value", chunk.column("id").slice(1)), _no_rows())

    def _no_rows() -> pa.Table:
        return NUMBERS.excluded_schema.empty_table()

    broken: StageSpec[NumbersConfig] = StageSpec(**{**NUMBERS.__dict__, "process": lossy})
    pipeline = TOY.__class__(name="toy", config_type=ToyConfig, stages=(broken,), default_config=Path("x"))
    from irforge.pipeline import execute_step, select_steps

    cfg = config()
    plans = pipeline.plan(cfg, tmp_path)
    store = ArtifactStore(tmp_path)
    (step,) = select_steps(pipeline, plans, Selection(), store)
    with pytest.raises(AccountingError, match=r"lost: 1 0"):
        execute_step(step, store, "toy", cfg.execution)
    assert store.find("toy", "numbers", step.plan.fingerprint) is None  # nothing published


def test_readers_never_see_a_partial_artifact(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    plans = TOY.plan(config(count=1000), tmp_path)
    fp = plans["numbers"].fingerprint
    seen: list[int] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            found = store.find("toy", "numbers", fp)
            if found is not None:
                # Whenever the directory is visible, it is complete and consistent.
                seen.append(found.num_rows)
                assert found.num_rows == found.manifest["counts"]["rows_out"]
            time.sleep(0.002)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        run_toy(tmp_path, config(count=1000), Selection(force=True), chunk_rows=50)
        run_toy(tmp_path, config(count=1000), Selection(force=True), chunk_rows=50)  # replace in place
    finally:
        stop.set()
        thread.join()
    assert seen and set(seen) == {1000 - len(range(0, 1000, 7))}


@pytest.mark.slow
def test_sigkill_mid_stage_resumes_to_identical_artifacts(tmp_path: Path) -> None:
    killed_root, clean_root = tmp_path / "killed", tmp_path / "clean"
    log = tmp_path / "calls.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.engine.toy_pipeline", str(killed_root), str(log)], cwd=REPO, env=env
    )
    work = killed_root / "toy" / "numbers"
    deadline = time.monotonic() + 60
    markers: list[Path] = []
    while time.monotonic() < deadline and len(markers) < 3:
        markers = list(work.glob(".work-*/chunk-*.json")) if work.exists() else []
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(markers) >= 3, "the run finished or stalled before it could be killed"
    finished_before_kill = {
        int(p.name.split("-")[1].split(".")[0]) for p in work.glob(".work-*/chunk-*.json")
    }
    assert not [p for p in work.iterdir() if not p.name.startswith(".")], "no artifact may be published yet"
    calls_before = len(log.read_text().splitlines())

    cfg = ToyConfig(stages=ToyStages(numbers=NumbersConfig(sleep_s=0.15, log_file=str(log))))
    resumed = run_toy(killed_root, cfg)
    assert resumed["numbers"].state == "resumed"
    assert resumed["numbers"].manifest["chunks"]["resumed"] == len(finished_before_kill)
    recomputed = {first // 10 for first, _pid, _node in chunks_logged(log)[calls_before:]}
    assert not recomputed & finished_before_kill  # finished chunks were not computed again
    assert not list(work.glob(".work-*")) and not list(work.glob(".tmp-*"))

    clean = run_toy(
        clean_root, cfg.model_copy(update={"stages": ToyStages(numbers=NumbersConfig(sleep_s=0.15))})
    )
    for stage in ("numbers", "square"):
        a, b = resumed[stage].artifact, clean[stage].artifact
        assert a.read().equals(b.read())
        assert a.excluded().equals(b.excluded())


@pytest.mark.parametrize("chunk_rows", [1, 3, 4, 7, 50])
def test_grouped_chunks_never_split_a_group(tmp_path: Path, chunk_rows: int) -> None:
    import pyarrow.parquet as pq

    from irforge.artifacts import Artifact
    from irforge.stage import ArtifactSource

    sizes = [3, 4, 1, 5, 2, 8, 1, 1, 4]
    groups = [f"g{i}" for i, n in enumerate(sizes) for _ in range(n)]
    art = tmp_path / "a"
    art.mkdir()
    table = pa.table({"group": groups, "row": list(range(len(groups)))})
    # Two parts, so batches also end at a file boundary in the middle of group g3.
    pq.write_table(table.slice(0, 10), art / "part-00000.parquet")
    pq.write_table(table.slice(10), art / "part-00001.parquet")
    chunks = list(ArtifactSource(Artifact(art), group_by="group").batches(chunk_rows))
    assert pa.concat_tables(chunks).column("row").to_pylist() == list(range(len(groups)))
    seen: set[str] = set()
    for chunk in chunks:
        names = set(chunk.column("group").to_pylist())
        assert not names & seen, "a group was split across chunks"
        seen |= names
        assert chunk.num_rows >= min(chunk_rows, 1)


def test_whole_input_stage_with_a_side_table(tmp_path: Path) -> None:
    from irforge.stage import TableSource

    stats_schema = pa.schema([pa.field("chunk_rows", pa.int64())])
    calls: list[int] = []

    def process(chunk: pa.Table, ctx: object) -> ChunkResult:
        calls.append(chunk.num_rows)
        kept = chunk.append_column("value", chunk.column("id"))
        return ChunkResult(
            kept, NUMBERS.excluded_schema.empty_table(), {"stats": pa.table({"chunk_rows": [chunk.num_rows]})}
        )

    def source(ctx: object, _inputs: object) -> TableSource:
        return TableSource(pa.table({"id": pa.array(range(25), pa.int64())}))

    whole: StageSpec[NumbersConfig] = StageSpec(
        **{
            **NUMBERS.__dict__,
            "process": process,
            "source": source,
            "whole_input": True,
            "tables": {"stats": stats_schema},
        }
    )
    artifact = _run_alone(whole, tmp_path, chunk_rows=10).artifact
    assert calls == [25]  # one chunk despite chunk_rows = 10
    assert artifact.table_names == ["stats"]
    assert artifact.read(table="stats").column("chunk_rows").to_pylist() == [25]
    assert artifact.manifest["tables"] == {"stats": 1}
    with pytest.raises(IrforgeError, match="has no table 'nope'"):
        artifact.read(table="nope")


def test_a_stage_of_whole_groups_a_chunk_cuts_its_table_source_by_group(tmp_path: Path) -> None:
    """``StageSpec.chunk_rows`` wins over ``execution.chunk_rows``; a grouped ``TableSource``
    never splits a group (here: one group a chunk, the last running to the end)."""
    from irforge.stage import TableSource

    groups = [0, 0, 0, 1, 2, 2, 3, 3, 3, 3]
    assert [c.column("g").to_pylist() for c in TableSource(pa.table({"g": groups}), "g").batches(2)] == [
        [0, 0, 0], [1, 2, 2], [3, 3, 3, 3]
    ]  # fmt: skip
    calls: list[list[int]] = []

    def process(chunk: pa.Table, ctx: object) -> ChunkResult:
        calls.append(chunk.column("g").to_pylist())
        kept = chunk.select(["id"]).append_column("value", chunk.column("id"))
        return ChunkResult(kept, NUMBERS.excluded_schema.empty_table())

    def source(ctx: object, _inputs: object) -> TableSource:
        return TableSource(pa.table({"id": pa.array(range(10), pa.int64()), "g": groups}), group_by="g")

    stage: StageSpec[NumbersConfig] = StageSpec(
        **{**NUMBERS.__dict__, "process": process, "source": source, "chunk_rows": 1}
    )
    artifact = _run_alone(stage, tmp_path, runner="inline").artifact
    assert calls == [[0, 0, 0], [1], [2, 2], [3, 3, 3, 3]]  # chunk_rows 2000 in the execution config
    assert artifact.read().column("id").to_pylist() == list(range(10))


def test_finalize_tables_replace_the_chunks_and_scratch_lives_while_the_stage_runs(tmp_path: Path) -> None:
    from irforge.stage import StageContext, TableSource

    stats = pa.schema([pa.field("rows", pa.int64())])
    scratch: list[Path] = []

    def process(chunk: pa.Table, ctx: StageContext[NumbersConfig]) -> ChunkResult:
        assert ctx.scratch_dir is not None
        scratch.append(ctx.scratch_dir)
        ctx.scratch_dir.mkdir(exist_ok=True)
        (ctx.scratch_dir / f"built-{len(scratch)}").touch()
        kept = chunk.append_column("value", chunk.column("id"))
        table = pa.table({"rows": [chunk.num_rows]}, schema=stats)
        return ChunkResult(kept, NUMBERS.excluded_schema.empty_table(), {"stats": table})

    def finalize(kept: pa.Table, ctx: StageContext[NumbersConfig]) -> ChunkResult:
        assert ctx.scratch_dir is not None and len(list(ctx.scratch_dir.iterdir())) == 3
        total = pa.table({"rows": [kept.num_rows]}, schema=stats)
        return ChunkResult(kept, NUMBERS.excluded_schema.empty_table(), {"stats": total})

    def source(ctx: object, _inputs: object) -> TableSource:
        return TableSource(pa.table({"id": pa.array(range(25), pa.int64())}))

    spec: StageSpec[NumbersConfig] = StageSpec(
        **{**NUMBERS.__dict__, "process": process, "source": source, "finalize": finalize,
           "tables": {"stats": stats}}
    )  # fmt: skip
    artifact = _run_alone(spec, tmp_path, chunk_rows=10).artifact
    assert artifact.read(table="stats").column("rows").to_pylist() == [25]  # not [10, 10, 5]
    assert len(set(scratch)) == 1 and not scratch[0].exists()  # one per run, gone once published


def test_files_a_stage_writes_are_published_with_its_artifact(tmp_path: Path) -> None:
    from irforge.stage import StageContext, TableSource

    seen: list[Path | None] = []

    def process(chunk: pa.Table, ctx: StageContext[NumbersConfig]) -> ChunkResult:
        seen.append(ctx.files_dir)
        assert ctx.files_dir is not None
        # Appending per chunk: a resumed run finds the earlier chunks' lines.
        with (ctx.files_dir / "ids.txt").open("a", encoding="utf-8") as out:
            out.writelines(f"{i}\n" for i in chunk.column("id").to_pylist())
        kept = chunk.append_column("value", chunk.column("id"))
        return ChunkResult(kept, NUMBERS.excluded_schema.empty_table())

    def source(ctx: object, _inputs: object) -> TableSource:
        return TableSource(pa.table({"id": pa.array(range(25), pa.int64())}))

    stage: StageSpec[NumbersConfig] = StageSpec(**{**NUMBERS.__dict__, "process": process, "source": source})
    artifact = _run_alone(stage, tmp_path, chunk_rows=10).artifact
    assert len(seen) == 3 and len(set(seen)) == 1  # one folder for every chunk of the run
    assert (artifact.files / "ids.txt").read_text(encoding="utf-8").split() == [str(i) for i in range(25)]
    assert not any(p.name.startswith(".work") for p in artifact.path.parent.iterdir())


def _run_failing_at(root: Path, chunk_index: int, error: Exception) -> None:
    """Run a numbers stage (10-row chunks) whose ``chunk_index``-th chunk raises ``error``."""

    calls = iter(range(10**6))

    def process(chunk: pa.Table, ctx: object) -> ChunkResult:
        if next(calls) == chunk_index:
            raise error
        kept = chunk.append_column("value", chunk.column("id"))
        return ChunkResult(kept, NUMBERS.excluded_schema.empty_table())

    stage: StageSpec[NumbersConfig] = StageSpec(**{**NUMBERS.__dict__, "process": process})
    _run_alone(stage, root, chunk_rows=10)


def test_a_config_error_leaves_no_work_dir(tmp_path: Path) -> None:
    from irforge.errors import ConfigError

    with pytest.raises(ConfigError, match="base_url is required"):
        _run_failing_at(tmp_path, 0, ConfigError("llm.base_url is required with engine: openai"))
    stage_dir = tmp_path / "toy" / "numbers"
    assert [p.name for p in stage_dir.iterdir() if not p.name.startswith(".lock-")] == []


def test_a_failure_after_finished_chunks_keeps_them_for_the_resumed_run(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="went away"):
        _run_failing_at(tmp_path, 3, RuntimeError("the server went away"))
    (work,) = (tmp_path / "toy" / "numbers").glob(".work-*")
    assert len(list(work.glob("chunk-*.json"))) == 3


def _numbers_in_chunks_of_10(root: Path, process: Any, count: int) -> tuple[Any, ArtifactStore, ToyConfig]:
    """The toy ``numbers`` stage with ``process`` as its only stage, ``count`` rows in chunks of 10:
    its step, store and config, ready for ``execute_step``."""
    from irforge.pipeline import Pipeline, select_steps

    stage: StageSpec[NumbersConfig] = StageSpec(**{**NUMBERS.__dict__, "process": process})
    pipeline = Pipeline(name="toy", config_type=ToyConfig, stages=(stage,), default_config=Path("x"))
    cfg = config(count=count)
    cfg = cfg.model_copy(update={"execution": cfg.execution.model_copy(update={"chunk_rows": 10})})
    store = ArtifactStore(root)
    (step,) = select_steps(pipeline, pipeline.plan(cfg, root), Selection(), store)
    return step, store, cfg


def test_files_survive_a_failed_publish_for_the_resumed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from irforge.pipeline import execute_step
    from irforge.stage import StageContext

    def process(chunk: pa.Table, ctx: StageContext[NumbersConfig]) -> ChunkResult:
        assert ctx.files_dir is not None
        (ctx.files_dir / f"chunk-{chunk.column('id')[0].as_py()}.txt").write_text("x")
        return ChunkResult(
            chunk.append_column("value", chunk.column("id")), NUMBERS.excluded_schema.empty_table()
        )

    step, store, cfg = _numbers_in_chunks_of_10(tmp_path, process, count=30)

    def disk_full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(store, "publish", disk_full)
        with pytest.raises(OSError, match="No space left"):
            execute_step(step, store, "toy", cfg.execution)
    outcome = execute_step(step, store, "toy", cfg.execution)
    assert outcome.state == "resumed"
    assert sorted(p.name for p in outcome.artifact.files.iterdir()) == [
        "chunk-0.txt",
        "chunk-10.txt",
        "chunk-20.txt",
    ]


def test_log_progress_says_rows_rate_and_time_left_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 29 §3: where no bar can be drawn (a file, a worker's log), a line every interval,
    also while no chunk has finished yet."""
    import logging
    import time

    from irforge.progress import LogProgress

    progress = LogProgress(interval_s=0.05)
    with caplog.at_level(logging.INFO, logger="irforge"):
        progress.start("judge", 1000)
        time.sleep(0.12)  # no chunk finished: still said
        progress.advance(250)
        time.sleep(0.12)
        progress.finish()
        time.sleep(0.1)
        after = len(caplog.records)
        time.sleep(0.15)
    lines = [r.getMessage() for r in caplog.records]
    assert len(caplog.records) == after  # finish() ends the lines
    assert lines[0].startswith("judge: 0/1,000 rows (0 %), 0.0 rows/s") and "time left unknown" in lines[0]
    assert any(line.startswith("judge: 250/1,000 rows (25 %)") and "left" in line for line in lines)
    assert "about" in lines[-1] and "elapsed" in lines[-1]


class _Recorded:
    """A Progress that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def start(self, stage: str, total_rows: int) -> None:
        self.calls.append(("start", stage, total_rows))

    def advance(self, rows: int) -> None:
        self.calls.append(("advance", rows))

    def units(self, unit: str, done: int, total: int) -> None:
        self.calls.append(("units", unit, done, total))

    def finish(self) -> None:
        self.calls.append(("finish",))


def test_units_counted_inside_a_chunk_reach_the_stage_s_progress(tmp_path: Path) -> None:
    """Issue 29 §3: a one-chunk stage does not sit at 0 rows: what its code counts on a meter
    (LLM requests, training steps) shows while the chunk runs; a meter outside a run counts silently."""
    from irforge.pipeline import execute_step
    from irforge.progress import meter
    from irforge.stage import StageContext

    def process(chunk: pa.Table, ctx: StageContext[NumbersConfig]) -> ChunkResult:
        steps = meter("training steps", 3)
        for _ in range(3):
            steps.advance()
        return ChunkResult(
            chunk.append_column("value", chunk.column("id")), NUMBERS.excluded_schema.empty_table()
        )

    step, store, cfg = _numbers_in_chunks_of_10(tmp_path, process, count=20)
    seen = _Recorded()
    execute_step(step, store, "toy", cfg.execution, progress=seen)
    one_chunk = [("units", "training steps", n, 3) for n in range(4)]
    assert seen.calls == [
        ("start", "numbers", 20),
        *one_chunk,
        ("advance", 10),
        *one_chunk,
        ("advance", 10),
        ("finish",),
    ]
    alone = meter("LLM requests", 2)  # no run: nobody to tell, still counted
    alone.advance(2)
    assert alone.done == 2


def test_log_progress_shows_the_running_chunk_s_units(caplog: pytest.LogCaptureFixture) -> None:
    import time

    from irforge.progress import LogProgress

    progress = LogProgress(interval_s=3600)
    progress.start("judge", 40)
    progress.units("LLM requests", 0, 40)
    progress.units("LLM requests", 10, 40)
    line = progress.line()
    assert line.startswith("judge: 0/40 rows (0 %)")
    assert "; this chunk: 10/40 LLM requests (25 %)" in line and "LLM requests/s, about" in line
    slow = LogProgress(interval_s=3600)
    slow.start("train_dense", 1)
    slow._unit = ("training steps", 2, 6, time.monotonic() - 60)  # 2 steps in a minute
    assert "2/6 training steps (33 %), 0.033 training steps/s, about 2 min 00 s left" in slow.line()
    slow.finish()
    progress.units("LLM requests", 40, 40)  # the chunk's units all done: the rows say the rest
    assert "this chunk" not in progress.line()
    progress.finish()


def test_the_terminal_bar_draws_a_line_for_the_chunk_s_units() -> None:
    import io

    from rich.console import Console

    from irforge.progress import RichProgress

    out = io.StringIO()
    progress = RichProgress(Console(file=out, force_terminal=True, color_system=None, width=120))
    progress.start("judge", 40)
    progress.units("LLM requests", 0, 12)
    progress.units("LLM requests", 5, 12)
    assert progress._bar is not None
    progress._bar.refresh()
    drawn = out.getvalue()
    progress.finish()
    assert "0/40 rows" in drawn and "5/12 LLM requests" in drawn and "this chunk" in drawn
