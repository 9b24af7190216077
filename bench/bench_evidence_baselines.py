"""Benchmark: retrieval baselines on the released EvidenceBench dev set, next to the paper's BM25.

    .venv/bin/python bench/bench_evidence_baselines.py [--model builtin:all-MiniLM-L6-v2] [--device cpu]

Each of the 37 dev instances (``../shared/samples/evidencebench``) is scored on the four
tasks (ER@optimal, ER@10, Result-ER@optimal, Result-ER@5) by
:func:`tasks.evidencebench.baselines.evaluate`; every baseline ranks the paper's candidate-pool
sentences with the hypothesis as the query and keeps the top K of each task:

* **BM25**: :class:`~tasks.evidencebench.baselines.BM25Ranker` (bm25s, Lucene BM25, k1 1.5, b 0.75);
* **MiniLM**: exact cosine under ``--model`` (all-MiniLM-L6-v2 by default, shipped in a
  PyPI package: no hub access), hypothesis as is;
* **MiniLM + E.6 prefix**: the same, with the instruction of App. E.6 prepended to the
  hypothesis (the results instruction for the results tasks). MiniLM was trained without
  instructions: this row shows the plumbing, not what an instruction-tuned model gains.

Reported per task: the mean aspect recall in percent, its standard error over instances
(sample standard deviation / sqrt(n); the paper bootstraps), how many instances were
skipped (no results aspects), and each row's seconds: its cold pass (the first dense row's
encodes every pool, the second's reuses those vectors and encodes only its queries) and the
median of ``--rounds`` warm passes, the systems interleaved (``bench.common.interleaved``).
A quality benchmark: the systems are baselines, not ours against a peer, so it gives no
ratio. The paper reports BM25
only for ER@optimal and ER@10 without instruction, on the **test** set (Table 11); it gives
no dev-set figures, so its row is a reference, not a like-for-like comparison. Results go
to ``bench/results/evidence_baselines.json``.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.samples import EVIDENCEBENCH_DEV
from tasks.common.embed.local import BUILTIN_MINILM, SentenceTransformerEncoder
from tasks.evidencebench.baselines import (
    E6_PREFIXES,
    BM25Ranker,
    DenseRanker,
    RankingBaseline,
    TaskScore,
    evaluate,
)
from tasks.evidencebench.selection import TASK_K, Task

# EvidenceBench Table 11 (App. E.6), BM25, no instruction, on the test set: mean and standard error.
PAPER_BM25_TEST: dict[Task, tuple[float, float] | None] = {
    "ER@optimal": (16.5, 1.1),
    "ER@10": (34.4, 1.7),
    "Result-ER@optimal": None,
    "Result-ER@5": None,
}


def summary(score: TaskScore) -> dict[str, Any]:
    """Mean and standard error in percent, over the scored instances, and the skipped ones."""
    values = list(score.per_instance.values())
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return {
        "mean_pct": 100 * score.mean,
        "se_pct": 100 * se,
        "scored": len(values),
        "skipped": list(score.skipped),
        "per_instance": score.per_instance,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--dev", type=Path, default=EVIDENCEBENCH_DEV, help="the released dev set JSON")
    parser.add_argument(
        "--model", default=BUILTIN_MINILM, help="sentence-transformers model of the dense rows"
    )
    parser.add_argument("--device", default=None, help="torch device (default: CUDA when present, else CPU)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved warm passes of every system")
    args = common.parse_with_out(parser, argv, common.results_file("evidence_baselines"))
    console = Console(width=120)
    data = common.read_dev_set(args.dev, console)
    if data is None:
        return 2
    encoder = SentenceTransformerEncoder(args.model, device=args.device)
    dense = DenseRanker(encoder, cached_pools=len(data))  # the pools are encoded once, for both rows
    short = args.model.removeprefix("builtin:")
    systems = {
        "BM25 (bm25s, Lucene)": RankingBaseline(BM25Ranker()),
        short: RankingBaseline(dense),
        f"{short} + E.6 prefix": RankingBaseline(dense, E6_PREFIXES),
    }
    console.print(f"{', '.join(systems)}: a cold pass each, then {args.rounds} interleaved rounds ...")
    timings = common.interleaved(
        {label: functools.partial(evaluate, data, system) for label, system in systems.items()}, args.rounds
    )
    rows: dict[str, dict[str, Any]] = {
        label: {
            "seconds": timings.median(label),
            "cold_s": timings.cold[label],
            "warm_s": timings.warm[label],
            "tasks": {task: summary(s) for task, s in timings.results[label].items()},
        }
        for label in systems
    }

    table = common.figures_table(
        f"Aspect recall (%) on the {len(data)} EvidenceBench dev instances, mean ± s.e.",
        ("system", *TASK_K, "cold s", "warm s"),
    )
    for label, row in rows.items():
        cells = [f"{t['mean_pct']:.1f} ± {t['se_pct']:.1f}" for t in row["tasks"].values()]
        table.add_row(label, *cells, f"{row['cold_s']:.1f}", f"{row['seconds']:.1f}")
    table.add_row(
        "paper: BM25, test set (Table 11)",
        *(f"{v[0]:.1f} ± {v[1]:.1f}" if v else "not reported" for v in PAPER_BM25_TEST.values()),
        "",
        "",
    )
    console.print(table)
    skipped = {t: len(s["skipped"]) for t, s in next(iter(rows.values()))["tasks"].items()}
    console.print(
        f"skipped (no results aspects): {skipped['Result-ER@optimal']} of {len(data)} instances "
        f"for the Result-* tasks; dense model {encoder.model_id} on {encoder.device}. The paper's "
        "figures are on its test set; it gives none for the dev set."
    )
    result = {
        "instances": len(data),
        "dev_set": str(args.dev.name),
        "systems": rows,
        "paper_bm25_test_set_table_11": {
            t: (None if v is None else {"mean_pct": v[0], "se_pct": v[1]}) for t, v in PAPER_BM25_TEST.items()
        },
        "prefixes": dict(E6_PREFIXES),
        "encoder": encoder.describe(),
        "device": encoder.device,
        "rounds": args.rounds,
        "environment": common.environment(
            bm25s=version("bm25s"),
            sentence_transformers=version("sentence-transformers"),
            torch=version("torch"),
            cpus=os.cpu_count(),
        ),
    }
    common.write_results(args.out, result, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
