"""What a run report shows, read from a run record and the artifacts it names.

A run record (``<root>/<flow>/runs/<run_id>.json``, :mod:`irforge.runs`) says which
fingerprint each stage used; each artifact's manifest gives counts, exclusions, timings and
cost. Stages with a known meaning get a section of their own, read from their rows and side
tables, chosen by the run's flow, since two flows may name different stages alike (both have
an ``evaluate``): for ``cure``, ``pool`` (score histograms, pool sizes at the run's cut-off),
``judge`` (label distribution, tokens), ``qrels`` (judgements by source and score),
``evaluate`` (the shape of CURE's Table 7, rater agreement) and ``release`` (the files
written); for ``evidencebench``, ``select`` (the instances and their optimal set sizes),
``evaluate`` (ER@K recall per system and task) and ``export`` (the release's files). Any other
flow gets the generic parts only (stages, timings, exclusions, details).

A stage whose artifact is gone is shown as missing, and a section whose tables cannot be read
says why instead of failing the whole report: a report is how one finds out what went wrong.
"""

from __future__ import annotations

import graphlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from irforge.artifacts import EXCLUDED, Artifact, ArtifactStore
from irforge.errors import IrforgeError
from tasks.common.report.cutoff import RunCutoff, run_cutoff
from tasks.common.rerank.cutoff import apply_cutoff

CONDITIONS = ("en-en", "fr-en", "es-en")  # query-language → passage-language, as in CURE's Table 7
OVERALL_SPLIT = "all"
QRELS_SOURCES = ("human", "containment", "llm")
RELEASE_COLUMNS = ("config", "split", "path", "rows", "bytes", "sha256")
EXAMPLES_PER_REASON = 3
EXAMPLES_PER_LABEL = 3
ER_TASKS = ("ER@optimal", "ER@10", "Result-ER@optimal", "Result-ER@5")  # EvidenceBench §4's order
EXPORT_COLUMNS = ("path", "rows", "bytes", "sha256")
NO_VALUE = "(none)"  # how a null group key (a row without a domain) is labelled, rather than dropped

T = TypeVar("T")


class ReportError(IrforgeError):
    """There is no run to report on, or its record cannot be read."""


class ReportDataError(IrforgeError):
    """An artifact's tables do not have the shape its report section needs."""


class StageRecord(BaseModel):
    """One stage's line in a run record."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    fingerprint: str | None = None
    state: str = "unknown"
    wall_s: float | None = None


class RunRecord(BaseModel):
    """``runs/<run_id>.json`` as :class:`irforge.runs.RunRecorder` writes it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    flow: str
    config: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    status: str | None = None  # None: the run never finished (still running, or killed)
    stages: dict[str, StageRecord] = Field(default_factory=dict)


@dataclass(frozen=True)
class ExclusionExample:
    reason: str
    detail: str | None


@dataclass(frozen=True)
class StageReport:
    """A stage of the run; ``artifact`` is None when it cannot be found, ``problem`` says why."""

    name: str
    record: StageRecord
    artifact: Artifact | None
    problem: str | None = None
    excluded_examples: tuple[ExclusionExample, ...] = ()

    @property
    def missing(self) -> bool:
        return self.artifact is None

    @property
    def manifest(self) -> dict[str, Any]:
        return self.artifact.manifest if self.artifact is not None else {}

    def count(self, name: str) -> int | None:
        value = self.manifest.get("counts", {}).get(name)
        return None if value is None else int(value)

    @property
    def excluded_by_reason(self) -> dict[str, int]:
        reasons: dict[str, int] = self.manifest.get("counts", {}).get("excluded_by_reason", {})
        return dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def cost(self) -> dict[str, float]:
        return {str(k): float(v) for k, v in self.manifest.get("cost", {}).items()}

    @property
    def computed_wall_s(self) -> float | None:
        """How long computing the artifact took (for a reused stage: back when it was computed)."""
        value = self.manifest.get("wall_s")
        return None if value is None else float(value)

    @property
    def rows_per_s(self) -> float | None:
        value = self.manifest.get("rows_per_s")
        return None if value is None else float(value)

    @property
    def side_tables(self) -> dict[str, int]:
        tables: dict[str, int] = self.manifest.get("tables", {})
        return tables

    @property
    def upstream(self) -> list[str]:
        return sorted(self.manifest.get("material", {}).get("upstream", {}))

    @property
    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = self.manifest.get("material", {}).get("config", {})
        return config


@dataclass(frozen=True)
class HistogramBin:
    low: float
    high: float
    pairs: int


@dataclass(frozen=True)
class PoolDomain:
    domain: str
    queries: int  # distinct queries among the stored pairs
    pairs_scored: int  # every pair the cross-encoder scored (the histogram's total)
    pairs_stored: int
    pool_size: int  # stored pairs within the run's cut-off (tasks/common/rerank/cutoff.py)

    @property
    def mean_pool_per_query(self) -> float | None:
        return self.pool_size / self.queries if self.queries else None


@dataclass(frozen=True)
class PoolSection:
    cutoff: RunCutoff
    domains: tuple[PoolDomain, ...]
    total: PoolDomain
    histograms: Mapping[str, tuple[HistogramBin, ...]]


@dataclass(frozen=True)
class JudgeExample:
    domain: str
    query_id: str
    passage_id: str
    score: int
    explanation: str


@dataclass(frozen=True)
class JudgeSection:
    labels: Mapping[str, Mapping[int, int]]  # domain → score → judgements
    scores: tuple[int, ...]
    judgements: int
    cached: int  # judgements answered from the request cache
    prompt_tokens: int  # summed over the judgements (cached ones included)
    completion_tokens: int
    models: tuple[str, ...]
    prompts: tuple[str, ...]  # prompt template digests
    cost: Mapping[str, float]  # what the run that computed the artifact paid (manifest)
    examples: tuple[JudgeExample, ...]


@dataclass(frozen=True)
class QrelsSection:
    counts: Mapping[tuple[str, str, int], int]  # (domain, source, score) → judgements
    queries: Mapping[str, int]  # domain → distinct queries
    domains: tuple[str, ...]
    sources: tuple[str, ...]
    scores: tuple[int, ...]

    def total(self, domain: str | None = None, source: str | None = None, score: int | None = None) -> int:
        return sum(
            n
            for (d, s, sc), n in self.counts.items()
            if (domain is None or d == domain)
            and (source is None or s == source)
            and (score is None or sc == score)
        )


@dataclass(frozen=True)
class Score:
    ndcg_at_10: float | None
    recall_at_100: float | None
    queries: int | None


@dataclass(frozen=True)
class Agreement:
    rater_a: str
    rater_b: str
    measure: str | None  # cohen_kappa, fleiss_kappa (None: the table does not say)
    kappa: float | None
    items: int | None


@dataclass(frozen=True)
class Confusion:
    rater_a: str
    rater_b: str
    labels: tuple[str, ...]
    counts: Mapping[tuple[str, str], int]  # (label_a, label_b) → items


@dataclass(frozen=True)
class EvaluateSection:
    models: tuple[str, ...]  # in the artifact's order
    conditions: tuple[str, ...]
    domains: tuple[str, ...]  # every split but "all"
    scores: Mapping[tuple[str, str, str], Score]  # (split, model, condition) → score
    agreement: tuple[Agreement, ...]
    confusion: tuple[Confusion, ...]

    def score(self, split: str, model: str, condition: str) -> Score | None:
        return self.scores.get((split, model, condition))


@dataclass(frozen=True)
class ReleaseFile:
    config: str
    split: str
    path: str
    rows: int | None
    bytes: int | None
    sha256: str


@dataclass(frozen=True)
class SectionInfo:
    """A flow-specific section of the page: its anchor, the stage it is read from, its title."""

    id: str
    stage: str
    title: str


# Per flow, the sections read from a stage's own tables (in page order). A flow not listed
# gets none: guessing from stage names alone would misread another flow's ``evaluate``.
FLOW_SECTIONS: dict[str, tuple[SectionInfo, ...]] = {
    "cure": (
        SectionInfo("pool", "pool", "Pooling"),
        SectionInfo("judge", "judge", "LLM judging"),
        SectionInfo("qrels", "qrels", "Qrels"),
        SectionInfo("evaluate", "evaluate", "Evaluation"),
        SectionInfo("release", "release", "Release"),
    ),
    "evidencebench": (
        SectionInfo("instances", "select", "Instances"),
        SectionInfo("recall", "evaluate", "Evidence retrieval (ER@K)"),
        SectionInfo("export", "export", "Export"),
    ),
}


@dataclass(frozen=True)
class InstancesSection:
    """EvidenceBench's ``select`` rows: the instances built and their optimal set sizes."""

    instances: int
    mean_aspects: float | None
    mean_covered_aspects: float | None
    mean_pool_size: float | None
    mean_at_10_covered: float | None
    optimal: Mapping[int, int]  # sentences in a minimum cover of all aspects → instances
    results_optimal: Mapping[int, int]  # the same for the results aspects
    without_results: int  # instances with no coverable results aspect (results_optimal null)

    @property
    def set_sizes(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.optimal) | set(self.results_optimal)))


@dataclass(frozen=True)
class Recall:
    k: str
    mean_recall: float | None  # None: no instance was scored
    instances: int
    skipped: int
    failed: int


@dataclass(frozen=True)
class RecallSection:
    """EvidenceBench's ``evaluate`` rows: mean ER@K aspect recall per (system, task)."""

    systems: tuple[str, ...]  # in the artifact's order
    tasks: tuple[str, ...]  # ER_TASKS first, any other task after
    scores: Mapping[tuple[str, str], Recall]  # (system, task) → recall

    def score(self, system: str, task: str) -> Recall | None:
        return self.scores.get((system, task))

    @property
    def instances(self) -> tuple[int, ...]:
        """The distinct numbers of scored instances (one value: every cell is over the same set)."""
        return tuple(sorted({s.instances for s in self.scores.values()}))


@dataclass(frozen=True)
class ExportFile:
    path: str
    rows: int | None
    bytes: int | None
    sha256: str


@dataclass(frozen=True)
class ExportSection:
    files: tuple[ExportFile, ...]
    release_dir: Path  # <artifact>/files/release, what ``irforge release`` copies out
    release_dir_exists: bool


@dataclass(frozen=True)
class RunReport:
    record: RunRecord
    stages: tuple[StageReport, ...]  # upstream before downstream
    pool: PoolSection | None = None
    judge: JudgeSection | None = None
    qrels: QrelsSection | None = None
    evaluate: EvaluateSection | None = None
    release: tuple[ReleaseFile, ...] | None = None
    instances: InstancesSection | None = None
    recall: RecallSection | None = None
    export: ExportSection | None = None
    section_problems: Mapping[str, str] = field(default_factory=dict)  # stage → why its section is absent

    @property
    def flow(self) -> str:
        return self.record.flow

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def status(self) -> str:
        return self.record.status or "unfinished"

    @property
    def total_s(self) -> float | None:
        started, finished = self.record.started_at, self.record.finished_at
        return (finished - started).total_seconds() if started and finished else None

    def stage(self, name: str) -> StageReport | None:
        return next((s for s in self.stages if s.name == name), None)

    @property
    def sections(self) -> tuple[SectionInfo, ...]:
        """This flow's own sections whose stage is in the run (shown even when its artifact is gone)."""
        return tuple(s for s in FLOW_SECTIONS.get(self.flow, ()) if self.stage(s.stage))

    def has_section(self, section_id: str) -> bool:
        return any(s.id == section_id for s in self.sections)


def load_report(root: Path, flow: str, run_id: str | None = None) -> RunReport:
    """The report of one run (``run_id=None``: the run that started last)."""
    record = read_run_record(root, flow, run_id)
    store = ArtifactStore(root)
    stages = {name: _stage_report(store, flow, name, rec) for name, rec in record.stages.items()}
    ordered = tuple(stages[name] for name in _upstream_first(stages))
    problems: dict[str, str] = {}
    sections: dict[str, Any] = {}
    # The record's flow, as RunReport.sections uses it, so the page shows what was loaded.
    if record.flow == "cure":
        pool = partial(load_pool, judge=stages.get("judge"), config_file=record.config)  # the run's cut-off
        sections = {
            "pool": _section(stages, "pool", pool, problems),
            "judge": _section(stages, "judge", load_judge, problems),
            "qrels": _section(stages, "qrels", load_qrels, problems),
            "evaluate": _section(stages, "evaluate", load_evaluate, problems),
            "release": _section(stages, "release", load_release, problems),
        }
    elif record.flow == "evidencebench":
        sections = {
            "instances": _section(stages, "select", load_instances, problems),
            "recall": _section(stages, "evaluate", load_recall, problems),
            "export": _section(stages, "export", load_export, problems),
        }
    return RunReport(record=record, stages=ordered, section_problems=problems, **sections)


def read_run_record(root: Path, flow: str, run_id: str | None = None) -> RunRecord:
    runs = root / flow / "runs"
    if run_id is not None:
        path = runs / f"{run_id}.json"
        if not path.is_file():
            known = sorted(p.stem for p in runs.glob("*.json"))[-5:]
            raise ReportError(f"no run {run_id!r} of flow {flow!r} under {runs} (latest runs: {known})")
        return _parse_record(path)
    records = [_parse_record(p) for p in sorted(runs.glob("*.json"))]
    if not records:
        raise ReportError(f"flow {flow!r} has no run records under {runs}: run it first")
    return max(records, key=lambda r: (r.started_at.timestamp() if r.started_at else float("-inf"), r.run_id))


def _parse_record(path: Path) -> RunRecord:
    try:
        return RunRecord.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as e:
        summary = " | ".join(str(e).splitlines()[:4])
        raise ReportError(f"run record {path} cannot be read: {summary}") from e


def _stage_report(store: ArtifactStore, flow: str, name: str, record: StageRecord) -> StageReport:
    if not record.fingerprint:
        return StageReport(name, record, None, f"the run record names no artifact (state {record.state})")
    artifact = store.find(flow, name, record.fingerprint)
    if artifact is None:
        where = store.stage_dir(flow, name) / record.fingerprint
        return StageReport(name, record, None, f"artifact missing: {where} (deleted since the run?)")
    try:
        _ = artifact.manifest
    except (OSError, ValueError) as e:
        return StageReport(name, record, None, f"manifest of {artifact.path} unreadable: {e}")
    try:
        examples = exclusion_examples(artifact)
    except (OSError, pa.ArrowException) as e:
        return StageReport(name, record, artifact, f"excluded rows unreadable: {e}")
    return StageReport(name, record, artifact, None, examples)


def _upstream_first(stages: Mapping[str, StageReport]) -> list[str]:
    """Stages in dependency order (from the manifests' upstream), by name within a level."""
    sorter = graphlib.TopologicalSorter(
        {name: [u for u in s.upstream if u in stages] for name, s in stages.items()}
    )
    sorter.prepare()
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return order


def _section(
    stages: Mapping[str, StageReport],
    name: str,
    loader: Callable[[Artifact], T],
    problems: dict[str, str],
) -> T | None:
    stage = stages.get(name)
    if stage is None or stage.artifact is None:
        return None
    try:
        return loader(stage.artifact)
    except (IrforgeError, OSError, pa.ArrowException) as e:
        problems[name] = f"{type(e).__name__}: {e}"
        return None


def _read(artifact: Artifact, columns: list[str], table: str | None = None) -> pa.Table:
    """Those columns of the rows (or of a side table), or an error naming what is missing."""
    names = artifact.schema(table=table).names
    missing = [c for c in columns if c not in names]
    if missing:
        what = f"table {table!r}" if table else "rows"
        raise ReportDataError(
            f"{artifact.stage} {artifact.fingerprint} {what} lack column(s) {missing} (columns: {names})"
        )
    return artifact.read(columns=columns, table=table)


def _key(value: Any) -> str:
    return NO_VALUE if value is None else str(value)


def _value_counts(column: pa.ChunkedArray) -> dict[str, int]:
    counts = pc.value_counts(column)
    return {
        _key(v): int(n)
        for v, n in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    }


def _sum(column: pa.ChunkedArray) -> int:
    return int(pc.sum(pc.cast(column, pa.int64())).as_py() or 0)


def exclusion_examples(
    artifact: Artifact, per_reason: int = EXAMPLES_PER_REASON
) -> tuple[ExclusionExample, ...]:
    """The first few excluded rows of each reason (reason and detail), most frequent reason first."""
    path = artifact.path / EXCLUDED
    if not path.is_file():
        return ()
    names = pq.read_schema(path).names
    excluded = pq.read_table(path, columns=[c for c in ("reason", "detail") if c in names])
    if "reason" not in excluded.column_names or excluded.num_rows == 0:
        return ()
    by_count = sorted(_value_counts(excluded["reason"]).items(), key=lambda kv: (-kv[1], kv[0]))
    examples = []
    for reason, _n in by_count:
        rows = excluded.filter(pc.equal(excluded["reason"], reason)).slice(0, per_reason).to_pylist()
        examples += [ExclusionExample(reason, _detail(r.get("detail"))) for r in rows]
    return tuple(examples)


def _detail(value: Any) -> str | None:
    return None if value is None else str(value)


def load_pool(
    artifact: Artifact, judge: StageReport | None = None, config_file: str | None = None
) -> PoolSection:
    """Pool sizes under the run's cut-off: its judge's config, else its config file (:mod:`.cutoff`)."""
    cutoff = run_cutoff(judge.config if judge else None, config_file)
    rows = _read(artifact, ["query_id", "domain", "rank", cutoff.cutoff.scale])
    hist = _read(artifact, ["domain", "bin_low", "bin_high", "pairs"], table="score_histogram")
    hist = hist.sort_by([("domain", "ascending"), ("bin_low", "ascending")])
    histograms: dict[str, list[HistogramBin]] = {}
    for r in hist.to_pylist():
        histograms.setdefault(_key(r["domain"]), []).append(
            HistogramBin(float(r["bin_low"]), float(r["bin_high"]), int(r["pairs"] or 0))
        )
    pooled = apply_cutoff(rows, cutoff.cutoff)
    stored = _value_counts(rows["domain"])
    pool_sizes = _value_counts(pooled["domain"])
    per_domain = rows.group_by("domain").aggregate([("query_id", "count_distinct")]).to_pylist()
    queries = {_key(r["domain"]): int(r["query_id_count_distinct"]) for r in per_domain}
    domains = tuple(
        PoolDomain(
            domain=d,
            queries=queries.get(d, 0),
            pairs_scored=sum(b.pairs for b in histograms.get(d, [])),
            pairs_stored=stored.get(d, 0),
            pool_size=pool_sizes.get(d, 0),
        )
        for d in sorted(set(histograms) | set(stored))
    )
    total = PoolDomain(
        domain=OVERALL_SPLIT,
        queries=int(pc.count_distinct(rows["query_id"]).as_py()),
        pairs_scored=sum(d.pairs_scored for d in domains),
        pairs_stored=rows.num_rows,
        pool_size=pooled.num_rows,
    )
    return PoolSection(cutoff, domains, total, {d: tuple(bins) for d, bins in histograms.items()})


def load_judge(artifact: Artifact, per_label: int = EXAMPLES_PER_LABEL) -> JudgeSection:
    rows = _read(
        artifact,
        [
            "query_id",
            "passage_id",
            "domain",
            "score",
            "explanation",
            "model",
            "prompt_sha256",
            "prompt_tokens",
            "completion_tokens",
            "cached",
        ],
    )
    counts = rows.group_by(["domain", "score"]).aggregate([("query_id", "count")])
    labels: dict[str, dict[int, int]] = {}
    for r in counts.sort_by([("domain", "ascending"), ("score", "ascending")]).to_pylist():
        labels.setdefault(_key(r["domain"]), {})[int(r["score"])] = int(r["query_id_count"])
    scores = tuple(sorted({s for by_score in labels.values() for s in by_score}))
    ordered = rows.sort_by([("domain", "ascending"), ("query_id", "ascending"), ("passage_id", "ascending")])
    examples = [
        JudgeExample(
            _key(r["domain"]), str(r["query_id"]), str(r["passage_id"]), score, str(r["explanation"])
        )
        for score in scores
        for r in ordered.filter(pc.equal(ordered["score"], score)).slice(0, per_label).to_pylist()
    ]
    return JudgeSection(
        labels=labels,
        scores=scores,
        judgements=rows.num_rows,
        cached=_sum(rows["cached"]),
        prompt_tokens=_sum(rows["prompt_tokens"]),
        completion_tokens=_sum(rows["completion_tokens"]),
        models=tuple(sorted(_value_counts(rows["model"]))),
        prompts=tuple(sorted(_value_counts(rows["prompt_sha256"]))),
        cost={str(k): float(v) for k, v in artifact.manifest.get("cost", {}).items()},
        examples=tuple(examples),
    )


def load_qrels(artifact: Artifact) -> QrelsSection:
    rows = _read(artifact, ["query_id", "passage_id", "domain", "score", "source"])
    grouped = rows.group_by(["domain", "source", "score"]).aggregate([("query_id", "count")]).to_pylist()
    counts = {
        (_key(r["domain"]), _key(r["source"]), int(r["score"])): int(r["query_id_count"]) for r in grouped
    }
    per_domain = rows.group_by("domain").aggregate([("query_id", "count_distinct")]).to_pylist()
    queries = {_key(r["domain"]): int(r["query_id_count_distinct"]) for r in per_domain}
    found_sources = {s for _d, s, _sc in counts}
    sources = [s for s in QRELS_SOURCES if s in found_sources] + sorted(found_sources - set(QRELS_SOURCES))
    return QrelsSection(
        counts=counts,
        queries=queries,
        domains=tuple(sorted({d for d, _s, _sc in counts})),
        sources=tuple(sources),
        scores=tuple(sorted({sc for _d, _s, sc in counts})),
    )


def load_evaluate(artifact: Artifact) -> EvaluateSection:
    rows = _read(artifact, ["model", "condition", "split", "ndcg_at_10", "recall_at_100", "queries"])
    scores: dict[tuple[str, str, str], Score] = {}
    models: dict[str, None] = {}  # insertion-ordered set
    for r in rows.to_pylist():
        key = (_key(r["split"]), _key(r["model"]), _key(r["condition"]))
        if key in scores:
            raise ReportDataError(
                f"evaluate {artifact.fingerprint} has two rows for split {key[0]!r}, "
                f"model {key[1]!r}, condition {key[2]!r}"
            )
        scores[key] = Score(r["ndcg_at_10"], r["recall_at_100"], r["queries"])
        models[key[1]] = None
    found = {c for _s, _m, c in scores}
    conditions = [c for c in CONDITIONS if c in found] + sorted(found - set(CONDITIONS))
    tables = artifact.table_names
    return EvaluateSection(
        models=tuple(models),
        conditions=tuple(conditions),
        domains=tuple(sorted({s for s, _m, _c in scores} - {OVERALL_SPLIT})),
        scores=scores,
        agreement=_agreement(artifact) if "agreement" in tables else (),
        confusion=_confusion(artifact) if "confusion" in tables else (),
    )


def _agreement(artifact: Artifact) -> tuple[Agreement, ...]:
    has_measure = "measure" in artifact.schema(table="agreement").names
    columns = ["rater_a", "rater_b", "kappa", "items", *(["measure"] if has_measure else [])]
    rows = _read(artifact, columns, table="agreement").to_pylist()
    return tuple(
        Agreement(_key(r["rater_a"]), _key(r["rater_b"]), r.get("measure"), r["kappa"], r["items"])
        for r in rows
    )


def _confusion(artifact: Artifact) -> tuple[Confusion, ...]:
    table = _read(artifact, ["rater_a", "rater_b", "label_a", "label_b", "count"], table="confusion")
    pairs: dict[tuple[str, str], dict[tuple[Any, Any], int]] = {}
    for r in table.to_pylist():
        cells = pairs.setdefault((_key(r["rater_a"]), _key(r["rater_b"])), {})
        cell = (r["label_a"], r["label_b"])
        cells[cell] = cells.get(cell, 0) + int(r["count"] or 0)
    matrices = []
    for (a, b), cells in pairs.items():
        values = {v for cell in cells for v in cell}
        # Labels sort by value (0 < 1 < 2), not as text; None last.
        labels = sorted(values, key=lambda v: (v is None, v if isinstance(v, int | float) else 0, _key(v)))
        counts = {(_key(la), _key(lb)): n for (la, lb), n in cells.items()}
        matrices.append(Confusion(a, b, tuple(_key(v) for v in labels), counts))
    return tuple(matrices)


def load_release(artifact: Artifact) -> tuple[ReleaseFile, ...]:
    """The files a release stage wrote: from its rows, else from a side table listing them."""
    for table in (None, *artifact.table_names):
        if set(RELEASE_COLUMNS) <= set(artifact.schema(table=table).names):
            rows = artifact.read(columns=list(RELEASE_COLUMNS), table=table).to_pylist()
            return tuple(
                ReleaseFile(
                    config=_key(r["config"]),
                    split=_key(r["split"]),
                    path=_key(r["path"]),
                    rows=r["rows"],
                    bytes=r["bytes"],
                    sha256=_key(r["sha256"]),
                )
                for r in rows
            )
    raise ReportDataError(
        f"release {artifact.fingerprint} has no rows or side table with columns {list(RELEASE_COLUMNS)} "
        f"(side tables: {artifact.table_names})"
    )


def _mean(column: pa.ChunkedArray) -> float | None:
    value = pc.mean(column).as_py()
    return None if value is None else float(value)


def _int_counts(column: pa.ChunkedArray) -> dict[int, int]:
    """Instances per value of an integer column (nulls left out: the caller counts those)."""
    counts = pc.value_counts(column.drop_null())
    pairs = zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    return dict(sorted((int(v), int(n)) for v, n in pairs))


def load_instances(artifact: Artifact) -> InstancesSection:
    """EvidenceBench ``select``: instance count, mean sizes, distribution of the optimal set sizes."""
    rows = _read(
        artifact,
        [
            "instance_id",
            "n_aspects",
            "covered_aspects",
            "pool_size",
            "optimal",
            "at_10_covered",
            "results_optimal",
        ],
    )
    return InstancesSection(
        instances=rows.num_rows,
        mean_aspects=_mean(rows["n_aspects"]),
        mean_covered_aspects=_mean(rows["covered_aspects"]),
        mean_pool_size=_mean(rows["pool_size"]),
        mean_at_10_covered=_mean(rows["at_10_covered"]),
        optimal=_int_counts(rows["optimal"]),
        results_optimal=_int_counts(rows["results_optimal"]),
        without_results=rows["results_optimal"].null_count,
    )


def load_recall(artifact: Artifact) -> RecallSection:
    """EvidenceBench ``evaluate``: mean recall per (system, task), with what was skipped or failed."""
    rows = _read(artifact, ["system", "task", "k", "mean_recall", "instances", "skipped", "failed"])
    scores: dict[tuple[str, str], Recall] = {}
    systems: dict[str, None] = {}  # insertion-ordered set
    for r in rows.to_pylist():
        key = (_key(r["system"]), _key(r["task"]))
        if key in scores:
            raise ReportDataError(
                f"evaluate {artifact.fingerprint} has two rows for system {key[0]!r}, task {key[1]!r}"
            )
        mean = r["mean_recall"]
        scores[key] = Recall(
            k=_key(r["k"]),
            mean_recall=None if mean is None else float(mean),
            instances=int(r["instances"] or 0),
            skipped=int(r["skipped"] or 0),
            failed=int(r["failed"] or 0),
        )
        systems[key[0]] = None
    found = {t for _s, t in scores}
    tasks = [t for t in ER_TASKS if t in found] + sorted(found - set(ER_TASKS))
    return RecallSection(systems=tuple(systems), tasks=tuple(tasks), scores=scores)


def load_export(artifact: Artifact) -> ExportSection:
    """EvidenceBench ``export``: the files of the release (side table ``files``) and its folder."""
    if "files" not in artifact.table_names:
        raise ReportDataError(
            f"export {artifact.fingerprint} has no side table 'files' (side tables: {artifact.table_names})"
        )
    rows = _read(artifact, list(EXPORT_COLUMNS), table="files").to_pylist()
    release_dir = artifact.files / "release"
    return ExportSection(
        files=tuple(
            ExportFile(path=_key(r["path"]), rows=r["rows"], bytes=r["bytes"], sha256=_key(r["sha256"]))
            for r in rows
        ),
        release_dir=release_dir,
        release_dir_exists=release_dir.is_dir(),
    )
