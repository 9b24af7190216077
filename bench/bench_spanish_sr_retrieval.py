"""Benchmark: the spanish_sr first stage (BM25 + dense + their fusions, top 100) at the paper's LILACS size, with a peer.

    .venv/bin/python bench/bench_spanish_sr_retrieval.py [--docs 175000] [--queries 1000] [--peer-queries 20]

Corpus (deterministic, ``--seed``): ``--docs`` Spanish abstracts resampled word by word from
the 300 real CT-EBM-SP records of ``data/spanish_sr/ct-ebm-sp`` (brat ``.txt``, first
non-blank line the title, as :mod:`tasks.spanish_sr.records` reads them): each copies the
length of a random real abstract (x a log-normal factor, sigma 0.3) and draws each word from
that abstract (60 %), from all abstracts' words (35 %) or from a Zipf tail of made-up rare
words (5 %), as ``bench/bench_crossgenre_bm25.py`` does. ``--queries`` records are sampled;
each one's title (the flow's questions are titles) is resampled from its template's title
(60 %), its own abstract (20 %) and all titles' words (20 %). Record ids follow row order.

Ours, as the ``hybrid`` stage runs it (:mod:`tasks.spanish_sr.fusion_scores`): the
:class:`~tasks.spanish_sr.analysis.Analyzer` (es, BM25Okapi k1 1.2, b 0.75), the exact
rank_bm25 index of :mod:`tasks.common.search.bm25_rank`, dense scores as a product of unit
vectors, every method of :func:`~tasks.spanish_sr.fusion_scores.first_stage`, top ``--top``.
Encoding 175,000 abstracts is a GPU job: the retrieval runs on **deterministic random unit
vectors** (384 dimensions, float32, through an Encoder-port object); the builtin
all-MiniLM-L6-v2's CPU throughput is measured on ``--encode-sample`` synthetic abstracts and
**extrapolated** to the corpus. Each method is timed alone and all six together (one shared
scoring pass); "scoring" is a pass with no method (BM25 over every document + dense product).

Peer, same process, same analysed terms and vectors: **rank_bm25** ``BM25Okapi``
(``get_scores`` per query, on ``--peer-queries`` queries, **extrapolated** to all) and
**numpy** (float32 matrix product, 64 queries at a time, on every query), each ranked by a
stable ``argsort`` (ties by row = by record id), and the same λ·BM25 + dense sum. Our BM25
top ``--top`` must equal rank_bm25's on the sampled queries (scores within 1e-6, same order).
Results go to ``bench/results/spanish_sr_retrieval.json``.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import resource
import sys
import zlib
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
from tasks.common.embed.local import BUILTIN_MINILM, SentenceTransformerEncoder
from tasks.common.embed.port import F32, Kind, ProgressFn, normalise_rows
from tasks.spanish_sr import fusion_scores as fs
from tasks.spanish_sr.analysis import Analyzer

DATA = common.REPO / "data" / "spanish_sr" / "ct-ebm-sp"
PARAMS = fs.Bm25Params(k1=1.2, b=0.75, variant="okapi", language="es", fold_accents=False)
DIMS = 384


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--docs", type=int, default=175_000, help="abstracts (paper 004's LILACS: ~175k)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--top", type=int, default=100)
    parser.add_argument("--peer-queries", type=int, default=20, help="rank_bm25 queries (extrapolated)")
    parser.add_argument("--encode-sample", type=int, default=1000, help="abstracts the real encoder encodes")
    parser.add_argument("--seed", type=int, default=0)
    return common.parse_with_out(parser, argv, common.results_file("spanish_sr_retrieval"))


class RandomUnitEncoder:
    """The Encoder port returning deterministic random unit vectors (seeded by the texts):
    retrieval timing without a model."""

    name = "random-unit-vectors (bench only)"
    model_id = "random"
    revision = None
    dims = DIMS

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def encode(self, texts: Sequence[str], *, kind: Kind, on_batch: ProgressFn | None = None) -> F32:
        digest = 0
        for text in texts:
            digest = zlib.crc32(text.encode(), digest)
        rng = np.random.default_rng([self.seed, kind == "query", digest, len(texts)])
        out = np.empty((len(texts), DIMS), dtype=np.float32)
        for at in range(0, len(texts), 8192):  # in blocks, as a model's batches: no corpus-sized float64
            block = rng.standard_normal((min(8192, len(texts) - at), DIMS), dtype=np.float32)
            out[at : at + len(block)] = normalise_rows(block, source=self.name)
        return out

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "dims": DIMS, "seed": self.seed}


def read_real() -> list[tuple[str, str]]:
    """(title, abstract) of each real record: first non-blank line, then the others."""
    out = []
    for path in sorted(DATA.glob("*.txt")):
        lines = [s for line in path.read_text(encoding="utf-8").splitlines() if (s := line.strip())]
        if len(lines) > 1:
            out.append((lines[0], " ".join(lines[1:])))
    return out


def tail_word(i: int) -> str:
    """A made-up rare word (letters only): the Zipf tail a real corpus has."""
    out = "zq"
    while True:
        i, r = divmod(i, 26)
        out += chr(97 + r)
        if not i:
            return out


def synthesise(n: int, queries: int, seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(corpus ``(record_id, abstract)``, questions ``(record_id, title)``); module docstring."""
    real = read_real()
    words = [a.split() for _, a in real]
    pool = np.array([w for ws in words for w in ws], dtype=object)
    title_pool = [w for t, _ in real for w in t.split()]
    rng = np.random.default_rng(seed)
    template = rng.integers(0, len(real), size=n)
    lengths = np.maximum(
        20, (np.array([len(words[t]) for t in template]) * rng.lognormal(0, 0.3, n)).astype(int)
    )
    cited = sorted(rng.choice(n, size=min(queries, n), replace=False).tolist())
    wanted, kept = set(cited), {}
    owns = [np.array(ws, dtype=object) for ws in words]
    corpus = []
    for i in range(n):
        own, size = owns[template[i]], lengths[i]
        source = rng.random(size)
        drawn = np.where(
            source < 0.6, own[rng.integers(0, len(own), size)], pool[rng.integers(0, len(pool), size)]
        )
        rare = np.flatnonzero(source >= 0.95)
        drawn[rare] = [tail_word(int(z)) for z in rng.zipf(1.3, size=len(rare)) % 3_000_000]
        corpus.append((f"SYN{i:07d}", " ".join(drawn)))
        if i in wanted:
            kept[i] = drawn
    pick, questions = random.Random(seed), []
    for i in cited:
        title = real[template[i]][0].split()
        size = max(3, round(len(title) * pick.uniform(0.7, 1.3)))
        draw = [pick.choices((title, list(kept[i]), title_pool), (0.6, 0.2, 0.2))[0] for _ in range(size)]
        text = " ".join(pick.choice(src) for src in draw)
        questions.append((corpus[i][0], text[:1].upper() + text[1:]))
    return corpus, questions


def run_ours(
    corpus: list[tuple[str, str]], questions: list[tuple[str, str]], top: int, console: Console
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Our figures, and what the peer reuses (analysed terms, rows, the prepared corpus)."""
    ids, texts = [rid for rid, _ in corpus], [text for _, text in corpus]
    encoder = RandomUnitEncoder(0)
    analyzer = Analyzer(PARAMS.language, PARAMS.fold_accents)
    encoded, t_analysis = common.timed(lambda: fs.encode_corpus(analyzer, texts))
    (id_rank, index), t_build = common.timed(lambda: fs.bm25_index(ids, encoded, PARAMS))
    vectors, t_vectors = common.timed(lambda: encoder.encode(texts, kind="passage").astype(np.float64))
    position = {pid: i for i, pid in enumerate(ids)}
    prepared = fs.Prepared(ids, id_rank, position, analyzer, encoded[0], index, vectors)
    out: dict[str, Any] = {"analysis_s": t_analysis, "index_s": t_build, "random_vectors_s": t_vectors,
                           "terms": len(encoded[0]), "tokens": len(encoded[1]), "search": {}}  # fmt: skip
    console.print(f"ours: analysis {t_analysis:.1f} s ({len(encoded[1]):,} tokens, {len(encoded[0]):,} terms), "
                  f"index {t_build:.1f} s, random vectors {t_vectors:.1f} s")  # fmt: skip
    keep: dict[str, Any] = {"encoded": encoded, "encoder": encoder, "prepared": prepared}
    runs: list[tuple[str, tuple[fs.Method, ...]]] = [("scoring only", ())]
    runs += [(m, (m,)) for m in fs.METHODS] + [("all six", fs.METHODS)]
    for name, methods in runs:
        fusion = fs.Fusion(methods=methods, top_n=top)
        rows, seconds = common.timed(lambda f=fusion: fs.run_first_stage(prepared, questions, encoder, f))  # type: ignore[misc]
        out["search"][name] = {"s": seconds, "qps": len(questions) / seconds, "rows": len(rows)}
        console.print(f"ours: {name} {seconds:.1f} s ({len(questions) / seconds:,.1f} q/s)")
        if name == "all six":
            keep["rows"] = rows
    out["peak_rss_mb"] = peak_rss_mb()
    return out, keep


def ranked(rows: list[dict[str, Any]], method: str) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for r in rows:
        if r["method"] == method:
            out.setdefault(r["query_id"], []).append((r["record_id"], r["score"]))
    return out


def run_peer(questions: list[tuple[str, str]], keep: dict[str, Any], sample: int, top: int) -> dict[str, Any]:
    """rank_bm25 BM25Okapi + numpy on the same terms and vectors; module docstring."""
    prepared: fs.Prepared = keep["prepared"]
    vocabulary, tokens, starts = keep["encoded"]
    terms = np.array(list(vocabulary), dtype=object)
    docs = [
        terms[tokens[a:b]].tolist() for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)
    ]
    model, t_index = common.timed(functools.partial(BM25Okapi, docs, k1=PARAMS.k1, b=PARAMS.b))
    del docs
    ids, lam = prepared.ids, fs.Fusion().bm25_weight
    passages = prepared.vectors.astype(np.float32)  # the encoder's float32 vectors, exactly
    queries = [(q, prepared.analyzer.query(text)) for q, text in questions]
    dense_rows: dict[str, list[str]] = {}
    query_vectors: dict[str, F32] = {}
    seconds = 0.0
    for at in range(0, len(questions), 64):  # ours encodes in batches of 64: the same vectors
        batch = questions[at : at + 64]
        vectors = keep["encoder"].encode([text for _, text in batch], kind="query")
        query_vectors |= {q: v for (q, _), v in zip(batch, vectors, strict=True)}
        (_, orders), t = common.timed(lambda v=vectors: dense_peer(v, passages, top))  # type: ignore[misc]
        seconds += t
        dense_rows |= {q: [ids[r] for r in order] for (q, _), order in zip(batch, orders, strict=True)}
    ours_bm25, ours_dense = ranked(keep["rows"], "bm25"), ranked(keep["rows"], "dense")
    get = argsort = fuse = 0.0
    identical = 0
    for q, words in queries[:sample]:
        bm25, t = common.timed(lambda w=words: model.get_scores(w))  # type: ignore[misc]
        get += t
        order, t = common.timed(lambda s=bm25: np.argsort(-s, kind="stable")[:top])  # type: ignore[misc]
        argsort += t
        _, t = common.timed(lambda s=bm25, v=query_vectors[q]: np.argsort(-(lam * s + passages @ v), kind="stable")[:top])  # type: ignore[misc]  # fmt: skip
        fuse += t
        mine = ours_bm25[q]
        identical += [ids[r] for r in order] == [r for r, _ in mine] and bool(
            np.allclose([s for _, s in mine], bm25[order], rtol=0, atol=1e-6)
        )
    overlap = [len(set(dense_rows[q]) & {r for r, _ in ours_dense[q]}) / top for q, _ in questions]
    n = len(questions)
    return {
        "index_s": t_index,
        "sample": sample,
        "bm25_get_scores_per_query_s": get / sample,
        "bm25_s_extrapolated": (get + argsort) / sample * n,
        "dense_s": seconds,
        "weighted_s_extrapolated": (get + fuse) / sample * n,
        "bm25_identical_top": identical,
        "dense_top_overlap": float(np.mean(overlap)),
    }


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
    ours, peer, n, q = result["ours"], result["peer"], result["docs"], result["queries"]
    table = common.figures_table(
        f"spanish_sr first stage, top {result['top']}: {n:,} abstracts, {q:,} questions, {result['cpus']} CPUs "
        "(dense: random unit vectors, 384-d)",
        ("run", "index s", "search s", "queries/s", "peer / ours"),
    )
    s = ours["search"]
    table.add_row("ours: analysis (Analyzer + term ids)", f"{ours['analysis_s']:.1f}", "", "", "")
    table.add_row(
        "ours: BM25 index (RankBm25.build)",
        f"{ours['index_s']:.1f}",
        "",
        "",
        f"{peer['index_s'] / ours['index_s']:.1f}x",
    )
    peers = {"bm25": "bm25_s_extrapolated", "dense": "dense_s", "weighted": "weighted_s_extrapolated"}
    for name, v in s.items():
        ratio = f"{peer[peers[name]] / v['s']:.1f}x" if name in peers else ""
        table.add_row(f"ours: {name}", "", f"{v['s']:.1f}", f"{v['qps']:,.1f}", ratio)
    table.add_row("rank_bm25 BM25Okapi index (same terms)", f"{peer['index_s']:.1f}", "", "", "")
    sample = f"{peer['sample']} queries, extrapolated"
    for name, key in peers.items():
        what = {"bm25": f"rank_bm25 get_scores + argsort ({sample})", "dense": "numpy float32 product + argsort (all queries)",
                "weighted": f"rank_bm25 + numpy, λ·BM25 + dense ({sample})"}[name]  # fmt: skip
        table.add_row(what, "", f"{peer[key]:.1f}", f"{q / peer[key]:,.1f}", "")
    console.print(table)
    e = result["encoder"]
    console.print(
        f"BM25 top {result['top']} = rank_bm25's on {peer['bm25_identical_top']}/{peer['sample']} sampled queries "
        f"(scores within 1e-6, same order); dense top {result['top']} overlap with numpy float32: {peer['dense_top_overlap']:.1%}"
    )
    console.print(
        f"peak RSS after ours {ours['peak_rss_mb']:,.0f} MB, at the end {result['peak_rss_mb']:,.0f} MB; "
        f"self-retrieval (own record in the top {result['top']}): "
        + ", ".join(f"{m} {v:.3f}" for m, v in result["self_retrieval"].items())
    )
    if e:
        console.print(
            f"real encoder {e['model']} on CPU: {e['texts_per_s']:.1f} abstracts/s ({e['texts']} in {e['s']:.1f} s, "
            f"max {e['max_seq_length']} tokens) -> {n:,} abstracts ~{e['corpus_s_extrapolated'] / 3600:.1f} h (extrapolated)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=150)
    (corpus, questions), t_make = common.timed(lambda: synthesise(args.docs, args.queries, args.seed))
    console.print(f"synthesised {len(corpus):,} abstracts and {len(questions):,} questions in {t_make:.0f} s; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    result: dict[str, Any] = {"docs": len(corpus), "queries": len(questions), "top": args.top, "cpus": os.cpu_count(),
                              "seed": args.seed, "load_average_start": os.getloadavg(),
                              "dense_vectors": f"random unit vectors ({DIMS}-d float32, seeded) through the Encoder port: "
                                               "retrieval timing only; encoding is a GPU job"}  # fmt: skip
    result["ours"], keep = run_ours(corpus, questions, args.top, console)
    result["self_retrieval"] = self_retrieval(keep["rows"], args.top)
    result["peer"] = run_peer(questions, keep, min(args.peer_queries, len(questions)), args.top)
    console.print(f"peer: {result['peer']}")
    del keep
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
