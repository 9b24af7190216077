"""Benchmark: cross-encoder pooling throughput (pairs/s), ours vs plain ``CrossEncoder.predict``.

    .venv/bin/python bench/bench_pool.py [--pairs 160] [--batch-size 32] [--rounds 3] [--gpu-pairs 20000]

Pairs (``--seed``): passages of the shared samples' sentences, 20-250 words (gamma, mean 77:
CURE's); a query, 8-16 words of a sentence of its passage (half) or another's (else synthetic).

CPU: the builtin cross-encoder (``builtin:minilm-l6-cross-encoder``, 23M, random head) scores

* ours, :class:`tasks.common.rerank.local.CrossEncoderReranker`: exact token counts, pairs sorted
  longest first, batches of ``--batch-size`` in that order, raw logits back in input order;
* the peer, plain ``sentence_transformers.CrossEncoder.predict`` in input order, same
  ``batch_size``, identity activation (it sorts by character length itself: not naive).

Interleaved (``bench.common.interleaved``), on one thread each, then on every core (threads
pinned alike): peer / ours seconds, median (min–max), both logits' largest difference (float
rounding only) and each batching's padding (padded / real tokens, machine-independent).

GPU (when torch sees CUDA, unless ``--skip-gpu``): a random-weight ``BertForSequenceClassification``
of the production reranker's size (gte-multilingual-reranker-base: 768 hidden, 12 layers, 250k
vocabulary, 8192 positions; the MiniLM tokenizer, none multilingual being available offline)
scores ``--gpu-pairs`` pairs in bf16 autocast through ours (``--gpu-max-batch-tokens``) and the
peer; the share of the GPU's dense bf16 peak comes from 2 x parameters x real tokens, with all
parameters and with the non-embedding ones (embeddings are lookups). Peaks: H100 SXM and H200
989 TFLOPS, H100 PCIe 756, A100 312; any other GPU: "unknown".

Results: ``bench/results/pool.json``."""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table
from sentence_transformers import CrossEncoder
from transformers import BertConfig, BertForSequenceClassification

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.samples import SENTENCE, sample_passages
from tasks.common.rerank.builtin import MINILM_CROSS_ENCODER, TOKENIZER_FILES
from tasks.common.rerank.local import CrossEncoderReranker

PEAK_BF16_TFLOPS = {"H100 SXM": 989.0, "H100 PCIe": 756.0, "H200": 989.0, "A100": 312.0}

# -- pairs ----------------------------------------------------------------------------------


def passage_lengths(n: int, rng: random.Random) -> list[int]:
    """Words per passage: gamma with mean 77 (shape 4), clipped to 20-250."""
    return [min(250, max(20, round(rng.gammavariate(4.0, 77.0 / 4.0)))) for _ in range(n)]


def build_pairs(n: int, rng: random.Random) -> tuple[list[str], list[str], str]:
    """``n`` (query, passage) pairs and where their text came from."""
    pools = [s for p in sample_passages() if (s := [x for x in SENTENCE.split(p) if len(x.split()) >= 8])]
    source = "shared samples"
    if not pools:  # no shared samples: synthetic words, same length distributions
        words = [f"w{i}" for i in range(5000)]
        pools = [
            [" ".join(rng.choices(words, k=rng.randint(8, 30))) + "." for _ in range(8)] for _ in range(200)
        ]
        source = "synthetic"
    passages: list[str] = []
    for target in passage_lengths(n, rng):
        pool = rng.choice(pools)
        parts: list[str] = []
        at, count = rng.randrange(len(pool)), 0
        while count < target:
            sentence = pool[at % len(pool)].split()
            parts.extend(sentence[: target - count])
            count += len(sentence)
            at += 1
        passages.append(" ".join(parts))
    queries: list[str] = []
    for i in range(n):
        donor = passages[i] if i % 2 == 0 else rng.choice(passages)
        words = donor.split()
        size = min(len(words), rng.randint(8, 16))
        at = rng.randrange(len(words) - size + 1)
        queries.append(" ".join(words[at : at + size]))
    return queries, passages, source


# -- padding accounting -----------------------------------------------------------------------


def synced(out: np.ndarray) -> np.ndarray:
    """``out``, once the GPU (if any) has finished: what a timing must wait for."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out


def padding_ratio(lengths: np.ndarray, order: np.ndarray, sizes: Sequence[int]) -> float:
    """Padded tokens / real tokens when batches of ``sizes`` are cut from ``order``."""
    padded, at = 0, 0
    for size in sizes:
        batch = lengths[order[at : at + size]]
        padded += int(batch.max()) * len(batch)
        at += size
    return padded / int(lengths.sum())


def even_sizes(n: int, batch_size: int) -> list[int]:
    return [min(batch_size, n - at) for at in range(0, n, batch_size)]


def budget_sizes(sorted_lengths: np.ndarray, batch_size: int, max_tokens: int | None) -> list[int]:
    """The batch sizes CrossEncoderReranker cuts (same rule, recomputed for the report)."""
    sizes, at = [], 0
    while at < len(sorted_lengths):
        size = batch_size
        if max_tokens is not None:
            size = max(1, min(size, max_tokens // int(sorted_lengths[at])))
        size = min(size, len(sorted_lengths) - at)
        sizes.append(size)
        at += size
    return sizes


# -- one engine pair ---------------------------------------------------------------------------


def compare(
    ours: CrossEncoderReranker,
    peer: CrossEncoder,
    queries: list[str],
    passages: list[str],
    *,
    batch_size: int,
    rounds: int,
    autocast: torch.dtype | None,
) -> dict[str, Any]:
    """Ours and the peer on the same pairs, interleaved (``bench.common.interleaved``); their
    timings, logits' largest difference and the padding each batching implies."""
    pairs = list(zip(queries, passages, strict=True))

    def run_peer() -> np.ndarray:
        with torch.autocast(peer.device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            out = peer.predict(
                pairs, batch_size=batch_size, activation_fn=torch.nn.Identity(), show_progress_bar=False
            )
        return synced(np.asarray(out, dtype=np.float64))

    def run_ours() -> np.ndarray:
        return synced(np.asarray(ours.score(queries, passages).logit, dtype=np.float64))

    # The cold call of each (kernels, allocator, tokenizer caches) is apart; then interleaved rounds.
    timings = common.interleaved({"ours": run_ours, "peer": run_peer}, rounds)
    ours_logits, peer_logits = timings.results["ours"], timings.results["peer"]
    lengths = ours.token_lengths(queries, passages)
    ours_order = np.argsort(-lengths, kind="stable")
    peer_order = np.argsort([-(len(q) + len(p)) for q, p in pairs], kind="stable")  # by characters
    sizes = budget_sizes(lengths[ours_order], ours.batch_size, ours.max_batch_tokens)
    return {
        "pairs": len(pairs),
        "timings": timings.summary(),
        "_timings": timings,
        "ours_s": timings.median("ours"),
        "peer_s": timings.median("peer"),
        "ours_pairs_per_s": len(pairs) / timings.median("ours"),
        "peer_pairs_per_s": len(pairs) / timings.median("peer"),
        "ratio": timings.ratio("peer", "ours"),
        "max_abs_logit_diff": float(np.abs(ours_logits - peer_logits).max()),
        "real_tokens": int(lengths.sum()),
        "mean_tokens_per_pair": float(lengths.mean()),
        "padding_ours": padding_ratio(lengths, ours_order, sizes),
        "padding_peer": padding_ratio(lengths, peer_order, even_sizes(len(pairs), batch_size)),
        "padding_unsorted": padding_ratio(lengths, np.arange(len(pairs)), even_sizes(len(pairs), batch_size)),
        "batches_ours": len(sizes),
    }


# -- GPU: the production architecture's size ------------------------------------------------------


def peak_tflops(name: str) -> float | None:
    if "H200" in name:
        return PEAK_BF16_TFLOPS["H200"]
    if "H100" in name:
        return PEAK_BF16_TFLOPS["H100 PCIe" if "PCIe" in name else "H100 SXM"]
    if "A100" in name:
        return PEAK_BF16_TFLOPS["A100"]
    return None


def production_sized_model(directory: Path, tokenizer_from: Path) -> tuple[int, int]:
    """A random-weight BertForSequenceClassification of gte-multilingual-reranker-base's size,
    saved with the MiniLM tokenizer; (all parameters, non-embedding parameters)."""
    torch.manual_seed(0)
    config = BertConfig(  # the shape of gte-multilingual-reranker-base's config
        vocab_size=250_048,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=8192,
    )
    config.num_labels = 1
    config.architectures = ["BertForSequenceClassification"]
    model = BertForSequenceClassification(config)
    model.save_pretrained(directory)
    for filename in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_from / filename, directory / filename)
    total = sum(p.numel() for p in model.parameters())
    embeddings = sum(p.numel() for p in model.bert.embeddings.parameters())
    return total, total - embeddings


def run_gpu(args: argparse.Namespace, tokenizer_from: Path, console: Console) -> dict[str, Any]:
    name = torch.cuda.get_device_name(0)
    rng = random.Random(args.seed + 1)
    queries, passages, _ = build_pairs(args.gpu_pairs, rng)
    with tempfile.TemporaryDirectory() as tmp:
        total, non_embedding = production_sized_model(Path(tmp), tokenizer_from)
        console.print(f"GPU {name}: random model with {total / 1e6:.0f}M parameters, bf16 autocast ...")
        ours = CrossEncoderReranker(
            tmp,
            device="cuda",
            precision="bfloat16",
            batch_size=args.gpu_batch_size,
            max_batch_tokens=args.gpu_max_batch_tokens,
            max_length=args.max_length,
        )
        peer = CrossEncoder(tmp, device="cuda", max_length=args.max_length)
        stats = compare(
            ours,
            peer,
            queries,
            passages,
            batch_size=args.gpu_batch_size,
            rounds=args.rounds,
            autocast=torch.bfloat16,
        )
    peak = peak_tflops(name)
    for label, params in (("all_params", total), ("non_embedding", non_embedding)):
        flops = 2.0 * params * stats["real_tokens"]
        stats[f"tflops_ours_{label}"] = flops / stats["ours_s"] / 1e12  # warm median
        stats[f"peak_fraction_ours_{label}"] = (
            stats[f"tflops_ours_{label}"] / peak if peak is not None else "unknown"
        )
    stats.update(
        device=name,
        peak_bf16_tflops=peak if peak is not None else "unknown",
        params=total,
        non_embedding_params=non_embedding,
        batch_size=args.gpu_batch_size,
        max_batch_tokens=args.gpu_max_batch_tokens,
        weights="random (speed only)",
    )
    return stats


# -- report -------------------------------------------------------------------------------------


def table(title: str, stats: dict[str, Any]) -> Table:
    t = common.figures_table(
        title, ("engine", "warm median s", "pairs/s", "peer / ours warm (min–max)", "padded / real tokens")
    )
    t.add_row(
        "ours: CrossEncoderReranker (token-length buckets)",
        f"{stats['ours_s']:.2f}",
        f"{stats['ours_pairs_per_s']:,.1f}",
        stats["ratio"],
        f"{stats['padding_ours']:.3f}",
    )
    t.add_row(
        "peer: CrossEncoder.predict, input order",
        f"{stats['peer_s']:.2f}",
        f"{stats['peer_pairs_per_s']:,.1f}",
        "",
        f"{stats['padding_peer']:.3f}",
    )
    t.add_row("(no sorting at all, for scale)", "", "", "", f"{stats['padding_unsorted']:.3f}")
    return t


def report_gpu(console: Console, gpu: dict[str, Any]) -> None:
    console.print(table(f"GPU {gpu['device']}, {gpu['params'] / 1e6:.0f}M random weights, bf16", gpu))
    share = gpu["peak_fraction_ours_non_embedding"]
    shown = f"{share:.1%}" if isinstance(share, float) else share
    console.print(
        f"ours {gpu['ours_pairs_per_s']:,.0f} pairs/s = {gpu['tflops_ours_non_embedding']:.0f} TFLOPS "
        f"(non-embedding 2·N·tokens), {shown} of the bf16 dense peak ({gpu['peak_bf16_tflops']}); "
        f"counting all parameters: {gpu['tflops_ours_all_params']:.0f} TFLOPS"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--pairs", type=int, default=160, help="CPU pairs (each engine scores all of them)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved warm rounds per engine")
    parser.add_argument("--gpu-pairs", type=int, default=20_000)
    parser.add_argument("--gpu-batch-size", type=int, default=256)
    parser.add_argument("--gpu-max-batch-tokens", type=int, default=32_768)
    parser.add_argument("--skip-gpu", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--builtin-cache-dir", type=Path, default=None, help="where the builtin model is built"
    )
    return common.parse_with_out(parser, argv, common.results_file("pool"))


def cpu_runs(
    args: argparse.Namespace, ours: CrossEncoderReranker, peer: CrossEncoder, queries: list[str],
    passages: list[str], console: Console,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
    """The CPU comparison on one thread each, then on every core (both sides the same torch,
    BLAS and numba threads: ``bench.common.same_threads``); the figures and the table rows."""
    out: dict[str, Any] = {"model": MINILM_CROSS_ENCODER}
    rows = []
    size = f"{len(queries):,} pairs, batch {args.batch_size}"
    for threads in dict.fromkeys((1, common.all_cores())):
        console.print(
            f"CPU: {MINILM_CROSS_ENCODER}, {threads} thread(s), {args.rounds} interleaved rounds ..."
        )
        with common.same_threads(threads):
            stats = compare(
                ours, peer, queries, passages, batch_size=args.batch_size, rounds=args.rounds, autocast=None
            )
        timings = stats.pop("_timings")
        rows.append(
            common.table_row(
                "Cross-encoder pairs/s (MiniLM-L6, CPU)", size, str(threads), timings,
                ("ours: CrossEncoderReranker", "ours"), ("CrossEncoder.predict", "peer"),
            )
        )  # fmt: skip
        out[f"threads_{threads}"] = stats
        console.print(table(f"CPU, {MINILM_CROSS_ENCODER}, {size}, {threads} thread(s)", stats))
        console.print(f"largest logit difference {stats['max_abs_logit_diff']:.1e}")
    return out, rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=120)
    queries, passages, source = build_pairs(args.pairs, random.Random(args.seed))
    console.print(
        f"{len(queries):,} pairs from {source}: queries {np.mean([len(q.split()) for q in queries]):.1f} words, "
        f"passages {np.mean([len(p.split()) for p in passages]):.1f} words on average"
    )
    ours = CrossEncoderReranker(
        MINILM_CROSS_ENCODER,
        device="cpu",
        batch_size=args.batch_size,
        max_length=args.max_length,
        builtin_cache_dir=args.builtin_cache_dir,
    )
    assert ours.path is not None
    peer = CrossEncoder(str(ours.path), device="cpu", max_length=args.max_length)
    cpu, rows = cpu_runs(args, ours, peer, queries, passages, console)
    result: dict[str, Any] = {
        "source": source,
        "pairs": len(queries),
        "mean_query_words": float(np.mean([len(q.split()) for q in queries])),
        "mean_passage_words": float(np.mean([len(p.split()) for p in passages])),
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "rounds": args.rounds,
        "cpu": cpu,
        "table": rows,
    }

    if torch.cuda.is_available() and not args.skip_gpu:
        gpu = run_gpu(args, ours.path, console)
        gpu.pop("_timings")
        result["gpu"] = gpu
        report_gpu(console, gpu)
    else:
        result["gpu"] = "skipped" if args.skip_gpu else "no CUDA device"
        console.print(f"GPU: {result['gpu']}")

    result["environment"] = common.environment(
        torch=torch.__version__,
        sentence_transformers=version("sentence-transformers"),
        transformers=version("transformers"),
    )
    common.write_results(args.out, result, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
