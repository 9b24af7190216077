"""A flow as data: its stages in order, its config model, and how a run is selected.

Nothing here imports Prefect: ``flows/`` wraps :func:`execute_step` in Prefect tasks, and
``irforge status`` / ``show`` use the same plans without starting anything.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from irforge.artifacts import ArtifactStore
from irforge.config import ExecutionConfig, StrictModel, load_config
from irforge.contents import canonical
from irforge.engine import StageOutcome, StagePlan, run_stage
from irforge.errors import ConfigError, IrforgeError
from irforge.parallel import INLINE, ChunkRunner
from irforge.progress import Progress
from irforge.stage import StageContext, StageSpec


class FlowConfig(StrictModel):
    execution: ExecutionConfig = ExecutionConfig()


@dataclass(frozen=True)
class Pipeline:
    name: str
    config_type: type[FlowConfig]
    stages: tuple[StageSpec[Any], ...]  # in an order where upstream comes first
    default_config: Path
    release_stage: str = "release"  # the stage whose files/release folder `irforge release` serves
    # The module whose ``SECTIONS`` are the flow's own sections of its run report
    # (``tasks/common/report/sections.py`` says what one is), imported only when a report is
    # written (it draws with matplotlib); None: the generic parts only.
    report_module: str | None = None

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for spec in self.stages:
            missing = [u for u in spec.upstream if u not in seen]
            if missing:
                raise ValueError(f"{self.name}: stage {spec.name} comes before its upstream {missing}")
            seen.add(spec.name)

    @property
    def report_sections(self) -> tuple[Any, ...]:
        if self.report_module is None:
            return ()
        return tuple(importlib.import_module(self.report_module).SECTIONS)

    @property
    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def spec(self, name: str) -> StageSpec[Any]:
        for spec in self.stages:
            if spec.name == name:
                return spec
        raise IrforgeError(f"flow {self.name} has no stage {name!r} (stages: {', '.join(self.stage_names)})")

    def stage_config(self, config: FlowConfig, name: str) -> BaseModel | None:
        """The stage's config; None when the flow config leaves an optional stage out."""
        stage_config: BaseModel | None = getattr(config.stages, name)  # type: ignore[attr-defined]
        return stage_config

    def descendants(self, name: str) -> set[str]:
        found = {name}
        for spec in self.stages:  # upstream-first order: one pass suffices
            if found.intersection(spec.upstream):
                found.add(spec.name)
        return found - {name}

    def ancestors(self, name: str) -> set[str]:
        found: set[str] = set()
        todo = list(self.spec(name).upstream)
        while todo:
            up = todo.pop()
            if up not in found:
                found.add(up)
                todo.extend(self.spec(up).upstream)
        return found

    def load(self, config_path: Path | None) -> tuple[FlowConfig, Path]:
        """The validated config and the folder its relative paths are resolved against."""
        path = (config_path or self.default_config).resolve()
        return load_config(self.config_type, path), path.parent

    def plan(
        self, config: FlowConfig, base_dir: Path, resolve: Callable[[str, str], str] | None = None
    ) -> dict[str, StagePlan]:
        """Plans of the configured stages (a stage left out of the config, and what depends on it, has none).

        ``resolve(stage, fingerprint)``: the fingerprint a downstream stage is to see for an
        upstream one (:func:`irforge.contents.canonical` over a store: early cut-off)."""
        plans: dict[str, StagePlan] = {}
        for spec in self.stages:
            stage_config = self.stage_config(config, spec.name)
            if stage_config is None:
                continue
            missing = [u for u in spec.upstream if u not in plans]
            if missing:  # configured, but it could never run: say so rather than skip it
                raise ConfigError(
                    f"stages.{spec.name} needs stage(s) {', '.join(missing)}: add "
                    + " and ".join(f"stages.{u}" for u in missing)
                    + " to the config, or remove stages."
                    + spec.name
                )
            context = StageContext(stage_config, base_dir)
            upstream = {
                u: resolve(u, plans[u].fingerprint) if resolve else plans[u].fingerprint
                for u in spec.upstream
            }
            plans[spec.name] = StagePlan.make(spec, context, upstream)
        return plans


@dataclass(frozen=True)
class Selection:
    """Which stages a run computes: ``--from`` / ``--only`` / ``--until`` / ``--force``."""

    from_stage: str | None = None
    only: str | None = None
    until: str | None = None
    force: bool = False


@dataclass(frozen=True)
class Step:
    plan: StagePlan
    force: bool

    @property
    def name(self) -> str:
        return self.plan.spec.name


def select_steps(
    pipeline: Pipeline, plans: dict[str, StagePlan], selection: Selection, store: ArtifactStore
) -> list[Step]:
    """The stages to execute, in order, each marked forced (recompute) or not (reuse if present).

    - default: every stage, reusing what exists;
    - ``until S``: S and what it depends on;
    - ``from S``: S and everything downstream recomputed, upstream reused (computed if missing);
    - ``only S``: S alone recomputed; its upstream artifacts must already exist;
    - ``force``: every selected stage recomputed.
    """
    for name in (selection.from_stage, selection.only, selection.until):
        if name is not None:
            pipeline.spec(name)  # fails with the list of valid names
            if name not in plans:
                raise IrforgeError(f"stage {name} is not configured: add stages.{name} to the flow config")
    if selection.only and (selection.from_stage or selection.until):
        raise IrforgeError("--only cannot be combined with --from or --until")
    if selection.only:
        spec = pipeline.spec(selection.only)
        for up in spec.upstream:
            if store.find(pipeline.name, up, plans[up].fingerprint) is None:
                raise IrforgeError(
                    f"--only {spec.name}: upstream stage {up} has no artifact for the current config "
                    f"(run `irforge run {pipeline.name} --until {up}` first)"
                )
        return [Step(plans[spec.name], force=True)]
    names = [n for n in pipeline.stage_names if n in plans]
    if selection.until:
        wanted = pipeline.ancestors(selection.until) | {selection.until}
        names = [n for n in names if n in wanted]
    forced: set[str] = set(names) if selection.force else set()
    if selection.from_stage:
        if selection.until and selection.from_stage not in names:
            raise IrforgeError(f"--from {selection.from_stage} is not upstream of --until {selection.until}")
        forced |= ({selection.from_stage} | pipeline.descendants(selection.from_stage)) & set(names)
    return [Step(plans[n], force=n in forced) for n in names]


def execute_step(
    step: Step,
    store: ArtifactStore,
    flow: str,
    execution: ExecutionConfig,
    progress: Progress | None = None,
    runner: ChunkRunner = INLINE,
    used: Mapping[str, str] | None = None,
) -> StageOutcome:
    """Run one stage against the upstream artifacts its plan names, its chunks on ``runner``.

    ``used``: the fingerprint each stage of this run ended with; each upstream is then taken at
    its canonical fingerprint (:func:`irforge.contents.canonical`), so an upstream recomputed
    to identical output leaves this stage's fingerprint, and artifact, as they were."""
    fps = step.plan.upstream_fingerprints
    if used is not None:
        fps = {u: canonical(store, flow, u, used.get(u, fp)) for u, fp in fps.items()}
    upstream = {name: store.get(flow, name, fp) for name, fp in fps.items()}
    plan = replace(step.plan, upstream_fingerprints=dict(sorted(fps.items())))
    plan = plan.with_upstream(upstream, cache_dir=store.root / "cache")
    return run_stage(plan, store, flow, execution, force=step.force, progress=progress, runner=runner)
