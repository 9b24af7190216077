"""What the benchmarks share: where the repository and the results are, the command line's
common options, timing (interleaved rounds of ours and a peer on equal threads), the environment block of a result, tables and writing results.

A benchmark run as a script (``python bench/bench_x.py``) puts the repository on
``sys.path`` itself before it imports this module."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def results_file(name: str) -> Path:
    """Where a benchmark writes its JSON results by default (``bench/results/``, not tracked)."""
    return REPO / "bench" / "results" / f"{name}.json"


def bench_parser(doc: str | None, *, full_doc: bool = False) -> argparse.ArgumentParser:
    """The benchmark's parser: its docstring's first paragraph as description (all of it,
    verbatim, with ``full_doc``)."""
    if full_doc:
        return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)


def parse_with_out(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, results: Path
) -> argparse.Namespace:
    """Add ``--out`` (the JSON results file, default ``results``) and parse ``argv``."""
    parser.add_argument("--out", type=Path, default=results, help="JSON results file")
    return parser.parse_args(argv)


def timed(fn: Callable[[], T], clock: Callable[[], float] = time.perf_counter) -> tuple[T, float]:
    """``fn()`` and the seconds it took by ``clock`` (wall time unless told)."""
    start = clock()
    result = fn()
    return result, clock() - start


def best_of(repeat: int, fn: Callable[[], T]) -> tuple[T, float]:
    """The result and the shortest of ``repeat`` timings (the machine is shared: take the least disturbed)."""
    result, best = timed(fn)
    for _ in range(repeat - 1):
        best = min(best, timed(fn)[1])
    return result, best


@dataclass
class Timings:
    """What :func:`interleaved` measured: each contender's cold call (the first, compiling and
    warming caches included) and its warm calls, one a round, in seconds."""

    cold: dict[str, float] = field(default_factory=dict)
    warm: dict[str, list[float]] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def median(self, name: str) -> float:
        """The median of ``name``'s warm seconds."""
        return statistics.median(self.warm[name])

    def ratio(self, peer: str, ours: str) -> str:
        """:func:`ratio_text` of ``peer`` over ``ours``, warm rounds."""
        return ratio_text(self.warm[peer], self.warm[ours])

    def summary(self) -> dict[str, Any]:
        """For the JSON results: per contender its cold seconds, warm seconds, warm median, min, max."""
        return {
            name: {
                "cold_s": self.cold.get(name),
                "warm_s": seconds,
                "median_s": statistics.median(seconds) if seconds else None,
                "min_s": min(seconds, default=None),
                "max_s": max(seconds, default=None),
            }
            for name, seconds in self.warm.items()
        }


def interleaved(
    contenders: dict[str, Callable[[], Any]],
    rounds: int = 3,
    *,
    warmup: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> Timings:
    """Time ``contenders`` on the same machine state: first each called once, in the given order
    (its ``cold`` time, compiling included; skipped when not ``warmup``), then ``rounds`` warm
    rounds calling each once, the order rotated every round so that the machine's drift (a
    neighbour's load, thermal state) falls on every contender alike. Each one's last result is
    kept in ``results``. ``clock``: wall time by default; ``time.thread_time`` counts only this
    thread's CPU, steadier on a shared machine, and right only when both sides run in it."""
    names = list(contenders)
    out = Timings(warm={name: [] for name in names})
    if warmup:
        for name in names:
            out.results[name], out.cold[name] = timed(contenders[name], clock)
    for r in range(rounds):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            out.results[name], seconds = timed(contenders[name], clock)
            out.warm[name].append(seconds)
    return out


def ratio_text(peer_seconds: Sequence[float], ours_seconds: Sequence[float]) -> str:
    """``"1.62× (1.55–1.70)"``: the peer's seconds over ours, round by round (pairs taken in
    order), median (min–max); above 1 is ours faster. One pair (a cold call): ``"1.62×"``."""
    ratios = ratios_of(peer_seconds, ours_seconds)
    if not ratios:
        return "n/a"
    if len(ratios) == 1:  # a cold call: one pair, no spread to show
        return f"{ratios[0]:.2f}×"
    return f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})"


def ratios_of(peer_seconds: Sequence[float], ours_seconds: Sequence[float]) -> list[float]:
    """The peer's seconds over ours, round by round (a zero of ours left out)."""
    return [p / o for p, o in zip(peer_seconds, ours_seconds, strict=False) if o > 0]


def ratio_summary(peer_seconds: Sequence[float], ours_seconds: Sequence[float]) -> dict[str, Any]:
    """For the JSON results: peer/ours per round, their median, min, max and :func:`ratio_text`."""
    ratios = ratios_of(peer_seconds, ours_seconds)
    return {
        "ratios": ratios,
        "median": statistics.median(ratios) if ratios else None,
        "min": min(ratios, default=None),
        "max": max(ratios, default=None),
        "text": ratio_text(peer_seconds, ours_seconds),
    }


def table_row(
    what: str, size: str, threads: str, timings: Timings, ours: tuple[str, str], peer: tuple[str, str]
) -> dict[str, Any]:
    """One row of the README's Benchmarks table (``bench/table.py`` prints them from each
    result's ``"table"`` list): ``ours`` and ``peer`` are (label, contender name in
    ``timings``); the ratio is the peer's seconds over ours, warm rounds and cold calls."""
    (ours_label, o), (peer_label, p) = ours, peer
    cold = (
        ratio_summary([timings.cold[p]], [timings.cold[o]])
        if o in timings.cold and p in timings.cold
        else None
    )
    return {
        "what": what,
        "size": size,
        "ours": ours_label,
        "peer": peer_label,
        "threads": threads,
        "ours_warm_median_s": timings.median(o),
        "peer_warm_median_s": timings.median(p),
        "warm": ratio_summary(timings.warm[p], timings.warm[o]),
        "cold": cold,
    }


@contextlib.contextmanager
def same_threads(n: int) -> Iterator[int]:
    """Run the block with ``n`` threads for numba, torch (when already imported) and the BLAS /
    OpenMP pools (threadpoolctl, https://github.com/joblib/threadpoolctl), so that ours and a
    peer run on equal footing; the previous counts come back after. Yields ``n``."""
    import numba  # noqa: PLC0415 -- heavy import, only where threads are pinned
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]  # noqa: PLC0415

    torch = sys.modules.get("torch")
    before_numba = numba.get_num_threads()
    before_torch = torch.get_num_threads() if torch is not None else None
    numba.set_num_threads(min(n, getattr(numba.config, "NUMBA_NUM_THREADS", n)))
    if torch is not None:
        torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield n
    finally:
        numba.set_num_threads(before_numba)
        if torch is not None and before_torch is not None:
            torch.set_num_threads(before_torch)


def all_cores() -> int:
    """This process's usable cores (its affinity where the OS says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def environment(**versions: Any) -> dict[str, Any]:
    """The result's environment block: Python, the given versions, the machine and processor."""
    return {
        "python": platform.python_version(),
        **versions,
        "machine": platform.machine(),
        "processor": platform.processor() or platform.platform(),
    }


def figures_table(title: str, columns: Sequence[str], *, left: int = 1, **column: Any) -> Table:
    """A table whose first ``left`` columns (names) are left-aligned and the others (figures)
    right-aligned; ``column`` goes to every ``add_column``."""
    table = Table(title=title)
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i < left else "right", **column)
    return table


def read_dev_set(path: Path, console: Console, option: str = "--dev") -> dict[str, dict[str, Any]] | None:
    """The released EvidenceBench dev set (instance key -> instance); None, said, when absent."""
    if not path.is_file():
        console.print(
            f"[red]the EvidenceBench dev set is not at {path}: it is expected in ../shared/samples/"
            f"evidencebench/ next to the repository, or give its path with {option}[/red]"
        )
        return None
    data: dict[str, dict[str, Any]] = json.loads(path.read_text())
    return data


def write_results(out: Path, result: dict[str, Any], console: Console) -> None:
    """Write ``result`` as JSON to ``out`` (folders made) and say so."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    console.print(f"wrote {out}")
