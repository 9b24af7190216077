"""Stage ``dedup``: merge hand-typed variants of one passage, find passages inside others.

CURE §2.1: annotators typed relevant passages by hand, so one passage can appear in
several slightly different forms (typos, spacing, case, a truncated end), and a passage
relevant to one query can be embedded in a longer passage relevant to another.

- **Variants**: passages whose normalised Levenshtein similarity (1 − distance / longer
  length, on NFKC + case-folded + whitespace-collapsed text) is at least ``threshold``
  are linked; linked passages form a cluster (transitively). The longest member (ties:
  the first record) represents the cluster and replaces the others in every qrel.
- **Containment**: when a cluster's passage contains another cluster's passage (exactly,
  or aligned with similarity ≥ ``containment_threshold``), the containing passage is
  partially relevant (1) for the contained passage's queries — unless it is already
  relevant (2) to that query.

Candidate pairs come from sub-quadratic blocking (:mod:`tasks.common.text.variants`), which
provably finds every pair above the threshold (the exhaustive comparison is its test
oracle and benchmark peer).

Output rows (one per annotation record): ``record_key``, ``query_id``, ``passage``,
``cluster_id`` (the representative's record key), ``canonical_passage``,
``canonical_corpus_passage_id``, ``similarity`` (to the representative), ``relevance`` (2).
Side tables: ``clusters`` (members, lengths, similarity range — the evidence for each
merge) and ``containment`` (outer cluster, inner cluster, the inner's query, score,
relevance 1). Nothing is excluded here.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
from pydantic import Field
from rapidfuzz.distance import Levenshtein

from irforge.config import StrictModel
from irforge.stage import (
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
    upstream_source,
)


class DedupConfig(StrictModel):
    threshold: float = Field(
        0.9, gt=0, le=1, description="Normalised Levenshtein similarity of two variants."
    )
    containment_threshold: float = Field(
        0.95, gt=0, le=1, description="Alignment score of a contained passage."
    )
    max_length_ratio: float = Field(
        0.9, gt=0, lt=1, description="A contained passage is at most this share of the longer one's length."
    )
    min_inner_chars: int = Field(20, ge=1, description="Shorter passages are never looked for inside others.")


SCHEMA = pa.schema(
    [
        pa.field("record_key", pa.string(), nullable=False),
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("passage", pa.string(), nullable=False),
        pa.field("cluster_id", pa.string(), nullable=False),
        pa.field("canonical_passage", pa.string(), nullable=False),
        pa.field("canonical_corpus_passage_id", pa.string()),
        pa.field("article_id", pa.string()),
        pa.field("similarity", pa.float64(), nullable=False),
        pa.field("relevance", pa.int8(), nullable=False),
    ]
)
CLUSTERS_SCHEMA = pa.schema(
    [
        pa.field("cluster_id", pa.string(), nullable=False),
        pa.field("members", pa.list_(pa.string()), nullable=False),
        pa.field("lengths", pa.list_(pa.int32()), nullable=False),
        pa.field("min_similarity", pa.float64(), nullable=False),
        pa.field("queries", pa.list_(pa.string()), nullable=False),
    ]
)
CONTAINMENT_SCHEMA = pa.schema(
    [
        pa.field("outer_cluster_id", pa.string(), nullable=False),
        pa.field("inner_cluster_id", pa.string(), nullable=False),
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("relevance", pa.int8(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("record_key", pa.string(), nullable=False))


def process(chunk: pa.Table, ctx: StageContext[DedupConfig]) -> ChunkResult:
    # numba's kernels (a quarter second to import): only a run that reaches dedup pays for them.
    from tasks.common.text.variants import clusters, normalise, representative, similar_pairs  # noqa: PLC0415

    config = ctx.config
    records = chunk.to_pylist()
    texts = [r["passage"] for r in records]
    labels = clusters(len(texts), similar_pairs(texts, config.threshold))
    members: dict[int, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        members[label].append(i)
    canon = {label: representative(group, texts) for label, group in members.items()}
    cluster_id = {label: records[canon[label]]["record_key"] for label in members}

    kept: list[dict[str, Any]] = []
    for i, r in enumerate(records):
        rep = records[canon[labels[i]]]
        linked = rep["corpus_passage_id"] or next(
            (records[j]["corpus_passage_id"] for j in members[labels[i]] if records[j]["corpus_passage_id"]),
            None,
        )
        kept.append(
            {
                "record_key": r["record_key"],
                "query_id": r["query_id"],
                "passage": r["passage"],
                "cluster_id": cluster_id[labels[i]],
                "canonical_passage": rep["passage"],
                "canonical_corpus_passage_id": linked,
                "article_id": rep["article_id"],
                "similarity": Levenshtein.normalized_similarity(
                    normalise(r["passage"]), normalise(rep["passage"])
                ),
                "relevance": 2,
            }
        )
    cluster_rows = []
    for label, group in sorted(members.items(), key=lambda kv: cluster_id[kv[0]]):
        rep_text = normalise(texts[canon[label]])
        sims = [Levenshtein.normalized_similarity(normalise(texts[j]), rep_text) for j in group]
        cluster_rows.append(
            {
                "cluster_id": cluster_id[label],
                "members": [records[j]["record_key"] for j in group],
                "lengths": [len(texts[j]) for j in group],
                "min_similarity": min(sims),
                "queries": sorted({records[j]["query_id"] for j in group}),
            }
        )
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        EXCLUDED_SCHEMA.empty_table(),
        {
            "clusters": rows_to_table(cluster_rows, CLUSTERS_SCHEMA),
            "containment": _containment(records, labels, canon, cluster_id, config),
        },
    )


def _containment(
    records: list[dict[str, Any]],
    labels: list[int],
    canon: dict[int, int],
    cluster_id: dict[int, str],
    config: DedupConfig,
) -> pa.Table:
    """Partial relevance: a representative inside another cluster's representative."""
    from tasks.common.text.variants import containments  # noqa: PLC0415

    reps = sorted(canon.items(), key=lambda kv: kv[1])  # (label, record index), in record order
    texts = [records[i]["passage"] for _, i in reps]
    queries_of: dict[int, set[str]] = defaultdict(set)
    for i, label in enumerate(labels):
        queries_of[label].add(records[i]["query_id"])
    rows = []
    found = containments(
        texts,
        config.containment_threshold,
        max_length_ratio=config.max_length_ratio,
        min_inner_chars=config.min_inner_chars,
    )
    for c in found:
        outer_label, inner_label = reps[c.outer][0], reps[c.inner][0]
        for query in sorted(queries_of[inner_label] - queries_of[outer_label]):  # human relevance (2) wins
            rows.append(
                {
                    "outer_cluster_id": cluster_id[outer_label],
                    "inner_cluster_id": cluster_id[inner_label],
                    "query_id": query,
                    "score": c.score,
                    "relevance": 1,
                }
            )
    return rows_to_table(rows, CONTAINMENT_SCHEMA)


SPEC: StageSpec[DedupConfig] = StageSpec(
    name="dedup",
    version=1,
    config_type=DedupConfig,
    upstream=("annotations",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("record_key",),
    source=upstream_source("annotations"),
    process=process,
    tables={"clusters": CLUSTERS_SCHEMA, "containment": CONTAINMENT_SCHEMA},
    whole_input=True,
    description="Levenshtein variant clusters (longest represents) and containment → partial relevance.",
)
