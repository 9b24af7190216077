"""Benchmark: exact evidence-set selection on the released EvidenceBench dev set, against greedy.

    .venv/bin/python bench/bench_evidence_select.py [--rounds 3]

For each of the 37 dev instances (``../shared/samples/evidencebench``) it computes the four
released evaluation fields with :func:`tasks.evidencebench.selection.evaluations`: the exact
minimum cover (``optimal``) and the exact maximum coverage by 10 sentences, for all aspects,
and the same for results aspects with 5 sentences; each with its lexicographically smallest
selection (integer programs, HiGHS through ``scipy.optimize.milp``). Target: all 37 in
under 10 s.

The **peer** is the plain greedy set cover (take the sentence covering most uncovered
aspects, lowest index on ties) for the optimum, and greedy maximum coverage (k greedy
picks) for @K: the usual fast approximation. Reported: both times, the ratio, and how often
greedy misses the exact optimum (a larger cover, or fewer aspects in K sentences); the two
passes are interleaved (``bench.common.interleaved``: a cold call each, then ``--rounds``
rounds, order rotated) on one thread each. Every
exact optimum is also checked against the released one. On the dev set greedy happens to
be optimal everywhere (small aspect sets); the brute-force-checked case in
``tests/evidencebench/test_selection.py::test_greedy_would_pick_more_sentences`` is one where
it is not.

Results go to ``bench/results/evidence_select.json``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy  # type: ignore[import-untyped]
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.samples import EVIDENCEBENCH_DEV
from tasks.evidencebench.selection import AspectGroup, Coverage, coverage, evaluations

Instances = dict[str, dict[str, Any]]
GROUPS: tuple[tuple[AspectGroup, str, int], ...] = (("all", "", 10), ("results", "results_", 5))


def greedy(cov: Coverage, k: int | None) -> list[int]:
    """Greedy cover (``k`` None: until every coverable aspect is covered) or ``k`` greedy picks."""
    left = cov.matrix.any(axis=0)
    chosen: list[int] = []
    while left.any() and (k is None or len(chosen) < k):
        gains = (cov.matrix & left).sum(axis=1)
        best = int(np.argmax(gains))  # first maximum: lowest index on ties
        chosen.append(best)
        left &= ~cov.matrix[best]
    return chosen


def greedy_fields(instance: dict[str, Any], name: str) -> dict[str, tuple[int, int]]:
    """Per task: (greedy cover size, -) for the optimum, (-, aspects covered) for @K."""
    out: dict[str, tuple[int, int]] = {}
    for group, prefix, k in GROUPS:
        cov = coverage(instance, group, name)
        if not cov.coverable:
            continue
        out[f"{prefix}optimal"] = (len(greedy(cov, None)), len(cov.coverable))
        picks = greedy(cov, k)
        out[f"{prefix}at_{k}"] = (len(picks), len(cov.covered_by(picks)))
    return out


def time_passes(data: Instances, rounds: int) -> tuple[dict[str, Any], dict[str, Any], common.Timings]:
    """Exact and greedy fields of every instance, the passes interleaved over ``rounds``
    (``bench.common.interleaved``, one thread each: HiGHS and numpy's BLAS pinned alike)."""
    with common.same_threads(1):
        timings = common.interleaved(
            {
                "exact": lambda: {key: evaluations(x, key) for key, x in data.items()},
                "greedy": lambda: {key: greedy_fields(x, key) for key, x in data.items()},
            },
            rounds,
        )
    return timings.results["exact"], timings.results["greedy"], timings


def check(data: Instances, ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """Exact optima that differ from the released ones; where greedy misses the exact optimum."""
    mismatches: list[str] = []
    worse = {"optimal": 0, "at_10": 0, "results_optimal": 0, "results_at_5": 0}
    counted = dict.fromkeys(worse, 0)
    extra_sentences = 0
    for key, x in data.items():
        for _, prefix, k in GROUPS:
            at_opt, at_k = (
                f"{prefix}evidence_retrieval_at_optimal_evaluation",
                f"{prefix}evidence_retrieval_at_{k}_evaluation",
            )
            mine, released = ours[key][at_opt], x[at_opt]
            if (mine is None) != (released is None) or (
                mine is not None and released is not None and mine["optimal"] != released["optimal"]
            ):
                mismatches.append(f"{key} {at_opt}")
            if mine is None:
                continue
            size, _ = peer[key][f"{prefix}optimal"]
            counted[f"{prefix}optimal"] += 1
            counted[f"{prefix}at_{k}"] += 1
            if size > mine["optimal"]:
                worse[f"{prefix}optimal"] += 1
                extra_sentences += size - mine["optimal"]
            exact_k = ours[key][at_k]
            if exact_k is not None and peer[key][f"{prefix}at_{k}"][1] < len(exact_k["covered_aspects"]):
                worse[f"{prefix}at_{k}"] += 1
    return {
        "released_optimal_mismatches": mismatches,
        "greedy_not_optimal": {task: f"{worse[task]}/{counted[task]}" for task in worse},
        "greedy_extra_sentences": extra_sentences,
    }


def report(console: Console, result: dict[str, Any]) -> None:
    t_exact, t_greedy, n = result["exact_s"], result["greedy_s"], result["instances"]
    row = result["table"][0]
    table = common.figures_table(
        f"Selection on the {n} dev instances, 1 thread, {result['rounds']} interleaved rounds (warm median)",
        ("method", "seconds", "greedy / exact warm", "cold", "not optimal (opt / @10 / res-opt / res-@5)"),
    )
    table.add_row(
        "ours: exact ILP (scipy milp / HiGHS)",
        f"{t_exact:.3f}",
        row["warm"]["text"],
        row["cold"]["text"],
        "0",
    )
    table.add_row(
        "peer: greedy cover / greedy @K",
        f"{t_greedy:.3f}",
        "",
        "",
        " / ".join(result["greedy_not_optimal"].values()),
    )
    console.print(table)
    console.print(
        f"exact optimum equals the released one on {n * 2 - len(result['released_optimal_mismatches'])}/{n * 2} "
        f"fields; greedy used {result['greedy_extra_sentences']} sentences more than optimal in total; "
        f"target < 10 s: {'met' if t_exact < 10 else 'MISSED'}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--dev", type=Path, default=EVIDENCEBENCH_DEV, help="the released dev set JSON")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved warm passes over the dev set")
    args = common.parse_with_out(parser, argv, common.results_file("evidence_select"))
    console = Console()
    data = common.read_dev_set(args.dev, console)
    if data is None:
        return 2
    ours, peer, timings = time_passes(data, args.rounds)
    t_exact, t_greedy = timings.median("exact"), timings.median("greedy")
    result: dict[str, Any] = {
        "instances": len(data),
        "rounds": args.rounds,
        "timings": timings.summary(),
        "exact_s": t_exact,
        "greedy_s": t_greedy,
        "exact_over_greedy": t_exact / t_greedy,
        "target_s": 10.0,
        "table": [
            common.table_row(
                "Evidence-set selection, exact (the peer is faster, not exact)",
                f"{len(data)} dev instances",
                "1",
                timings,
                ("ours: exact ILP (HiGHS)", "exact"),
                ("greedy cover / @K", "greedy"),
            )
        ],
        **check(data, ours, peer),
        "environment": common.environment(scipy=scipy.__version__, numpy=np.__version__),
    }
    report(console, result)
    common.write_results(args.out, result, console)
    return 0 if not result["released_optimal_mismatches"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
