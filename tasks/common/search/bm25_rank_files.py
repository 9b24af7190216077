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

from tasks.common.search.bm25_kernels import Bm25Matrix
from tasks.common.search.bm25_rank import Params, RankBm25

PARAMS = "params.json"
_MATRIX = tuple(f.name for f in dataclasses.fields(Bm25Matrix))
_ARRAYS = tuple(f.name for f in dataclasses.fields(RankBm25) if f.name not in ("params", "matrix"))


def save(index: RankBm25, folder: Path) -> None:
    """Write ``index`` under ``folder`` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in _MATRIX:
        np.save(folder / f"matrix.{name}.npy", getattr(index.matrix, name), allow_pickle=False)
    for name in _ARRAYS:
        np.save(folder / f"{name}.npy", getattr(index, name), allow_pickle=False)
    (folder / PARAMS).write_text(
        json.dumps(dataclasses.asdict(index.params), sort_keys=True), encoding="utf-8"
    )


def mapped(path: Path) -> Any:
    """The ``.npy`` array at ``path``, memory-mapped copy-on-write (module docstring)."""
    return np.asarray(np.load(path, mmap_mode="c", allow_pickle=False))


def load(folder: Path) -> RankBm25:
    """The index :func:`save` wrote under ``folder``, its arrays memory-mapped (copy-on-write)."""

    def array(name: str) -> Any:
        return mapped(folder / f"{name}.npy")

    params = Params(**json.loads((folder / PARAMS).read_text(encoding="utf-8")))
    matrix = Bm25Matrix(**{name: array(f"matrix.{name}") for name in _MATRIX})
    return RankBm25(params, matrix, **{name: array(name) for name in _ARRAYS})
