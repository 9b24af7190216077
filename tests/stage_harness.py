"""Running one stage on upstream artifacts made from small tables, without Prefect.

``artifact_of`` publishes a table (and side tables) as an artifact of a stage named as the
upstream one, through the real engine (:func:`irforge.engine.run_stage`); ``run_one`` runs
a stage's spec on such artifacts the way a flow run does (fingerprint, chunks, accounting).
Each flow's ``tests/<flow>/conftest.py`` binds them to its flow name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from irforge.artifacts import Artifact, ArtifactStore
from irforge.config import ExecutionConfig, StrictModel
from irforge.engine import StageOutcome, StagePlan, run_stage
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema


class _Nothing(StrictModel):
    label: str = ""


def artifact_of(
    root: Path, name: str, table: pa.Table, tables: Mapping[str, pa.Table] | None = None, flow: str = "test"
) -> Artifact:
    """``table`` (and side ``tables``) published as the artifact of a stage called ``name``."""
    side = dict(tables or {})
    key = tuple(table.schema.names[:1])
    excluded = exclusion_schema(table.schema.field(key[0]))

    def process(chunk: pa.Table, _ctx: StageContext[Any]) -> ChunkResult:
        return ChunkResult(chunk, excluded.empty_table(), tables=side)

    spec: StageSpec[Any] = StageSpec(
        name=name,
        version=1,
        config_type=_Nothing,
        upstream=(),
        schema=table.schema,
        excluded_schema=excluded,
        key=key,
        source=lambda _ctx, _inputs: TableSource(table),
        process=process,
        tables={n: t.schema for n, t in side.items()},
        whole_input=True,
    )
    label = _content_digest(table, side)
    return run_one(root, spec, _Nothing(label=label), {}, flow=flow).artifact


def _content_digest(table: pa.Table, side: Mapping[str, pa.Table]) -> str:
    """A digest of the tables' schemas and values (Arrow IPC bytes), so that two tables of the
    same shape but other values never share a fingerprint (``to_string`` shows the schema only)."""
    digest = hashlib.blake2b(digest_size=16)
    for name, t in [("", table), *sorted(side.items())]:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as writer:
            writer.write_table(t)
        digest.update(name.encode() + b"\0" + sink.getvalue().to_pybytes())
    return digest.hexdigest()


def run_one(
    root: Path,
    spec: StageSpec[Any],
    config: BaseModel,
    upstream: Mapping[str, Artifact],
    base_dir: Path | None = None,
    chunk_rows: int = 500,
    flow: str = "test",
) -> StageOutcome:
    """Run ``spec`` with ``config`` on ``upstream`` artifacts (as flow ``flow``, cache in ``root/cache``)."""
    store = ArtifactStore(root)
    context = StageContext(config, base_dir or root, {}, None)
    plan = StagePlan.make(spec, context, {n: a.fingerprint for n, a in upstream.items()})
    plan = plan.with_upstream(dict(upstream), cache_dir=root / "cache")
    (root / "cache").mkdir(parents=True, exist_ok=True)
    return run_stage(plan, store, flow, ExecutionConfig(chunk_rows=chunk_rows))
