"""Stage ``select``: the coverage rule and the exact optimal evidence sets (§2.2, App. A.6).

For every labelled summary: drop it when fewer than 70 % of its aspects have a sentence
(``low_coverage``); otherwise build the released-schema instance
(:func:`tasks.evidencebench.instance.build_instance`): covered aspects only, the exact minimum
number of sentences covering all of them (``optimal``) with one such selection, the
maximum-coverage 10 sentences, and the same for the results aspects (``optimal`` and @5),
all by integer programming (:mod:`tasks.evidencebench.selection`, never greedy).

Units: labelled summaries (``unit_id``). Output: ``instance_id`` (``id_prefix`` + the
``unit_id`` with every character but letters and digits turned into ``_``), the summary's
identity and texts, ``aspects``, ``aspect_labels``, ``aspect_covered`` (per aspect: in the instance), ``n_aspects``, ``covered_aspects``,
``optimal``, ``results_optimal`` (null without results aspects), ``at_10_covered``,
``results_at_5_covered`` and ``instance`` (the released JSON object, as text).
Excluded: ``low_coverage`` (``covered_aspects`` of ``n_aspects``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.parallel import CPU
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.evidencebench.instance import build_instance, low_coverage
from tasks.evidencebench.pools import paper_pools
from tasks.evidencebench.selection import MIN_COVERED_FRACTION
from tasks.evidencebench.stages.label import INSTANCE

_UNSAFE = re.compile(r"[^A-Za-z0-9]+")


class SelectConfig(StrictModel):
    id_prefix: str = Field(
        "evidencebench_irforge_", pattern=r"^[A-Za-z0-9_]*$", description="Prefix of the instance ids."
    )


SCHEMA = pa.schema(
    [
        pa.field("instance_id", pa.string(), nullable=False),
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("review_id", pa.string(), nullable=False),
        pa.field("cited_ref_id", pa.string(), nullable=False),
        pa.field("paper_id", pa.string(), nullable=False),
        pa.field("hypothesis", pa.string(), nullable=False),
        pa.field("summary", pa.string(), nullable=False),
        pa.field("aspects", pa.list_(pa.string()), nullable=False),
        pa.field("aspect_labels", pa.list_(pa.string()), nullable=False),
        pa.field("aspect_covered", pa.list_(pa.bool_()), nullable=False),
        pa.field("n_aspects", pa.int32(), nullable=False),
        pa.field("covered_aspects", pa.int32(), nullable=False),
        pa.field("pool_size", pa.int32(), nullable=False),
        pa.field("optimal", pa.int32(), nullable=False),
        pa.field("at_10_covered", pa.int32(), nullable=False),
        pa.field("results_optimal", pa.int32()),
        pa.field("results_at_5_covered", pa.int32()),
        pa.field("instance", pa.string(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("unit_id", pa.string(), nullable=False),
    pa.field("review_id", pa.string(), nullable=False),
    pa.field("n_aspects", pa.int32(), nullable=False),
    pa.field("covered_aspects", pa.int32(), nullable=False),
)


def instance_id(prefix: str, unit_id: str) -> str:
    """A released-style id: letters, digits and underscores only."""
    return prefix + _UNSAFE.sub("_", unit_id).strip("_")


def inputs(ctx: StageContext[SelectConfig]) -> dict[str, Any]:
    return {"min_covered_fraction": MIN_COVERED_FRACTION}


def _labelled(ctx: StageContext[SelectConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["label"], columns=[*INSTANCE, "aspect_labels"])


def process(chunk: pa.Table, ctx: StageContext[SelectConfig]) -> ChunkResult:
    rows = chunk.to_pylist()
    pools = paper_pools(ctx.upstream["papers"], [r["paper_id"] for r in rows])
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for row in rows:
        sentences: list[list[int]] = row["aspect_sentences"]
        covered = sum(1 for s in sentences if s)
        why = low_coverage(sentences)
        if why is not None:  # label already drops these before paying for labels; a guard here
            excluded.append(
                {
                    "unit_id": row["unit_id"],
                    "review_id": row["review_id"],
                    "reason": "low_coverage",
                    "detail": why,
                    "n_aspects": len(sentences),
                    "covered_aspects": covered,
                }
            )
            continue
        pool = pools[row["paper_id"]]
        name = instance_id(ctx.config.id_prefix, row["unit_id"])
        instance = build_instance(
            name,
            hypothesis=row["hypothesis"],
            pool=pool.texts,
            pool_types=pool.types,
            paper_id=row["paper_id"],
            aspect_sentences=sentences,
            results=[label == "results" for label in row["aspect_labels"]],
        )
        at_optimal = instance["evidence_retrieval_at_optimal_evaluation"]
        results_optimal = instance["results_evidence_retrieval_at_optimal_evaluation"]
        results_at_5 = instance["results_evidence_retrieval_at_5_evaluation"]
        kept.append(
            {
                "instance_id": name,
                **{key: row[key] for key in ("unit_id", "review_id", "cited_ref_id", "paper_id")},
                **{key: row[key] for key in ("hypothesis", "summary", "aspects", "aspect_labels")},
                "aspect_covered": [bool(s) for s in sentences],
                "n_aspects": len(sentences),
                "covered_aspects": covered,
                "pool_size": len(pool.texts),
                "optimal": at_optimal["optimal"],
                "at_10_covered": len(instance["evidence_retrieval_at_10_evaluation"]["covered_aspects"]),
                "results_optimal": None if results_optimal is None else results_optimal["optimal"],
                "results_at_5_covered": None
                if results_at_5 is None
                else len(results_at_5["covered_aspects"]),
                "instance": json.dumps(instance, ensure_ascii=False),
            }
        )
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


SPEC: StageSpec[SelectConfig] = StageSpec(
    name="select",
    version=1,
    config_type=SelectConfig,
    upstream=("label", "papers"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    inputs=inputs,
    source=_labelled,
    process=process,
    resources=CPU,
    description="The 70 % coverage rule, then the exact optimal and @K evidence sets (ILP).",
)
