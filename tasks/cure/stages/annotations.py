"""Stage ``annotations`` (module name: ``intake``): expert annotation exports → validated queries and relevant passages.

CURE's annotators (via Argilla) wrote a query in English, French or Spanish, named its
discipline(s) and expertise level, and pasted one relevant passage from an article;
validators accepted or rejected each record (CURE §2.1). Exports in JSON, JSONL, CSV or
Parquet are read through ``fields``, a map from our canonical field to a dotted path in
the source record (``responses.language[0].value`` for an Argilla v2 export), so no
export needs editing by hand.

Every record is validated; an invalid one is excluded with its reason and the file and
row it came from: ``malformed_record``, ``wrong_type`` (a field that is not text: an
object, a list, a number, NaN; ids may be whole numbers), ``conflicting_duplicate`` (one
record id with different content: all its records, as which is right cannot be told),
``missing_query``, ``missing_passage``,
``unknown_language``, ``missing_domain``, ``unknown_domain`` (outside ``domains``),
``unknown_expertise``, ``rejected`` / ``not_validated`` (status; detail carries the
validator's feedback), ``duplicate_record`` (same query and same passage as an earlier
record).

Split rule (a query with several disciplines is placed in exactly one split): the first
discipline the annotator listed, over the query's records in export order.

Output rows (``relevant``, one per validated record): ``record_key`` (``<file>:<row>``),
``record_id`` (the export's own id, if mapped), ``query_id``,
``passage`` (as typed), the article reference as given, ``article_id`` (the corpus article
it names, if ingested), ``corpus_passage_id`` + ``link`` + ``link_score`` (see
:mod:`tasks.common.annotations.linking`; ``unmatched`` passages are kept, flagged, as new
passages of their article), ``source_file``, ``row``.

Side table ``queries`` (one per distinct query: same language and same normalised text):
``query_id``, ``text``, ``language``, ``domain`` (its split), ``domains`` (all listed),
``expertise``, ``annotators``, ``status``, ``n_relevant``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import digest_bytes, digest_file
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.annotations.exports import ExportFormat, export_format, json_default, read_export
from tasks.common.annotations.fields import Invalid as _Invalid
from tasks.common.annotations.fields import conflicts as find_conflicts
from tasks.common.annotations.fields import domains as _domains
from tasks.common.annotations.fields import shown as _shown
from tasks.common.annotations.fields import text as _text
from tasks.common.annotations.linking import ArticleIndex, ArticleRef, link_passage, normalise
from tasks.common.annotations.vocab import domain_key, language_code
from tasks.cure.vocab import CURE_DOMAINS


class FieldMap(StrictModel):
    """Canonical field → dotted path in a source record (``a.b[0].c``); null: not exported."""

    record_id: str | None = "id"
    query: str = "query"
    language: str = "language"
    domains: str = "domains"
    expertise: str | None = "expertise"
    annotator: str | None = "annotator"
    status: str | None = "status"
    feedback: str | None = "feedback"
    passage: str = "passage"
    article_url: str | None = "article_url"
    article_title: str | None = "article_title"
    doi: str | None = "doi"
    pmid: str | None = "pmid"
    pmcid: str | None = "pmcid"


class AnnotationsConfig(StrictModel):
    sources: tuple[str, ...] = Field(min_length=1, description="Export files, relative to the config file.")
    format: ExportFormat = Field("auto", description="auto: from each file's suffix.")
    records_path: str | None = Field(None, description="JSON only: dotted path to the list of records.")
    fields: FieldMap = FieldMap()
    languages: tuple[str, ...] = ("en", "fr", "es")
    domains: tuple[str, ...] = Field(CURE_DOMAINS, description="Valid domains (split names).")
    expertise_levels: tuple[str, ...] = ("layman", "expert")
    accepted_statuses: tuple[str, ...] = Field(("validated",), description="Statuses that pass validation.")
    rejected_statuses: tuple[str, ...] = ("rejected", "flagged", "needs_revision", "discarded")
    link_threshold: float = Field(
        0.85, ge=0, le=1, description="Fuzzy match floor for linking to a corpus passage."
    )


RELEVANT_SCHEMA = pa.schema(
    [
        pa.field("record_key", pa.string(), nullable=False),
        pa.field("record_id", pa.string()),
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("passage", pa.string(), nullable=False),
        pa.field("article_url", pa.string()),
        pa.field("article_title", pa.string()),
        pa.field("doi", pa.string()),
        pa.field("pmid", pa.string()),
        pa.field("pmcid", pa.string()),
        pa.field("article_id", pa.string()),
        pa.field("corpus_passage_id", pa.string()),
        pa.field("link", pa.string(), nullable=False),
        pa.field("link_score", pa.float64(), nullable=False),
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("row", pa.int64(), nullable=False),
    ]
)
QUERIES_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("language", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("domains", pa.list_(pa.string()), nullable=False),
        pa.field("expertise", pa.string()),
        pa.field("annotators", pa.list_(pa.string()), nullable=False),
        pa.field("status", pa.string()),
        pa.field("n_relevant", pa.int32(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("record_key", pa.string(), nullable=False),
    pa.field("source_file", pa.string(), nullable=False),
    pa.field("row", pa.int64(), nullable=False),
    pa.field("query", pa.string()),
    pa.field("passage", pa.string()),
)
_SOURCE_SCHEMA = pa.schema(
    [
        pa.field("record_key", pa.string()),
        pa.field("source_file", pa.string()),
        pa.field("row", pa.int64()),
        pa.field("record", pa.string()),  # the raw record as JSON; null when unreadable
        pa.field("error", pa.string()),
    ]
)


def _files(ctx: StageContext[AnnotationsConfig]) -> list[tuple[str, Path]]:
    out = []
    for i, source in enumerate(ctx.config.sources):
        path = (ctx.base_dir / source).resolve()
        if not path.is_file():
            raise ConfigError(
                f"stages.annotations.sources[{i}]: no such file: {source!r} (resolved against {ctx.base_dir})"
            )
        out.append((source, path))
    return out


def inputs(ctx: StageContext[AnnotationsConfig]) -> dict[str, Any]:
    return {"files": {display: digest_file(path) for display, path in _files(ctx)}}


def source(ctx: StageContext[AnnotationsConfig], _inputs: dict[str, Any]) -> TableSource:
    rows = []
    for display, path in _files(ctx):
        fmt = export_format(path, ctx.config.format)
        for rec in read_export(path, display, fmt, ctx.config.records_path):
            rows.append(
                {
                    "record_key": f"{rec.source_file}:{rec.row}",
                    "source_file": rec.source_file,
                    "row": rec.row,
                    "record": json.dumps(rec.data, ensure_ascii=False, default=json_default)
                    if rec.data is not None
                    else None,
                    "error": rec.error,
                }
            )
    return TableSource(pa.Table.from_pylist(rows, schema=_SOURCE_SCHEMA))


def _validate(record: dict[str, Any], config: AnnotationsConfig) -> dict[str, Any]:
    f = config.fields
    query, passage = _text(record, f.query), _text(record, f.passage)
    if not query:
        raise _Invalid("missing_query", f"no query text at {f.query!r}")
    if not passage:
        raise _Invalid("missing_passage", f"no passage text at {f.passage!r}")
    raw_language = _text(record, f.language)
    language = language_code(raw_language) if raw_language else None
    if language is None or language not in config.languages:
        raise _Invalid(
            "unknown_language", f"language {raw_language!r} is not one of {list(config.languages)}"
        )
    listed = _domains(record, f.domains)
    if not listed:
        raise _Invalid("missing_domain", f"no discipline at {f.domains!r}")
    domains = [domain_key(d) for d in listed]
    unknown = [d for d, key in zip(listed, domains, strict=True) if key not in config.domains]
    if unknown:
        raise _Invalid("unknown_domain", f"{unknown} not among the configured domains")
    expertise = _text(record, f.expertise)
    if expertise is not None:
        expertise = expertise.casefold()
        if expertise not in config.expertise_levels:
            raise _Invalid(
                "unknown_expertise", f"expertise {expertise!r} is not one of {list(config.expertise_levels)}"
            )
    status = _text(record, f.status)
    folded = status.casefold() if status else None
    if folded not in config.accepted_statuses:
        feedback = _text(record, f.feedback)
        reason = "rejected" if folded in config.rejected_statuses else "not_validated"
        raise _Invalid(reason, f"status {status!r}" + (f"; feedback: {feedback}" if feedback else ""))
    return {
        "query": query,
        "passage": passage,
        "language": language,
        "domains": list(dict.fromkeys(domains)),
        "expertise": expertise,
        "annotator": _text(record, f.annotator),
        "status": folded,
        "ref": ArticleRef(
            url=_text(record, f.article_url),
            title=_text(record, f.article_title),
            doi=_text(record, f.doi),
            pmid=_text(record, f.pmid, numbers=True),
            pmcid=_text(record, f.pmcid),
        ),
    }


def query_id(language: str, text: str) -> str:
    return "q-" + digest_bytes(f"{language}\n{normalise(text)}".encode())[:12]


def process(chunk: pa.Table, ctx: StageContext[AnnotationsConfig]) -> ChunkResult:
    config = ctx.config
    articles = ArticleIndex(ctx.upstream["ingest"].read().to_pylist())
    passages: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for p in ctx.upstream["segment"].read(columns=["article_id", "passage_id", "text"]).to_pylist():
        passages[p["article_id"]].append((p["passage_id"], p["text"]))
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    queries: dict[str, dict[str, Any]] = {}
    seen: dict[tuple[str, str], str] = {}
    rows = chunk.to_pylist()
    conflicts = find_conflicts(rows, config.fields.record_id)
    for row in rows:
        record = json.loads(row["record"]) if row["record"] is not None else None
        base = {"record_key": row["record_key"], "source_file": row["source_file"], "row": row["row"]}
        try:
            if record is None:
                raise _Invalid("malformed_record", row["error"] or "unreadable record")
            if row["record_key"] in conflicts:
                raise _Invalid("conflicting_duplicate", conflicts[row["record_key"]])
            v = _validate(record, config)
            record_id = _text(record, config.fields.record_id, numbers=True)
            qid = query_id(v["language"], v["query"])
            pair = (qid, normalise(v["passage"]))
            if pair in seen:
                raise _Invalid("duplicate_record", f"same query and passage as {seen[pair]}")
            seen[pair] = row["record_key"]
        except _Invalid as bad:
            excluded.append(
                {
                    **base,
                    "reason": bad.reason,
                    "detail": f"{row['source_file']} row {row['row']}: {bad.detail}",
                    "query": _shown(record, config.fields.query),
                    "passage": _shown(record, config.fields.passage),
                }
            )
            continue
        q = queries.setdefault(
            qid,
            {"query_id": qid, "text": v["query"], "language": v["language"], "domains": [], "expertise": v["expertise"],
             "annotators": [], "status": v["status"], "n_relevant": 0},
        )  # fmt: skip
        q["domains"] = list(dict.fromkeys([*q["domains"], *v["domains"]]))
        if v["annotator"] and v["annotator"] not in q["annotators"]:
            q["annotators"].append(v["annotator"])
        q["n_relevant"] += 1
        ref: ArticleRef = v["ref"]
        article_id = articles.find(ref)
        if article_id is None:
            link_id, link, score = None, "no_article", 0.0
        else:
            found = link_passage(v["passage"], passages.get(article_id, []), config.link_threshold)
            link_id, link, score = found.passage_id, found.link, found.score
        kept.append(
            {
                **base,
                "record_id": record_id,
                "query_id": qid,
                "passage": v["passage"],
                "article_url": ref.url,
                "article_title": ref.title,
                "doi": ref.doi,
                "pmid": ref.pmid,
                "pmcid": ref.pmcid,
                "article_id": article_id,
                "corpus_passage_id": link_id,
                "link": link,
                "link_score": score,
            }
        )
    query_rows = [{**q, "domain": q["domains"][0]} for q in queries.values()]
    return ChunkResult(
        rows_to_table(kept, RELEVANT_SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        {"queries": rows_to_table(query_rows, QUERIES_SCHEMA)},
    )


SPEC: StageSpec[AnnotationsConfig] = StageSpec(
    name="annotations",
    version=1,
    config_type=AnnotationsConfig,
    upstream=("ingest", "segment"),
    schema=RELEVANT_SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("record_key",),
    inputs=inputs,
    source=source,
    process=process,
    tables={"queries": QUERIES_SCHEMA},
    whole_input=True,
    description="Annotation exports → validated queries (side table) and relevant passages linked to the corpus.",
)
