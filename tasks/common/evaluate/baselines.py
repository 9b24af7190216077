"""Sparse and dense baseline runs over a released split (CURE §4, Table 7).

Both take the release's tables: corpus (``_id, title, text``) and queries (``_id, text``),
and return a run ``query id -> passage id -> score`` of the top ``k`` passages per query.
The document text is the title and the text joined by a space (the text alone when the
title is empty), as MTEB and BEIR present a passage to a retriever.

- :func:`bm25_run`: BM25 ``match`` of the query text on the embedded search backend
  (:mod:`tasks.common.search.embedded`, tantivy, the analyser of the mining index), in a
  temporary index of the split's passages. Scores are tantivy's (2.2x Lucene's, same
  ranking). A query without any indexable word gets an empty run (it scores 0).
- :func:`dense_run`: exact inner product between the encoder's unit query and passage
  vectors (cosine), with numpy; no approximate index.

Every list is ordered by score descending and cut at ``k`` with ties broken by passage id
ascending, so a run is deterministic.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tasks.common.embed.port import Encoder
from tasks.common.evaluate.metrics import EvaluationError
from tasks.common.search.embedded.backend import EmbeddedBackend
from tasks.common.search.port import PASSAGE_SCHEMA, vectors_column

Run = dict[str, dict[str, float]]

_INDEX_BATCH: Final = 10_000  # passages per record batch given to the index
_QUERY_BLOCK: Final = 256  # queries per matrix product: 256 x 250k passages x 4 B = 256 MB of scores


def document_texts(corpus: pa.Table) -> tuple[list[str], list[str]]:
    """Passage ids and the text a retriever sees: ``title + " " + text`` (text alone without a title)."""
    ids = _strings(corpus, "corpus", "_id")
    titles = _strings(corpus, "corpus", "title")
    texts = _strings(corpus, "corpus", "text")
    _unique(ids, "corpus")
    if not ids:
        raise EvaluationError("the corpus is empty: nothing to retrieve")
    return ids, [f"{t.strip()} {x}" if t.strip() else x for t, x in zip(titles, texts, strict=True)]


def query_texts(queries: pa.Table) -> tuple[list[str], list[str]]:
    """Query ids and texts, checked: present, strings, ids unique."""
    ids = _strings(queries, "queries", "_id")
    texts = _strings(queries, "queries", "text")
    _unique(ids, "queries")
    return ids, texts


def bm25_run(corpus: pa.Table, queries: pa.Table, k: int = 100) -> Run:
    """The top ``k`` passages of each query by BM25 over title + text (embedded backend)."""
    _check_k(k)
    ids, documents = document_texts(corpus)
    query_ids, texts = query_texts(queries)
    # The port indexes vectors too; BM25 ignores them, so each passage gets the same unit vector.
    with (
        tempfile.TemporaryDirectory(prefix="irforge-bm25-") as tmp,
        EmbeddedBackend.create(Path(tmp) / "index", dims=1) as backend,
    ):
        report = backend.add(_batches(ids, documents))
        if report.failed:
            pid, reason = report.failed[0]
            raise EvaluationError(
                f"BM25 baseline: the index refused {len(report.failed)} passage(s), e.g. {pid!r}: {reason}"
            )
        backend.finish()
        hits = backend.bm25(texts, k)
    return {qid: {h.passage_id: h.score for h in found} for qid, found in zip(query_ids, hits, strict=True)}


def dense_run(corpus: pa.Table, queries: pa.Table, encoder: Encoder, k: int = 100) -> Run:
    """The top ``k`` passages of each query by inner product of unit vectors (cosine), exact."""
    _check_k(k)
    ids, documents = document_texts(corpus)
    query_ids, texts = query_texts(queries)
    passages = encoder.encode(documents, kind="passage")
    questions = encoder.encode(texts, kind="query")
    if passages.shape != (len(ids), encoder.dims) or questions.shape != (len(query_ids), encoder.dims):
        raise EvaluationError(
            f"dense baseline: encoder {encoder.model_id} returned {passages.shape} passage and "
            f"{questions.shape} query vectors, expected {encoder.dims} dimensions for {len(ids)} and {len(query_ids)}"
        )
    # Position of each passage in id order: the tie-break key, as integers.
    id_rank = np.empty(len(ids), dtype=np.int64)
    id_rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    run: Run = {}
    for start in range(0, len(query_ids), _QUERY_BLOCK):
        scores = questions[start : start + _QUERY_BLOCK] @ passages.T
        for offset, row in enumerate(scores):
            top = _top(row, id_rank, k)
            run[query_ids[start + offset]] = {ids[i]: float(row[i]) for i in top.tolist()}
    return run


def _top(scores: npt.NDArray[np.float32], id_rank: npt.NDArray[np.int64], k: int) -> npt.NDArray[np.intp]:
    """Indices of the ``k`` best scores, score descending then passage id ascending."""
    n = len(scores)
    if n > k:
        # Everything tied with the k-th best stays a candidate, so the id tie-break is exact.
        kth = np.partition(scores, n - k)[n - k]
        candidates = np.flatnonzero(scores >= kth)
    else:
        candidates = np.arange(n)
    order = np.lexsort((id_rank[candidates], -scores[candidates]))
    return candidates[order][:k]


def _batches(ids: list[str], documents: list[str]) -> list[pa.RecordBatch]:
    batches = []
    for start in range(0, len(ids), _INDEX_BATCH):
        part = ids[start : start + _INDEX_BATCH]
        batches.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(part, pa.string()),
                    pa.array(part, pa.string()),  # article_id: unknown in a release, unused by BM25
                    pa.array(documents[start : start + _INDEX_BATCH], pa.string()),
                    vectors_column(np.ones((len(part), 1), dtype=np.float32)),
                ],
                schema=PASSAGE_SCHEMA,
            )
        )
    return batches


def _strings(table: pa.Table, what: str, column: str) -> list[str]:
    if column not in table.column_names:
        raise EvaluationError(f"{what} table has no column {column!r} (it has {table.column_names})")
    values: list[str] = table.column(column).to_pylist()
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise EvaluationError(f"{what} row {i}: {column} is {value!r}, not a string")
    return values


def _unique(ids: list[str], what: str) -> None:
    seen: set[str] = set()
    for i, value in enumerate(ids):
        if value in seen:
            raise EvaluationError(f"{what} row {i}: _id {value!r} occurs twice")
        seen.add(value)


def _check_k(k: int) -> None:
    if k < 1:
        raise EvaluationError(f"k must be at least 1, got {k}")


__all__ = ["Run", "bm25_run", "dense_run", "document_texts", "query_texts"]
