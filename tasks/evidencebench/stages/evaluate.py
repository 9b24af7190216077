"""Stage ``evaluate``: ER@K aspect recall of retrieval systems on the built instances (§2.3, §4, App. E).

The instances are those ``select`` built, or, with ``dataset``, any file in the released
schema (the authors' dev set, say), so the baselines can be compared with the paper's.
Systems (each answers the four tasks; see :mod:`tasks.evidencebench.baselines`):

* ``oracle``: the instance's own released selections: 100 % on both @optimal tasks by
  construction, a check that the instances and the scorer agree;
* ``bm25``: BM25 (``bm25s``) over the pool with the hypothesis as the query;
* ``dense:<model>`` and ``dense:<model>+E6``: exact cosine under an embedding model, without
  and with the instruction prefix of App. E.6;
* ``llm:<strategy>``: the LLM strategies of App. E (``default``, ``section``,
  ``regenerate``, :mod:`tasks.evidencebench.llm_retrieval`) through the reply cache;
* ``file:<stem>``: any system's selections, a JSON file ``{instance id: {task: [indices]}}``;
* with ``negation``, every ranking system again on negated hypotheses (App. E.8,
  ``<system>@negated``; the LLM writes the negations).

A task an LLM system got no valid reply for scores 0 and is counted in ``failed`` (never
silently dropped); an instance without results aspects is ``skipped`` for the Result tasks.

Units: (system, task). Output: ``system``, ``task``, ``k`` (``optimal``, 10 or 5),
``mean_recall``, ``instances`` (scored), ``skipped``, ``failed``. Side table ``per_instance``:
``system``, ``task``, ``instance_id``, ``recall``, ``failed``. Excluded: ``bad_selections``
(a selections file that cannot be read or does not fit the instances), ``no_negations``
(every negation request failed), ``no_instances`` (nothing to score).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError, IrforgeError
from irforge.fingerprint import Transport, digest_file
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.embed.config import EncoderConfig, encoder_for
from tasks.common.embed.local import BUILTIN_MINILM
from tasks.common.llm.cache import ChatStats
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.stage import llm_cost, llm_session
from tasks.evidencebench.baselines import (
    E6_PREFIXES,
    BM25Ranker,
    DenseRanker,
    RankingBaseline,
    System,
    evaluate,
    negated_set,
)
from tasks.evidencebench.llm_retrieval import LLMRetriever, Strategy
from tasks.evidencebench.negation import negate
from tasks.evidencebench.selection import TASK_K, Task, coverage

ORACLE = "oracle"


class EvaluateConfig(StrictModel):
    dataset: str | None = Field(
        None,
        description="A released-schema JSON file (relative to the config) instead of select's instances.",
    )
    oracle: bool = Field(True, description="Score the instances' own selections (a consistency check).")
    bm25: bool = True
    embedding_models: tuple[str, ...] = Field((BUILTIN_MINILM,), description="sentence-transformers models.")
    embedding_prefix: Literal["both", "with", "without"] = Field(
        "both", description="Dense rows with the App. E.6 instruction prefix, without it, or both."
    )
    device: Transport[str | None] = Field(None, description="Embedding device (default: CUDA when present).")
    llm: LLMConfig | None = Field(None, description="The LLM of the llm strategies and of negation.")
    llm_strategies: tuple[Strategy, ...] = ()
    max_regenerations: int = Field(3, ge=0)
    negation: bool = Field(False, description="Also score the ranking systems on negated hypotheses (E.8).")
    selections: tuple[str, ...] = Field(
        (),
        description="JSON files {instance id: {task: [indices]}} of other systems, relative to the config.",
    )


SCHEMA = pa.schema(
    [
        pa.field("system", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("k", pa.string(), nullable=False),
        pa.field("mean_recall", pa.float64()),
        pa.field("instances", pa.int32(), nullable=False),
        pa.field("skipped", pa.int32(), nullable=False),
        pa.field("failed", pa.int32(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("system", pa.string(), nullable=False),
                                   pa.field("task", pa.string(), nullable=False))  # fmt: skip
PER_INSTANCE_SCHEMA = pa.schema(
    [
        pa.field("system", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("instance_id", pa.string(), nullable=False),
        pa.field("recall", pa.float64(), nullable=False),
        pa.field("failed", pa.bool_(), nullable=False),
    ]
)


def _check(config: EvaluateConfig) -> None:
    if (config.llm_strategies or config.negation) and config.llm is None:
        raise ConfigError("evaluate: llm_strategies and negation need an llm")


@dataclass(frozen=True)
class _RankerSpec:
    """A ranking system: BM25 (``model`` None) or a dense model, with or without the E.6 prefix."""

    name: str
    model: str | None
    prefixed: bool


def _ranker_specs(config: EvaluateConfig) -> list[_RankerSpec]:
    specs = [_RankerSpec("bm25", None, False)] if config.bm25 else []
    for model in config.embedding_models:
        if config.embedding_prefix in ("both", "without"):
            specs.append(_RankerSpec(f"dense:{model}", model, False))
        if config.embedding_prefix in ("both", "with"):
            specs.append(_RankerSpec(f"dense:{model}+E6", model, True))
    return specs


def _rankers(config: EvaluateConfig) -> list[str]:
    return [spec.name for spec in _ranker_specs(config)]


def system_names(config: EvaluateConfig) -> list[str]:
    """Every system the config asks for, in report order."""
    _check(config)
    names = [ORACLE] if config.oracle else []
    names += _rankers(config)
    names += [f"llm:{s}" for s in config.llm_strategies]
    if config.negation:
        names += [f"{n}@negated" for n in _rankers(config)]
    names += [f"file:{Path(p).stem}" for p in config.selections]
    if len(set(names)) != len(names):
        raise ConfigError(f"evaluate: two systems have the same name in {names}")
    return names


def inputs(ctx: StageContext[EvaluateConfig]) -> dict[str, Any]:
    config = ctx.config
    files = ([config.dataset] if config.dataset else []) + list(config.selections)
    return {
        "systems": system_names(config),
        "files": {f: digest_file(ctx.base_dir / f) for f in files if (ctx.base_dir / f).is_file()},
        "llm": None if config.llm is None else describe(config.llm, ctx.base_dir),
    }


def source(ctx: StageContext[EvaluateConfig], _inputs: dict[str, Any]) -> TableSource:
    rows = [{"system": s, "task": t} for s in system_names(ctx.config) for t in TASK_K]
    return TableSource(
        pa.Table.from_pylist(rows, schema=pa.schema([("system", pa.string()), ("task", pa.string())]))
    )


def load_instances(ctx: StageContext[EvaluateConfig]) -> dict[str, dict[str, Any]]:
    """The instances to score, each checked to be a well-formed released instance."""
    config = ctx.config
    if config.dataset is not None:
        path = ctx.base_dir / config.dataset
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise IrforgeError(f"evaluate: cannot read the dataset {path}: {err}") from err
        if not isinstance(data, dict):
            raise IrforgeError(f"evaluate: {path} is not an object of instances by id")
    else:
        table = ctx.upstream["select"].read(columns=["instance_id", "instance"])
        data = {i: json.loads(text) for i, text in zip(*(table.column(c).to_pylist() for c in table.column_names),
                                                          strict=True)}  # fmt: skip
    for name, instance in data.items():
        try:
            coverage(instance, "all", name)
        except ValueError as err:
            raise IrforgeError(f"evaluate: {err}") from err
    return data


def _oracle(name: str, instance: Mapping[str, Any]) -> dict[Task, list[int]]:
    fields: dict[Task, str] = {
        "ER@optimal": "evidence_retrieval_at_optimal_evaluation",
        "ER@10": "evidence_retrieval_at_10_evaluation",
        "Result-ER@optimal": "results_evidence_retrieval_at_optimal_evaluation",
        "Result-ER@5": "results_evidence_retrieval_at_5_evaluation",
    }
    return {task: list(found["one_selection_of_sentences"]) for task, key in fields.items()
            if (found := instance.get(key)) is not None}  # fmt: skip


def _read_selections(path: Path, data: Mapping[str, Any]) -> dict[str, dict[Task, list[int]]]:
    """A selections file, checked: every instance present, every index an int inside its pool."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from err
    if not isinstance(found, dict):
        raise ValueError(f"{path}: not an object of selections by instance id")
    missing = sorted(set(data) - set(found))
    if missing:
        raise ValueError(f"{path}: no selections for {len(missing)} instance(s), e.g. {missing[:3]}")
    out: dict[str, dict[Task, list[int]]] = {}
    for name in data:
        tasks = found[name]
        if not isinstance(tasks, dict) or any(t not in TASK_K for t in tasks):
            raise ValueError(f"{path}: {name}: expected {{task: [indices]}} with tasks {list(TASK_K)}")
        n = len(data[name]["paper_as_candidate_pool"])
        for task, indices in tasks.items():
            if not isinstance(indices, list) or not all(isinstance(i, int) and 0 <= i < n for i in indices):
                raise ValueError(f"{path}: {name}: {task} must be a list of sentence indices in 0..{n - 1}")
        out[name] = tasks
    return out


class _Scores:
    """Scores by system, collected as they come."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.per_instance: list[dict[str, Any]] = []

    def add(
        self,
        system: str,
        data: Mapping[str, Mapping[str, Any]],
        answer: System,
        failed: Mapping[str, set[Task]] | None = None,
    ) -> None:
        failed = failed or {}
        scores = evaluate(data, answer)
        for task, score in scores.items():
            n_failed = sum(1 for name in score.per_instance if task in failed.get(name, set()))
            _, k = TASK_K[task]
            self.rows.append(
                {
                    "system": system,
                    "task": task,
                    "k": "optimal" if k is None else str(k),
                    "mean_recall": None if np.isnan(score.mean) else score.mean,
                    "instances": len(score.per_instance),
                    "skipped": len(score.skipped),
                    "failed": n_failed,
                }
            )
            self.per_instance += [
                {"system": system, "task": task, "instance_id": name, "recall": recall,
                 "failed": task in failed.get(name, set())}
                for name, recall in sorted(score.per_instance.items())
            ]  # fmt: skip


def _answers(
    selections: Mapping[str, Mapping[Task, list[int]]], failed: Mapping[str, set[Task]] | None = None
) -> System:
    """A system answering from ``selections``; a ``failed`` task answers no sentence."""

    def answer(name: str, _instance: Mapping[str, Any]) -> dict[Task, list[int]]:
        return {**{task: [] for task in (failed or {}).get(name, set())}, **selections.get(name, {})}

    return answer


def _llm_systems(
    ctx: StageContext[EvaluateConfig],
    llm: LLMConfig,
    data: Mapping[str, Mapping[str, Any]],
    scores: _Scores,
    rankers: Mapping[str, RankingBaseline],
) -> tuple[list[dict[str, Any]], ChatStats]:
    """Score the ``llm:<strategy>`` systems, then the rankers on negated hypotheses (App. E, E.8);
    the excluded rows (``no_negations``) and what the requests cost."""
    config = ctx.config
    excluded: list[dict[str, Any]] = []
    stats = ChatStats()
    with llm_session(ctx, llm) as (model, cache):
        for strategy in config.llm_strategies:
            retriever = LLMRetriever(
                model, cache, strategy, sampling=llm.sampling, max_regenerations=config.max_regenerations
            )
            run = retriever.select_all(data)
            stats = stats + run.stats
            failed = {name: set(tasks) for name, tasks in run.failures.items()}
            # A failed task answers nothing: recall 0, counted in ``failed``.
            scores.add(f"llm:{strategy}", data, _answers(run.selections, failed), failed)
        if config.negation:
            hypotheses = {name: str(instance["hypothesis"]) for name, instance in data.items()}
            negations, failures, negate_stats = negate(model, cache, hypotheses, sampling=llm.sampling)
            stats = stats + negate_stats
            negated = negated_set({n: data[n] for n in negations}, negations)
            for ranker_name in _rankers(config):
                if not negated:
                    detail = f"all {len(failures)} negation requests failed"
                    excluded += [
                        {
                            "system": f"{ranker_name}@negated",
                            "task": t,
                            "reason": "no_negations",
                            "detail": detail,
                        }
                        for t in TASK_K
                    ]
                    continue
                scores.add(f"{ranker_name}@negated", negated, rankers[ranker_name])
    return excluded, stats


def process(chunk: pa.Table, ctx: StageContext[EvaluateConfig]) -> ChunkResult:
    config = ctx.config
    data = load_instances(ctx)
    if not data:
        # Nothing to score is an outcome of the run (select kept no instance), not an error.
        why = {"reason": "no_instances", "detail": "there is no instance to score (select kept none)"}
        return ChunkResult(
            rows_to_table([], SCHEMA),
            rows_to_table([{**row, **why} for row in chunk.to_pylist()], EXCLUDED_SCHEMA),
            tables={"per_instance": rows_to_table([], PER_INSTANCE_SCHEMA)},
        )
    scores = _Scores()
    excluded: list[dict[str, Any]] = []
    stats = ChatStats()
    rankers: dict[str, RankingBaseline] = {}
    dense: dict[str, DenseRanker] = {}  # one encoder per model, shared by its two prefix variants
    for spec in _ranker_specs(config):
        if spec.model is None:
            rankers[spec.name] = RankingBaseline(BM25Ranker())
            continue
        if spec.model not in dense:
            encoder = encoder_for(EncoderConfig(model=spec.model, device=config.device))
            dense[spec.model] = DenseRanker(encoder, cached_pools=2)
        rankers[spec.name] = RankingBaseline(dense[spec.model], E6_PREFIXES if spec.prefixed else {})
    if config.oracle:
        scores.add(ORACLE, data, _oracle)
    for system_name, ranker in rankers.items():
        scores.add(system_name, data, ranker)

    if config.llm is not None and (config.llm_strategies or config.negation):
        excluded, stats = _llm_systems(ctx, config.llm, data, scores, rankers)

    for path in config.selections:
        system = f"file:{Path(path).stem}"
        try:
            chosen = _read_selections(ctx.base_dir / path, data)
            scores.add(system, data, _answers(chosen))
        except ValueError as err:
            excluded += [
                {"system": system, "task": t, "reason": "bad_selections", "detail": str(err)} for t in TASK_K
            ]
    return ChunkResult(
        rows_to_table(scores.rows, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={"per_instance": rows_to_table(scores.per_instance, PER_INSTANCE_SCHEMA)},
        cost=llm_cost(config.llm, stats) if config.llm is not None else {},
    )


SPEC: StageSpec[EvaluateConfig] = StageSpec(
    name="evaluate",
    version=1,
    config_type=EvaluateConfig,
    upstream=("select",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("system", "task"),
    tables={"per_instance": PER_INSTANCE_SCHEMA},
    inputs=inputs,
    source=source,
    process=process,
    whole_input=True,
    description="ER@K of the oracle, BM25, embedding and LLM retrieval systems (App. E) on the instances.",
)
