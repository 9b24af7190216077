"""Stage ``corpus``: the per-domain passage collections (CURE §2.3, Table 5).

A domain's corpus is every passage of every article that is in-domain for it, plus the
annotated relevant passages. An article is *claimed* by a domain when

- a relevant passage of one of the domain's queries comes from it (rank 0: the
  annotator's own judgement is the strongest claim), or
- one of the top fused passages the ``mine`` stage found for a query of the domain comes
  from it (its fused rank).

An article claimed by several domains goes to exactly one: the domain with the best
(smallest) claim rank; ties go to the domain with more claims on the article, then to
the domain name in alphabetical order. So a passage is in one domain split only, and
every relevant passage is in the split of its query's domain unless another domain's
annotators also marked its article (then the best-ranked claim wins, as for any article).

Input units: the ``filter`` stage's kept passages, plus every annotated relevant passage
(``dedup`` representative) that is not among them: one that matched no corpus passage
enters as a new passage ``ann-<digest of its cluster id>`` of its article, one whose corpus passage the
quality filter dropped comes back under that passage's id; both are flagged by ``origin``
``annotation``.
Output: ``passage_id``, ``article_id``, ``domain``, ``title``, ``text``, ``origin``
(``corpus`` | ``annotation``), ``n_words`` (whitespace tokens). Excluded:
``not_in_domain`` (no domain claims the article). Side tables: ``article_domains`` (the
rule's evidence per article) and ``domain_stats`` (passages, articles, mean passage length
in whitespace tokens — CURE's Table 5 columns).
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa

from irforge.config import StrictModel
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table


class CorpusConfig(StrictModel):
    pass


SCHEMA = pa.schema(
    [
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("text", pa.string(), nullable=False),
        pa.field("origin", pa.string(), nullable=False),
        pa.field("n_words", pa.int32(), nullable=False),
    ]
)
INPUT_SCHEMA = pa.schema(
    [
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("origin", pa.string(), nullable=False),
    ]
)
ARTICLE_DOMAINS_SCHEMA = pa.schema(
    [
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("best_rank", pa.int32(), nullable=False),
        pa.field("claims", pa.int32(), nullable=False),
        pa.field("claimed_by", pa.list_(pa.string()), nullable=False),
    ]
)
DOMAIN_STATS_SCHEMA = pa.schema(
    [
        pa.field("domain", pa.string(), nullable=False),
        pa.field("passages", pa.int64(), nullable=False),
        pa.field("articles", pa.int64(), nullable=False),
        pa.field("mean_words", pa.float64(), nullable=False),
        pa.field("annotated_passages", pa.int64(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("passage_id", pa.string(), nullable=False), pa.field("article_id", pa.string())
)
UNKNOWN_ARTICLE = "unknown-article"


def annotation_passage_id(cluster_id: str, corpus_passage_id: str | None) -> str:
    """The corpus id of an annotated passage: the corpus passage it matched, else ``ann-<digest>``.

    A cluster id is a record key (``<export file>:<row>``): a path has no place in a
    released id, so the new passage is named by a short digest of it.
    """
    if corpus_passage_id is not None:
        return corpus_passage_id
    return "ann-" + hashlib.blake2b(cluster_id.encode("utf-8"), digest_size=6).hexdigest()


def _source(ctx: StageContext[CorpusConfig], _inputs: dict[str, Any]) -> TableSource:
    passages = ctx.upstream["filter"].read(columns=["passage_id", "article_id", "text"])
    rows = [{**r, "origin": "corpus"} for r in passages.to_pylist()]
    ids = {r["passage_id"] for r in rows}
    for r in ctx.upstream["dedup"].read().to_pylist():
        # A relevant passage must be in the corpus even when it matched no kept passage:
        # none at all (a new passage), or one the quality filter dropped (kept under its id).
        passage_id = annotation_passage_id(r["cluster_id"], r["canonical_corpus_passage_id"])
        if passage_id not in ids:
            ids.add(passage_id)
            rows.append(
                {
                    "passage_id": passage_id,
                    "article_id": r["article_id"] or UNKNOWN_ARTICLE,
                    "text": r["canonical_passage"],
                    "origin": "annotation",
                }
            )
    return TableSource(rows_to_table(rows, INPUT_SCHEMA))


def assign_domains(claims: list[tuple[str, str, int]]) -> dict[str, tuple[str, int, int, list[str]]]:
    """Article → (domain, best rank, claims, claiming domains) from (article, domain, rank) claims.

    The rule of the module docstring: best rank, then more claims, then domain name.
    """
    best: dict[tuple[str, str], int] = {}
    count: Counter[tuple[str, str]] = Counter()
    for article, domain, rank in claims:
        key = (article, domain)
        best[key] = min(rank, best.get(key, rank))
        count[key] += 1
    by_article: dict[str, list[str]] = defaultdict(list)
    for article, domain in best:
        by_article[article].append(domain)
    out = {}
    for article, domains in by_article.items():
        winner = min(domains, key=lambda d: (best[(article, d)], -count[(article, d)], d))
        out[article] = (winner, best[(article, winner)], count[(article, winner)], sorted(domains))
    return out


def process(chunk: pa.Table, ctx: StageContext[CorpusConfig]) -> ChunkResult:
    domain_of_query = {
        q["query_id"]: q["domain"]
        for q in ctx.upstream["annotations"].read(table="queries", columns=["query_id", "domain"]).to_pylist()
    }
    claims: list[tuple[str, str, int]] = []
    for r in ctx.upstream["dedup"].read(columns=["query_id", "article_id"]).to_pylist():
        if r["query_id"] in domain_of_query:
            claims.append((r["article_id"] or UNKNOWN_ARTICLE, domain_of_query[r["query_id"]], 0))
    mined = ctx.upstream["mine"].read(columns=["domain", "article_id", "fused_rank"])
    claims.extend(
        zip(
            mined.column("article_id").to_pylist(),
            mined.column("domain").to_pylist(),
            mined.column("fused_rank").to_pylist(),
            strict=True,
        )
    )
    assigned = assign_domains(claims)
    titles = {
        r["article_id"]: r["title"]
        for r in ctx.upstream["ingest"].read(columns=["article_id", "title"]).to_pylist()
    }
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for r in chunk.to_pylist():
        claim = assigned.get(r["article_id"])
        if claim is None:
            excluded.append(
                {
                    "reason": "not_in_domain",
                    "detail": "no query's relevant passage or top fused passages come from this article",
                    "passage_id": r["passage_id"],
                    "article_id": r["article_id"],
                }
            )
            continue
        kept.append(
            {
                **r,
                "domain": claim[0],
                "title": titles.get(r["article_id"]),
                "n_words": len(r["text"].split()),
            }
        )
    kept.sort(key=lambda r: (r["domain"], r["passage_id"]))
    article_rows = [
        {"article_id": a, "domain": d, "best_rank": rank, "claims": n, "claimed_by": by}
        for a, (d, rank, n, by) in sorted(assigned.items())
    ]
    per_domain: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in kept:
        per_domain[r["domain"]].append(r)
    stats = [
        {
            "domain": d,
            "passages": len(rows),
            "articles": len({r["article_id"] for r in rows}),
            "mean_words": sum(r["n_words"] for r in rows) / len(rows),
            "annotated_passages": sum(r["origin"] == "annotation" for r in rows),
        }
        for d, rows in sorted(per_domain.items())
    ]
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        {
            "article_domains": rows_to_table(article_rows, ARTICLE_DOMAINS_SCHEMA),
            "domain_stats": rows_to_table(stats, DOMAIN_STATS_SCHEMA),
        },
    )


SPEC: StageSpec[CorpusConfig] = StageSpec(
    name="corpus",
    version=1,
    config_type=CorpusConfig,
    upstream=("mine", "filter", "dedup", "ingest", "annotations"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("passage_id",),
    source=_source,
    process=process,
    tables={"article_domains": ARTICLE_DOMAINS_SCHEMA, "domain_stats": DOMAIN_STATS_SCHEMA},
    whole_input=True,
    description="Per-domain corpus: every passage of in-domain articles plus annotated passages.",
)
