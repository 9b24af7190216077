"""The validated queries as later stages see them: one row per query with its English text.

The English text is the ``translate`` stage's (the annotator's own English, or a machine
translation); a query with no English text keeps its original text and says so in
``query_language``. Rows are sorted by ``query_id``.
"""

from __future__ import annotations

import pyarrow as pa

from irforge.artifacts import Artifact
from irforge.stage import rows_to_table

QUERIES_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("query_language", pa.string(), nullable=False),
        pa.field("query_text", pa.string(), nullable=False),
    ]
)


def english_queries(annotations: Artifact, translate: Artifact) -> pa.Table:
    english: dict[str, str] = {}
    for row in translate.read(columns=["query_id", "language", "text"]).to_pylist():
        if row["language"] == "en":
            english[row["query_id"]] = row["text"]
    rows = []
    for q in annotations.read(
        table="queries", columns=["query_id", "domain", "language", "text"]
    ).to_pylist():
        en = english.get(q["query_id"])
        rows.append(
            {
                "query_id": q["query_id"],
                "domain": q["domain"],
                "query_language": "en" if en is not None else q["language"],
                "query_text": en if en is not None else q["text"],
            }
        )
    rows.sort(key=lambda r: r["query_id"])
    return rows_to_table(rows, QUERIES_SCHEMA)
