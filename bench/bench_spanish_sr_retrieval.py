"""Benchmark: the spanish_sr bm25 analysis and index, BM25 search and first stage, with peers.

    .venv/bin/python bench/bench_spanish_sr_retrieval.py [--docs 20000] [--queries 200] [--peer-queries 20] [--rounds 3]

Corpus (deterministic, ``--seed``): ``--docs`` Spanish abstracts resampled word by word from
the 300 real CT-EBM-SP records of ``data/spanish_sr/ct-ebm-sp`` (brat ``.txt``, first
non-blank line the title, as :mod:`tasks.spanish_sr.records` reads them): each copies the
length of a random real abstract (x a log-normal factor, sigma 0.3) and draws each word from
that abstract (60 %), from all abstracts' words (35 %) or from a Zipf tail of made-up rare
words (5 %), as ``bench/bench_crossgenre_bm25.py`` does. ``--queries`` records are sampled;
each one's title (the flow's questions are titles) is resampled from its template's title
(60 %), its own abstract (20 %) and all titles' words (20 %). Record ids follow row order.

Interleaved (``bench.common.interleaved``: a cold call each, then ``--rounds`` rounds, order
rotated), one thread each unless said; the analysis and the index build by the thread's CPU
time (``time.thread_time``), the searches by wall time:

* the ``bm25`` stage's **analysis** (:func:`~tasks.spanish_sr.fusion_scores.encode_corpus`, es,
  a fresh analyzer a call): ours, :meth:`~tasks.spanish_sr.analysis.Analyzer.documents` (each
  distinct piece analysed once), against the per-word path it replaced (``Analyzer.document``
  text by text); the terms must be the same. Then the **index build**: ours
  (:class:`~tasks.common.search.bm25_rank.RankBm25`, BM25Okapi k1 1.2, b 0.75) against
  **rank_bm25** ``BM25Okapi`` on the same terms, and the analysis' share of analysis + build;
* **BM25 top** ``--top`` of ``--peer-queries`` questions, query analysis included: ours
  (``RankBm25.search``) against rank_bm25 (``get_scores``, stable ``argsort``: ties by row =
  by record id), on one thread, then ours on every core (rank_bm25 has none); the rankings
  must be equal (scores within 1e-6).

Ours alone, once: every method of :func:`~tasks.spanish_sr.fusion_scores.first_stage` over
all questions, dense scores from **deterministic random unit vectors** (384-d, through an
Encoder-port object; encoding is a GPU job), their dense top overlap with numpy's float32
product; the builtin all-MiniLM-L6-v2's CPU throughput on ``--encode-sample`` abstracts,
**extrapolated** to the corpus. Sizes: 20,000 abstracts by default (a few minutes on 2 cores).
Results go to ``bench/results/spanish_sr_retrieval.json``.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import sys
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.spanish_sr_corpus import DIMS, RandomUnitEncoder, synthesise
from tasks.common.embed.local import BUILTIN_MINILM, SentenceTransformerEncoder
from tasks.common.embed.port import F32
from tasks.common.search.bm25_rank import encode_documents, encode_queries
from tasks.spanish_sr import fusion_scores as fs
from tasks.spanish_sr.analysis import Analyzer
from tasks.spanish_sr.stages.bm25 import Bm25Config

PARAMS = fs.Bm25Params(k1=1.2, b=0.75, variant="okapi", language="es", fold_accents=False)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--docs", type=int, default=20_000, help="abstracts (paper 004's LILACS: ~175k)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved warm rounds of ours and each peer")
    parser.add_argument("--top", type=int, default=100)
    parser.add_argument("--peer-queries", type=int, default=20, help="rank_bm25 queries (extrapolated)")
    parser.add_argument("--encode-sample", type=int, default=64, help="abstracts the real encoder encodes")
    parser.add_argument("--seed", type=int, default=0)
    return common.parse_with_out(parser, argv, common.results_file("spanish_sr_retrieval"))


GRID_CELLS = len(Bm25Config().k1_grid) * len(Bm25Config().b_grid)


class PerWord:
    """The analysis before issue 26: :meth:`Analyzer.document` text by text, every word folded,
    stopped and stemmed where it stands (the batch path's test oracle; here its bench peer)."""

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer

    def encode_documents(self, texts: Sequence[str | None]) -> tuple[dict[str, int], Any, Any]:
        return encode_documents([self.analyzer.document(t) for t in texts])


def analysis_and_index(ids: list[str], texts: list[str], rounds: int, console: Console) -> dict[str, Any]:
    """The ``bm25`` stage's analysis (ours, the per-word path) and index build (ours, rank_bm25
    BM25Okapi over the same terms), each interleaved on one thread and timed by its CPU time
    (``time.thread_time``: steadier on a shared machine); a fresh analyzer a call."""
    new = lambda: fs.encode_corpus(Analyzer(PARAMS.language, PARAMS.fold_accents), texts)  # noqa: E731
    old = lambda: fs.encode_corpus(PerWord(Analyzer(PARAMS.language, PARAMS.fold_accents)), texts)  # type: ignore[arg-type]  # noqa: E731
    with common.same_threads(1):
        analysis = common.interleaved({"ours": new, "per_word": old}, rounds, clock=time.thread_time)
    encoded = analysis.results["ours"]
    same = all(
        encoded[0] == other[0]
        and np.array_equal(encoded[1], other[1])
        and np.array_equal(encoded[2], other[2])
        for other in (analysis.results["per_word"],)
    )
    vocabulary, tokens, starts = encoded
    terms = np.array(list(vocabulary), dtype=object)
    docs = [
        terms[tokens[a:b]].tolist() for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)
    ]
    with common.same_threads(1):
        build = common.interleaved(
            {"ours": lambda: fs.bm25_index(ids, encoded, PARAMS),
             "rank_bm25": functools.partial(BM25Okapi, docs, k1=PARAMS.k1, b=PARAMS.b)},
            rounds, clock=time.thread_time,
        )  # fmt: skip
    a_new, a_old, t_index = analysis.median("ours"), analysis.median("per_word"), build.median("ours")
    grid = t_index * GRID_CELLS  # the bm25 stage builds one index per (k1, b) cell
    console.print(
        f"analysis: ours {a_new:.2f} s, per-word {a_old:.2f} s ({analysis.ratio('per_word', 'ours')}), "
        f"same terms: {same}; index build {t_index:.2f} s, x{GRID_CELLS} grid cells {grid:.2f} s; analysis "
        f"share of analysis + grid builds: {a_new / (a_new + grid):.0%} (per-word: {a_old / (a_old + grid):.0%})"
    )
    return {
        "encoded": encoded, "index": build.results["ours"], "rank_bm25": build.results["rank_bm25"],
        "figures": {"analysis": analysis.summary(), "index": build.summary(), "same_terms": same,
                    "terms": len(vocabulary), "tokens": len(tokens), "grid_cells": GRID_CELLS,
                    "analysis_share": a_new / (a_new + grid), "analysis_share_per_word": a_old / (a_old + grid)},
        "timings": (analysis, build),
    }  # fmt: skip


def first_stage_once(
    prepared: fs.Prepared, questions: list[tuple[str, str]], encoder: RandomUnitEncoder, top: int, console: Console
) -> tuple[dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
    """Ours alone, each method once (no peer runs these fusions): seconds, queries/s, the rows of all six."""
    out: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    runs: list[tuple[str, tuple[fs.Method, ...]]] = [("scoring only", ())]
    runs += [(m, (m,)) for m in fs.METHODS] + [("all six", fs.METHODS)]
    for name, methods in runs:
        fusion = fs.Fusion(methods=methods, top_n=top)
        found, seconds = common.timed(lambda f=fusion: fs.run_first_stage(prepared, questions, encoder, f))  # type: ignore[misc]
        out[name] = {"s": seconds, "qps": len(questions) / seconds, "rows": len(found)}
        console.print(f"ours: {name} {seconds:.1f} s ({len(questions) / seconds:,.1f} q/s), once")
        rows = found if name == "all six" else rows
    return out, rows


def search_rounds(
    prepared: fs.Prepared, model: Any, questions: list[tuple[str, str]], top: int, rounds: int, console: Console
) -> tuple[dict[str, Any], list[common.Timings]]:  # fmt: skip
    """BM25 top ``top`` of the sampled ``questions``, query analysis included: ours
    (``RankBm25.search``) against rank_bm25 (``get_scores``, stable argsort), interleaved on
    one thread, then on every core (rank_bm25 has no parallel path); rankings compared."""
    analyzer, vocabulary, index = prepared.analyzer, prepared.vocabulary, prepared.index

    def ours(threads: int) -> Any:
        q_terms, q_starts = encode_queries(analyzer.queries([t for _, t in questions]), vocabulary)
        return index.search(q_terms, q_starts, top, threads)

    def peer() -> list[tuple[Any, Any]]:
        out = []
        for words in analyzer.queries([t for _, t in questions]):
            scores = model.get_scores(words)
            order = np.argsort(-scores, kind="stable")[:top]
            out.append((order, scores[order]))
        return out

    figures: dict[str, Any] = {}
    timings = []
    for threads in dict.fromkeys((1, common.all_cores())):
        with common.same_threads(threads):
            tm = common.interleaved({"ours": functools.partial(ours, threads), "rank_bm25": peer}, rounds)
        timings.append(tm)
        ranking, theirs = tm.results["ours"], tm.results["rank_bm25"]
        identical = sum(
            np.array_equal(ranking.rows[q, : ranking.counts[q]], order[: ranking.counts[q]])
            and bool(np.allclose(ranking.scores[q, : ranking.counts[q]], scores[: ranking.counts[q]], rtol=0, atol=1e-6))
            for q, (order, scores) in enumerate(theirs)
        )  # fmt: skip
        figures[f"threads_{threads}"] = {"timings": tm.summary(), "identical_top": identical}
        console.print(f"BM25 search, {threads} thread(s): rank_bm25/ours {tm.ratio('rank_bm25', 'ours')}, "
                      f"identical top {top}: {identical}/{len(questions)}")  # fmt: skip
    return figures, timings


def dense_peer(vectors: F32, passages: F32, top: int) -> tuple[F32, list[Any]]:
    """numpy's plain dense retrieval: one float32 product, a stable argsort per query."""
    scores = vectors @ passages.T
    return scores, [np.argsort(-row, kind="stable")[:top] for row in scores]


def encoder_throughput(corpus: list[tuple[str, str]], sample: int) -> dict[str, Any]:
    """The builtin all-MiniLM-L6-v2 on CPU over ``sample`` synthetic abstracts."""
    model, t_load = common.timed(lambda: SentenceTransformerEncoder(BUILTIN_MINILM, device="cpu"))
    texts = [text for _, text in corpus[:sample]]
    model.encode(texts[:16], kind="passage")  # warm-up
    _, seconds = common.timed(lambda: model.encode(texts, kind="passage"))
    return {"model": BUILTIN_MINILM, "load_s": t_load, "texts": len(texts), "s": seconds,
            "texts_per_s": len(texts) / seconds, "max_seq_length": model.max_seq_length}  # fmt: skip


def self_retrieval(rows: list[dict[str, Any]], top: int) -> dict[str, float]:
    """Per method: the share of questions whose own record is in the top ``top``."""
    queries = {r["query_id"] for r in rows}
    found: dict[str, set[str]] = {m: set() for m in fs.METHODS}
    for r in rows:
        if r["record_id"] == r["query_id"] and r["rank"] <= top:
            found[r["method"]].add(r["query_id"])
    return {m: len(found[m]) / max(1, len(queries)) for m in fs.METHODS}


def report(console: Console, result: dict[str, Any]) -> None:
    n, q = result["docs"], result["queries"]
    table = common.figures_table(
        f"spanish_sr bm25 / first stage: {n:,} abstracts, {result['rounds']} interleaved rounds",
        ("what", "threads", "ours warm s", "peer warm s", "peer / ours warm", "cold"),
    )
    for row in result["table"]:
        table.add_row(
            f"{row['what']}: {row['peer']}", row["threads"], f"{row['ours_warm_median_s']:.2f}",
            f"{row['peer_warm_median_s']:.2f}", row["warm"]["text"], row["cold"]["text"] if row["cold"] else "",
        )  # fmt: skip
    console.print(table)
    f = result["bm25_stage"]
    console.print(
        f"analysis share of the bm25 stage's analysis + its {f['grid_cells']} index builds: "
        f"{f['analysis_share']:.0%} (per-word path: {f['analysis_share_per_word']:.0%}); same terms as the "
        f"per-word path: {f['same_terms']}"
    )
    once = common.figures_table(
        f"ours alone, once: first stage over {q:,} questions", ("run", "s", "queries/s")
    )
    for name, v in result["first_stage"].items():
        once.add_row(name, f"{v['s']:.1f}", f"{v['qps']:,.1f}")
    console.print(once)
    console.print(
        f"dense top {result['top']} overlap with numpy float32: {result['dense_top_overlap']:.1%}; self-retrieval: "
        + ", ".join(f"{m} {v:.3f}" for m, v in result["self_retrieval"].items())
        + f"; peak RSS {result['peak_rss_mb']:,.0f} MB"
    )
    e = result["encoder"]
    if e:
        console.print(
            f"real encoder {e['model']} on CPU: {e['texts_per_s']:.1f} abstracts/s ({e['texts']} in {e['s']:.1f} s) "
            f"-> {n:,} abstracts ~{e['corpus_s_extrapolated'] / 3600:.1f} h (extrapolated)"
        )


def ranked(rows: list[dict[str, Any]], method: str) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for r in rows:
        if r["method"] == method:
            out.setdefault(r["query_id"], []).append((r["record_id"], r["score"]))
    return out


def dense_overlap(prepared: fs.Prepared, questions: list[tuple[str, str]], encoder: Any, rows: list[dict[str, Any]], top: int) -> float:  # fmt: skip
    """The mean share of our dense top ``top`` that numpy's float32 product also ranks there."""
    ours = ranked(rows, "dense")
    passages = prepared.vectors.astype(np.float32)
    shares = []
    for at in range(0, len(questions), 64):
        batch = questions[at : at + 64]
        _, orders = dense_peer(encoder.encode([t for _, t in batch], kind="query"), passages, top)
        shares += [len({prepared.ids[r] for r in o} & {r for r, _ in ours[qid]}) / top for (qid, _), o in zip(batch, orders, strict=True)]  # fmt: skip
    return float(np.mean(shares))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=150)
    (corpus, questions), t_make = common.timed(lambda: synthesise(args.docs, args.queries, args.seed))
    console.print(f"synthesised {len(corpus):,} abstracts and {len(questions):,} questions in {t_make:.0f} s; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    ids, texts = [rid for rid, _ in corpus], [text for _, text in corpus]
    built = analysis_and_index(ids, texts, args.rounds, console)
    encoder = RandomUnitEncoder(0)
    vectors = encoder.encode(texts, kind="passage").astype(np.float64)
    id_rank, index = built["index"]
    analyzer = Analyzer(PARAMS.language, PARAMS.fold_accents)
    prepared = fs.Prepared(ids, id_rank, {pid: i for i, pid in enumerate(ids)}, analyzer, built["encoded"][0], index, vectors)  # fmt: skip
    sample = questions[: args.peer_queries]
    search, rounds = search_rounds(prepared, built["rank_bm25"], sample, args.top, args.rounds, console)
    one, every = rounds[0], rounds[-1]
    analysis, build = built["timings"]
    size = f"{len(corpus):,} abstracts"
    qsize = f"{size}, {len(sample)} queries"
    table = [
        common.table_row(
            "spanish_sr bm25 analysis (thread CPU s)",
            size,
            "1",
            analysis,
            ("ours: Analyzer.encode_documents", "ours"),
            ("per-word Analyzer.document", "per_word"),
        ),
        common.table_row(
            "spanish_sr BM25 index build (thread CPU s)",
            size,
            "1",
            build,
            ("ours: RankBm25.build", "ours"),
            ("rank_bm25 BM25Okapi", "rank_bm25"),
        ),
        common.table_row(
            f"spanish_sr BM25 top {args.top}",
            qsize,
            "1",
            one,
            ("ours: RankBm25.search", "ours"),
            ("rank_bm25 get_scores + argsort", "rank_bm25"),
        ),
    ]
    if every is not one:
        cores = common.all_cores()
        table.append(common.table_row(f"spanish_sr BM25 top {args.top}, all cores", qsize, f"ours {cores}, peer 1", every,
                                      ("ours: RankBm25.search", "ours"), ("rank_bm25 get_scores + argsort", "rank_bm25")))  # fmt: skip
    first, rows = first_stage_once(prepared, questions, encoder, args.top, console)
    result: dict[str, Any] = {
        "docs": len(corpus), "queries": len(questions), "top": args.top, "cpus": os.cpu_count(), "seed": args.seed,
        "rounds": args.rounds, "table": table, "bm25_stage": built["figures"], "bm25_search": search,
        "first_stage": first, "self_retrieval": self_retrieval(rows, args.top),
        "dense_top_overlap": dense_overlap(prepared, questions, encoder, rows, args.top),
        "dense_vectors": f"random unit vectors ({DIMS}-d float32, seeded) through the Encoder port: "
                         "retrieval timing only; encoding is a GPU job",
    }  # fmt: skip
    result["encoder"] = {}
    if args.encode_sample > 0:
        e = encoder_throughput(corpus, args.encode_sample)
        e["corpus_s_extrapolated"] = len(corpus) / e["texts_per_s"]
        result["encoder"] = e
    result["peak_rss_mb"] = peak_rss_mb()
    result["load_average_end"] = os.getloadavg()
    report(console, result)
    result["environment"] = common.environment(numpy=np.__version__, rank_bm25=version("rank-bm25"))
    common.write_results(args.out, result, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
