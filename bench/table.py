"""Print the README's Benchmarks table (markdown) from the benchmarks' results.

    .venv/bin/python bench/table.py [--results bench/results]

One row per entry of each ``bench/results/*.json``'s ``"table"`` list (written with
``bench.common.table_row``): what is measured, the size, ours and the peer, the threads
each side had, both warm medians, and the peer's seconds over ours as median (min–max) of
the interleaved warm rounds and of the cold calls (compile and first-load included). A
result without a ``"table"`` (a quality or a cost benchmark, a flow timing) is named below
the table as not comparing speed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

COLUMNS = ("bench", "what", "size", "ours", "peer", "threads", "ours s", "peer s", "peer / ours warm", "cold")


def cell(text: Any) -> str:
    """A markdown table cell: pipes escaped, newlines folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def rows_of(name: str, result: dict[str, Any]) -> list[list[str]]:
    """The table rows of one result file (``name`` without ``.json``)."""
    out = []
    for row in result.get("table", []):
        cold = row.get("cold") or {}
        out.append(
            [
                f"`{name}`",
                row["what"],
                row["size"],
                row["ours"],
                row["peer"],
                str(row["threads"]),
                f"{row['ours_warm_median_s']:.3g}",
                f"{row['peer_warm_median_s']:.3g}",
                row["warm"]["text"],
                cold.get("text", ""),
            ]
        )
    return out


def markdown(results: Path) -> str:
    """The table, then the result files that hold no speed comparison."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    others = []
    for path in sorted(results.glob("*.json")):
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            others.append(f"{path.name} (unreadable: {err})")
            continue
        rows = rows_of(path.stem, result) if isinstance(result, dict) else []
        if not rows:
            others.append(path.name)
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    if others:
        text += "\nNo speed comparison (quality, cost or flow timings): " + ", ".join(others) + "\n"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--results", type=Path, default=common.REPO / "bench" / "results")
    args = parser.parse_args(argv)
    print(markdown(args.results), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
