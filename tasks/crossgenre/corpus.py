"""A PubMed record as a row of the crossgenre document corpus (contract §6 ``corpus``, §7).

The cited abstracts (stage ``claims``) and the negative abstracts (stage ``distractors``)
share one column layout so the candidates stage can search their union: ``doc_id`` is the
PMID, then the record's text and metadata (:class:`tasks.common.pubmed.port.PubmedRecord`).
Resolve's ``records`` side table (contract §5) has the same columns with ``pmid`` for
``doc_id`` plus ``doi`` / ``pmcid``: :data:`RECORD_FIELDS`, :func:`record_fields_row`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tasks.common.pubmed.port import PubmedRecord


def required(name: str, type_: pa.DataType | None = None) -> pa.Field:
    """A non-null column (``str`` unless ``type_``): the contract's columns not marked ``?``."""
    return pa.field(name, pa.string() if type_ is None else type_, nullable=False)


STRINGS = pa.list_(pa.string())
SECTION_TYPE = pa.struct([required("label"), required("text")])

# The record's content, shared by the corpus rows and resolve's records rows.
_CONTENT_FIELDS: tuple[pa.Field, ...] = (
    required("title"),
    required("abstract", pa.large_string()),
    required("sections", pa.list_(SECTION_TYPE)),
    required("labelled", pa.bool_()),
    required("mesh", STRINGS),
    required("publication_types", STRINGS),
    required("journal"),
    pa.field("year", pa.int32()),
)

CORPUS_FIELDS: tuple[pa.Field, ...] = (required("doc_id"), *_CONTENT_FIELDS)
CORPUS_SCHEMA = pa.schema(CORPUS_FIELDS)

RECORD_FIELDS: tuple[pa.Field, ...] = (
    required("pmid"),
    *_CONTENT_FIELDS,
    pa.field("doi", pa.string()),
    pa.field("pmcid", pa.string()),
)
RECORDS_SCHEMA = pa.schema(RECORD_FIELDS)


def _content(record: PubmedRecord) -> dict[str, Any]:
    return {
        "title": record.title,
        "abstract": record.abstract,
        "sections": [{"label": s.label, "text": s.text} for s in record.sections],
        "labelled": record.labelled,
        "mesh": list(record.mesh),
        "publication_types": list(record.publication_types),
        "journal": record.journal,
        "year": record.year,
    }


def record_row(record: PubmedRecord) -> dict[str, Any]:
    """The corpus row (:data:`CORPUS_FIELDS`) of one record: ``doc_id`` = its PMID."""
    return {"doc_id": record.pmid, **_content(record)}


def record_fields_row(record: PubmedRecord) -> dict[str, Any]:
    """Resolve's ``records`` row (:data:`RECORD_FIELDS`) of one record."""
    return {"pmid": record.pmid, **_content(record), "doi": record.doi, "pmcid": record.pmcid}


def corpus_row_of_record_row(row: dict[str, Any]) -> dict[str, Any]:
    """A ``records`` row (resolve's side table) as a corpus row: ``pmid`` → ``doc_id``, no ids."""
    return {"doc_id": row["pmid"], **{f.name: row[f.name] for f in _CONTENT_FIELDS}}
