"""Benchmark: the embedded search backend (tantivy + numpy) on a CURE-sized mining pass, with BM25 peers.

    .venv/bin/python bench/bench_search.py [--n 20000] [--queries 1000] [--rounds 3]

Corpus (deterministic, ``--seed``): every ``<p>`` of the shared sample articles, reviews
and HTML pages is split into sentences, and passages of 50-150 words are built from runs
of 1-3 consecutive sentences of different paragraphs (``bench/samples.py``, ``build_passages``)
until ``--n`` distinct passages exist. Vectors are **random unit vectors** of ``--dims``
(384, MiniLM's size), precomputed with a fixed seed: no embedding model runs, so only
search is timed and kNN quality is meaningless. Each of ``--queries`` queries is a
fragment of 4-12 words of one sentence of a random passage, its "relevant passage"; its
vector is the passage's vector plus noise, normalised.

In one process it times

* ours, :class:`tasks.common.search.embedded.backend.EmbeddedBackend`: the index build (tantivy + vectors
  + ids + token store, committed, and the BM25 matrix of :mod:`tasks.common.search.bm25_kernels`),
  BM25 (``bm25``: tantivy's BM25 scored from that matrix by numba kernels) and kNN
  (``knn``) queries per second over all queries, and the full CURE mining pass: ``phrase``
  (query text, slop 2), ``fuzzy`` (passage text), ``knn`` (query vector) and ``knn``
  (passage vector), each k = 50, num_candidates = 250, then RRF (k = 60) of the four lists
  per query;
* BM25 peers on the same passages and queries, top 50, interleaved with ours
  (``bench.common.interleaved``: a cold call each, then ``--rounds`` rounds, order rotated)
  on one thread each (our index reopened with ``threads=1``, numba and BLAS pinned, the
  peers' ``n_threads=1``), then on every core: **tantivy** itself on our index
  (``bm25_tantivy``: the same query and scores; ``bm25``'s test oracle, and its
  implementation before the matrix), **bm25s** ``method="lucene"`` (both its numpy and
  numba backends) and **rank_bm25** ``BM25Okapi``. rank_bm25 scores every passage in Python
  per query, so it and ours are timed on ``--rank-bm25-queries`` queries only. Peers get
  the same analysis as ours (lowercased alphanumeric runs, no stop words removed, no
  stemming) and their query tokenisation is inside the timing, as ours is.

The top-10 overlap with bm25s (Lucene's BM25; tantivy's is 2.2x with quantised lengths) is
printed as a sanity check (with tantivy: the same ranking, up to near-ties). The mining
pass and index builds run once. Results go to
``bench/results/search.json``.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.samples import SENTENCE, build_passages, sample_passages
from bench.search_peers import bm25_rounds
from tasks.common.search.embedded.backend import EmbeddedBackend
from tasks.common.search.fusion import rrf
from tasks.common.search.port import F32, PASSAGE_SCHEMA, vectors_column


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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.bench_parser(__doc__)
    parser.add_argument(
        "--n", type=int, default=20_000, help="passages (20,000: minutes on 2 cores; CURE: 200,000)"
    )
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--num-candidates", type=int, default=250)
    parser.add_argument("--rank-bm25-queries", type=int, default=20, help="queries given to rank_bm25")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved warm rounds (not the mining pass)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-peers", action="store_true", help="only ours (quick runs)")
    parser.add_argument("--index-dir", type=Path, default=None, help="where to build (default: a temp dir)")
    return common.parse_with_out(parser, argv, common.results_file("search"))


@dataclass
class Inputs:
    """The passages, their vectors, and the queries with their relevant passage."""

    texts: list[str]
    ids: list[str]
    vectors: F32
    queries: list[str]
    relevant: list[int]
    query_vectors: F32
    passage_texts: list[str]  # each query's relevant passage
    passage_vectors: F32


def make_inputs(args: argparse.Namespace) -> Inputs:
    rng = random.Random(args.seed)
    texts = build_passages(sample_passages(), args.n, rng)
    vectors = unit(
        np.random.default_rng(args.seed).standard_normal((len(texts), args.dims), dtype=np.float32)
    )
    queries, relevant = make_queries(texts, args.queries, rng)
    noise = np.random.default_rng(args.seed + 1).standard_normal((len(queries), args.dims), dtype=np.float32)
    return Inputs(
        texts=texts,
        ids=[f"p-{i:07d}" for i in range(len(texts))],
        vectors=vectors,
        queries=queries,
        relevant=relevant,
        query_vectors=unit(vectors[relevant] + 0.05 * noise),
        passage_texts=[texts[i] for i in relevant],
        passage_vectors=np.ascontiguousarray(vectors[relevant]),
    )


def mining_pass(
    backend: EmbeddedBackend, x: Inputs, k: int, nc: int
) -> tuple[dict[str, float], list[Any], Any]:
    """The CURE mining pass (phrase, fuzzy, two kNN lists, RRF): its timings, fused and phrase hits."""
    mining: dict[str, float] = {}
    phrase_hits, mining["phrase_s"] = common.timed(lambda: backend.phrase(x.queries, 2, k))
    fuzzy_hits, mining["fuzzy_s"] = common.timed(lambda: backend.fuzzy(x.passage_texts, k))
    knn_q, mining["knn_query_s"] = common.timed(lambda: backend.knn(x.query_vectors, k, nc))
    knn_p, mining["knn_passage_s"] = common.timed(lambda: backend.knn(x.passage_vectors, k, nc))
    fused, mining["rrf_s"] = common.timed(
        lambda: [
            rrf({"phrase": a, "fuzzy": b, "knn_query": c, "knn_passage": d}, k=60, top=k)
            for a, b, c, d in zip(phrase_hits, fuzzy_hits, knn_q, knn_p, strict=True)
        ]
    )
    mining["total_s"] = sum(mining.values())
    return mining, fused, phrase_hits


def run_ours(args: argparse.Namespace, x: Inputs, console: Console) -> dict[str, Any]:
    """Ours: the build (once), BM25 against the peers on one thread and on every core
    (:func:`bench.search_peers.bm25_rounds`), kNN, the mining pass; the figures."""
    k, nc, queries, cpus = args.k, args.num_candidates, x.queries, common.all_cores()
    with tempfile.TemporaryDirectory(dir=args.index_dir) as tmp:
        backend = EmbeddedBackend.create(Path(tmp) / "index", args.dims, threads=cpus)

        def build() -> int:
            report = backend.add(batches(x.ids, x.texts, x.vectors))
            backend.finish()
            # The first bm25 call builds the BM25 matrix: index time, as the peers' index() builds theirs.
            backend.bm25(queries[:1], k)
            return report.indexed

        indexed, t_build = common.timed(build)
        assert indexed == len(x.texts), indexed
        size_mb = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file()) / 2**20
        console.print(f"ours: built in {t_build:.1f} s ({size_mb:.0f} MB on disk)")
        one = EmbeddedBackend.open(Path(tmp) / "index", threads=1)  # the same index, searched in one thread
        bm25 = bm25_rounds(args, x.texts, queries, x.ids, {1: one, cpus: backend}, console)
        knn = common.interleaved({"knn": lambda: backend.knn(x.query_vectors, k, nc)}, args.rounds)
        t_knn = knn.median("knn")
        mining, fused, phrase_hits = mining_pass(backend, x, k, nc)
        one.close()
        backend.close()

    found = sum(x.ids[r] in {f.passage_id for f in fl} for r, fl in zip(x.relevant, fused, strict=True))
    phrase_found = sum(
        any(h.passage_id == x.ids[r] for h in hl) for r, hl in zip(x.relevant, phrase_hits, strict=True)
    )
    return {
        "build_s": t_build,
        "index_mb": size_mb,
        "bm25": bm25,
        "knn_timings": knn.summary(),
        "knn_qps": len(queries) / t_knn,
        "mining": mining,
        "mining_qps": len(queries) / mining["total_s"],
        "relevant_in_fused_top": found / len(queries),
        "relevant_in_phrase_top": phrase_found / len(queries),
    }


def report(console: Console, result: dict[str, Any]) -> None:
    """The BM25 table (ours against each peer, per thread count), the mining pass table, the verdict."""
    ours, k, n_queries = result["ours"], result["k"], result["queries"]
    table = common.figures_table(
        f"BM25, {result['n']:,} passages, top {k}, {result['rounds']} interleaved rounds "
        f"(ours built in {ours['build_s']:.1f} s, vectors included)",
        ("peer", "threads", "queries", "ours warm s", "peer warm s", "peer / ours warm", "cold"),
    )
    for row in ours["bm25"]["table"]:
        table.add_row(
            row["peer"], row["threads"], row["size"].split(", ")[-1], f"{row['ours_warm_median_s']:.2f}",
            f"{row['peer_warm_median_s']:.2f}", row["warm"]["text"], row["cold"]["text"] if row["cold"] else "",
        )  # fmt: skip
    console.print(table)
    console.print(f"peer index builds (once): {ours['bm25']['index_s']}")
    mining = ours["mining"]
    mtable = common.figures_table(
        f"ours: mining pass, {n_queries:,} queries, k={k}, num_candidates={result['num_candidates']}",
        ("step", "seconds", "queries/s"),
    )
    for step, seconds in mining.items():
        mtable.add_row(step.removesuffix("_s"), f"{seconds:.1f}", f"{n_queries / seconds:,.0f}")
    mtable.add_row(
        "(kNN alone, query vectors, warm median)",
        f"{n_queries / ours['knn_qps']:.1f}",
        f"{ours['knn_qps']:,.0f}",
    )
    console.print(mtable)
    verdict = "under" if mining["total_s"] < 180 else "OVER"
    console.print(
        f"mining pass {mining['total_s']:.1f} s: {verdict} the 3-minute target; relevant passage in the fused "
        f"top {k}: {ours['relevant_in_fused_top']:.1%} (phrase alone: {ours['relevant_in_phrase_top']:.1%}); "
        f"peak RSS {result['peak_rss_mb']:,.0f} MB"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=120)
    cpus = os.cpu_count() or 1
    x = make_inputs(args)
    console.print(
        f"{len(x.texts):,} passages, {np.mean([len(t.split()) for t in x.texts]):.0f} words on average; "
        f"{len(x.queries):,} queries of {np.mean([len(q.split()) for q in x.queries]):.1f} words; "
        f"vectors: random unit vectors, {args.dims} dims, precomputed (no model runs); {cpus} CPUs"
    )
    result: dict[str, Any] = {
        "n": len(x.texts),
        "queries": len(x.queries),
        "dims": args.dims,
        "k": args.k,
        "num_candidates": args.num_candidates,
        "vectors": "random unit vectors, precomputed",
        "cpus": cpus,
        "rounds": args.rounds,
    }
    result["ours"] = run_ours(args, x, console)
    result["table"] = result["ours"]["bm25"]["table"]
    result["peak_rss_mb"] = peak_rss_mb()
    result["environment"] = common.environment(
        tantivy=version("tantivy"),
        numpy=np.__version__,
        bm25s=version("bm25s"),
        rank_bm25=version("rank-bm25"),
    )
    report(console, result)
    common.write_results(args.out, result, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
