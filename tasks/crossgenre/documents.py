"""The searched corpus of the later crossgenre stages: claims' cited abstracts ∪ distractors.

Contract §8: the corpus searched is claims' ``corpus`` side table together with the
``distractors`` rows, one row per ``doc_id`` (both in :data:`tasks.crossgenre.corpus.CORPUS_SCHEMA`).
A doc id in both (which the distractors stage rules out, excluding cited abstracts) is taken
from claims. Reads ask Parquet for the wanted ids only (``filters``), so a chunk of queries
does not load 200,000 abstracts.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from irforge.artifacts import Artifact


def read_documents(
    claims: Artifact, distractors: Artifact, columns: list[str], ids: Iterable[str] | None = None
) -> pa.Table:
    """``doc_id`` + ``columns`` of the corpus (the ``ids`` given, or all), sorted by doc_id."""
    wanted = None if ids is None else sorted(set(ids))
    if wanted is not None and not wanted:
        return _empty(claims, columns)
    filters = None if wanted is None else [("doc_id", "in", wanted)]
    names = ["doc_id", *[c for c in columns if c != "doc_id"]]
    cited = claims.read(columns=names, table="corpus", filters=filters)
    negatives = distractors.read(columns=names, filters=filters)
    negatives = negatives.filter(pc.invert(pc.is_in(negatives.column("doc_id"), cited.column("doc_id"))))
    both = pa.concat_tables([cited, negatives.cast(cited.schema)])
    return both.sort_by("doc_id")


def _empty(claims: Artifact, columns: list[str]) -> pa.Table:
    schema = claims.schema(table="corpus")
    return pa.schema(
        [schema.field("doc_id"), *[schema.field(c) for c in columns if c != "doc_id"]]
    ).empty_table()


def headlines(claims: Artifact, query_ids: Iterable[str] | None = None) -> dict[str, str]:
    """Query id → headline (claims' kept rows; every query or the ids given)."""
    wanted = None if query_ids is None else sorted(set(query_ids))
    filters = None if wanted is None else [("query_id", "in", wanted)]
    if wanted is not None and not wanted:
        return {}
    rows = claims.read(columns=["query_id", "headline"], filters=filters)
    return dict(zip(rows.column("query_id").to_pylist(), rows.column("headline").to_pylist(), strict=True))


def qrels(claims: Artifact, query_ids: Iterable[str] | None = None) -> dict[str, list[str]]:
    """Query id → its cited doc ids, sorted (claims' ``qrels`` side table)."""
    wanted = None if query_ids is None else sorted(set(query_ids))
    if wanted is not None and not wanted:
        return {}
    filters = None if wanted is None else [("query_id", "in", wanted)]
    rows = claims.read(columns=["query_id", "doc_id"], table="qrels", filters=filters)
    out: dict[str, list[str]] = {}
    for qid, doc in zip(rows.column("query_id").to_pylist(), rows.column("doc_id").to_pylist(), strict=True):
        out.setdefault(qid, []).append(doc)
    return {q: sorted(set(docs)) for q, docs in out.items()}
