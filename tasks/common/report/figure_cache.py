"""Figures drawn once: a section's SVG kept on disk under a digest of what it is drawn from.

Drawing with matplotlib was most of a run whose stages were all reused (issue 26: 9.8 of
12.5 s of ``irforge run cure`` on the demo's artifacts), though the figures of reused stages
are those of the last run. A section's data is loaded from the run's artifacts and its
config (``tasks/common/report/sections.py``), so its key is :func:`run_material` (every
stage's fingerprint, the config file's bytes) with the section's id; a figure of data made
in the report itself keys on that data. Both add the source of the module that draws and of
:mod:`tasks.common.report.plots`, and matplotlib's version. Files live under
``<root>/<flow>/reports/.figures/``; a stale one is never read again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import uuid
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tasks.common.report.data import RunReport

FOLDER = ".figures"


def run_material(report: RunReport) -> bytes:
    """What every section's data is loaded from: the stages' artifacts and the run's config."""
    stages = [(s.name, s.artifact.fingerprint if s.artifact is not None else None) for s in report.stages]
    config = report.record.config
    try:
        config_bytes = Path(config).read_bytes().hex() if config else None
    except OSError:
        config_bytes = None
    return json.dumps({"stages": stages, "config": config, "bytes": config_bytes}).encode()


def cached_svg(
    cache: Path | None, material: bytes, draw: Callable[[Any], str | None], data: Any
) -> str | None:
    """``draw(data)``, read from ``cache`` when a figure of equal ``material`` was drawn before."""
    if data is None:
        return None
    if cache is None:
        return draw(data)
    path = cache / f"{_key(material, draw)}.svg"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    svg = draw(data)
    if svg is not None:
        _write(path, svg)
    return svg


def _key(material: bytes, draw: Callable[[Any], str | None]) -> str:
    digest = hashlib.sha256(material)
    for module in sorted({getattr(draw, "__module__", ""), "tasks.common.report.plots"}):
        digest.update(_code_digest(module))
    digest.update(getattr(draw, "__qualname__", "").encode())
    return digest.hexdigest()[:32]


@functools.cache
def _code_digest(module: str) -> bytes:
    """A drawing module's source and matplotlib's version, read once a process."""
    source = getattr(sys.modules.get(module), "__file__", None)
    code = Path(source).read_bytes() if source else module.encode()
    return hashlib.sha256(code + version("matplotlib").encode()).digest()


def _write(path: Path, svg: str) -> None:
    """Written whole (temp file + rename): a reader never sees half a figure."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(svg, encoding="utf-8")
        tmp.replace(path)
    except OSError:  # a read-only root: the page is still written from the drawn figure
        pass
