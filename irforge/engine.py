"""Runs one stage under the stage contract (:mod:`irforge.stage`).

Reuse an artifact whose fingerprint exists; otherwise process the input in chunks, each
persisted as it finishes under ``.work-<fingerprint>/`` (a killed run resumes from the last
finished chunk), check rows in = rows out + rows excluded for every chunk, then assemble the
parts, ``excluded.parquet`` and ``manifest.json`` and publish them atomically (:mod:`irforge.artifacts`).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from irforge.artifacts import (
    EXCLUDED,
    FILES,
    MANIFEST,
    PARQUET_COMPRESSION,
    Artifact,
    ArtifactStore,
    write_json_atomic,
    write_parquet_atomic,
)
from irforge.config import ExecutionConfig
from irforge.contents import content_digest, register
from irforge.errors import AccountingError, IrforgeError
from irforge.fingerprint import fingerprint, fingerprint_view
from irforge.manifest import Totals, build_manifest
from irforge.parallel import INLINE, ChunkCall, ChunkRunner, kept_rows_per_chunk
from irforge.progress import NullProgress, Progress, reporting
from irforge.stage import ChunkResult, StageContext, StageSpec, key_set

log = logging.getLogger("irforge")

StageState = Literal["reused", "computed", "resumed"]
_WHOLE = 2**62
SCRATCH = "scratch"  # in the work dir: what a stage's chunks build once and share (StageContext.scratch_dir)


@dataclass(frozen=True)
class StagePlan:
    """A stage with its inputs resolved: enough to know its fingerprint without running it."""

    spec: StageSpec[Any]
    context: StageContext[Any]
    upstream_fingerprints: dict[str, str]
    inputs: dict[str, Any]

    @classmethod
    def make(
        cls, spec: StageSpec[Any], context: StageContext[Any], upstream_fingerprints: dict[str, str]
    ) -> StagePlan:
        return cls(spec, context, dict(sorted(upstream_fingerprints.items())), spec.inputs(context))

    @property
    def material(self) -> dict[str, Any]:
        return {
            "stage": self.spec.name,
            "version": self.spec.version,
            "config": fingerprint_view(self.context.config),  # without Transport fields
            "upstream": self.upstream_fingerprints,
            "inputs": self.inputs,
        }

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.material)

    def with_upstream(self, upstream: dict[str, Artifact], cache_dir: Path | None = None) -> StagePlan:
        context = StageContext(self.context.config, self.context.base_dir, upstream, cache_dir)
        return StagePlan(self.spec, context, self.upstream_fingerprints, self.inputs)


@dataclass(frozen=True)
class StageOutcome:
    artifact: Artifact
    state: StageState
    wall_s: float

    @property
    def manifest(self) -> dict[str, Any]:
        return self.artifact.manifest


def run_stage(
    plan: StagePlan,
    store: ArtifactStore,
    flow: str,
    execution: ExecutionConfig,
    *,
    force: bool = False,
    progress: Progress | None = None,
    runner: ChunkRunner = INLINE,
) -> StageOutcome:
    spec = plan.spec
    material = plan.material
    fp = fingerprint(material)
    started = time.perf_counter()
    with store.lock(flow, spec.name, fp):
        existing = None if force else store.find(flow, spec.name, fp)  # (an object store downloads it)
        if existing is not None:
            log.info(
                "REUSED %s/%s %s (computed %s)", flow, spec.name, fp, existing.manifest.get("created_at")
            )
            return StageOutcome(existing, "reused", time.perf_counter() - started)
        store.remove_leftovers(flow, spec.name, fp)
        work = store.work_dir(flow, spec.name, fp)
        if force and work.exists():
            shutil.rmtree(work)
        # A whole-input stage gets one chunk however large its input is.
        chunk_rows = _WHOLE if spec.whole_input else spec.chunk_rows or execution.chunk_rows
        files = work / FILES
        try:
            resumed = _prepare_work_dir(work, fp, chunk_rows)
            files.mkdir(exist_ok=True)
            context = replace(plan.context, files_dir=files, scratch_dir=work / SCRATCH, fingerprint=fp)
            running = StagePlan(spec, context, plan.upstream_fingerprints, plan.inputs)
            totals = _run_chunks(running, work, chunk_rows, progress or NullProgress(), runner)
        except BaseException:
            _drop_if_unfinished(work)
            raise
        if resumed:
            log.warning("RESUMED %s/%s %s: %d finished chunk(s) kept", flow, spec.name, fp, resumed)
        tmp = store.new_tmp_dir(flow, spec.name, fp)
        try:
            kept, excluded = _chunk_outputs(spec, work, totals.chunks)
            final_tables: dict[str, pa.Table] = {}
            if spec.finalize is not None:
                kept, extra, final_tables = _finalize(running, kept, totals)
                excluded = [*excluded, extra]
            _write_artifact(spec, kept, excluded, tmp, execution.part_rows)
            totals.tables = _write_side_tables(spec, work, totals.chunks, tmp, final_tables)
            if any(files.iterdir()):
                files.rename(tmp / FILES)
            wall = time.perf_counter() - started
            manifest = build_manifest(flow, plan, fp, material, totals, wall, resumed)
            manifest["content"] = content_digest(tmp)
            write_json_atomic(tmp / MANIFEST, manifest)
            artifact = store.publish(tmp, flow, spec.name, fp)
            register(store, flow, spec.name, fp, artifact.manifest["content"])
        except BaseException:
            if (tmp / FILES).is_dir():  # back beside the finished chunks, for the resumed run
                shutil.rmtree(files, ignore_errors=True)
                (tmp / FILES).rename(files)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(work, ignore_errors=True)
    state: StageState = "resumed" if resumed else "computed"
    log.info("%s %s/%s %s in %.2fs", state.upper(), flow, spec.name, fp, wall)
    if totals.units_in and not totals.units_kept:  # every row excluded: one line says why
        log.warning("%s/%s kept none of its %s", flow, spec.name, totals.excluded_text())
    return StageOutcome(artifact, state, wall)


def _chunk_paths(work: Path, index: int) -> tuple[Path, Path, Path]:
    stem = work / f"chunk-{index:06d}"
    return stem.with_suffix(".kept.parquet"), stem.with_suffix(".excluded.parquet"), stem.with_suffix(".json")


def _side_table_path(work: Path, index: int, name: str) -> Path:
    return work / f"chunk-{index:06d}.table-{name}.parquet"


def _prepare_work_dir(work: Path, fp: str, chunk_rows: int) -> int:
    """Create or validate the work dir; return how many finished chunks it already holds."""
    plan_file = work / "plan.json"
    if work.exists():
        try:
            plan = json.loads(plan_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            plan = {}
        if plan.get("fingerprint") == fp and plan.get("chunk_rows") == chunk_rows:
            return len(list(work.glob("chunk-*.json")))
        # Chunk boundaries would not line up with what was persisted: start over.
        log.warning("discarding %s: it was made with other chunk settings", work)
        shutil.rmtree(work)
    work.mkdir(parents=True)
    write_json_atomic(plan_file, {"fingerprint": fp, "chunk_rows": chunk_rows})
    return 0


def _drop_if_unfinished(work: Path) -> None:
    """Delete a work dir that holds no finished chunk and nothing built in its scratch dir (the
    stage failed before the first one, e.g. on a config error); else keep it for the resumed run."""
    if not any(work.glob("chunk-*.json")) and not any((work / SCRATCH).glob("*")):
        shutil.rmtree(work, ignore_errors=True)


def _run_chunks(
    plan: StagePlan, work: Path, chunk_rows: int, progress: Progress, runner: ChunkRunner
) -> Totals:
    """Compute the unfinished chunks on ``runner`` and persist each as it comes back (any order)."""
    spec = plan.spec
    totals = Totals()
    source = spec.source(plan.context, plan.inputs)
    total_rows = source.num_rows()
    resources = spec.resources_for(plan.context.config)
    if not resources.parallel or total_rows <= chunk_rows:
        runner = INLINE  # one chunk (or chunks that share state): no worker to pay for
    if not spec.whole_input and not spec.chunk_rows:  # execution.chunk_rows: sized for the runner
        workers, started = getattr(runner, "workers", 1), any(work.glob("chunk-*.json"))
        chunk_rows = kept_rows_per_chunk(work / "plan.json", chunk_rows, total_rows, workers, started)
    progress.start(spec.name, total_rows)
    rows_of: dict[int, int] = {}

    def calls() -> Iterator[ChunkCall]:
        for index, chunk in enumerate(source.batches(chunk_rows)):
            marker_path = _chunk_paths(work, index)[2]
            if marker_path.exists():
                totals.add(json.loads(marker_path.read_text(encoding="utf-8")))
                progress.advance(chunk.num_rows)
                continue
            rows_of[index] = chunk.num_rows
            yield ChunkCall(index, f"{spec.name}[{index}]", compute_chunk, (spec, chunk, plan.context, index))

    with reporting(progress):  # meters of chunks computed in this thread (inline); then finish()
        for index, done in runner.run(calls(), resources):
            _persist_chunk(work, index, done)
            totals.add(done.marker)
            progress.advance(rows_of.pop(index))
    return totals


@dataclass(frozen=True)
class ChunkDone:
    """One chunk's rows, side tables and marker, as computed by a worker."""

    kept: pa.Table
    excluded: pa.Table
    tables: dict[str, pa.Table]
    marker: dict[str, Any]


def compute_chunk(spec: StageSpec[Any], chunk: pa.Table, context: StageContext[Any], index: int) -> ChunkDone:
    """Process one chunk and check its accounting: what a worker runs (it writes nothing)."""
    t0 = time.perf_counter()
    result = spec.process(chunk, context)
    elapsed = time.perf_counter() - t0
    kept, excluded = _conform(spec, result)
    marker = _account(spec, chunk, kept, excluded, index)
    marker["process_s"] = elapsed
    marker["cost"] = {k: float(v) for k, v in sorted(result.cost.items())}
    return ChunkDone(kept, excluded, _conform_tables(spec, result), marker)


def _persist_chunk(work: Path, index: int, done: ChunkDone) -> None:
    kept_path, excluded_path, marker_path = _chunk_paths(work, index)
    for name, table in done.tables.items():
        write_parquet_atomic(_side_table_path(work, index, name), table)
    write_parquet_atomic(kept_path, done.kept)
    write_parquet_atomic(excluded_path, done.excluded)
    write_json_atomic(marker_path, done.marker)  # the commit point of this chunk


def _conform(spec: StageSpec[Any], result: ChunkResult) -> tuple[pa.Table, pa.Table]:
    def cast(table: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
        missing = [n for n in schema.names if n not in table.column_names]
        extra = [n for n in table.column_names if n not in schema.names]
        if missing or extra:
            raise IrforgeError(
                f"stage {spec.name} produced {what} rows with columns missing {missing} / unexpected {extra}"
            )
        return table.select(schema.names).cast(schema)

    return cast(result.kept, spec.schema, "kept"), cast(result.excluded, spec.excluded_schema, "excluded")


def _conform_tables(spec: StageSpec[Any], result: ChunkResult) -> dict[str, pa.Table]:
    unknown = sorted(set(result.tables) - set(spec.tables))
    if unknown:
        raise IrforgeError(f"stage {spec.name} produced undeclared tables {unknown}")
    out = {}
    for name, schema in spec.tables.items():
        table = result.tables.get(name, schema.empty_table())
        if sorted(table.column_names) != sorted(schema.names):
            raise IrforgeError(
                f"stage {spec.name} table {name}: columns {table.column_names} != {schema.names}"
            )
        out[name] = table.select(schema.names).cast(schema)
    return out


def _account(
    spec: StageSpec[Any], chunk: pa.Table, kept: pa.Table, excluded: pa.Table, index: int
) -> dict[str, Any]:
    units_in = key_set(chunk, spec.key)
    units_kept = spec.units_kept(kept)
    units_excluded = key_set(excluded, spec.key)
    both = units_kept & units_excluded
    lost = units_in - units_kept - units_excluded
    invented = (units_kept | units_excluded) - units_in
    if both or lost or invented:

        def show(units: set[tuple[Any, ...]]) -> str:
            return ", ".join(repr(u[0] if len(u) == 1 else u) for u in sorted(units, key=repr)[:3])

        raise AccountingError(
            f"stage {spec.name} chunk {index}: rows in != rows out + rows excluded "
            f"(lost: {len(lost)} {show(lost)}; both kept and excluded: {len(both)} {show(both)}; "
            f"not in input: {len(invented)} {show(invented)})"
        )
    reasons = Counter(excluded.column("reason").to_pylist())
    return {
        "rows_in": chunk.num_rows,
        "rows_out": kept.num_rows,
        "rows_excluded": excluded.num_rows,
        "units_in": len(units_in),
        "units_kept": len(units_kept),
        "units_excluded": len(units_excluded),
        "reasons": dict(sorted(reasons.items())),
    }


def _chunk_outputs(
    spec: StageSpec[Any], work: Path, chunks: int
) -> tuple[Iterator[pa.Table], list[pa.Table]]:
    """Kept rows streamed chunk by chunk (they may be large); excluded rows all at once."""

    def kept() -> Iterator[pa.Table]:
        for i in range(chunks):
            yield pq.read_table(_chunk_paths(work, i)[0]).cast(spec.schema)

    excluded = [pq.read_table(_chunk_paths(work, i)[1]).cast(spec.excluded_schema) for i in range(chunks)]
    return kept(), excluded


def _finalize(
    plan: StagePlan, kept: Iterator[pa.Table], totals: Totals
) -> tuple[Iterator[pa.Table], pa.Table, dict[str, pa.Table]]:
    """``finalize`` over all kept rows; the side tables it returns replace the chunks' ones."""
    spec = plan.spec
    assert spec.finalize is not None
    before = pa.concat_tables([spec.schema.empty_table(), *kept])
    result = spec.finalize(before, plan.context)
    after, extra = _conform(spec, result)
    units_before = spec.units_kept(before)
    units_after, units_extra = spec.units_kept(after), key_set(extra, spec.key)
    if units_after & units_extra or (units_after | units_extra) != units_before:
        raise AccountingError(f"stage {spec.name}: finalize lost, invented or duplicated rows")
    totals.rows_out = after.num_rows
    totals.rows_excluded += extra.num_rows
    totals.units_kept = len(units_after)
    totals.units_excluded += len(units_extra)
    totals.reasons.update(extra.column("reason").to_pylist())
    tables = {n: t for n, t in _conform_tables(spec, result).items() if n in result.tables}
    return iter([after]), extra, tables


def _write_artifact(
    spec: StageSpec[Any], kept: Iterator[pa.Table], excluded: list[pa.Table], out: Path, part_rows: int
) -> None:
    """Kept rows in parts of ``part_rows``, each written whole, so the files' bytes depend on the
    rows only, never on how they were chunked (``chunk_rows`` is not fingerprinted)."""
    part = 0
    pending: list[pa.Table] = []
    pending_rows = 0

    def write(table: pa.Table) -> None:
        nonlocal part
        path = out / f"part-{part:05d}.parquet"
        pq.write_table(table.combine_chunks(), path, compression=PARQUET_COMPRESSION)
        part += 1

    for table in kept:
        pending.append(table)
        pending_rows += table.num_rows
        while pending_rows >= part_rows:
            rows = pa.concat_tables(pending)
            write(rows.slice(0, part_rows))
            rest = rows.slice(part_rows)
            pending, pending_rows = [rest], rest.num_rows
    if pending_rows or part == 0:  # nothing kept: still one (empty) part, so the schema is always readable
        write(pa.concat_tables([spec.schema.empty_table(), *pending]))
    table = pa.concat_tables([spec.excluded_schema.empty_table(), *excluded]).combine_chunks()
    pq.write_table(table, out / EXCLUDED, compression=PARQUET_COMPRESSION)


def _write_side_tables(
    spec: StageSpec[Any], work: Path, chunks: int, out: Path, final: dict[str, pa.Table]
) -> dict[str, int]:
    rows = {}
    for name, schema in spec.tables.items():
        if name in final:
            table = final[name].combine_chunks()
        else:
            parts = [pq.read_table(_side_table_path(work, i, name)).cast(schema) for i in range(chunks)]
            table = pa.concat_tables([schema.empty_table(), *parts]).combine_chunks()
        pq.write_table(table, out / f"{name}.parquet", compression=PARQUET_COMPRESSION)
        rows[name] = table.num_rows
    return rows
