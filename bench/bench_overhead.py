"""Benchmark: what an ``irforge`` command costs beyond its work (issue 26).

    .venv/bin/python bench/bench_overhead.py [--rounds 3] [--articles 10]

Each command runs as a whole process (``irforge`` of this environment), interleaved over
``--rounds`` rounds after one cold call each, in a fresh ``PREFECT_HOME`` and artifact root:

- start-up: ``irforge --help`` and ``irforge status cure`` against the floor any typer command
  pays (``python -c "import typer, rich"``);
- ``irforge run cure --until filter`` with every stage reused (no Prefect is started);
- the same run forced (``--force``) on ``--articles`` real articles of ``../shared/samples/articles``
  (else ``data/demo/articles``): with Prefect's temporary server (the default) and with one
  local server (``irforge server start``); per run the overhead share, wall time less the
  stages' own wall time (the run record's ``wall_s``) over wall time;
- Prefect's floor on that same local server: a flow of four empty tasks (``FLOOR``), one per
  stage of the run, with flow-run heartbeats off as irforge sets them on its own servers. No
  orchestration by Prefect can cost less than this.

Results go to ``bench/results/overhead.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from flows import local_server

IRFORGE = str(Path(sys.executable).with_name("irforge"))
SAMPLES = common.REPO.parent / "shared" / "samples" / "articles"
FLOOR = """
from prefect import flow, task
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

@task
def stage(i: int) -> int:
    return i

@flow
def empty() -> None:
    for i in range(4):
        stage.submit(i).result()

with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
    empty()
"""


def article_config(folder: Path, articles: int) -> Path:
    """A cure config whose ingest reads ``articles`` real article files copied into ``folder``."""
    source = SAMPLES if SAMPLES.is_dir() else common.REPO / "data" / "demo" / "articles"
    files = sorted(p for p in source.iterdir() if p.suffix in (".xml", ".nxml"))[:articles]
    corpus = folder / "articles"
    corpus.mkdir(parents=True)
    for path in files:
        shutil.copy(path, corpus / path.name)
    demo = yaml.safe_load((common.REPO / "flows" / "configs" / "cure.yaml").read_text())
    stages = {k: demo["stages"][k] for k in ("parse", "segment", "filter")}
    config = {
        "flow": "cure",
        "execution": demo["execution"],
        "stages": {"ingest": {"sources": [str(corpus)]}, **stages},
    }
    path = folder / "cure-articles.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def command(env: dict[str, str], *args: str) -> Callable[[], float]:
    """A contender running ``args``; returns the overhead share of a run (NaN for other commands)."""

    def call() -> float:
        started = time.perf_counter()
        done = subprocess.run(args, env=env, cwd=common.REPO, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        if done.returncode not in (0, 1) or (done.returncode and args[1:3] != ("server", "status")):
            raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-1500:]}")
        if args[1] != "run":
            return float("nan")
        runs = sorted(Path(env["IRFORGE_ARTIFACTS"], "cure", "runs").glob("*.json"))
        stages = json.loads(runs[-1].read_text())["stages"].values()
        return 1 - float(sum(s["wall_s"] for s in stages)) / wall

    return call


def measure(rounds: int, articles: int, console: Console) -> tuple[common.Timings, common.Timings]:
    """Start-up commands against the floor, then forced runs on a temporary server against
    runs on one local server (each in its own ``PREFECT_HOME``), interleaved."""
    with tempfile.TemporaryDirectory(prefix="irforge-overhead-") as tmp:
        root = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env |= {"PREFECT_HOME": str(root / "prefect-temporary"), "IRFORGE_ARTIFACTS": str(root / "artifacts")}
        local_env = {**env, "PREFECT_HOME": str(root / "prefect-local")}
        config = str(article_config(root, articles))
        run = (IRFORGE, "run", "cure", "-c", config, "--until", "filter")
        command(env, *run)()  # the artifacts the reused runs find
        startup = common.interleaved(
            {
                "help": command(env, IRFORGE, "--help"),
                "status": command(env, IRFORGE, "status", "cure", "-c", config),
                "reused run": command(env, *run),
                "floor": command(env, sys.executable, "-c", "import typer, rich"),
            },
            rounds,
        )
        started = subprocess.run(
            [IRFORGE, "server", "start"], env=local_env, capture_output=True, text=True, check=False
        )
        console.print(started.stdout.strip() or started.stderr.strip())
        state = json.loads((root / "prefect-local" / local_server.STATE_FILE).read_text())
        floor_env = {**local_env, "PREFECT_API_URL": state["url"]}  # the same server, named
        try:
            runs = common.interleaved(
                {
                    "temporary server": command(env, *run, "--force"),
                    "local server": command(local_env, *run, "--force"),
                    "prefect floor": command(floor_env, sys.executable, "-c", FLOOR),
                },
                rounds,
            )
        finally:
            subprocess.run([IRFORGE, "server", "stop"], env=local_env, capture_output=True, check=False)
    return startup, runs


def main(argv: Sequence[str] | None = None) -> None:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--articles", type=int, default=10)
    args = common.parse_with_out(parser, argv, common.results_file("overhead"))
    console = Console()
    startup, runs = measure(args.rounds, args.articles, console)
    table = common.figures_table(
        "irforge overhead (s, warm median (min–max))", ["command", "median s", "min–max", "cold s"]
    )
    for timings in (startup, runs):
        for name, seconds in timings.warm.items():
            table.add_row(
                name,
                f"{statistics.median(seconds):.2f}",
                f"{min(seconds):.2f}–{max(seconds):.2f}",
                f"{timings.cold.get(name, float('nan')):.2f}",
            )
    console.print(table)
    share = {name: runs.results[name] for name in runs.warm if name != "prefect floor"}  # last round
    console.print(
        f"overhead share of a forced {args.articles}-article run (last round): "
        + ", ".join(f"{k} {v:.0%}" for k, v in share.items())
    )
    size = f"{args.articles} articles, until filter"
    result = {
        "environment": common.environment(cores=common.all_cores()),
        "rounds": args.rounds,
        "startup": startup.summary(),
        "runs": runs.summary(),
        "overhead_share_last_round": share,
        "table": [
            common.table_row(
                "irforge --help",
                "-",
                "1",
                startup,
                ("irforge --help", "help"),
                ("python + typer floor", "floor"),
            ),
            common.table_row(
                "irforge status cure",
                "10 articles",
                "1",
                startup,
                ("irforge status", "status"),
                ("python + typer floor", "floor"),
            ),
            common.table_row(
                "forced run",
                size,
                "all",
                runs,
                ("local server", "local server"),
                ("temporary server", "temporary server"),
            ),
            common.table_row(
                "forced run against Prefect's floor",
                size,
                "all",
                runs,
                ("local server", "local server"),
                ("empty 4-task Prefect flow", "prefect floor"),
            ),
        ],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"results: {args.out}")


if __name__ == "__main__":
    main()
