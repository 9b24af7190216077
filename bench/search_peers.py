"""The BM25 peers of ``bench/bench_search.py``: tantivy's own search of our index, bm25s
(Lucene's BM25, numpy and numba backends) and rank_bm25, on the same passages and queries,
with the same analysis as ours (lowercased alphanumeric runs, no stop words, no stemming)."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

import bm25s  # type: ignore[import-untyped]
import numpy as np
from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]
from rich.console import Console

from bench import common
from tasks.common.search.port import Hit

TOKEN = re.compile(r"[^\W_]+")  # runs of letters/digits: what tantivy's simple tokenizer keeps


def tokens(text: str) -> list[str]:
    """The peers' analysis, as close as plain Python gets to tantivy's ``default`` tokenizer."""
    return [t for t in TOKEN.findall(text.lower()) if len(t.encode()) < 40]


def overlap_at_10(ours: list[list[Hit]], theirs: list[list[int]], ids: list[str]) -> float:
    shares = [
        len({h.passage_id for h in a[:10]} & {ids[j] for j in b[:10]}) / max(1, min(10, len(a), len(b)))
        for a, b in zip(ours, theirs, strict=True)
    ]
    return float(np.mean(shares))


def run_bm25s(
    texts: list[str], queries: list[str], k: int, backend: str, threads: int, repeat: int
) -> tuple[dict[str, Any], list[list[int]]]:
    def build() -> Any:
        retriever = bm25s.BM25(method="lucene", backend=backend)
        retriever.index([tokens(t) for t in texts], show_progress=False)
        return retriever

    retriever, t_index = common.timed(build)

    def search() -> Any:
        return retriever.retrieve([tokens(q) for q in queries], k=k, show_progress=False, n_threads=threads)

    retriever.retrieve([tokens(q) for q in queries[:50]], k=k, show_progress=False, n_threads=threads)
    # ^ warm-up: numba compiles its kernels on the first call, which is not part of the rate
    result, t_query = common.best_of(repeat, search)
    found = [[int(j) for j in row] for row in result.documents]
    return {
        "index_s": t_index,
        "query_s": t_query,
        "queries": len(queries),
        "qps": len(queries) / t_query,
    }, found


def run_rank_bm25(texts: list[str], queries: list[str], k: int) -> dict[str, Any]:
    model, t_index = common.timed(lambda: BM25Okapi([tokens(t) for t in texts]))

    def search() -> list[list[int]]:
        out = []
        for q in queries:
            scores = model.get_scores(tokens(q))
            top = np.argpartition(-scores, k)[:k]
            out.append(top[np.argsort(-scores[top], kind="stable")].tolist())
        return out

    _, t_query = common.timed(search)
    return {"index_s": t_index, "query_s": t_query, "queries": len(queries), "qps": len(queries) / t_query}


def tantivy_peer(
    ids: list[str], bm25_hits: list[list[Hit]], hits: list[list[Hit]], seconds: float
) -> dict[str, Any]:
    """tantivy's own search of our BM25 query, against ours: overlap and identical rankings."""
    row = {pid: i for i, pid in enumerate(ids)}
    return {
        "index_s": None,  # the same index as ours
        "query_s": seconds,
        "queries": len(hits),
        "qps": len(hits) / seconds,
        "overlap_at_10_with_ours": overlap_at_10(
            bm25_hits, [[row[h.passage_id] for h in hl] for hl in hits], ids
        ),
        "same_ranking_as_ours": float(
            np.mean(
                [
                    [h.passage_id for h in a] == [h.passage_id for h in b]
                    for a, b in zip(bm25_hits, hits, strict=True)
                ]
            )
        ),
    }


def run_peers(
    args: argparse.Namespace,
    texts: list[str],
    queries: list[str],
    ids: list[str],
    ours: tuple[list[list[Hit]], tuple[list[list[Hit]], float] | None],
    console: Console,
) -> dict[str, dict[str, Any]]:
    """The BM25 peers (none with ``--skip-peers``), each against ``ours``: our BM25 hits and,
    when it ran, tantivy's own search ``(hits, seconds)``."""
    bm25_hits, tantivy = ours
    cpus = os.cpu_count() or 1
    peers: dict[str, dict[str, Any]] = {}
    if tantivy is not None:
        peers[f"tantivy (bm25_tantivy on our index, {cpus} threads)"] = tantivy_peer(ids, bm25_hits, *tantivy)
    if not args.skip_peers:
        for backend_name in ("numpy", "numba"):
            console.print(f"peer: bm25s lucene, {backend_name} backend ...")
            stats, found_ids = run_bm25s(texts, queries, args.k, backend_name, cpus, args.repeat)
            stats["overlap_at_10_with_ours"] = overlap_at_10(bm25_hits, found_ids, ids)
            peers[f"bm25s lucene ({backend_name}, {cpus} threads)"] = stats
        console.print(f"peer: rank_bm25 BM25Okapi on {args.rank_bm25_queries} queries ...")
        peers[f"rank_bm25 BM25Okapi (on {args.rank_bm25_queries} queries)"] = run_rank_bm25(
            texts, queries[: args.rank_bm25_queries], args.k
        )
    return peers
