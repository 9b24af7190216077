"""The BM25 peers of ``bench/bench_search.py``: tantivy's own search of our index, bm25s
(Lucene's BM25, numpy and numba backends) and rank_bm25, on the same passages and queries,
with the same analysis as ours (lowercased alphanumeric runs, no stop words, no stemming),
interleaved with ours on the same number of threads (``bench.common``)."""

from __future__ import annotations

import argparse
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


def build_bm25s(texts: list[str], backend: str) -> tuple[Any, float]:
    """A bm25s ``method="lucene"`` retriever of ``texts`` on ``backend`` and its index seconds."""

    def build() -> Any:
        retriever = bm25s.BM25(method="lucene", backend=backend)
        retriever.index([tokens(t) for t in texts], show_progress=False)
        return retriever

    return common.timed(build)


def rank_bm25_search(model: Any, queries: list[str], k: int) -> list[list[int]]:
    """rank_bm25's top ``k`` rows per query: every passage scored in Python, then a stable sort."""
    out = []
    for q in queries:
        scores = model.get_scores(tokens(q))
        top = np.argpartition(-scores, k)[:k]
        out.append(top[np.argsort(-scores[top], kind="stable")].tolist())
    return out


def same_ranking(ours: list[list[Hit]], theirs: list[list[Hit]]) -> float:
    """The share of queries whose ranked passage ids are the same."""
    pairs = zip(ours, theirs, strict=True)
    return float(np.mean([[h.passage_id for h in a] == [h.passage_id for h in b] for a, b in pairs]))


def bm25_rounds(
    args: argparse.Namespace, texts: list[str], queries: list[str], ids: list[str], backends: dict[int, Any],
    console: Console,
) -> dict[str, Any]:  # fmt: skip
    """Our ``bm25`` against the peers, interleaved over ``args.rounds`` rounds, for each
    (threads, our backend searching in that many threads): numba, BLAS and the peers'
    ``n_threads`` pinned to the same count. Peers' indexes are built once (timed once)."""
    k, size = args.k, f"{len(texts):,} passages, {len(queries):,} queries"
    out: dict[str, Any] = {"index_s": {}, "rounds": {}, "table": []}
    retrievers: dict[str, Any] = {}
    if not args.skip_peers:
        for name in ("numpy", "numba"):
            retrievers[name], out["index_s"][f"bm25s_{name}"] = build_bm25s(texts, name)
    for threads, backend in backends.items():
        contenders: dict[str, Any] = {"ours": lambda b=backend: b.bm25(queries, k)}
        if not args.skip_peers:
            contenders["tantivy"] = lambda b=backend: b.bm25_tantivy(queries, k)
            for name, r in retrievers.items():
                contenders[f"bm25s_{name}"] = lambda r=r, t=threads: r.retrieve(
                    [tokens(q) for q in queries], k=k, show_progress=False, n_threads=t
                )
        console.print(f"BM25, {threads} thread(s): {', '.join(contenders)} interleaved ...")
        with common.same_threads(threads):
            tm = common.interleaved(contenders, args.rounds)
        ours = tm.results["ours"]
        entry: dict[str, Any] = {
            "timings": tm.summary(),
            "qps": {n: len(queries) / tm.median(n) for n in tm.warm},
        }
        if "tantivy" in tm.results:
            entry["tantivy_same_ranking"] = same_ranking(ours, tm.results["tantivy"])
        for name in retrievers:
            found = [[int(j) for j in r] for r in tm.results[f"bm25s_{name}"].documents]
            entry[f"bm25s_{name}_overlap_at_10"] = overlap_at_10(ours, found, ids)
        out["rounds"][str(threads)] = entry
        for peer in tm.warm:
            if peer != "ours":
                label = peer.replace("_", " ") + (" (our index)" if peer == "tantivy" else ", lucene")
                out["table"].append(
                    common.table_row(f"BM25 top {k}", size, str(threads), tm, ("ours: embedded", "ours"), (label, peer))
                )  # fmt: skip
        console.print(", ".join(f"{p}/ours {tm.ratio(p, 'ours')}" for p in tm.warm if p != "ours"))
    if not args.skip_peers:
        few = queries[: args.rank_bm25_queries]
        model, out["index_s"]["rank_bm25"] = common.timed(lambda: BM25Okapi([tokens(t) for t in texts]))
        with common.same_threads(1):
            tm = common.interleaved(
                {
                    "ours": lambda: backends[1].bm25(few, k),
                    "rank_bm25": lambda: rank_bm25_search(model, few, k),
                },
                args.rounds,
            )
        out["rounds"]["rank_bm25"] = {"timings": tm.summary(), "queries": len(few)}
        out["table"].append(
            common.table_row(
                f"BM25 top {k}", f"{len(texts):,} passages, {len(few)} queries", "1", tm, ("ours: embedded", "ours"),
                ("rank_bm25 BM25Okapi", "rank_bm25"),
            )
        )  # fmt: skip
    return out
