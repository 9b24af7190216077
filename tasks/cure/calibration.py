"""Pick the pooling cut-off from a human-labelled sample, as CURE did (CURE §2.3).

For each threshold t: the *relevant rate* is the share of labelled relevant pairs
(grade ≥ ``relevant_min``) whose score is ≥ t, the *irrelevant rate* the same share of
labelled irrelevant pairs, and CURE's criterion is their difference (it "maximize[s] the
difference between the rate of relevant passages and non-relevant passages included in
the candidate pool"). The pool size at t — stored pairs at or above it, in all and per
query — shows what each choice costs in judge requests.

Only thresholds at or above the pool stage's storage floor are swept: a labelled pair
below the floor was not stored and counts as outside every such pool, which is exact
there and unknown below it. Ties of the criterion go to the higher threshold (a smaller
pool for the same separation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
from matplotlib.figure import Figure  # not pyplot: no GUI backend, no global state

from irforge.errors import IrforgeError

Scale = Literal["probability", "logit"]

SWEEP_SCHEMA = pa.schema(
    [
        pa.field("threshold", pa.float64(), nullable=False),
        pa.field("relevant_rate", pa.float64(), nullable=False),
        pa.field("irrelevant_rate", pa.float64(), nullable=False),
        pa.field("criterion", pa.float64(), nullable=False),
        pa.field("pool_pairs", pa.int64(), nullable=False),
        pa.field("mean_pool_per_query", pa.float64(), nullable=False),
    ]
)


@dataclass(frozen=True)
class Calibration:
    sweep: pa.Table
    best_threshold: float
    labelled_relevant: int
    labelled_irrelevant: int
    labelled_unscored: int  # labelled pairs the pool stage did not store (below its floor)


def read_labels(path: Path) -> pa.Table:
    """``query_id, passage_id, label`` (+ optional ``rater``) from CSV or JSONL; errors name the file."""
    if not path.is_file():
        raise IrforgeError(f"labels: no file at {path}")
    try:
        table = pajson.read_json(path) if path.suffix in {".jsonl", ".json"} else pacsv.read_csv(path)
    except pa.ArrowInvalid as exc:
        raise IrforgeError(f"labels {path}: not readable as {path.suffix or 'CSV'} ({exc})") from None
    missing = {"query_id", "passage_id", "label"} - set(table.column_names)
    if missing:
        raise IrforgeError(f"labels {path}: missing columns {sorted(missing)} (have {table.column_names})")
    for i, label in enumerate(table.column("label").to_pylist()):
        if label not in (0, 1, 2):
            raise IrforgeError(f"labels {path}: row {i + 2}: label {label!r} is not 0, 1 or 2")
    return table


def calibrate(
    pool: pa.Table,
    labels: pa.Table,
    *,
    scale: Scale,
    floor: float,
    relevant_min: int = 1,
    steps: int = 101,
) -> Calibration:
    """Sweep thresholds from the storage floor (on ``scale``) to the highest stored score."""
    scores = {
        (q, p): s
        for q, p, s in zip(
            pool.column("query_id").to_pylist(),
            pool.column("passage_id").to_pylist(),
            pool.column(scale).to_pylist(),
            strict=True,
        )
    }
    # A pair labelled by several raters counts once, with its highest grade.
    grade: dict[tuple[str, str], int] = {}
    for q, p, label in zip(
        labels.column("query_id").to_pylist(),
        labels.column("passage_id").to_pylist(),
        labels.column("label").to_pylist(),
        strict=True,
    ):
        key = (str(q), str(p))
        grade[key] = max(grade.get(key, 0), int(label))
    relevant = np.array([scores.get(k, -math.inf) for k, g in sorted(grade.items()) if g >= relevant_min])
    irrelevant = np.array([scores.get(k, -math.inf) for k, g in sorted(grade.items()) if g < relevant_min])
    if not len(relevant) or not len(irrelevant):
        raise IrforgeError(
            f"labels: need both relevant (grade >= {relevant_min}) and irrelevant pairs; "
            f"got {len(relevant)} relevant and {len(irrelevant)} irrelevant"
        )
    low = floor if scale == "probability" else _logit(floor)
    stored = np.asarray(pool.column(scale).to_numpy(zero_copy_only=False), dtype=np.float64)
    high = float(stored.max()) if len(stored) else low
    thresholds = np.linspace(low, max(high, low), steps)
    queries = max(1, len(pc.unique(pool.column("query_id"))))
    rows = []
    for t in thresholds:
        rel = float(np.mean(relevant >= t))
        irr = float(np.mean(irrelevant >= t))
        pairs = int(np.sum(stored >= t))
        rows.append(
            {"threshold": float(t), "relevant_rate": rel, "irrelevant_rate": irr, "criterion": rel - irr,
             "pool_pairs": pairs, "mean_pool_per_query": pairs / queries}
        )  # fmt: skip
    best = max(rows, key=lambda r: (r["criterion"], r["threshold"]))
    unscored = sum(1 for k in grade if k not in scores)
    return Calibration(
        sweep=pa.Table.from_pylist(rows, schema=SWEEP_SCHEMA),
        best_threshold=float(best["threshold"]),
        labelled_relevant=len(relevant),
        labelled_irrelevant=len(irrelevant),
        labelled_unscored=unscored,
    )


def plot(calibration: Calibration, path: Path, *, scale: Scale, current: float | None = None) -> Path:
    """Rates and criterion against the threshold, pool size on a second axis, as a PNG."""
    sweep = calibration.sweep.to_pydict()
    fig = Figure(figsize=(8, 4.5), dpi=110)
    ax = fig.subplots()
    ax.plot(sweep["threshold"], sweep["relevant_rate"], label="relevant pairs in pool")
    ax.plot(sweep["threshold"], sweep["irrelevant_rate"], label="irrelevant pairs in pool")
    ax.plot(sweep["threshold"], sweep["criterion"], label="difference (CURE's criterion)", linewidth=2.5)
    ax.axvline(
        calibration.best_threshold,
        color="black",
        linestyle="--",
        label=f"best {calibration.best_threshold:.3f}",
    )
    if current is not None:
        ax.axvline(current, color="grey", linestyle=":", label=f"configured {current:g}")
    ax.set_xlabel(f"threshold ({scale})")
    ax.set_ylabel("rate")
    ax.set_ylim(-0.05, 1.05)
    pool_axis = ax.twinx()
    pool_axis.plot(sweep["threshold"], sweep["mean_pool_per_query"], color="tab:grey", alpha=0.5)
    pool_axis.set_ylabel("mean pool per query (pairs)", color="tab:grey")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("Pool cut-off calibration")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def _logit(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))
