"""Benchmark: the embedded search backend (tantivy + numpy) on a CURE-sized mining pass, with BM25 peers.

    .venv/bin/python bench/bench_search.py [--n 200000] [--queries 2000]

Corpus (deterministic, ``--seed``): every ``<p>`` of the shared sample articles, reviews
and HTML pages is split into sentences, and passages of 50-150 words are built from runs
of 1-3 consecutive sentences of different paragraphs (``bench_dedup.build_passages``)
until ``--n`` distinct passages exist. Vectors are **random unit vectors** of ``--dims``
(384, MiniLM's size), precomputed with a fixed seed: no embedding model runs, so only
search is timed and kNN quality is meaningless. Each of ``--queries`` queries is a
fragment of 4-12 words of one sentence of a random passage, its "relevant passage"; its
vector is the passage's vector plus noise, normalised.

In one process it times

* ours, :class:`tasks.common.search.embedded.EmbeddedBackend`: the index build (tantivy + vectors
  + ids + token store, committed, and the BM25 matrix of :mod:`tasks.common.search.bm25_kernels`),
  BM25 (``bm25``: tantivy's BM25 scored from that matrix by numba kernels) and kNN
  (``knn``) queries per second over all queries, and the full CURE mining pass: ``phrase``
  (query text, slop 2), ``fuzzy`` (passage text), ``knn`` (query vector) and ``knn``
  (passage vector), each k = 50, num_candidates = 250, then RRF (k = 60) of the four lists
  per query;
* BM25 peers on the same passages and queries, top 50: **tantivy** itself on our index
  (``bm25_tantivy``: the same query and scores, searched by tantivy in ``threads`` = CPUs;
  ``bm25``'s test oracle, and its implementation before the matrix), **bm25s**
  ``method="lucene"`` (both its numpy and numba backends, ``n_threads`` = CPUs) and
  **rank_bm25** ``BM25Okapi``. rank_bm25 scores every passage in Python per query, so it is
  timed on ``--rank-bm25-queries`` queries only and its queries/s is labelled so. Peers get
  the same analysis as ours (lowercased alphanumeric runs, no stop words removed, no
  stemming) and their query tokenisation is inside the timing, as ours is.

The top-10 overlap with bm25s (Lucene's BM25; tantivy's is 2.2x with quantised lengths) is
printed as a sanity check (with tantivy: the same ranking, up to near-ties). Query rates
(ours, tantivy and bm25s) are the best of ``--repeat`` runs
(the machine may be shared); the mining pass and index builds run once. Results go to
``bench/results/search.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

import bm25s  # type: ignore[import-untyped]
import numpy as np
import pyarrow as pa
from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from bench.bench_dedup import SENTENCE, build_passages  # noqa: E402
from bench.samples import sample_passages  # noqa: E402
from tasks.common.search.embedded import EmbeddedBackend  # noqa: E402
from tasks.common.search.fusion import rrf  # noqa: E402
from tasks.common.search.port import F32, PASSAGE_SCHEMA, Hit, vectors_column  # noqa: E402

RESULTS = REPO / "bench" / "results" / "search.json"
TOKEN = re.compile(r"[^\W_]+")  # runs of letters/digits: what tantivy's simple tokenizer keeps
T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def best_of(repeat: int, fn: Callable[[], T]) -> tuple[T, float]:
    """The result and the shortest of ``repeat`` timings (the machine is shared: take the least disturbed)."""
    result, best = timed(fn)
    for _ in range(repeat - 1):
        best = min(best, timed(fn)[1])
    return result, best


def tokens(text: str) -> list[str]:
    """The peers' analysis, as close as plain Python gets to tantivy's ``default`` tokenizer."""
    return [t for t in TOKEN.findall(text.lower()) if len(t.encode()) < 40]


def unit(rows: F32) -> F32:
    out: F32 = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return out


def make_queries(texts: Sequence[str], count: int, rng: random.Random) -> tuple[list[str], list[int]]:
    """Fragments of 4-12 words of one sentence of a random passage (the relevant passage)."""
    queries: list[str] = []
    relevant: list[int] = []
    while len(queries) < count:
        i = rng.randrange(len(texts))
        sentences = [s for s in SENTENCE.split(texts[i]) if len(s.split()) >= 4]
        if not sentences:
            continue
        words = rng.choice(sentences).split()
        size = rng.randint(4, min(12, len(words)))
        at = rng.randrange(len(words) - size + 1)
        queries.append(" ".join(words[at : at + size]))
        relevant.append(i)
    return queries, relevant


def batches(ids: list[str], texts: list[str], vectors: F32, size: int = 10_000) -> Iterator[pa.RecordBatch]:
    for at in range(0, len(ids), size):
        block = vectors[at : at + size]
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(ids[at : at + size], pa.string()),
                pa.array([f"article-{int(p[2:]) // 20:06d}" for p in ids[at : at + size]], pa.string()),
                pa.array(texts[at : at + size], pa.string()),
                vectors_column(block),
            ],
            schema=PASSAGE_SCHEMA,
        )


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


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

    retriever, t_index = timed(build)

    def search() -> Any:
        return retriever.retrieve([tokens(q) for q in queries], k=k, show_progress=False, n_threads=threads)

    retriever.retrieve([tokens(q) for q in queries[:50]], k=k, show_progress=False, n_threads=threads)
    # ^ warm-up: numba compiles its kernels on the first call, which is not part of the rate
    result, t_query = best_of(repeat, search)
    found = [[int(j) for j in row] for row in result.documents]
    return {
        "index_s": t_index,
        "query_s": t_query,
        "queries": len(queries),
        "qps": len(queries) / t_query,
    }, found


def run_rank_bm25(texts: list[str], queries: list[str], k: int) -> dict[str, Any]:
    model, t_index = timed(lambda: BM25Okapi([tokens(t) for t in texts]))

    def search() -> list[list[int]]:
        out = []
        for q in queries:
            scores = model.get_scores(tokens(q))
            top = np.argpartition(-scores, k)[:k]
            out.append(top[np.argsort(-scores[top], kind="stable")].tolist())
        return out

    _, t_query = timed(search)
    return {"index_s": t_index, "query_s": t_query, "queries": len(queries), "qps": len(queries) / t_query}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=200_000, help="passages (200,000 for the reported figures)")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--num-candidates", type=int, default=250)
    parser.add_argument("--rank-bm25-queries", type=int, default=20, help="queries given to rank_bm25")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="query-rate timings: best of this many runs (not the mining pass)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-peers", action="store_true", help="only ours (quick runs)")
    parser.add_argument("--index-dir", type=Path, default=None, help="where to build (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    console = Console(width=120)
    cpus = os.cpu_count() or 1

    rng = random.Random(args.seed)
    texts = build_passages(sample_passages(), args.n, rng)
    ids = [f"p-{i:07d}" for i in range(len(texts))]
    vectors = unit(
        np.random.default_rng(args.seed).standard_normal((len(texts), args.dims), dtype=np.float32)
    )
    queries, relevant = make_queries(texts, args.queries, rng)
    noise = np.random.default_rng(args.seed + 1).standard_normal((len(queries), args.dims), dtype=np.float32)
    query_vectors = unit(vectors[relevant] + 0.05 * noise)
    passage_texts = [texts[i] for i in relevant]
    passage_vectors = np.ascontiguousarray(vectors[relevant])
    console.print(
        f"{len(texts):,} passages, {np.mean([len(t.split()) for t in texts]):.0f} words on average; "
        f"{len(queries):,} queries of {np.mean([len(q.split()) for q in queries]):.1f} words; "
        f"vectors: random unit vectors, {args.dims} dims, precomputed (no model runs); {cpus} CPUs"
    )
    k, nc = args.k, args.num_candidates
    result: dict[str, Any] = {
        "n": len(texts),
        "queries": len(queries),
        "dims": args.dims,
        "k": k,
        "num_candidates": nc,
        "vectors": "random unit vectors, precomputed",
        "cpus": cpus,
        "repeat": args.repeat,
    }

    with tempfile.TemporaryDirectory(dir=args.index_dir) as tmp:
        backend = EmbeddedBackend.create(Path(tmp) / "index", args.dims)

        def build() -> int:
            report = backend.add(batches(ids, texts, vectors))
            backend.finish()
            # The first bm25 call builds the BM25 matrix: index time, as the peers' index() builds theirs.
            backend.bm25(queries[:1], k)
            return report.indexed

        indexed, t_build = timed(build)
        assert indexed == len(texts), indexed
        size_mb = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file()) / 2**20
        console.print(f"ours: built in {t_build:.1f} s ({size_mb:.0f} MB on disk)")
        backend.bm25(queries[:50], k)  # warm-up (page cache, lazy structures), as the peers get one
        bm25_hits, t_bm25 = best_of(args.repeat, lambda: backend.bm25(queries, k))
        tantivy_hits, t_tantivy = None, None
        if not args.skip_peers:
            console.print("peer: tantivy's own search of the same BM25 query ...")
            backend.bm25_tantivy(queries[:50], k)
            tantivy_hits, t_tantivy = best_of(args.repeat, lambda: backend.bm25_tantivy(queries, k))
        _, t_knn = best_of(args.repeat, lambda: backend.knn(query_vectors, k, nc))
        console.print(
            f"ours: bm25 {len(queries) / t_bm25:,.0f} q/s, knn {len(queries) / t_knn:,.0f} q/s; mining pass ..."
        )

        mining: dict[str, float] = {}
        phrase_hits, mining["phrase_s"] = timed(lambda: backend.phrase(queries, 2, k))
        fuzzy_hits, mining["fuzzy_s"] = timed(lambda: backend.fuzzy(passage_texts, k))
        knn_q, mining["knn_query_s"] = timed(lambda: backend.knn(query_vectors, k, nc))
        knn_p, mining["knn_passage_s"] = timed(lambda: backend.knn(passage_vectors, k, nc))
        fused, mining["rrf_s"] = timed(
            lambda: [
                rrf({"phrase": a, "fuzzy": b, "knn_query": c, "knn_passage": d}, k=60, top=k)
                for a, b, c, d in zip(phrase_hits, fuzzy_hits, knn_q, knn_p, strict=True)
            ]
        )
        mining["total_s"] = sum(mining.values())
        backend.close()

    found = sum(ids[r] in {f.passage_id for f in fl} for r, fl in zip(relevant, fused, strict=True))
    phrase_found = sum(
        any(h.passage_id == ids[r] for h in hl) for r, hl in zip(relevant, phrase_hits, strict=True)
    )
    result["ours"] = {
        "build_s": t_build,
        "index_mb": size_mb,
        "bm25_s": t_bm25,
        "bm25_qps": len(queries) / t_bm25,
        "knn_s": t_knn,
        "knn_qps": len(queries) / t_knn,
        "mining": mining,
        "mining_qps": len(queries) / mining["total_s"],
        "relevant_in_fused_top": found / len(queries),
        "relevant_in_phrase_top": phrase_found / len(queries),
    }

    peers: dict[str, dict[str, Any]] = {}
    if tantivy_hits is not None and t_tantivy is not None:
        row = {pid: i for i, pid in enumerate(ids)}
        peers[f"tantivy (bm25_tantivy on our index, {cpus} threads)"] = {
            "index_s": None,  # the same index as ours
            "query_s": t_tantivy,
            "queries": len(queries),
            "qps": len(queries) / t_tantivy,
            "overlap_at_10_with_ours": overlap_at_10(
                bm25_hits, [[row[h.passage_id] for h in hl] for hl in tantivy_hits], ids
            ),
            "same_ranking_as_ours": float(
                np.mean(
                    [
                        [h.passage_id for h in a] == [h.passage_id for h in b]
                        for a, b in zip(bm25_hits, tantivy_hits, strict=True)
                    ]
                )
            ),
        }
    if not args.skip_peers:
        for backend_name in ("numpy", "numba"):
            console.print(f"peer: bm25s lucene, {backend_name} backend ...")
            stats, found_ids = run_bm25s(texts, queries, k, backend_name, cpus, args.repeat)
            stats["overlap_at_10_with_ours"] = overlap_at_10(bm25_hits, found_ids, ids)
            peers[f"bm25s lucene ({backend_name}, {cpus} threads)"] = stats
        console.print(f"peer: rank_bm25 BM25Okapi on {args.rank_bm25_queries} queries ...")
        peers[f"rank_bm25 BM25Okapi (on {args.rank_bm25_queries} queries)"] = run_rank_bm25(
            texts, queries[: args.rank_bm25_queries], k
        )
    result["peers"] = peers
    result["peak_rss_mb"] = peak_rss_mb()
    result["environment"] = {
        "python": platform.python_version(),
        "tantivy": version("tantivy"),
        "numpy": np.__version__,
        "bm25s": version("bm25s"),
        "rank_bm25": version("rank-bm25"),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.platform(),
    }

    ours = result["ours"]
    table = Table(title=f"BM25, {len(texts):,} passages, top {k}")
    for col in ("engine", "index s", "queries/s", "ours / peer (q/s)", "top-10 overlap"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    table.add_row(
        "ours: embedded (BM25 matrix + numba), incl. vectors",
        f"{t_build:.1f}",
        f"{ours['bm25_qps']:,.0f}",
        "",
        "",
    )
    for name, stats in peers.items():
        ratio = ours["bm25_qps"] / stats["qps"]
        overlap = stats.get("overlap_at_10_with_ours")
        table.add_row(
            f"peer: {name}",
            "(same)" if stats["index_s"] is None else f"{stats['index_s']:.1f}",
            f"{stats['qps']:,.1f}",
            f"{ratio:,.1f}x",
            "" if overlap is None else f"{overlap:.0%}",
        )
    console.print(table)
    mtable = Table(title=f"ours: mining pass, {len(queries):,} queries, k={k}, num_candidates={nc}")
    mtable.add_column("step")
    mtable.add_column("seconds", justify="right")
    mtable.add_column("queries/s", justify="right")
    for step, seconds in mining.items():
        mtable.add_row(step.removesuffix("_s"), f"{seconds:.1f}", f"{len(queries) / seconds:,.0f}")
    mtable.add_row("(kNN alone, query vectors)", f"{t_knn:.1f}", f"{ours['knn_qps']:,.0f}")
    console.print(mtable)
    verdict = "under" if mining["total_s"] < 180 else "OVER"
    console.print(
        f"mining pass {mining['total_s']:.1f} s: {verdict} the 3-minute target; relevant passage in the fused "
        f"top {k}: {found / len(queries):.1%} (phrase alone: {phrase_found / len(queries):.1%}); "
        f"peak RSS {result['peak_rss_mb']:,.0f} MB"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
