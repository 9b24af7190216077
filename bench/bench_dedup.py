"""Benchmark: variant and containment detection against the exhaustive rapidfuzz comparison.

    .venv/bin/python bench/bench_dedup.py [--n 3000] [--threshold 0.9] [--rounds 3] [--one-thread-only]

Corpus (deterministic, ``--seed``): every ``<p>`` of the shared sample articles, reviews
and HTML pages is split into sentences; passages of 50-150 words are built by
concatenating runs of 1-3 consecutive sentences taken from different paragraphs, until
``--n`` distinct passages exist. Planted into it (replacing base passages, so the total
stays ``--n``):

* ``--groups`` variant groups: a base passage plus 1-3 variants, each made with one or
  two of: 1-3 character typos, whitespace changes, case changes, a truncated end (3-8 %);
* ``--planted-containments`` outer passages: prefix sentences + a base passage (exact, or
  with 1-2 typos) + suffix sentences, the base passage staying in the corpus.

Passages reuse the ~2,000 sample paragraphs' sentences about 17 times each, so unrelated
passages often share a sentence: harder for any filter than a real corpus.

In one process, interleaved (``bench.common.interleaved``: a cold call each, kernel load or
compile included, then ``--rounds`` rounds, order rotated), it times

* ours, :func:`tasks.common.text.variants.similar_pairs` (normalisation included), against the
  **peer**: rapidfuzz ``process.cdist(norm, norm, scorer=Levenshtein.normalized_similarity,
  score_cutoff=threshold, workers=1)`` on the same normalised passages (one list object
  for queries and choices, so rapidfuzz computes each pair once), both on one thread; then
  (unless ``--one-thread-only``) the peer with ``workers=-1`` on every core against ours
  (which has no parallel path). Recall and precision are ours against the peer's pairs.
* ours, :func:`tasks.common.text.variants.containments` on all passages, and the exhaustive
  oracle (``fuzz.partial_ratio`` on every length-eligible pair) on a fixed random subset
  of ``--oracle-subset`` passages (plus some planted pairs), interleaved with ours on the
  same subset: the oracle takes milliseconds per pair, far too long for all passages; its
  full-size time is extrapolated (pairs grow with n²) and labelled so. Recall/precision compare ours (full run, restricted to
  the subset) with the oracle on the subset.

Results go to ``bench/results/dedup.json``.
"""

from __future__ import annotations

import argparse
import random
import string
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz import __version__ as rapidfuzz_version
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.samples import build_passages, sample_passages
from tasks.common.text import variant_grams
from tasks.common.text.variants import (
    Containment,
    clusters,
    containments,
    containments_exhaustive,
    normalise,
    similar_pairs,
)


def typo(text: str, rng: random.Random, edits: int) -> str:
    chars = list(text)
    for _ in range(edits):
        p = rng.randrange(len(chars))
        op = rng.choice("sid")
        if op == "s":
            chars[p] = rng.choice(string.ascii_lowercase)
        elif op == "i":
            chars.insert(p, rng.choice(string.ascii_lowercase))
        else:
            del chars[p]
    return "".join(chars)


def variant(text: str, rng: random.Random) -> str:
    for kind in rng.sample(["typo", "space", "case", "truncate"], rng.randint(1, 2)):
        if kind == "typo":
            text = typo(text, rng, rng.randint(1, 3))
        elif kind == "space":
            words = text.split(" ")
            text = " " + "".join(w + rng.choice([" ", "  ", "\n", "\t "]) for w in words)
        elif kind == "case":
            text = rng.choice([str.upper, str.lower, str.title])(text)
        else:
            text = text[: len(text) - max(1, round(len(text) * rng.uniform(0.03, 0.08)))]
    return text


def build_corpus(args: argparse.Namespace) -> tuple[list[str], list[list[int]], list[tuple[int, int]]]:
    """Passages with planted variant groups and containments (indexes after shuffling)."""
    rng = random.Random(args.seed)
    passages = build_passages(sample_passages(), args.n, rng)
    slots = list(range(len(passages)))
    rng.shuffle(slots)
    free = iter(slots)  # base passages to overwrite with planted texts
    used: set[int] = set()

    def take() -> int:
        i = next(free)
        used.add(i)
        return i

    groups: list[list[int]] = []
    for _ in range(args.groups):
        base = take()
        group = [base]
        for _ in range(rng.randint(1, 3)):
            slot = take()
            passages[slot] = variant(passages[base], rng)
            group.append(slot)
        groups.append(group)
    planted: list[tuple[int, int]] = []
    for _ in range(args.planted_containments):
        inner = take()
        outer = take()
        body = passages[inner] if rng.random() < 0.5 else typo(passages[inner], rng, rng.randint(1, 2))
        before = " ".join(rng.choice(passages).split(". ")[:2])
        after = " ".join(rng.choice(passages).split(". ")[-2:])
        passages[outer] = f"{before}. {body} {after}"
        planted.append((outer, inner))
    return passages, groups, planted


def peer_pairs(norm: list[str], threshold: float, workers: int) -> set[tuple[int, int]]:
    scores = process.cdist(
        norm,
        norm,
        scorer=Levenshtein.normalized_similarity,
        score_cutoff=threshold,
        dtype=np.float32,
        workers=workers,
    )
    a, b = np.nonzero(np.triu(scores, k=1))  # below the cutoff rapidfuzz returns 0
    return set(zip(a.tolist(), b.tolist(), strict=True))


def recall_precision(ours: set[Any], truth: set[Any]) -> tuple[float, float]:
    hit = len(ours & truth)
    return (hit / len(truth) if truth else 1.0), (hit / len(ours) if ours else 1.0)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--n", type=int, default=3000, help="passages (3,000: a few minutes on 2 cores)")
    parser.add_argument("--threshold", type=float, default=0.9, help="variant similarity threshold")
    parser.add_argument(
        "--containment-threshold",
        type=float,
        default=0.95,
        help="containment score threshold (dedup stage default)",
    )
    parser.add_argument("--groups", type=int, default=100, help="planted variant groups")
    parser.add_argument("--planted-containments", type=int, default=60)
    parser.add_argument(
        "--oracle-subset", type=int, default=150, help="passages given to the containment oracle"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved warm rounds of ours and the peer")
    parser.add_argument(
        "--one-thread-only", dest="all_cores", action="store_false", help="skip the peer's workers=-1 rounds"
    )
    parser.add_argument(
        "--skip-peer", action="store_true", help="do not run the exhaustive peer (quick runs)"
    )
    return common.parse_with_out(parser, argv, common.results_file("dedup"))


def measure_variants(
    args: argparse.Namespace, texts: list[str], groups: list[list[int]], console: Console
) -> dict[str, Any]:
    """Ours and, unless skipped, the exhaustive peer, interleaved on one thread; then, with
    ``--all-cores``, the same with the peer on every core (module docstring)."""
    norm = [normalise(x) for x in texts]
    contenders: dict[str, Callable[[], Any]] = {"ours": lambda: similar_pairs(texts, args.threshold)}
    if not args.skip_peer:
        contenders["peer"] = lambda: peer_pairs(norm, args.threshold, 1)
    with common.same_threads(1):
        one = common.interleaved(contenders, args.rounds)
    ours = one.results["ours"]
    stats = dict(variant_grams.STATS)
    ours_set = {(p.a, p.b) for p in ours}
    labels = clusters(len(texts), ours)
    groups_whole = sum(len({labels[i] for i in g}) == 1 for g in groups)
    section: dict[str, Any] = {
        "timings_1_thread": one.summary(),
        "pairs": len(ours_set),
        "planted_groups_recovered": f"{groups_whole}/{len(groups)}",
        "stats": stats,
        "table": [],
    }
    size = f"{len(texts):,} passages"
    console.print(
        f"ours: cold {one.cold['ours']:.2f} s (kernel load or compile included), warm {one.warm['ours']}"
    )
    if args.skip_peer:
        return section
    truth = one.results["peer"]
    recall, precision = recall_precision(ours_set, truth)
    section |= {"peer_pairs": len(truth), "recall": recall, "precision": precision}
    section["table"].append(
        common.table_row(
            "Variant pairs (normalised Levenshtein ≥ threshold)", size, "1", one,
            ("ours: similar_pairs", "ours"), ("rapidfuzz cdist, workers=1", "peer"),
        )
    )  # fmt: skip
    console.print(
        f"1 thread each: peer/ours {one.ratio('peer', 'ours')}; recall {recall:.2%}, precision {precision:.2%}"
    )
    if args.all_cores:
        cores = common.all_cores()
        contenders["peer"] = lambda: peer_pairs(norm, args.threshold, -1)
        every = common.interleaved(contenders, args.rounds)
        section["timings_all_cores"] = every.summary()
        section["table"].append(
            common.table_row(
                "Variant pairs, all cores (ours has no parallel path)", size, f"ours 1, peer {cores}", every,
                ("ours: similar_pairs", "ours"), ("rapidfuzz cdist, workers=-1", "peer"),
            )
        )  # fmt: skip
        console.print(f"all {cores} cores for the peer: peer/ours {every.ratio('peer', 'ours')}")
    return section


def oracle_subset(args: argparse.Namespace, n: int, planted: list[tuple[int, int]]) -> list[int]:
    """A fixed random subset of the passages, plus some planted pairs, for the oracle."""
    rng = random.Random(args.seed + 1)
    subset = set(rng.sample(range(n), min(args.oracle_subset, n)))
    for o, i in planted[: max(1, args.oracle_subset // 20)]:
        subset |= {o, i}
    return sorted(subset)


def measure_containments(
    args: argparse.Namespace, texts: list[str], planted: list[tuple[int, int]]
) -> tuple[dict[str, Any], int]:
    """Ours on all passages and on the oracle subset (and what it found there); the oracle on
    the subset, extrapolated."""
    with common.same_threads(1):
        full = common.interleaved(
            {"ours": lambda: containments(texts, args.containment_threshold)}, args.rounds
        )
    found, t_cont = full.results["ours"], full.median("ours")  # defaults: ratio 0.9, 20 characters
    cstats = dict(variant_grams.STATS)
    found_set = {(c.outer, c.inner) for c in found}
    planted_found = sum((o, i) in found_set for o, i in planted)
    sub = oracle_subset(args, len(texts), planted)
    where = {g: k for k, g in enumerate(sub)}
    sub_texts = [texts[g] for g in sub]
    with common.same_threads(1):
        subset = common.interleaved(
            {
                "ours": lambda: containments(sub_texts, args.containment_threshold),
                "oracle": lambda: containments_exhaustive(sub_texts, args.containment_threshold),
            },
            args.rounds,
        )
    oracle, t_oracle = subset.results["oracle"], subset.median("oracle")
    ours_sub, t_ours_sub = subset.results["ours"], subset.median("ours")
    truth_c = {(c.outer, c.inner) for c in oracle}
    restricted = {(where[o], where[i]) for o, i in found_set if o in where and i in where}
    recall_c, precision_c = recall_precision(restricted, truth_c)
    scale = (len(texts) / len(sub)) ** 2
    return {
        "ours_s": t_cont,
        "timings_full": full.summary(),
        "timings_subset": subset.summary(),
        "table": [
            common.table_row(
                "Containments (partial_ratio ≥ threshold), oracle subset",
                f"{len(sub)} passages",
                "1",
                subset,
                ("ours: containments", "ours"),
                ("rapidfuzz partial_ratio, every pair", "oracle"),
            )
        ],
        "subset_ratio": subset.ratio("oracle", "ours"),
        "found": len(found_set),
        "planted_found": f"{planted_found}/{len(planted)}",
        "stats": cstats,
        "oracle_subset": len(sub),
        "oracle_subset_s": t_oracle,
        "ours_subset_s": t_ours_sub,
        "subset_speedup": t_oracle / t_ours_sub,  # warm medians
        "oracle_full_s_extrapolated": t_oracle * scale,
        "full_speedup_extrapolated": t_oracle * scale / t_cont,
        "oracle_pairs": len(truth_c),
        "recall": recall_c,
        "precision": precision_c,
        "subset_run_equal": [dataclass_key(c) for c in ours_sub] == [dataclass_key(c) for c in oracle],
    }, len(ours_sub)


def report_variants(console: Console, result: dict[str, Any]) -> None:
    variants = result["variants"]
    table = common.figures_table(
        f"Variants: {result['n']} passages, threshold {result['threshold']}, {result['rounds']} interleaved rounds",
        ("run", "threads", "ours warm s", "peer warm s", "peer / ours warm", "cold"),
    )
    for row in variants["table"]:
        table.add_row(
            row["what"], row["threads"], f"{row['ours_warm_median_s']:.2f}", f"{row['peer_warm_median_s']:.2f}",
            row["warm"]["text"], row["cold"]["text"] if row["cold"] else "",
        )  # fmt: skip
    console.print(table)
    if "recall" in variants:
        console.print(
            f"ours {variants['pairs']} pairs, peer {variants['peer_pairs']}: recall {variants['recall']:.2%}, "
            f"precision {variants['precision']:.2%}; planted groups whole {variants['planted_groups_recovered']}"
        )
    detail = common.figures_table("ours, inside similar_pairs", ("step", "value"))
    for key, value in variants["stats"].items():
        detail.add_row(key, f"{value:.3f}" if key.endswith("_s") else f"{int(value):,}")
    console.print(detail)


def report_containments(console: Console, result: dict[str, Any], subset_found: int) -> None:
    c, n = result["containments"], result["n"]
    t_oracle, t_full = c["oracle_subset_s"], c["oracle_full_s_extrapolated"]
    table = common.figures_table(
        f"Containments: threshold {result['containment_threshold']}, inner ≤ 0.9 x outer, ≥ 20 chars",
        ("method", "passages", "seconds", "found", "recall", "precision"),
    )
    table.add_row("ours: containments", str(n), f"{c['ours_s']:.2f}", str(c["found"]), "", "")
    sub = str(c["oracle_subset"])
    table.add_row("ours, on the oracle subset", sub, f"{c['ours_subset_s']:.2f}", str(subset_found), "", "")
    table.add_row(
        "oracle: partial_ratio, every pair",
        sub,
        f"{t_oracle:.2f}",
        str(c["oracle_pairs"]),
        f"{c['recall']:.2%}",
        f"{c['precision']:.2%}",
    )
    table.add_row("oracle, extrapolated to all", str(n), f"~{t_full:,.0f}", "", "", "")
    console.print(table)
    console.print(
        f"planted containments found: {c['planted_found']}; subset oracle / ours {c['subset_ratio']}, "
        f"full-size speed-up ~{c['full_speedup_extrapolated']:,.0f}x (extrapolated)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console()
    texts, groups, planted = build_corpus(args)
    lengths = [len(normalise(x)) for x in texts]
    console.print(
        f"{len(texts)} passages, {np.mean([len(x.split()) for x in texts]):.0f} words / {np.mean(lengths):.0f} "
        f"characters on average; {len(groups)} planted variant groups, {len(planted)} planted containments"
    )
    result: dict[str, Any] = {
        "n": len(texts),
        "threshold": args.threshold,
        "containment_threshold": args.containment_threshold,
        "mean_chars": float(np.mean(lengths)),
        "rounds": args.rounds,
        "variants": measure_variants(args, texts, groups, console),
    }
    result["containments"], subset_found = measure_containments(args, texts, planted)
    result["table"] = result["variants"]["table"] + result["containments"]["table"]
    result["environment"] = common.environment(rapidfuzz=rapidfuzz_version, numpy=np.__version__)
    report_variants(console, result)
    report_containments(console, result, subset_found)
    common.write_results(args.out, result, console)
    return 0


def dataclass_key(c: Containment) -> tuple[int, int, float]:
    return (c.outer, c.inner, c.score)


if __name__ == "__main__":
    raise SystemExit(main())
