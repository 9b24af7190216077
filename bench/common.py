"""What the benchmarks share: where the repository and the results are, the command line's
common options, timing, the environment block of a result, tables and writing results.

A benchmark run as a script (``python bench/bench_x.py``) puts the repository on
``sys.path`` itself before it imports this module."""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable, Sequence
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


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the seconds it took."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def best_of(repeat: int, fn: Callable[[], T]) -> tuple[T, float]:
    """The result and the shortest of ``repeat`` timings (the machine is shared: take the least disturbed)."""
    result, best = timed(fn)
    for _ in range(repeat - 1):
        best = min(best, timed(fn)[1])
    return result, best


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
