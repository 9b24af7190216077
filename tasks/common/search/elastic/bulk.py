"""Bulk loading: rows validated here, sent by :func:`elasticsearch.helpers.streaming_bulk`.

``raise_on_error=False``: a rejected document is reported in ``IndexReport.failed`` with the
server's reason, never dropped; ``raise_on_exception=True``: a whole request that fails
(auth, a broken server, a body too large) is a :class:`SearchError`, not thousands of rows
blamed for an outage. ``429`` answers are retried with exponential backoff.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from elasticsearch import ApiError, TransportError
from elasticsearch.helpers import streaming_bulk

from tasks.common.search.elastic.dsl import TEXT_FIELD, VECTOR_FIELD
from tasks.common.search.elastic.errors import item_reason
from tasks.common.search.elastic.indices import ManagedIndex
from tasks.common.search.port import PASSAGE_SCHEMA, IndexReport

log = logging.getLogger(__name__)

MAX_ID_BYTES = 512  # the server's limit on a document _id


def bulk_load(target: ManagedIndex, batches: Iterable[pa.RecordBatch]) -> IndexReport:
    """Index every valid row into ``target``; each row is indexed or in ``failed`` with a reason."""
    report = IndexReport()
    target.begin_load()
    o = target.config
    try:
        for ok, item in streaming_bulk(
            target.server.es,
            _actions(target.index, target.dims, batches, report),
            chunk_size=o.chunk_size,
            max_chunk_bytes=o.max_chunk_bytes,
            raise_on_error=False,
            raise_on_exception=True,
            max_retries=o.bulk_retries,
            initial_backoff=o.initial_backoff,
            max_backoff=o.max_backoff,
            retry_on_status=(429,),
        ):
            if ok:
                report.indexed += 1
            else:
                _, info = next(iter(item.items()))
                report.failed.append((str(info.get("_id", "")), item_reason(info)))
    except (ApiError, TransportError) as err:
        raise target.server.error(
            f"bulk load into {target.index} stopped after {report.indexed} indexed and "
            f"{len(report.failed)} failed rows",
            err,
        ) from None
    if report.failed:
        log.warning(
            "%d of %d rows were not indexed into %s; first: %s",
            len(report.failed),
            report.indexed + len(report.failed),
            target.index,
            report.failed[0],
        )
    return report


def _actions(
    index: str, dims: int, batches: Iterable[pa.RecordBatch], report: IndexReport
) -> Iterator[dict[str, Any]]:
    """Bulk actions for the valid rows; invalid rows go straight to ``report.failed``."""
    seen = 0
    for batch in batches:
        missing = [n for n in PASSAGE_SCHEMA.names if n not in batch.schema.names]
        if missing:
            raise ValueError(f"passage batch lacks column(s) {missing}; expected {PASSAGE_SCHEMA.names}")
        columns = {n: batch.column(n).to_pylist() for n in PASSAGE_SCHEMA.names}
        for pid, aid, text, vector in zip(
            columns["passage_id"], columns["article_id"], columns["text"], columns["vector"], strict=True
        ):
            seen += 1
            key = pid if isinstance(pid, str) and pid else f"<row {seen}>"
            reason = _row_problem(dims, pid, aid, text, vector)
            if reason is not None:
                report.failed.append((key, reason))
                continue
            yield {
                "_op_type": "index",
                "_index": index,
                "_id": pid,
                "_source": {"passage_id": pid, "article_id": aid, TEXT_FIELD: text, VECTOR_FIELD: vector},
            }


def _row_problem(dims: int, pid: Any, aid: Any, text: Any, vector: Any) -> str | None:
    if not isinstance(pid, str) or not pid:
        return "passage_id is null or empty"
    if len(pid.encode("utf-8")) > MAX_ID_BYTES:
        return f"passage_id is over {MAX_ID_BYTES} bytes (Elasticsearch's _id limit)"
    if not isinstance(aid, str):
        return "article_id is null"
    if not isinstance(text, str):
        return "text is null"
    if vector is None:
        return "vector is null"
    if len(vector) != dims:
        return f"vector has {len(vector)} dims, the index has {dims}"
    values = np.asarray([math.nan if x is None else x for x in vector], dtype=np.float64)
    if not np.isfinite(values).all():
        return "vector has NaN, infinite or null values"
    if not values.any():
        return "vector is all zeros (cosine similarity is undefined for it)"
    return None
