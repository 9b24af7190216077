"""Searching: one ``msearch`` request per batch of queries, one response item per query.

An error item raises :class:`SearchError` naming the query's position and the server's
reason; requests and items answered 429 are retried with backoff. Results follow the
port's order (score descending, then passage id): Elasticsearch breaks ties by internal doc
id, so hits are re-sorted here. A tie straddling the ``k`` cut-off can still select a
different passage than the embedded backend would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from elasticsearch import ApiError, TransportError

from tasks.common.search.elastic.dsl import (
    Lexical,
    check_knn,
    fuzzy_query,
    knn_body,
    knn_retriever,
    match_query,
    phrase_query,
    rrf_body,
    standard_retriever,
)
from tasks.common.search.elastic.errors import Server, error_text, is_licence_error
from tasks.common.search.elastic.options import ElasticsearchOptions
from tasks.common.search.port import F32, Hit, SearchError, ranked


class Searcher:
    """The retrievers of one concrete index."""

    def __init__(self, server: Server, index: str, dims: int, config: ElasticsearchOptions) -> None:
        self.server, self.index, self.dims, self.config = server, index, dims, config

    def lexical(
        self, kind: str, texts: Sequence[str], k: int, body: Callable[[str], dict[str, Any]]
    ) -> list[list[Hit]]:
        """One search ``body`` per text; a blank text has no hits and is not sent."""
        bodies = [(i, body(t)) for i, t in enumerate(texts) if t.strip()]
        answers = self.msearch(kind, bodies)
        return [self.hits(answers[i], k) if i in answers else [] for i in range(len(texts))]

    def knn(self, vectors: F32, k: int, num_candidates: int) -> list[list[Hit]]:
        rows = self.query_vectors(vectors)
        bodies = [(i, knn_body(row, k, num_candidates)) for i, row in enumerate(rows)]
        answers = self.msearch("knn", bodies)
        return [self.hits(answers[i], k) for i in range(len(rows))]

    def rrf(
        self,
        texts: Sequence[str],
        vectors: F32,
        k: int,
        num_candidates: int,
        lexical: Lexical,
        slop: int,
        rank_window_size: int | None,
        rank_constant: int,
    ) -> list[list[Hit]]:
        """Server-side RRF per query; see ``ElasticsearchBackend.rrf_search``."""
        window = k if rank_window_size is None else rank_window_size
        rows = self.query_vectors(vectors)
        if len(rows) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(rows)} vectors")
        check_knn(window, num_candidates)
        bodies: list[tuple[int, dict[str, Any]]] = []
        knn_only: set[int] = set()
        for i, (text, row) in enumerate(zip(texts, rows, strict=True)):
            if not text.strip():
                knn_only.add(i)
                bodies.append((i, knn_body(row, k, num_candidates)))
                continue
            if lexical == "phrase":
                query = phrase_query(text, slop)
            elif lexical == "fuzzy":
                query = fuzzy_query(text, self.config.fuzzy_max_expansions)
            else:
                query = match_query(text)
            retrievers = [standard_retriever(query), knn_retriever(row, window, num_candidates)]
            bodies.append((i, rrf_body(retrievers, k, rank_window_size=window, rank_constant=rank_constant)))
        answers = self.msearch("rrf", bodies)
        out: list[list[Hit]] = []
        for i in range(len(rows)):
            hits = self.hits(answers[i], k)
            if i in knn_only:
                hits = [Hit(h.rank, h.passage_id, 1.0 / (rank_constant + h.rank)) for h in hits]
            out.append(hits)
        return out

    def query_vectors(self, vectors: F32) -> F32:
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim == 1 and rows.size == 0:
            rows = rows.reshape(0, self.dims)
        if rows.ndim != 2 or rows.shape[1] != self.dims:
            raise ValueError(f"query vectors must have shape (n, {self.dims}), got {rows.shape}")
        finite = np.isfinite(rows).all(axis=1)
        nonzero = np.abs(rows).sum(axis=1) > 0
        bad = np.flatnonzero(~(finite & nonzero))
        if bad.size:
            raise ValueError(f"query vector #{int(bad[0])} is not finite or is all zeros")
        return rows

    def msearch(
        self, kind: str, bodies: Sequence[tuple[int, dict[str, Any]]]
    ) -> dict[int, Mapping[str, Any]]:
        """One ``msearch`` request per ``search_batch`` bodies; the response item of each query."""
        o = self.config
        out: dict[int, Mapping[str, Any]] = {}
        for start in range(0, len(bodies), o.search_batch):
            pending = list(bodies[start : start + o.search_batch])
            for attempt in range(o.search_retries + 1):
                if attempt:
                    time.sleep(min(o.max_backoff, o.initial_backoff * 2 ** (attempt - 1)))
                items = self._request(kind, pending, attempt)
                if items is None:
                    continue
                retry: list[tuple[int, dict[str, Any]]] = []
                for (qi, b), item in zip(pending, items, strict=True):
                    status = int(item.get("status", 500 if "error" in item else 200))
                    if "error" not in item and status < 300:
                        out[qi] = item
                    elif status == 429 and attempt < o.search_retries:
                        retry.append((qi, b))
                    else:
                        raise self._item_error(kind, qi, status, item.get("error"))
                if not retry:
                    break
                pending = retry
        return out

    def _request(
        self, kind: str, pending: Sequence[tuple[int, dict[str, Any]]], attempt: int
    ) -> list[Mapping[str, Any]] | None:
        """The response items of one ``msearch`` request; None: answered 429, to retry."""
        searches: list[Mapping[str, Any]] = []
        for _, b in pending:
            searches.extend(({}, b))
        try:
            items: list[Mapping[str, Any]] = self.server.es.msearch(index=self.index, searches=searches).body[
                "responses"
            ]
        except ApiError as err:
            if err.status_code == 429 and attempt < self.config.search_retries:
                return None
            raise self.server.error(f"{kind} search on {self.index}", err) from None
        except TransportError as err:
            raise self.server.error(f"{kind} search on {self.index}", err) from None
        if len(items) != len(pending):
            raise SearchError(
                f"Elasticsearch at {self.server.where} answered {len(items)} items to an msearch of {len(pending)}"
            )
        return items

    def _item_error(self, kind: str, qi: int, status: int, error: Any) -> SearchError:
        reason = error_text(error)
        where = self.server.where
        if kind == "rrf" and is_licence_error(reason):
            return SearchError(
                self.server.scrub(
                    f"Elasticsearch at {where} refused the server-side rrf retriever for query #{qi}: "
                    f"{reason}. It needs an Enterprise or trial licence (Elasticsearch 8.16+); use "
                    "client-side RRF instead (tasks.common.search.fusion), which works on every licence"
                )
            )
        return SearchError(
            self.server.scrub(
                f"Elasticsearch at {where} rejected {kind} query #{qi} on {self.index} ({status}): {reason}"
            )
        )

    @staticmethod
    def hits(item: Mapping[str, Any], k: int) -> list[Hit]:
        hits = item.get("hits", {}).get("hits", [])
        ids = [str(h["_id"]) for h in hits]
        scores = [float(h["_score"]) if h.get("_score") is not None else 0.0 for h in hits]
        return ranked(ids, scores, k)
