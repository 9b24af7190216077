"""Systematic-review query sets: the evaluation sets of the ``spanish_sr`` flow (issue 17,
"Evaluation sets"; paper 004 §4.1: per review, queries from the research question and the
expert's outcome terms, the included records as relevant).

A review set is a YAML file (``.yaml`` / ``.yml``)::

    corpus: what the record ids name (free text, optional)
    reviews:
      - id: hp-erradicacion          # letters, digits, ".", "_", "-"; unique across files
        language: es                 # ISO 639-1, lower case
        title: optional review title
        question: "¿...?"            # the research question: one query
        expert_queries:              # one or more expert search strings, as typed
          - "helicobacter Y erradicacion"
        included: [S0120-99572013000200003, ...]   # record ids judged relevant

or a JSONL file (``.jsonl``) holding one such review object per line. Examples:
``data/spanish_sr/reviews/``.

Each review gives the queries ``<id>/question`` and ``<id>/expert-<n>`` (n from 1, in file
order); every query of a review has the review's included records as relevant (label 1).
A file that cannot be read or parsed, a review that breaks the format (empty query list,
blank string, repeated record id) and a review id used twice are one-line
:class:`ReviewSetError` s naming the file and the review. :func:`check_records` compares the
included ids with a corpus' ids: an unknown id is an excluded row (``unknown_record``) or,
with ``on_unknown="error"``, a one-line error; it is never dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

import pyarrow as pa
import yaml
from pydantic import Field, ValidationError, field_validator

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.stage import exclusion_schema, rows_to_table

YAML_SUFFIXES: Final = (".yaml", ".yml")
JSONL_SUFFIXES: Final = (".jsonl",)

QUERY_SCHEMA: Final = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("review_id", pa.string(), nullable=False),
        pa.field("language", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # question | expert
        pa.field("text", pa.string(), nullable=False),
    ]
)
QRELS_SCHEMA: Final = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("relevance", pa.int32(), nullable=False),
    ]
)
EXCLUDED_SCHEMA: Final = exclusion_schema(
    pa.field("source", pa.string(), nullable=False),
    pa.field("review_id", pa.string(), nullable=False),
    pa.field("record_id", pa.string()),  # null on the row of a review left without any record
)
"""``unknown_record``: an included id absent from the corpus; ``no_known_record``: a review
whose included ids are all unknown, dropped with its queries (record_id null)."""


class ReviewSetError(IrforgeError):
    """A review set file that does not follow the format; the message names file and review."""


class Review(StrictModel):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="Unique review id.")
    language: str = Field(pattern=r"^[a-z]{2}$", description="ISO 639-1 code of the queries.")
    title: str | None = Field(None, description="The review's title (documentation only).")
    question: str = Field(description="The research question, used as one query.")
    expert_queries: list[str] = Field(min_length=1, description="Expert search strings, as typed.")
    included: list[str] = Field(min_length=1, description="Ids of the records the review included.")

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is blank")
        return value.strip()

    @field_validator("expert_queries", "included")
    @classmethod
    def _strings(cls, values: list[str]) -> list[str]:
        cleaned = [v.strip() for v in values]
        for i, value in enumerate(cleaned):
            if not value:
                raise ValueError(f"entry {i} is blank")
            if value in cleaned[:i]:
                raise ValueError(f"entry {i} {value!r} is given twice")
        return cleaned


class ReviewSetsConfig(StrictModel):
    """The review sets a stage evaluates on (for ``evaluate``'s config)."""

    files: list[str] = Field(
        min_length=1, description="Review set files (.yaml/.jsonl), relative to the config."
    )
    on_unknown_record: Literal["exclude", "error"] = Field(
        "exclude", description="An included id missing from the corpus: excluded row, or error."
    )


@dataclass(frozen=True)
class ReviewSet:
    source: str  # the file, as given to the loader
    reviews: tuple[Review, ...]
    corpus: str | None = None


def load_review_set(path: Path, data: bytes | None = None) -> ReviewSet:
    """Reviews of one YAML or JSONL file (module doc), checked; ``data``: its bytes, already read."""
    try:
        text = (path.read_bytes() if data is None else data).decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ReviewSetError(f"{path}: cannot read review set: {_one_line(err)}") from None
    suffix = path.suffix.lower()
    if suffix in YAML_SUFFIXES:
        corpus, raw = _yaml_reviews(path, text)
    elif suffix in JSONL_SUFFIXES:
        corpus, raw = None, _jsonl_reviews(path, text)
    else:
        raise ReviewSetError(f"{path}: unknown review set format (use {YAML_SUFFIXES + JSONL_SUFFIXES})")
    reviews: list[Review] = []
    seen: dict[str, str] = {}
    for where, entry in raw:
        review = _review(path, where, entry)
        if review.id in seen:
            raise ReviewSetError(
                f"{path}: {where}: review id {review.id!r} is used twice (first at {seen[review.id]})"
            )
        seen[review.id] = where
        reviews.append(review)
    if not reviews:
        raise ReviewSetError(f"{path}: no review in the file")
    return ReviewSet(str(path), tuple(reviews), corpus)


def load_review_sets(paths: Sequence[Path], data: Sequence[bytes] | None = None) -> tuple[ReviewSet, ...]:
    """Several files (``data``: their bytes, already read); a review id may appear in only one of them."""
    sets = tuple(load_review_set(p, None if data is None else data[i]) for i, p in enumerate(paths))
    owner: dict[str, str] = {}
    for review_set in sets:
        for review in review_set.reviews:
            if review.id in owner:
                raise ReviewSetError(
                    f"{review_set.source}: review {review.id!r} is also defined in {owner[review.id]}"
                )
            owner[review.id] = review_set.source
    return sets


def _yaml_reviews(path: Path, text: str) -> tuple[str | None, list[tuple[str, Any]]]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ReviewSetError(f"{path}: not valid YAML: {_one_line(err)}") from None
    if not isinstance(data, dict):
        raise ReviewSetError(
            f"{path}: the top level must be a mapping with 'reviews', got {type(data).__name__}"
        )
    unknown = sorted(set(data) - {"corpus", "reviews"})
    if unknown:
        raise ReviewSetError(f"{path}: unknown top-level key(s) {unknown} (allowed: corpus, reviews)")
    reviews, corpus = data.get("reviews"), data.get("corpus")
    if not isinstance(reviews, list):
        raise ReviewSetError(f"{path}: 'reviews' must be a list of reviews")
    if corpus is not None and not isinstance(corpus, str):
        raise ReviewSetError(f"{path}: 'corpus' must be a string")
    return corpus, [(f"reviews[{i}]", r) for i, r in enumerate(reviews)]


def _jsonl_reviews(path: Path, text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as err:
            raise ReviewSetError(f"{path}: line {number}: not valid JSON: {err.msg}") from None
    return out


def _review(path: Path, where: str, data: Any) -> Review:
    if not isinstance(data, dict):
        raise ReviewSetError(f"{path}: {where}: a review must be a mapping, got {type(data).__name__}")
    name = data.get("id")
    label = f"{where} (review {name!r})" if isinstance(name, str) else where
    try:
        return Review.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<review>'}: {e['msg']}" for e in err.errors()
        )
        raise ReviewSetError(f"{path}: {label}: {problems}") from None


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())


def query_id(review: Review, kind: Literal["question", "expert"], number: int = 0) -> str:
    return f"{review.id}/question" if kind == "question" else f"{review.id}/expert-{number}"


def queries_table(sets: Sequence[ReviewSet]) -> pa.Table:
    """One :data:`QUERY_SCHEMA` row per query: each review's question, then its expert queries."""
    rows: list[dict[str, Any]] = []
    for review in (r for s in sets for r in s.reviews):
        base = {"review_id": review.id, "language": review.language}
        rows.append(
            {**base, "query_id": query_id(review, "question"), "kind": "question", "text": review.question}
        )
        for n, text in enumerate(review.expert_queries, start=1):
            rows.append({**base, "query_id": query_id(review, "expert", n), "kind": "expert", "text": text})
    return rows_to_table(rows, QUERY_SCHEMA)


def qrels(sets: Sequence[ReviewSet]) -> dict[str, dict[str, int]]:
    """query id -> record id -> 1, for every query of every review (the shared metrics' input)."""
    out: dict[str, dict[str, int]] = {}
    for review in (r for s in sets for r in s.reviews):
        relevant = dict.fromkeys(review.included, 1)
        out[query_id(review, "question")] = dict(relevant)
        for n in range(1, len(review.expert_queries) + 1):
            out[query_id(review, "expert", n)] = dict(relevant)
    return out


def qrels_table(sets: Sequence[ReviewSet]) -> pa.Table:
    rows = [
        {"query_id": qid, "record_id": rid, "relevance": label}
        for qid, docs in qrels(sets).items()
        for rid, label in docs.items()
    ]
    return rows_to_table(rows, QRELS_SCHEMA)


@dataclass(frozen=True)
class RecordCheck:
    sets: tuple[ReviewSet, ...]  # reviews with their known records only; empty reviews dropped
    excluded: pa.Table  # EXCLUDED_SCHEMA


def check_records(
    sets: Sequence[ReviewSet],
    corpus_ids: Collection[str],
    on_unknown: Literal["exclude", "error"] = "exclude",
) -> RecordCheck:
    """Keep the included ids found in ``corpus_ids``; the others become excluded rows (or an error)."""
    known = corpus_ids if isinstance(corpus_ids, set | frozenset) else set(corpus_ids)
    kept_sets: list[ReviewSet] = []
    excluded: list[dict[str, Any]] = []
    for review_set in sets:
        kept: list[Review] = []
        for review in review_set.reviews:
            unknown = [rid for rid in review.included if rid not in known]
            if unknown and on_unknown == "error":
                shown = ", ".join(repr(u) for u in unknown[:3]) + (" ..." if len(unknown) > 3 else "")
                raise ReviewSetError(
                    f"{review_set.source}: review {review.id!r}: "
                    f"{len(unknown)} included id(s) not in the corpus: {shown}"
                )
            for rid in unknown:
                detail = f"{review_set.source}: review {review.id!r} includes {rid!r}, absent from the corpus"
                excluded.append(_excluded("unknown_record", detail, review_set.source, review.id, rid))
            remaining = [rid for rid in review.included if rid in known]
            if remaining:
                kept.append(review if not unknown else review.model_copy(update={"included": remaining}))
            else:
                detail = (
                    f"{review_set.source}: review {review.id!r}: none of its {len(unknown)} included "
                    "id(s) is in the corpus; its queries are dropped"
                )
                excluded.append(_excluded("no_known_record", detail, review_set.source, review.id, None))
        kept_sets.append(replace(review_set, reviews=tuple(kept)))
    return RecordCheck(tuple(kept_sets), rows_to_table(excluded, EXCLUDED_SCHEMA))


def _excluded(reason: str, detail: str, source: str, review_id: str, record_id: str | None) -> dict[str, Any]:
    return {
        "reason": reason,
        "detail": detail,
        "source": source,
        "review_id": review_id,
        "record_id": record_id,
    }


__all__ = [
    "EXCLUDED_SCHEMA",
    "QRELS_SCHEMA",
    "QUERY_SCHEMA",
    "RecordCheck",
    "Review",
    "ReviewSet",
    "ReviewSetError",
    "ReviewSetsConfig",
    "check_records",
    "load_review_set",
    "load_review_sets",
    "qrels",
    "qrels_table",
    "queries_table",
    "query_id",
]
