"""How the project's numba kernels are compiled (one place, so every kernel module agrees)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba


def compiled(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` compiled with ``numba.njit``: cached on disk (a process pays the compile
    once per install) and releasing the GIL, so callers may run kernels in threads."""
    kernel: Callable[..., Any] = numba.njit(cache=True, nogil=True)(function)
    return kernel
