"""Stage ``export``: the selected instances as a release in both formats (App. A.6).

Writes ``<artifact>/files/release/`` (see :mod:`tasks.evidencebench.release`):
``evidencebench.json`` in the authors' released schema, ``data/test.parquet`` and the
generated ``README.md`` card, whose provenance lists every LLM stage's model and prompt
digests and every stage's fingerprint, found by walking the artifacts' lineage. ``irforge
release evidencebench --out DIR`` copies the folder out.

Units: instances (``instance_id``). Output: one row per instance (``instance_id``,
``unit_id``, ``paper_id``, ``n_aspects``, ``optimal``) and the side table ``files`` (path,
rows, bytes, sha256 of each written file). Excluded: ``duplicate_id`` (two summaries gave
the same instance id; both are left out rather than one silently replacing the other).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from irforge.artifacts import lineage
from irforge.config import StrictModel
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.evidencebench.release import ReleaseInfo, ReleaseRow, write_release

LLM_STAGES = ("refine", "hypothesis", "decompose", "align", "label")


class ExportConfig(StrictModel):
    name: str = Field("EvidenceBench (irforge build)", description="The dataset's name on its card.")
    license: str = Field("cc-by-4.0", description="The release's licence (Hub identifier).")


SCHEMA = pa.schema(
    [
        pa.field("instance_id", pa.string(), nullable=False),
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("paper_id", pa.string(), nullable=False),
        pa.field("n_aspects", pa.int32(), nullable=False),
        pa.field("optimal", pa.int32(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("instance_id", pa.string(), nullable=False), pa.field("unit_id", pa.string(), nullable=False)
)
FILES_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("sha256", pa.string(), nullable=False),
    ]
)
_COLUMNS = [
    *("instance_id", "unit_id", "review_id", "paper_id", "summary"),
    *("aspects", "aspect_labels", "aspect_covered", "instance"),
]


def _selected(ctx: StageContext[ExportConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["select"], columns=_COLUMNS)


def release_info(ctx: StageContext[ExportConfig]) -> ReleaseInfo:
    stages = lineage(dict(ctx.upstream))
    models: dict[str, str] = {}
    prompts: dict[str, str] = {}
    demo = False
    for name in LLM_STAGES:
        if name not in stages:
            continue
        material = stages[name].manifest["material"]["inputs"]
        llm = material["llm"]
        models[f"{name} LLM"] = f"{llm['model']} ({llm['engine']})"
        demo |= llm["engine"] == "llama-cpp"
        found = material.get("prompts") or {"prompt": material.get("prompt")}
        prompts.update({f"{name}/{key}": digest for key, digest in found.items() if digest})
    return ReleaseInfo(
        name=ctx.config.name,
        license=ctx.config.license,
        models=models,
        prompts=prompts,
        stage_fingerprints={name: artifact.fingerprint for name, artifact in stages.items()},
        demo_models=demo,
    )


def process(chunk: pa.Table, ctx: StageContext[ExportConfig]) -> ChunkResult:
    assert ctx.files_dir is not None, "export: run through the stage engine"
    harvest = ctx.upstream["harvest"].read(columns=["unit_id", "review_license"])
    harvest = harvest.filter(pc.is_in(harvest.column("unit_id"), chunk.column("unit_id")))
    licences = dict(zip(harvest.column("unit_id").to_pylist(), harvest.column("review_license").to_pylist(),
                        strict=True))  # fmt: skip
    rows = chunk.to_pylist()
    counts = Counter(r["instance_id"] for r in rows)
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    release: list[ReleaseRow] = []
    for row in rows:
        if counts[row["instance_id"]] > 1:
            excluded.append(
                {
                    "instance_id": row["instance_id"],
                    "unit_id": row["unit_id"],
                    "reason": "duplicate_id",
                    "detail": f"{counts[row['instance_id']]} summaries map to this instance id",
                }
            )
            continue
        instance = json.loads(row["instance"])
        # The instance lists covered aspects only: keep the texts and labels of those.
        covered = [j for j, flag in enumerate(row["aspect_covered"]) if flag]
        release.append(
            ReleaseRow(
                instance_id=row["instance_id"],
                instance=instance,
                aspect_texts=[row["aspects"][j] for j in covered],
                aspect_labels=[row["aspect_labels"][j] for j in covered],
                evidence_summary=row["summary"],
                review_id=row["review_id"],
                review_license=licences.get(row["unit_id"]),
            )
        )
        kept.append(
            {
                "instance_id": row["instance_id"],
                "unit_id": row["unit_id"],
                "paper_id": row["paper_id"],
                "n_aspects": len(instance["aspect_list_ids"]),
                "optimal": instance["evidence_retrieval_at_optimal_evaluation"]["optimal"],
            }
        )
    written = write_release(ctx.files_dir / "release", release, release_info(ctx))
    files = [{"path": f.path, "rows": f.rows, "bytes": f.bytes, "sha256": f.sha256} for f in written]
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={"files": rows_to_table(files, FILES_SCHEMA)},
    )


SPEC: StageSpec[ExportConfig] = StageSpec(
    name="export",
    version=1,
    config_type=ExportConfig,
    upstream=("select", "harvest"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("instance_id",),
    tables={"files": FILES_SCHEMA},
    source=_selected,
    process=process,
    whole_input=True,
    description="The released EvidenceBench JSON schema and a Hugging Face dataset folder with its card.",
)
