"""A :class:`~tasks.common.search.bm25_rank.RankBm25` index as files: one ``.npy`` per array
(https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html) and its parameters as
JSON. :func:`load` maps the arrays copy-on-write (``numpy.load(mmap_mode="c")``), so every
process of a host searching one index shares its pages instead of holding a copy each. (Not
read-only: numba compiles other code for read-only arrays, and that code's float sums differed
in the last bit.)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from tasks.common.search.bm25_rank import Params, RankBm25

PARAMS = "params.json"
FORMAT = 2  # 2: float64 posting scores (1, before: float32 weights and frequencies)
_ARRAYS = tuple(f.name for f in dataclasses.fields(RankBm25) if f.name != "params")


def save(index: RankBm25, folder: Path) -> None:
    """Write ``index`` under ``folder`` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in _ARRAYS:
        np.save(folder / f"{name}.npy", getattr(index, name), allow_pickle=False)
    saved = {"format": FORMAT, **dataclasses.asdict(index.params)}
    (folder / PARAMS).write_text(json.dumps(saved, sort_keys=True), encoding="utf-8")


def mapped(path: Path) -> Any:
    """The ``.npy`` array at ``path``, memory-mapped copy-on-write (module docstring)."""
    return np.asarray(np.load(path, mmap_mode="c", allow_pickle=False))


def load(folder: Path) -> RankBm25:
    """The index :func:`save` wrote under ``folder``, its arrays memory-mapped (copy-on-write)."""

    def array(name: str) -> Any:
        return mapped(folder / f"{name}.npy")

    saved = json.loads((folder / PARAMS).read_text(encoding="utf-8"))
    if saved.pop("format", 1) != FORMAT:
        raise ValueError(
            f"{folder}: a rank_bm25 index of another format (not {FORMAT}): delete it to rebuild"
        )
    return RankBm25(Params(**saved), **{name: array(name) for name in _ARRAYS})
