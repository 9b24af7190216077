"""The pool cut-off a run used, read from the run itself (never a constant of the report).

The judge stage's manifest holds the config it ran with (``material.config.pool``, a
:class:`tasks.common.rerank.cutoff.PoolCutoff`); a run without a judge artifact falls back to
``stages.judge.pool`` in the config file its run record names (``irforge/runs.py``), then to
the defaults of ``PoolCutoff``. The source is kept so the page can say where the cut-off is from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from irforge.config import format_validation_error
from irforge.errors import ConfigError
from tasks.common.rerank.cutoff import PoolCutoff

JUDGE_STAGE = "judge"  # the stage whose config ``pool`` is the cut-off the judged pools went through


@dataclass(frozen=True)
class RunCutoff:
    cutoff: PoolCutoff
    source: str  # e.g. "the judge stage's config", "the config file flows/configs/<flow>.yaml"


def run_cutoff(judge_config: Mapping[str, Any] | None, config_file: str | None) -> RunCutoff:
    """The cut-off from the judge's manifest config, else the run's config file, else the defaults."""
    if judge_config is not None and "pool" in judge_config:
        return _validate(judge_config["pool"], "the judge stage's config")
    stages = _config_stages(Path(config_file)) if config_file else {}
    judge = stages.get(JUDGE_STAGE)
    if isinstance(judge, Mapping) and "pool" in judge:
        return _validate(judge["pool"], f"the config file {config_file}")
    return RunCutoff(PoolCutoff(), "PoolCutoff's defaults: the run states no cut-off")


def _config_stages(path: Path) -> Mapping[str, Any]:
    """``stages`` of a flow config file; empty when the file is gone or not a mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    stages = data.get("stages") if isinstance(data, Mapping) else None
    return stages if isinstance(stages, Mapping) else {}


def _validate(data: Any, source: str) -> RunCutoff:
    try:
        return RunCutoff(PoolCutoff.model_validate(data), source)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, f"pool cut-off in {source}")) from e
