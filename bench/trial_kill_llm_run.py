"""SIGKILL ``irforge run`` while its embedded LLM server serves a stage; count the servers left.

The trials of issue 14, item 6: ``irforge run cure --until translate --force`` on the demo
config, killed (SIGKILL, the main process only) a random 0.5-4 s after its llama.cpp server
answers; a server still running 5 s later is an orphan. The run's other children (Prefect's
temporary API server) are counted apart, and every leftover is killed after the count.

    .venv/bin/python -m bench.trial_kill_llm_run --trials 20 --artifacts /tmp/kill-trials
    # against another checkout (e.g. the code before the fix):
    .venv/bin/python -m bench.trial_kill_llm_run --tree /tmp/old --trials 8 --artifacts /tmp/kill-old

Linux only (reads /proc). Prints one line per trial and ``orphans: N/M kills``.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REPO

CLI = "import sys; from flows.cli import main; sys.argv[0] = 'irforge'; main()"


def children(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def running(pid: int, marker: bytes = b"") -> bool:
    """Whether ``pid`` runs (not a zombie) with ``marker`` in its command line."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return marker in cmdline and state != "Z"


def is_server(pid: int) -> bool:
    return running(pid, b"llama_cpp.server")


def run_args(artifacts: Path) -> list[str]:
    return [sys.executable, "-c", CLI, "run", "cure", "--artifacts", str(artifacts), "--until", "translate"]


def trial(tree: Path, artifacts: Path, rng: random.Random, log: Path) -> tuple[str, list[int], list[int]]:
    """One killed run: ("killed", LLM servers left, other children left) or ("finished"/"no server", [], [])."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with log.open("ab") as out:
        run = subprocess.Popen([*run_args(artifacts), "--force"], cwd=tree, env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + 300
    servers: list[int] = []
    while not servers:
        if run.poll() is not None or time.monotonic() > deadline:
            run.kill()
            run.wait()
            return ("finished" if run.returncode == 0 else "no server"), [], []
        servers = [p for p in children(run.pid) if is_server(p)]
        time.sleep(0.05)
    time.sleep(rng.uniform(0.5, 4.0))
    if run.poll() is not None:
        return "finished", [], []
    others = [p for p in children(run.pid) if p not in servers]
    run.send_signal(signal.SIGKILL)
    run.wait()
    time.sleep(5.0)
    left = [p for p in servers if is_server(p)]
    others_left = [p for p in others if running(p)]
    for pid in left + others_left:  # clean up after the measurement
        os.kill(pid, signal.SIGKILL)
    return "killed", left, others_left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--tree", type=Path, default=REPO, help="checkout whose code runs")
    parser.add_argument("--artifacts", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    args.artifacts.mkdir(parents=True, exist_ok=True)
    log = args.artifacts / "trials.log"
    env = {**os.environ, "PYTHONPATH": str(args.tree)}
    print("warming up: stages before translate", flush=True)
    with log.open("ab") as out:
        subprocess.run(
            [*run_args(args.artifacts)[:-1], "dedup"],
            check=True,
            cwd=args.tree,
            env=env,
            stdout=out,
            stderr=out,
        )
    kills = orphans = other_orphans = 0
    while kills < args.trials:
        state, left, others_left = trial(args.tree, args.artifacts, rng, log)
        if state == "killed":
            kills += 1
            orphans += bool(left)
            other_orphans += bool(others_left)
        print(
            f"trial {kills}: {state}, LLM servers left: {left}, other children left: {others_left}",
            flush=True,
        )
        if state == "no server":
            sys.exit(f"the run failed before its LLM server started: see {log}")
    print(
        f"orphans: {orphans}/{kills} kills (other children, e.g. Prefect's server: {other_orphans}/{kills})"
    )


if __name__ == "__main__":
    main()
