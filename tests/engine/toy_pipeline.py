"""A tiny two-stage pipeline for engine tests (the real stages are tested on real data).

``numbers`` makes rows 0..count-1 and excludes multiples of 7; ``square`` squares what is
left and excludes squares above ``limit``. Each processed chunk appends its first id to
``log_file`` (when set), so tests can see which chunks were computed, and sleeps
``sleep_s`` so a test can kill a run mid-stage.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from irforge.artifacts import ArtifactStore
from irforge.config import ExecutionConfig, StrictModel
from irforge.contents import resolver
from irforge.engine import StageOutcome
from irforge.parallel import INLINE, ChunkRunner
from irforge.pipeline import FlowConfig, Pipeline, Selection, execute_step, select_steps
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, upstream_source


class NumbersConfig(StrictModel):
    count: int = 100
    sleep_s: float = 0.0
    log_file: str | None = None
    fail_flag: str | None = None  # while this file exists, the chunk holding the id it names raises


class SquareConfig(StrictModel):
    limit: int = 5000
    log_file: str | None = None


class ToyStages(StrictModel):
    numbers: NumbersConfig = NumbersConfig()
    square: SquareConfig = SquareConfig()


class ToyConfig(FlowConfig):
    stages: ToyStages = ToyStages()


ROWS = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("value", pa.int64(), nullable=False)])
EXCLUDED = exclusion_schema(pa.field("id", pa.int64(), nullable=False))


def _log(path: str | None, first_id: int) -> None:
    """``<first id> <pid> <Ray node id or ->`` per computed chunk."""
    if path:
        node = "-"
        if "ray" in sys.modules and sys.modules["ray"].is_initialized():
            node = sys.modules["ray"].get_runtime_context().get_node_id()
        with Path(path).open("a") as fh:
            fh.write(f"{first_id} {os.getpid()} {node}\n")


def chunks_logged(path: Path) -> list[tuple[int, int, str]]:
    """What :func:`_log` wrote: (first id, pid, node) per computed chunk."""
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(int(first), int(pid), node) for first, pid, node in rows]


def _numbers(chunk: pa.Table, ctx: StageContext[NumbersConfig]) -> ChunkResult:
    ids = chunk.column("id").to_pylist()
    time.sleep(ctx.config.sleep_s)
    flag = Path(ctx.config.fail_flag) if ctx.config.fail_flag else None
    if flag is not None and flag.exists() and int(flag.read_text()) in ids:
        raise RuntimeError(f"chunk with id {flag.read_text()} fails")
    _log(ctx.config.log_file, ids[0])
    kept = [{"id": i, "value": i} for i in ids if i % 7]
    excluded = [
        {"reason": "multiple_of_7", "detail": f"{i} = 7 * {i // 7}", "id": i} for i in ids if not i % 7
    ]
    return ChunkResult(pa.Table.from_pylist(kept, ROWS), pa.Table.from_pylist(excluded, EXCLUDED))


def _square(chunk: pa.Table, ctx: StageContext[SquareConfig]) -> ChunkResult:
    rows = chunk.to_pylist()
    if rows:
        _log(ctx.config.log_file, rows[0]["id"])
    kept = [{"id": r["id"], "value": r["value"] ** 2} for r in rows if r["value"] ** 2 <= ctx.config.limit]
    excluded = [
        {"reason": "too_big", "detail": None, "id": r["id"]}
        for r in rows
        if r["value"] ** 2 > ctx.config.limit
    ]
    return ChunkResult(pa.Table.from_pylist(kept, ROWS), pa.Table.from_pylist(excluded, EXCLUDED))


def _numbers_source(ctx: StageContext[NumbersConfig], _inputs: dict[str, Any]) -> TableSource:
    return TableSource(pa.table({"id": pa.array(range(ctx.config.count), pa.int64())}))


NUMBERS: StageSpec[NumbersConfig] = StageSpec(
    name="numbers",
    version=1,
    config_type=NumbersConfig,
    upstream=(),
    schema=ROWS,
    excluded_schema=EXCLUDED,
    key=("id",),
    source=_numbers_source,
    process=_numbers,
)
SQUARE: StageSpec[SquareConfig] = StageSpec(
    name="square",
    version=1,
    config_type=SquareConfig,
    upstream=("numbers",),
    schema=ROWS,
    excluded_schema=EXCLUDED,
    key=("id",),
    source=upstream_source("numbers"),
    process=_square,
)
TOY = Pipeline(
    name="toy", config_type=ToyConfig, stages=(NUMBERS, SQUARE), default_config=Path("unused.yaml")
)


def run_toy(
    root: Path,
    config: ToyConfig,
    selection: Selection | None = None,
    chunk_rows: int = 10,
    runner: ChunkRunner = INLINE,
    pipeline: Pipeline | None = None,
) -> dict[str, StageOutcome]:
    """Run the toy pipeline (or a variant of it) the way a flow's tasks would, chunks on ``runner``."""
    pipeline = pipeline or TOY
    store = ArtifactStore(root)
    config = config.model_copy(
        update={"execution": config.execution.model_copy(update={"chunk_rows": chunk_rows})}
    )
    plans = pipeline.plan(config, root, resolver(store, "toy"))
    steps = select_steps(pipeline, plans, selection or Selection(), store)
    used: dict[str, str] = {}
    outcomes = {}
    for step in steps:
        outcomes[step.name] = execute_step(step, store, "toy", config.execution, runner=runner, used=used)
        used[step.name] = outcomes[step.name].artifact.fingerprint
    return outcomes


def _main(root: str, log: str, runner: str = "inline") -> None:
    """The kill-and-resume tests: ``python -m tests.engine.toy_pipeline ROOT LOG [RUNNER]``."""
    config = ToyConfig(stages=ToyStages(numbers=NumbersConfig(sleep_s=0.15, log_file=log)))
    if runner == "inline":
        run_toy(Path(root), config)
        return
    from flows.runners import PrefectChunkRunner

    chunks = PrefectChunkRunner(ExecutionConfig(runner=runner, workers=2), "toy")  # type: ignore[arg-type]
    try:
        run_toy(Path(root), config, runner=chunks)
    finally:
        chunks.close()


if __name__ == "__main__":
    _main(*sys.argv[1:])
