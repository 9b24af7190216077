"""Picking the pool cut-off from labelled pairs (CURE §2.3: maximise relevant-rate minus irrelevant-rate)."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from irforge.errors import IrforgeError
from tasks.cure.calibration import calibrate, plot, read_labels


def _pool(scores: dict[tuple[str, str], float]) -> pa.Table:
    rows = [
        {"query_id": q, "passage_id": p, "probability": s, "logit": math.log(s / (1 - s))}
        for (q, p), s in sorted(scores.items())
    ]
    return pa.Table.from_pylist(rows)


def _labels(grades: dict[tuple[str, str], int]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"query_id": q, "passage_id": p, "label": g} for (q, p), g in grades.items()]
    )


def test_best_threshold_separates_relevant_from_irrelevant() -> None:
    # Relevant pairs score 0.7 and 0.9, irrelevant ones 0.2 and 0.5; q2/x is labelled but
    # was not stored (below the floor): outside every pool.
    pool = _pool({("q1", "a"): 0.9, ("q1", "b"): 0.5, ("q2", "c"): 0.7, ("q2", "d"): 0.2, ("q2", "e"): 0.6})
    labels = _labels({("q1", "a"): 2, ("q1", "b"): 0, ("q2", "c"): 1, ("q2", "d"): 0, ("q2", "x"): 0})
    result = calibrate(pool, labels, scale="probability", floor=0.1, steps=81)  # steps of 0.01
    rows = {round(r["threshold"], 2): r for r in result.sweep.to_pylist()}
    # At 0.6: both relevant pairs in (1.0), no irrelevant one (0 of 3): criterion 1.
    assert rows[0.6]["relevant_rate"] == 1.0 and rows[0.6]["irrelevant_rate"] == 0.0
    assert rows[0.6]["pool_pairs"] == 3 and rows[0.6]["mean_pool_per_query"] == 1.5
    # At 0.1: everything stored is in: 2 of 3 irrelevant (x was never stored).
    assert rows[0.1]["irrelevant_rate"] == pytest.approx(2 / 3)
    # Criterion 1 holds for t in (0.5, 0.7]; ties go to the highest threshold.
    assert result.best_threshold == pytest.approx(0.7)
    assert (result.labelled_relevant, result.labelled_irrelevant, result.labelled_unscored) == (2, 3, 1)


def test_logit_scale_starts_at_the_floor_in_logits() -> None:
    pool = _pool({("q", "a"): 0.9, ("q", "b"): 0.3})
    result = calibrate(pool, _labels({("q", "a"): 2, ("q", "b"): 0}), scale="logit", floor=0.1)
    assert result.sweep.column("threshold")[0].as_py() == pytest.approx(math.log(0.1 / 0.9))
    assert math.log(0.3 / 0.7) < result.best_threshold <= math.log(0.9 / 0.1)


def test_labels_need_both_classes_and_valid_grades(tmp_path: Path) -> None:
    pool = _pool({("q", "a"): 0.9})
    with pytest.raises(IrforgeError, match="both relevant"):
        calibrate(pool, _labels({("q", "a"): 2}), scale="probability", floor=0.05)
    bad = tmp_path / "labels.csv"
    bad.write_text("query_id,passage_id,label\nq,a,2\nq,b,5\n")
    with pytest.raises(IrforgeError, match=r"row 3: label 5"):
        read_labels(bad)
    missing = tmp_path / "nolabel.csv"
    missing.write_text("query_id,passage_id\nq,a\n")
    with pytest.raises(IrforgeError, match="missing columns"):
        read_labels(missing)


def test_plot_is_written(tmp_path: Path) -> None:
    pool = _pool({("q", "a"): 0.9, ("q", "b"): 0.3})
    result = calibrate(pool, _labels({("q", "a"): 2, ("q", "b"): 0}), scale="probability", floor=0.05)
    png = plot(result, tmp_path / "cal.png", scale="probability", current=0.42)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
