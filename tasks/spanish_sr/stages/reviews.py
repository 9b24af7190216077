"""Stage ``reviews``: systematic-review query sets checked against the cleaned corpus (issue 17 "Evaluation sets", paper 004 §4.1).

Input: the review set files of ``files`` (YAML or JSONL, format and errors:
:mod:`tasks.spanish_sr.review_sets`; paths relative to the config, folders and globs
allowed), their digests in the fingerprint (a file changed since planning is refused, not
read). A file that breaks the format stops the run with a one-line error naming the file and
the review.

Units: the judgements, one per ``(review_id, record_id)`` listed under ``included``.
Kept: ``review_id``, ``record_id``, ``relevance`` (1), ``source`` (the file). Excluded:
``unknown_record`` — an included id that is not a record of the ``clean`` artifact (absent
from the export, or excluded by ``ingest``/``clean``); with ``on_unknown_record: error`` it
is a one-line error instead. A review left without any known record is named in the detail,
and its queries are not evaluated. Side tables: ``queries``
(:data:`tasks.spanish_sr.review_sets.QUERY_SCHEMA`: the research question and each expert
query of every review that kept a record) and ``reviews`` (one row per review: file, title,
language, question, included ids listed and known).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa

from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, rows_to_table
from tasks.common.text.discovery import discover, read_input
from tasks.common.text.document import InputRejected
from tasks.spanish_sr.review_sets import (
    EXCLUDED_SCHEMA,
    QUERY_SCHEMA,
    ReviewSetError,
    ReviewSetsConfig,
    check_records,
    load_review_sets,
    queries_table,
)

_S, _I = pa.string(), pa.int32()
SUFFIXES = (".yaml", ".yml", ".jsonl")
MAX_BYTES = 100_000_000
SCHEMA = pa.schema(
    [
        pa.field("review_id", _S, nullable=False),
        pa.field("record_id", _S, nullable=False),
        pa.field("relevance", _I, nullable=False),
        pa.field("source", _S, nullable=False),
    ]
)
REVIEWS_SCHEMA = pa.schema(
    [
        pa.field("review_id", _S, nullable=False),
        pa.field("source", _S, nullable=False),
        pa.field("title", _S),
        pa.field("language", _S, nullable=False),
        pa.field("question", _S, nullable=False),
        pa.field("included", _I, nullable=False),
        pa.field("included_known", _I, nullable=False),
    ]
)


class ReviewsConfig(ReviewSetsConfig):
    """``files`` (review set files, folders or globs, relative to the config) and ``on_unknown_record``."""


def inputs(ctx: StageContext[ReviewsConfig]) -> dict[str, Any]:
    found = discover(tuple(ctx.config.files), SUFFIXES, ctx.base_dir, "stages.reviews.files")
    return {"files": sorted(found.items())}


def _sets(ctx: StageContext[ReviewsConfig], files: list[list[str]]) -> tuple[Any, ...]:
    data = []
    for name, digest in files:
        try:
            data.append(read_input(ctx.base_dir / name, digest, MAX_BYTES))
        except InputRejected as err:
            raise ReviewSetError(f"{name}: cannot read review set: {err.reason}: {err.detail}") from None
    loaded = load_review_sets([ctx.base_dir / name for name, _ in files], data)
    return tuple(replace(s, source=name) for s, (name, _) in zip(loaded, files, strict=True))


def source(ctx: StageContext[ReviewsConfig], material: dict[str, Any]) -> TableSource:
    rows = [
        {"review_id": review.id, "record_id": rid, "relevance": 1, "source": review_set.source}
        for review_set in _sets(ctx, material["files"])
        for review in review_set.reviews
        for rid in review.included
    ]
    return TableSource(rows_to_table(rows, SCHEMA))


def process(chunk: pa.Table, ctx: StageContext[ReviewsConfig]) -> ChunkResult:
    sets = _sets(ctx, inputs(ctx)["files"])
    corpus = set(ctx.upstream["clean"].read(columns=["record_id"]).column("record_id").to_pylist())
    checked = check_records(sets, corpus, ctx.config.on_unknown_record)
    known = {(r.id, rid) for s in checked.sets for r in s.reviews for rid in r.included}
    kept = chunk.filter(
        pa.array(
            [
                (r, d) in known
                for r, d in zip(chunk["review_id"].to_pylist(), chunk["record_id"].to_pylist(), strict=True)
            ]
        )
    )
    dropped = {r["review_id"] for r in checked.excluded.to_pylist() if r["reason"] == "no_known_record"}
    excluded = [
        r | ({"detail": r["detail"] + "; the review has no known record left: its queries are not evaluated"}
             if r["review_id"] in dropped else {})
        for r in checked.excluded.to_pylist()
        if r["reason"] == "unknown_record"
    ]  # fmt: skip
    reviews = [
        {"review_id": review.id, "source": review_set.source, "title": review.title, "language": review.language,
         "question": review.question, "included": len(review.included),
         "included_known": sum((review.id, rid) in known for rid in review.included)}
        for review_set in sets
        for review in review_set.reviews
    ]  # fmt: skip
    return ChunkResult(
        kept,
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={"queries": queries_table(checked.sets), "reviews": rows_to_table(reviews, REVIEWS_SCHEMA)},
    )


SPEC: StageSpec[ReviewsConfig] = StageSpec(
    name="reviews",
    version=1,
    config_type=ReviewsConfig,
    upstream=("clean",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("review_id", "record_id"),
    inputs=inputs,
    source=source,
    process=process,
    whole_input=True,
    tables={"queries": QUERY_SCHEMA, "reviews": REVIEWS_SCHEMA},
    description="Review query sets (research question + expert queries, included records) checked against the corpus.",
)
