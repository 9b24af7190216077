"""Benchmark: spanish_sr ``hybrid`` inline against the process pool, on the same cores.

    .venv/bin/python bench/bench_hybrid.py [--seeds 10,42,50] [--rounds 3] [--root DIR]

The Spanish SR demo (flows/configs/spanish_sr.yaml) with ``train_dense.seeds`` set to
``--seeds``, so that ``hybrid`` has one chunk per seed (a seed's held-out questions against
the whole corpus, indexed and encoded once per seed). Its upstream stages run once (into
``--root``, kept for a rerun of the bench); then ``irforge run spanish_sr --only hybrid
--force`` runs with ``execution.runner: inline`` and with ``process`` (every core), cold
first and then interleaved over ``--rounds`` (bench/common.py ``interleaved``). Timed: the
stage's own wall time (the run record's ``wall_s``), so Prefect's start-up, the same on both
sides, is left out. Speed-up = inline / pool per round, median (min–max); efficiency = speed-up
/ cores. Results: bench/results/hybrid.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

IRFORGE = str(Path(sys.executable).with_name("irforge"))
DEMO = common.REPO / "flows" / "configs" / "spanish_sr.yaml"


def _absolute(value: Any, base: Path) -> Any:
    """The demo's relative paths made absolute (the configs are written elsewhere)."""
    if isinstance(value, dict):
        return {k: _absolute(v, base) if k in ("path", "files", "sources") else v for k, v in value.items()}
    if isinstance(value, list):
        return [_absolute(v, base) for v in value]
    if isinstance(value, str) and value.startswith("../"):
        return str((base / value).resolve())
    return value


def write_config(folder: Path, seeds: list[int], runner: str) -> Path:
    demo = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    stages = {name: _absolute(body, DEMO.parent) for name, body in demo["stages"].items()}
    stages["train_dense"] = {**stages["train_dense"], "seeds": seeds}
    path = folder / f"spanish_sr-{runner}.yaml"
    body = {"flow": "spanish_sr", "execution": {**demo["execution"], "runner": runner}, "stages": stages}
    path.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    return path


def irforge(env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [IRFORGE, *args], env=env, cwd=common.REPO, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"irforge {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")


def hybrid_seconds(env: dict[str, str], config: Path) -> float:
    irforge(env, "run", "spanish_sr", "-c", str(config), "--only", "hybrid", "--force")
    runs = sorted(Path(env["IRFORGE_ARTIFACTS"], "spanish_sr", "runs").glob("*.json"))
    return float(json.loads(runs[-1].read_text())["stages"]["hybrid"]["wall_s"])


def stage_rounds(env: dict[str, str], configs: dict[str, Path], rounds: int) -> common.Timings:
    """``common.interleaved``'s schedule (a cold run each, then rounds in rotated order), timing
    the stage's own wall time rather than the command's."""
    names = list(configs)
    timings = common.Timings(warm={name: [] for name in names})
    for name in names:
        timings.cold[name] = hybrid_seconds(env, configs[name])
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            timings.warm[name].append(hybrid_seconds(env, configs[name]))
    return timings


def main(argv: Sequence[str] | None = None) -> None:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--seeds", default="10,42,50")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--root", type=Path, default=None, help="artifact root to keep (default: temporary)")
    args = common.parse_with_out(parser, argv, common.results_file("hybrid"))
    console, seeds = Console(), [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory(prefix="irforge-hybrid-") as tmp:
        folder = Path(tmp)
        root = args.root or folder / "artifacts"
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env |= {"IRFORGE_ARTIFACTS": str(root), "PREFECT_HOME": str(folder / "prefect")}
        configs = {r: write_config(folder, seeds, r) for r in ("inline", "process")}
        console.print(f"upstream of hybrid ({len(seeds)} seeds) into {root} ...")
        for stage in ("train_dense", "bm25"):  # hybrid's upstream (train_dense does not need bm25)
            irforge(env, "run", "spanish_sr", "-c", str(configs["inline"]), "--until", stage)
        timings = stage_rounds(env, configs, args.rounds)
    cores = common.all_cores()
    speedup = common.ratio_summary(timings.warm["inline"], timings.warm["process"])
    console.print(
        f"hybrid, {len(seeds)} chunks (seeds), {cores} cores: inline {timings.median('inline'):.1f} s, "
        f"pool {timings.median('process'):.1f} s; speed-up {speedup['text']}, "
        f"efficiency {speedup['median'] / cores:.2f}"
    )
    result = {
        "environment": common.environment(cores=cores),
        "seeds": seeds,
        "rounds": args.rounds,
        "timings": timings.summary(),
        "speedup": speedup,
        "table": [
            common.table_row(
                "spanish_sr hybrid, pool vs inline",
                f"{len(seeds)} seeds (chunks)",
                "all",
                timings,
                ("process pool", "process"),
                ("inline", "inline"),
            )
        ],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"results: {args.out}")


if __name__ == "__main__":
    main()
