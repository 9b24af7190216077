"""Stage ``claims``: one query per story, its cited abstracts as the relevant documents (contract §6).

Paper 003 §2: the dataset is tuples (headline, {abstracts of the cited studies}); an
abstract cited by several articles is one document (5,034 headlines, 4,566 abstracts).

Syndicated copies of one story (the same wire text on several sites) would be near-identical
queries with the same answer. They are clustered with the shared Levenshtein variant
search (:mod:`tasks.common.text.variants`, normalised similarity ≥ ``threshold``) and kept
once. Two headlines are linked only when they also cite at least one common PMID
(``require_shared_pmid``): short generic headlines ("New study links coffee to longer
life") can be near-identical for different studies, and merging those would throw away a
query whose answer is another abstract; a syndicated copy cites the same study, so the
shared PMID costs nothing. Identical PMID lists are not required: a copy may drop or add
a companion-paper link. Links are transitive (union-find). The representative is the
earliest published member (undated last), then the smallest ``page_id``; it keeps its own
PMIDs, the others are excluded ``duplicate_headline``.

Side tables: ``corpus`` (one row per PMID cited by a kept query, from resolve's
``records``, :mod:`tasks.crossgenre.corpus`) and ``qrels`` (relevance 1 per cited PMID).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
from pydantic import Field
from rapidfuzz.distance import Levenshtein

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.stage import (
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
    upstream_source,
)
from tasks.common.text.variants import clusters, normalise, similar_pairs
from tasks.crossgenre.corpus import CORPUS_SCHEMA, STRINGS, corpus_row_of_record_row, required


class ClaimsConfig(StrictModel):
    threshold: float = Field(
        0.9, gt=0, le=1, description="Normalised Levenshtein similarity of two syndicated headlines."
    )
    require_shared_pmid: bool = Field(
        True, description="Link near-identical headlines only when they cite a common PMID."
    )


SCHEMA = pa.schema(
    [
        required("query_id"),
        required("page_id"),
        required("headline"),
        required("url"),
        required("site"),
        pa.field("published", pa.string()),
        required("pmids", STRINGS),
        required("cluster_id"),
        required("cluster_size", pa.int32()),
    ]
)
QRELS_SCHEMA = pa.schema(
    [
        required("query_id"),
        required("doc_id"),
        required("relevance", pa.int32()),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    required("page_id"),
    required("url"),
    required("cluster_id"),
)


def syndication_clusters(pages: list[dict[str, Any]], config: ClaimsConfig) -> list[list[int]]:
    """Clusters of page indexes (each sorted: representative first), clusters in input order."""
    headlines = [p["headline"] for p in pages]
    pairs = [
        p
        for p in similar_pairs(headlines, config.threshold)
        if not config.require_shared_pmid or set(pages[p.a]["pmids"]) & set(pages[p.b]["pmids"])
    ]
    members: dict[int, list[int]] = defaultdict(list)
    for i, label in enumerate(clusters(len(pages), pairs)):
        members[label].append(i)

    def rank(i: int) -> tuple[bool, str, str]:
        published = pages[i]["published"]
        return published is None, published or "", pages[i]["page_id"]

    return [sorted(group, key=rank) for _, group in sorted(members.items())]


def _corpus(ctx: StageContext[ClaimsConfig], cited: set[str]) -> pa.Table:
    """One corpus row per cited PMID, sorted (resolve's records may repeat a PMID across chunks)."""
    records = ctx.upstream["resolve"].read(table="records").to_pylist()
    by_pmid = {r["pmid"]: r for r in records if r["pmid"] in cited}
    missing = sorted(cited - set(by_pmid))
    if missing:
        raise IrforgeError(f"claims: resolve's records table lacks cited PMID(s) {', '.join(missing[:5])}")
    rows = [corpus_row_of_record_row(by_pmid[p]) for p in sorted(by_pmid)]
    return rows_to_table(rows, CORPUS_SCHEMA)


def process(chunk: pa.Table, ctx: StageContext[ClaimsConfig]) -> ChunkResult:
    pages = chunk.to_pylist()
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for group in syndication_clusters(pages, ctx.config):
        rep = pages[group[0]]
        cluster_id = rep["page_id"]
        kept.append(
            {
                **{k: rep[k] for k in ("page_id", "headline", "url", "site", "published")},
                "query_id": rep["page_id"],
                "pmids": sorted(set(rep["pmids"])),
                "cluster_id": cluster_id,
                "cluster_size": len(group),
            }
        )
        for i in group[1:]:
            similarity = Levenshtein.normalized_similarity(
                normalise(pages[i]["headline"]), normalise(rep["headline"])
            )
            excluded.append(
                {
                    "reason": "duplicate_headline",
                    "detail": f"representative {cluster_id}, similarity {similarity:.3f}",
                    "page_id": pages[i]["page_id"],
                    "url": pages[i]["url"],
                    "cluster_id": cluster_id,
                }
            )
    kept.sort(key=lambda r: r["query_id"])
    qrels = [{"query_id": r["query_id"], "doc_id": p, "relevance": 1} for r in kept for p in r["pmids"]]
    cited = {p for r in kept for p in r["pmids"]}
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        {"corpus": _corpus(ctx, cited), "qrels": rows_to_table(qrels, QRELS_SCHEMA)},
    )


SPEC: StageSpec[ClaimsConfig] = StageSpec(
    name="claims",
    version=1,
    config_type=ClaimsConfig,
    upstream=("resolve",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("page_id",),
    source=upstream_source("resolve"),
    process=process,
    tables={"corpus": CORPUS_SCHEMA, "qrels": QRELS_SCHEMA},
    whole_input=True,
    description="One query per story (syndicated copies merged), its cited abstracts as corpus and qrels.",
)
