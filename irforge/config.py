"""Typed flow configuration loaded from YAML.

Every config model forbids unknown keys and is frozen; a bad file fails with one line
per problem, each naming the key's dotted path (``stages.filter.min_words: ...``). Fields
that only say how the work is reached or scheduled are declared
``Transport[...]`` (:mod:`irforge.fingerprint`) and never enter a fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from irforge.errors import ConfigError
from irforge.fingerprint import Transport


class StrictModel(BaseModel):
    """Base of every stage and flow config: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ExecutionConfig(StrictModel):
    """How work is scheduled. Never part of a fingerprint: it does not change results."""

    chunk_rows: Transport[int] = Field(
        2000,
        ge=1,
        description="Input rows per persisted chunk of a long stage; on a pool it may grow, by whole "
        "multiples up to 16x, towards rows / (workers x 4) (irforge/parallel.py rows_per_chunk).",
    )
    part_rows: Transport[int] = Field(100_000, ge=1, description="Rows per Parquet part file of an artifact.")
    runner: Transport[Literal["inline", "process", "ray"]] = Field(
        "process",
        description="Where chunks run: this process one after another, a local process pool, or Ray.",
    )
    workers: Transport[int | None] = Field(
        None,
        ge=1,
        description="Process pool size (default: every core); Ray: chunks in flight (default: its CPUs).",
    )
    ray_address: Transport[str | None] = Field(
        None,
        description="runner ray: a cluster to join (ray://host:10001 or host:6379); unset: a local Ray on demand.",
    )


M = TypeVar("M", bound=BaseModel)


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def format_validation_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        value = e.get("input")
        shown = "" if e["type"] == "missing" or isinstance(value, dict) else f" (got {value!r})"
        lines.append(f"{source}: {_key_path(tuple(e['loc']))}: {e['msg']}{shown}")
    return "\n".join(lines)


def validate_config(model: type[M], data: Any, source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


def load_config(model: type[M], path: Path) -> M:
    """Load and validate ``path``; relative paths inside are resolved later against its folder."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}".replace("\n", " ")) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return validate_config(model, data, str(path))
