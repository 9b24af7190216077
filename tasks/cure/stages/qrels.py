"""Stage ``qrels``: one relevance grade per (query, passage), with where it came from (CURE §2.1, §2.3).

Three sources of labels:

- ``human`` (2): an annotator's validated relevant passage, as its variant cluster's
  representative (``dedup``) under its corpus id;
- ``containment`` (1): a passage that contains another query's relevant passage
  (``dedup``'s containment table);
- ``llm`` (0 / 1 / 2): the ``judge`` stage's grade of a pooled pair, with its
  explanation, model and prompt digest.

Conflict rule (documented in the release card): a pair keeps the label of the most
trusted source — ``human`` over ``containment`` over ``llm`` — whatever the grades. The
labels that lose are not dropped silently: they are excluded as ``superseded`` with the
winning source and both grades in ``detail``, so the LLM's agreement with the humans can
be read off this stage's exclusions too.

A label whose passage is not in its query's domain split (the corpus stage gave the
article to another domain) cannot be judged in that split: it is excluded as
``passage_outside_split``.

Units: labels (source, query, passage). Output: ``query_id``, ``passage_id``, ``domain``,
``score``, ``source``, ``explanation``, ``model``, ``prompt_sha256`` (the last three only
for ``llm``), ``llm_score`` (the LLM's grade of the pair when it was judged, also under a
human label).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from irforge.config import StrictModel
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.cure.stages.corpus import annotation_passage_id

SOURCES = ("human", "containment", "llm")
"""Most trusted first: a pair keeps the label of the first source that has one."""


class QrelsConfig(StrictModel):
    pass


LABEL_FIELDS = [
    pa.field("query_id", pa.string(), nullable=False),
    pa.field("passage_id", pa.string(), nullable=False),
    pa.field("domain", pa.string(), nullable=False),
    pa.field("score", pa.int8(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("explanation", pa.string()),
    pa.field("model", pa.string()),
    pa.field("prompt_sha256", pa.string()),
]
SCHEMA = pa.schema([*LABEL_FIELDS, pa.field("llm_score", pa.int8())])
_LABELS_SCHEMA = pa.schema(LABEL_FIELDS)
EXCLUDED_SCHEMA = exclusion_schema(*LABEL_FIELDS)


def _labels(ctx: StageContext[QrelsConfig], _inputs: dict[str, Any]) -> TableSource:
    domain_of = {
        q["query_id"]: q["domain"]
        for q in ctx.upstream["annotations"].read(table="queries", columns=["query_id", "domain"]).to_pylist()
    }
    dedup = ctx.upstream["dedup"]
    passage_of_cluster: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    for r in dedup.read(
        columns=["query_id", "cluster_id", "canonical_corpus_passage_id", "relevance"]
    ).to_pylist():
        passage_id = annotation_passage_id(r["cluster_id"], r["canonical_corpus_passage_id"])
        passage_of_cluster[r["cluster_id"]] = passage_id
        if r["query_id"] in domain_of:
            rows.append(_label(r["query_id"], passage_id, domain_of[r["query_id"]], r["relevance"], "human"))
    for r in dedup.read(table="containment").to_pylist():
        if r["query_id"] in domain_of:
            outer = passage_of_cluster[r["outer_cluster_id"]]
            rows.append(_label(r["query_id"], outer, domain_of[r["query_id"]], r["relevance"], "containment"))
    for r in (
        ctx.upstream["judge"]
        .read(columns=["query_id", "passage_id", "domain", "score", "explanation", "model", "prompt_sha256"])
        .to_pylist()
    ):
        rows.append({**r, "source": "llm"})
    # One label per (source, query, passage): a human who marked the same passage twice
    # for a query (two variants of one cluster) is one label.
    unique = {(r["source"], r["query_id"], r["passage_id"]): r for r in rows}
    ordered = sorted(
        unique.values(), key=lambda r: (r["query_id"], r["passage_id"], SOURCES.index(r["source"]))
    )
    return TableSource(rows_to_table(ordered, _LABELS_SCHEMA))


def _label(query_id: str, passage_id: str, domain: str, score: int, source: str) -> dict[str, Any]:
    return {
        "query_id": query_id, "passage_id": passage_id, "domain": domain, "score": score, "source": source,
        "explanation": None, "model": None, "prompt_sha256": None,
    }  # fmt: skip


def process(chunk: pa.Table, ctx: StageContext[QrelsConfig]) -> ChunkResult:
    corpus = ctx.upstream["corpus"].read(columns=["passage_id", "domain"])
    split_of = dict(
        zip(corpus.column("passage_id").to_pylist(), corpus.column("domain").to_pylist(), strict=True)
    )
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in chunk.to_pylist():
        by_pair.setdefault((r["query_id"], r["passage_id"]), []).append(r)
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for (_query, passage), labels in sorted(by_pair.items()):
        labels.sort(key=lambda r: SOURCES.index(r["source"]))
        winner = labels[0]
        if split_of.get(passage) != winner["domain"]:
            where = split_of.get(passage)
            detail = f"passage is in split {where!r}" if where else "passage is not in the corpus"
            excluded += [{**r, "reason": "passage_outside_split", "detail": detail} for r in labels]
            continue
        llm = next((r["score"] for r in labels if r["source"] == "llm"), None)
        kept.append({**winner, "llm_score": llm})
        for loser in labels[1:]:
            excluded.append(
                {
                    **loser,
                    "reason": "superseded",
                    "detail": f"{winner['source']} {winner['score']} wins over {loser['source']} {loser['score']}",
                }
            )
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


SPEC: StageSpec[QrelsConfig] = StageSpec(
    name="qrels",
    version=1,
    config_type=QrelsConfig,
    upstream=("judge", "dedup", "annotations", "corpus"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("source", "query_id", "passage_id"),
    source=_labels,
    process=process,
    whole_input=True,
    description="Relevance grades per pair: human 2, containment 1, LLM 0-2; human wins.",
)
