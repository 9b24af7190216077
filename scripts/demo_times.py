"""Wall and CPU time of each flow's bundled demo, as the README states them (issue 29 §5).

    .venv/bin/python scripts/demo_times.py [--flows cure,evidencebench,crossgenre,spanish_sr]

Each flow runs as a user runs it, ``irforge run <flow>`` on its bundled config, in a fresh
artifact root and ``PREFECT_HOME`` (nothing reused, Prefect's temporary server included);
setup (``scripts/setup.sh``) is not counted. CPU is user + system time of the command and
every process it waited for (pool workers, the embedded LLM server): ``getrusage``'s
``RUSAGE_CHILDREN`` before and after. Prints a Markdown table for the README.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IRFORGE = str(Path(sys.executable).with_name("irforge"))
FLOWS = ("cure", "evidencebench", "crossgenre", "spanish_sr")


def timed_run(flow: str, folder: Path) -> tuple[int, float, float]:
    """(exit status, wall seconds, CPU seconds) of ``irforge run flow``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "DEEPL_AUTH_KEY")}
    env |= {"IRFORGE_ARTIFACTS": str(folder / "artifacts"), "PREFECT_HOME": str(folder / "prefect")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with (folder / f"{flow}.log").open("wb") as log:
        status = subprocess.run(
            [IRFORGE, "run", flow], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=False
        ).returncode
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return status, wall, cpu


def _minutes(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--flows", default=",".join(FLOWS))
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{platform.processor() or platform.machine()}, {cores} cores, load {os.getloadavg()[0]:.2f}")
    print("| demo | wall | CPU (user + system) | exit |")
    print("|---|---:|---:|---:|")
    failed = 0
    for flow in args.flows.split(","):
        with tempfile.TemporaryDirectory(prefix=f"irforge-demo-{flow}-") as tmp:
            status, wall, cpu = timed_run(flow, Path(tmp))
            if status:
                failed += 1
                sys.stderr.write((Path(tmp) / f"{flow}.log").read_text(errors="replace")[-3000:])
        print(f"| `irforge run {flow}` | {_minutes(wall)} | {_minutes(cpu)} | {status} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
