"""A tiny two-stage pipeline for engine tests (the real stages are tested on real data).

``numbers`` makes rows 0..count-1 and excludes multiples of 7; ``square`` squares what is
left and excludes squares above ``limit``. Each processed chunk appends its first id to
``log_file`` (when set), so tests can see which chunks were computed, and sleeps
``sleep_s`` so a test can kill a run mid-stage.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from irforge.artifacts import ArtifactStore
from irforge.config import StrictModel
from irforge.engine import StageOutcome
from irforge.pipeline import FlowConfig, Pipeline, Selection, execute_step, select_steps
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, upstream_source


class NumbersConfig(StrictModel):
    count: int = 100
    sleep_s: float = 0.0
    log_file: str | None = None


class SquareConfig(StrictModel):
    limit: int = 5000


class ToyStages(StrictModel):
    numbers: NumbersConfig = NumbersConfig()
    square: SquareConfig = SquareConfig()


class ToyConfig(FlowConfig):
    stages: ToyStages = ToyStages()


ROWS = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("value", pa.int64(), nullable=False)])
EXCLUDED = exclusion_schema(pa.field("id", pa.int64(), nullable=False))


def _log(path: str | None, first_id: int) -> None:
    if path:
        with Path(path).open("a") as fh:
            fh.write(f"{first_id}\n")


def _numbers(chunk: pa.Table, ctx: StageContext[NumbersConfig]) -> ChunkResult:
    ids = chunk.column("id").to_pylist()
    time.sleep(ctx.config.sleep_s)
    _log(ctx.config.log_file, ids[0])
    kept = [{"id": i, "value": i} for i in ids if i % 7]
    excluded = [
        {"reason": "multiple_of_7", "detail": f"{i} = 7 * {i // 7}", "id": i} for i in ids if not i % 7
    ]
    return ChunkResult(pa.Table.from_pylist(kept, ROWS), pa.Table.from_pylist(excluded, EXCLUDED))


def _square(chunk: pa.Table, ctx: StageContext[SquareConfig]) -> ChunkResult:
    rows = chunk.to_pylist()
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
    root: Path, config: ToyConfig, selection: Selection | None = None, chunk_rows: int = 10
) -> dict[str, StageOutcome]:
    """Run the toy pipeline without Prefect, the way a flow's tasks would."""
    store = ArtifactStore(root)
    config = config.model_copy(
        update={"execution": config.execution.model_copy(update={"chunk_rows": chunk_rows})}
    )
    plans = TOY.plan(config, root)
    steps = select_steps(TOY, plans, selection or Selection(), store)
    return {s.name: execute_step(s, store, "toy", config.execution) for s in steps}


if __name__ == "__main__":  # used by the kill-and-resume test: python -m tests.engine.toy_pipeline ROOT LOG
    run_toy(
        Path(sys.argv[1]),
        ToyConfig(stages=ToyStages(numbers=NumbersConfig(sleep_s=0.15, log_file=sys.argv[2]))),
    )
