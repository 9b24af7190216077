"""Kill trials (issue 30 §1): kill ``irforge run`` once its process pool is working, then
check that no process it started outlives it and that a rerun gives the artifacts of a run
never killed.

    .venv/bin/python scripts/kill_trials.py [--trials 20] [--signal KILL|TERM] [--seed 0]

The run is the CURE demo (flows/configs/cure.yaml) up to ``filter`` with ``chunk_rows: 4``,
so that parse, segment and filter go through the pool (``runner: process``). Each trial:
start the run in a fresh process group, watch its process tree (``/proc``) until a pool
worker (``multiprocessing.spawn``) shows, wait a random 0–1.5 s, send the signal, then
after 3 s list every process of that tree still alive (zombies are dead); then rerun to
completion in the same artifact root and compare every Parquet file of every artifact with
the never-killed reference run, byte for byte. SIGTERM trials also time the exit.
Prints one row per trial and a summary; exit status 1 if any trial left a process or
changed a byte.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
IRFORGE = str(Path(sys.executable).with_name("irforge"))


def config(folder: Path) -> Path:
    demo = yaml.safe_load((REPO / "flows" / "configs" / "cure.yaml").read_text(encoding="utf-8"))
    stages = {k: demo["stages"][k] for k in ("ingest", "parse", "segment", "filter")}
    sources = [str((REPO / "flows" / "configs" / s).resolve()) for s in stages["ingest"]["sources"]]
    stages["ingest"] = {**stages["ingest"], "sources": sources}
    path = folder / "cure-kill.yaml"
    body = {"flow": "cure", "execution": {"chunk_rows": 4, "runner": "process"}, "stages": stages}
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    return path


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def run(cfg: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [IRFORGE, "run", "cure", "-c", str(cfg), "--until", "filter"],
            env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def parquet_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted((root / "cure").glob("*/*/*.parquet"))
        if not p.parent.name.startswith(".")
    }


def trial(
    n: int, cfg: Path, base: dict[str, str], folder: Path, sig: signal.Signals, rng: random.Random
) -> dict:
    root = folder / f"trial-{n:02d}"
    env = {**base, "IRFORGE_ARTIFACTS": str(root), "PREFECT_HOME": str(folder / f"prefect-{n:02d}")}
    proc = run(cfg, env, folder / f"trial-{n:02d}.log")
    seen: set[int] = set()
    deadline = time.monotonic() + 300
    while not any("multiprocessing" in _cmdline(p) and "spawn" in _cmdline(p) for p in seen):
        if proc.poll() is not None or time.monotonic() > deadline:
            return {"trial": n, "error": f"the run ended (rc {proc.returncode}) before its pool worked"}
        seen |= descendants(proc.pid)
        time.sleep(0.05)
    time.sleep(rng.uniform(0, 1.5))
    seen |= descendants(proc.pid)
    sent = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=120)
    exit_s = time.monotonic() - sent
    time.sleep(3)
    left = sorted(p for p in seen if alive(p))
    for pid in left:  # leave the machine clean for the next trial
        os.kill(pid, signal.SIGKILL)
    rerun = run(cfg, env, folder / f"trial-{n:02d}.log")
    return {"trial": n, "exit_s": exit_s, "rc": proc.returncode, "processes": len(seen), "left": left,
            "rerun_rc": rerun.wait(timeout=900), "root": root}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--signal", choices=("KILL", "TERM"), default="KILL")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sig, rng = signal.Signals[f"SIG{args.signal}"], random.Random(args.seed)
    base = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    folder = Path(tempfile.mkdtemp(prefix="irforge-kill-"))
    try:
        cfg = config(folder)
        ref_env = {
            **base,
            "IRFORGE_ARTIFACTS": str(folder / "reference"),
            "PREFECT_HOME": str(folder / "prefect-ref"),
        }
        if run(cfg, ref_env, folder / "reference.log").wait(timeout=900) != 0:
            print((folder / "reference.log").read_text()[-3000:])
            return 2
        reference = parquet_bytes(folder / "reference")
        print(f"reference run: {len(reference)} Parquet files; SIG{args.signal} x {args.trials}")
        print("trial  exit_s  rc   procs  left  rerun  identical")
        bad = 0
        for n in range(1, args.trials + 1):
            r = trial(n, cfg, base, folder, sig, rng)
            if "error" in r:
                print(f"{n:5d}  {r['error']}")
                bad += 1
                continue
            same = r["rerun_rc"] == 0 and parquet_bytes(r["root"]) == reference
            bad += bool(r["left"]) or not same
            print(f"{n:5d}  {r['exit_s']:6.2f}  {r['rc']:4d}  {r['processes']:5d}  {len(r['left']):4d}  "
                  f"{r['rerun_rc']:5d}  {'yes' if same else 'NO'}")  # fmt: skip
            shutil.rmtree(r["root"], ignore_errors=True)
        print(f"{args.trials - bad} of {args.trials} trials clean (no process left, artifacts identical)")
        return 1 if bad else 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
