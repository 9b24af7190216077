"""Benchmark: the crossgenre candidates (BM25+† top 500, paper 003 §3.1) at the paper's size, with peers.

    .venv/bin/python bench/bench_crossgenre_bm25.py [--n 222000] [--queries 5034] [--rank-bm25-queries 20] [--rounds 3]

Corpus (deterministic, ``--seed``): ``--n`` abstracts resampled word by word from the real
MEDLINE records of ``data/crossgenre/medline`` (1,085 abstracts): each copies the length of
a random real abstract (x a log-normal factor, sigma 0.3) and draws each word from that
abstract (60 %), from all abstracts' words (35 %, the unigram distribution) or from a
Zipf-distributed tail of made-up rare words (5 %: real corpora have ~10^6 distinct terms).
Each of ``--queries`` headlines "cites" one abstract: 6-14 words, half drawn from that
abstract, half from the real titles' words, capitalised as a headline; every 50th carries
an abbreviation of the dictionary (``BP``, ``MS``, ``ICU``) so the expansion step runs.

Timed, in one process: our preprocessing (:mod:`tasks.crossgenre.preprocess`, ``pre`` and
``plain``, ``--threads``), the index build and the search of
:class:`tasks.common.search.bm25_rank.RankBm25` for each variant (BM25+† = ``plus`` on ``pre``
terms; ``plus`` and ``okapi`` on ``plain`` terms), top ``--k``; peak memory (``ru_maxrss``)
after ours. Peers on the same ``pre`` terms: **bm25s** ``method="bm25+"`` with ``delta=0``
(numba backend; bm25s adds BM25+'s delta only for terms a document holds, rank_bm25 for every
query term whatever the document, so delta never changes rank_bm25's order and bm25s
matches it only with delta 0): our BM25+† search and bm25s' ``retrieve`` are timed
interleaved (:func:`bench.common.interleaved`: each called once first, "cold": bm25s compiles
its numba functions there, in every new process and thread count; ours are compiled once per
install, cached on disk, and ran before, in the variant timings; then ``--rounds`` warm
rounds, round-robin), on 1 thread and on all cores, the same number on
both sides (:func:`bench.common.same_threads` pins numba's; ours gets it as ``threads``,
bm25s as ``n_threads``); ratio = bm25s' seconds / ours per round, median (min–max).
**rank_bm25** ``BM25Plus`` (the paper's tool: index, then ``get_scores`` + a sort per
headline, on ``--rank-bm25-queries`` headlines only, extrapolated to all) is the identity
oracle: our top ``--k`` must be identical on them. Results go to
``bench/results/crossgenre_bm25.json``.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import resource
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import bm25s  # type: ignore[import-untyped]
import numpy as np
import pyarrow as pa
from rank_bm25 import BM25Plus  # type: ignore[import-untyped]
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from tasks.common.pubmed.local import scan_medline
from tasks.common.search.bm25_rank import Params, RankBm25, Ranking, Variant, encode_queries
from tasks.crossgenre import preprocess as pp

MEDLINE = common.REPO / "data" / "crossgenre" / "medline"
DICTIONARY = common.REPO / "data" / "crossgenre" / "abbreviations" / "wikipedia_abbreviation_database.csv"
ANALYSES: tuple[pp.Analysis, ...] = ("pre", "plain")
VARIANTS: dict[str, tuple[Variant, pp.Analysis]] = {
    "plus_pre": ("plus", "pre"),
    "plus": ("plus", "plain"),
    "okapi": ("okapi", "plain"),
}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--n", type=int, default=222_000, help="abstracts (the paper: > 222k)")
    parser.add_argument("--queries", type=int, default=5034, help="headlines (the paper: 5,034)")
    parser.add_argument("--k", type=int, default=500)
    parser.add_argument("--rank-bm25-queries", type=int, default=20)
    parser.add_argument(
        "--threads", type=int, default=common.all_cores(), help="all cores: the second comparison"
    )
    parser.add_argument("--rounds", type=int, default=3, help="warm rounds of each timing (interleaved)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-peers", action="store_true")
    return common.parse_with_out(parser, argv, common.results_file("crossgenre_bm25"))


def tail_word(i: int) -> str:
    """A made-up rare word (letters only): the Zipf tail a real corpus has."""
    out = "zq"
    while True:
        i, r = divmod(i, 26)
        out += chr(97 + r)
        if not i:
            return out


def synthesise(n: int, queries: int, seed: int) -> tuple[list[str], list[str], list[int]]:
    """(abstracts, headlines, the abstract each headline cites); module docstring."""
    files = sorted(MEDLINE.rglob("*.xml.gz"))
    records = [r for _, r in sorted(scan_medline([(f, f.name) for f in files])[1].items()) if r.abstract]
    real = [r.abstract.split() for r in records]
    pool = np.array([w for ws in real for w in ws], dtype=object)
    titles = np.array([w for r in records for w in r.title.split()], dtype=object)
    rng = np.random.default_rng(seed)
    template = rng.integers(0, len(real), size=n)
    lengths = np.maximum(
        20, (np.array([len(real[t]) for t in template]) * rng.lognormal(0, 0.3, n)).astype(int)
    )
    abstracts: list[str] = []
    kept: dict[int, np.ndarray[Any, Any]] = {}
    cited = rng.choice(n, size=queries, replace=False)
    wanted = set(cited.tolist())
    for i in range(n):
        own = np.array(real[template[i]], dtype=object)
        source = rng.random(lengths[i])
        words = np.where(
            source < 0.6,
            own[rng.integers(0, len(own), lengths[i])],
            pool[rng.integers(0, len(pool), lengths[i])],
        )
        rare = np.flatnonzero(source >= 0.95)
        words[rare] = [tail_word(int(z)) for z in rng.zipf(1.3, size=len(rare)) % 3_000_000]
        abstracts.append(" ".join(words))
        if i in wanted:
            kept[i] = words
    headlines = []
    pick = random.Random(seed)
    for q, i in enumerate(cited.tolist()):
        size = pick.randint(6, 14)
        words = [pick.choice(kept[i]) for _ in range(size // 2)] + [
            pick.choice(titles) for _ in range(size - size // 2)
        ]
        pick.shuffle(words)
        if q % 50 == 0:
            words.insert(pick.randrange(len(words)), pick.choice(["BP", "MS", "ICU"]))
        headlines.append(" ".join(w.capitalize() if j == 0 else w for j, w in enumerate(words)))
    return abstracts, headlines, cited.tolist()


def run_ours(
    texts: pa.Array, headlines: list[str], k: int, threads: int, rounds: int, console: Console
) -> dict[str, Any]:
    """Preprocessing, build and search per variant; every figure, and each variant's ranking."""
    out: dict[str, Any] = {"variants": {}}
    corpora: dict[str, pp.Tokenised] = {}
    for analysis in ANALYSES:
        corpus, seconds = common.timed(functools.partial(pp.analyse_corpus, texts, analysis, threads))
        corpora[analysis], out[f"preprocess_{analysis}_s"] = corpus, seconds
        console.print(
            f"ours: {analysis} analysis {seconds:.1f} s, {len(corpus.terms):,} terms, {len(corpus.tokens):,} tokens"
        )
    dictionary = pp.load_abbreviations(DICTIONARY)
    plan, out["expansions_s"] = common.timed(
        functools.partial(
            pp.plan_expansions,
            headlines,
            dictionary,
            3,
            functools.partial(pp.phrase_documents, corpora["pre"]),
        )
    )
    out["expansions"] = {e.abbreviation: e.long_form for e in plan}
    for name, (kind, analysis) in VARIANTS.items():
        out["variants"][name] = run_variant(
            corpora[analysis], headlines, analysis, Params(kind), plan, k, (threads, rounds)
        )
        v = out["variants"][name]
        console.print(
            f"ours: {name} build {v['build_s']:.1f} s, search {v['search_s']:.1f} s ({v['qps']:,.0f} q/s)"
        )
    out["corpora"] = corpora
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def run_variant(
    corpus: pp.Tokenised,
    headlines: list[str],
    analysis: pp.Analysis,
    params: Params,
    plan: list[pp.Expansion],
    k: int,
    threads_repeat: tuple[int, int],
) -> dict[str, Any]:
    """One variant: its index built once, its search timed as the best of ``rounds`` runs (the
    comparison with bm25s is :func:`run_bm25s`'s)."""
    threads, rounds = threads_repeat
    q_terms, q_starts = encode_queries(
        pp.analyse_queries(headlines, analysis, pp.expansion_words(plan)), corpus.index
    )
    build = functools.partial(RankBm25.build, corpus.tokens, corpus.starts, len(corpus.terms), params)
    index, t_build = common.timed(build)
    ranking, t_search = common.best_of(rounds, functools.partial(index.search, q_terms, q_starts, k, threads))
    return {
        "build_s": t_build,
        "search_s": t_search,
        "qps": len(headlines) / t_search,
        "postings": int(index.indptr[-1]),
        "index": index,
        "ranking": ranking,
        "q_terms": q_terms,
        "q_starts": q_starts,
    }


def terms_lists(corpus: pp.Tokenised) -> list[list[str]]:
    terms = corpus.terms
    return [
        [terms[t] for t in corpus.tokens[a:b]]
        for a, b in zip(corpus.starts[:-1].tolist(), corpus.starts[1:].tolist(), strict=True)
    ]


def same_top(scores: np.ndarray[Any, Any], floor: float, rows: np.ndarray[Any, Any], k: int) -> bool:
    """Our rows are rank_bm25's top k (its own scores, position by position, to 1e-9)."""
    above = np.flatnonzero(scores > floor + 1e-9)
    top = above[np.lexsort((above, -scores[above]))][:k]
    return len(top) == len(rows) and bool(np.allclose(scores[rows], scores[top], rtol=1e-9, atol=1e-12))


def run_rank_bm25(docs: list[list[str]], ours: dict[str, Any], sample: int, k: int) -> dict[str, Any]:
    model, t_index = common.timed(lambda: BM25Plus(docs))
    v = ours["variants"]["plus_pre"]
    ranking: Ranking = v["ranking"]
    terms = ours["corpora"]["pre"].terms
    identical = 0
    seconds = 0.0
    for q in range(sample):
        query = [
            terms[t] if t >= 0 else "\x00" for t in v["q_terms"][v["q_starts"][q] : v["q_starts"][q + 1]]
        ]
        scores, t = common.timed(functools.partial(model.get_scores, query))
        _, t_sort = common.timed(functools.partial(np.argsort, scores))
        seconds += t + t_sort
        floor = sum(model.idf.get(w) or 0 for w in query)
        identical += same_top(scores, floor, ranking.rows[q, : ranking.counts[q]], k)
    per_query = seconds / sample
    return {"index_s": t_index, "per_query_s": per_query, "sample": sample, "identical_top": identical}


def run_bm25s(
    docs: list[list[str]], ours: dict[str, Any], threads: Sequence[int], rounds: int, k: int
) -> dict[str, Any]:
    """bm25s on our ``pre`` terms against our BM25+† search, interleaved, per thread count."""
    corpus: pp.Tokenised = ours["corpora"]["pre"]
    vocab = {t: i for i, t in enumerate(corpus.terms)}
    ids = [[vocab[w] for w in d] for d in docs]
    retriever = bm25s.BM25(method="bm25+", k1=1.5, b=0.75, delta=0.0, backend="numba")
    _, t_index = common.timed(
        lambda: retriever.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
    )
    v = ours["variants"]["plus_pre"]
    index: RankBm25 = v["index"]
    queries = [
        [int(t) for t in v["q_terms"][a:b] if t >= 0]
        or [0]  # bm25s needs a token (term 0 stands in; not in the overlap)
        for a, b in zip(v["q_starts"][:-1], v["q_starts"][1:], strict=True)
    ]
    tokenized = bm25s.tokenization.Tokenized(ids=queries, vocab=vocab)
    out: dict[str, Any] = {"index_s": t_index, "ours_build_s": v["build_s"], "by_threads": {}}
    for n in dict.fromkeys(threads):
        with common.same_threads(n):
            timings = common.interleaved(
                {
                    "ours": functools.partial(index.search, v["q_terms"], v["q_starts"], k, n),
                    "bm25s": functools.partial(
                        retriever.retrieve, tokenized, k=k, show_progress=False, n_threads=n
                    ),
                },
                rounds,
            )
        cold = timings.cold["bm25s"] / timings.cold["ours"] if timings.cold.get("ours") else None
        out["by_threads"][str(n)] = {
            "timings": timings.summary(),
            "warm_ratio": common.ratio_summary(timings.warm["bm25s"], timings.warm["ours"]),
            "cold_ratio": cold,
            "ours_qps": len(queries) / timings.median("ours"),
            "bm25s_qps": len(queries) / timings.median("bm25s"),
            "table_row": common.table_row(
                "crossgenre candidates, BM25+† top k", f"{index.documents:,} abstracts, {len(queries):,} headlines, k {k}",
                str(n), timings, ("ours: RankBm25.search", "ours"), ("bm25s numba, bm25+ delta 0", "bm25s"),
            ),
        }  # fmt: skip
    result = timings.results["bm25s"]
    ranking: Ranking = timings.results["ours"]
    shares = [len(set(result.documents[q].tolist()) & set(ranking.rows[q, : ranking.counts[q]].tolist())) / max(1, ranking.counts[q])
              for q in range(len(queries)) if ranking.counts[q] >= k]  # fmt: skip
    out["overlap_at_k"] = float(np.mean(shares)) if shares else None
    return out


def recall(ranking: Ranking, cited: list[int], ks: Sequence[int]) -> dict[int, float]:
    return {
        k: float(np.mean([c in ranking.rows[q, : min(k, ranking.counts[q])] for q, c in enumerate(cited)]))
        for k in ks
    }


def report(console: Console, result: dict[str, Any]) -> None:
    ours, n, q, k = result["ours"], result["n"], result["queries"], result["k"]
    table = common.figures_table(f"BM25 top {k}, {n:,} abstracts, {q:,} headlines, {result['cpus']} CPUs",
                                 ("engine", "index s", "search s", "queries/s", "ours / peer", "top-k check"))  # fmt: skip
    best = ours["variants"]["plus_pre"]
    for name, v in ours["variants"].items():
        table.add_row(
            f"ours: {name}", f"{v['build_s']:.1f}", f"{v['search_s']:.1f}", f"{v['qps']:,.0f}", "", ""
        )
    peers = result.get("peers", {})
    if "rank_bm25" in peers:
        r = peers["rank_bm25"]
        total = r["per_query_s"] * q
        table.add_row("rank_bm25 BM25Plus (pre terms), extrapolated", f"{r['index_s']:.1f}", f"{total:,.0f}",
                      f"{1 / r['per_query_s']:.2f}", f"{total / best['search_s']:,.0f}x",
                      f"{r['identical_top']}/{r['sample']} identical")  # fmt: skip
    if "bm25s" in peers:
        b = peers["bm25s"]
        for n, row in b["by_threads"].items():
            t = row["timings"]
            table.add_row(f"bm25s bm25+ delta 0 (numba), {n} thread(s)", f"{b['index_s']:.1f}",
                          f"{t['bm25s']['median_s']:.2f}", f"{row['bm25s_qps']:,.0f}", "", "")  # fmt: skip
            table.add_row(f"  ours BM25+†, same {n} thread(s), interleaved", f"{b['ours_build_s']:.1f}",
                          f"{t['ours']['median_s']:.2f}", f"{row['ours_qps']:,.0f}",
                          f"{row['warm_ratio']['text']} warm, {row['cold_ratio']:.2f}× cold",
                          f"top-{k} overlap {b['overlap_at_k']:.1%}")  # fmt: skip
    console.print(table)
    memory = f"peak RSS after ours {ours['peak_rss_mb']:,.0f} MB, at the end {result['peak_rss_mb']:,.0f} MB"
    recall = ", ".join(f"@{k} {v:.3f}" for k, v in result["recall"].items())
    console.print(
        f"preprocessing: pre {ours['preprocess_pre_s']:.1f} s, plain {ours['preprocess_plain_s']:.1f} s"
    )
    console.print(f"{memory}; BM25+† recall of the cited abstract (synthetic headlines): {recall}")
    console.print(f"abbreviations expanded: {ours['expansions']}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=140)
    (abstracts, headlines, cited), t_make = common.timed(lambda: synthesise(args.n, args.queries, args.seed))
    texts = pa.array(abstracts, pa.large_string())
    del abstracts
    console.print(f"synthesised {len(texts):,} abstracts and {len(headlines):,} headlines in {t_make:.0f} s; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    ours = run_ours(texts, headlines, args.k, args.threads, args.rounds, console)
    result: dict[str, Any] = {"n": len(texts), "queries": len(headlines), "k": args.k, "cpus": os.cpu_count(),
                              "threads": args.threads, "rounds": args.rounds,
                              "load_average_start": os.getloadavg()}  # fmt: skip
    result["recall"] = recall(ours["variants"]["plus_pre"]["ranking"], cited, (1, 5, 20, 100, 500))
    if not args.skip_peers:
        docs = terms_lists(ours["corpora"]["pre"])
        result["peers"] = {"bm25s": run_bm25s(docs, ours, (1, args.threads), args.rounds, args.k)}
        for n, row in result["peers"]["bm25s"]["by_threads"].items():
            console.print(
                f"bm25s / ours, {n} thread(s): {row['warm_ratio']['text']} warm, {row['cold_ratio']:.2f}x cold"
            )
        result["table"] = [row.pop("table_row") for row in result["peers"]["bm25s"]["by_threads"].values()]
        result["peers"]["rank_bm25"] = run_rank_bm25(docs, ours, args.rank_bm25_queries, args.k)
    result["peak_rss_mb"] = peak_rss_mb()
    result["ours"] = ours
    result["load_average_end"] = os.getloadavg()
    report(console, result)
    for v in ours["variants"].values():
        for key in ("index", "ranking", "q_terms", "q_starts"):
            v.pop(key)
    ours.pop("corpora")
    result["environment"] = common.environment(
        numpy=np.__version__, pyarrow=pa.__version__, bm25s=version("bm25s"), rank_bm25=version("rank-bm25")
    )
    common.write_results(args.out, result, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
