"""EvidenceBench's own sections of its run report (``tasks/common/report/sections.py``):
``select`` (the instances and their optimal set sizes), ``evaluate`` (ER@K recall per system
and task, EvidenceBench §4) and ``export`` (the release's files)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.common.report import plots
from tasks.common.report.sections import Section, Source
from tasks.common.report.tables import ReportDataError, int_counts, mean, read_columns, text_key
from tasks.evidencebench.selection import TASK_K

ER_TASKS = tuple(TASK_K)  # EvidenceBench §4's order
EXPORT_COLUMNS = ("path", "rows", "bytes", "sha256")
# One colour per ER@K task: the two @optimal tasks dark, their fixed-K partners light.
TASK_COLOURS = {
    "ER@optimal": "#1d4f91",
    "ER@10": "#7fa7dc",
    "Result-ER@optimal": "#1f7a6f",
    "Result-ER@5": "#7cc8bd",
}
INSTANCE_COLUMNS = [
    "instance_id",
    "n_aspects",
    "covered_aspects",
    "pool_size",
    "optimal",
    "at_10_covered",
    "results_optimal",
]


@dataclass(frozen=True)
class InstancesSection:
    """The ``select`` rows: the instances built and their optimal set sizes."""

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
    """The ``evaluate`` rows: mean ER@K aspect recall per (system, task)."""

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


def load_instances(source: Source) -> InstancesSection:
    """Instance count, mean sizes, distribution of the optimal set sizes."""
    rows = read_columns(source.artifact, INSTANCE_COLUMNS)
    return InstancesSection(
        instances=rows.num_rows,
        mean_aspects=mean(rows["n_aspects"]),
        mean_covered_aspects=mean(rows["covered_aspects"]),
        mean_pool_size=mean(rows["pool_size"]),
        mean_at_10_covered=mean(rows["at_10_covered"]),
        optimal=int_counts(rows["optimal"]),
        results_optimal=int_counts(rows["results_optimal"]),
        without_results=rows["results_optimal"].null_count,
    )


def load_recall(source: Source) -> RecallSection:
    """Mean recall per (system, task), with what was skipped or failed."""
    artifact = source.artifact
    rows = read_columns(artifact, ["system", "task", "k", "mean_recall", "instances", "skipped", "failed"])
    scores: dict[tuple[str, str], Recall] = {}
    systems: dict[str, None] = {}  # insertion-ordered set
    for r in rows.to_pylist():
        key = (text_key(r["system"]), text_key(r["task"]))
        if key in scores:
            raise ReportDataError(
                f"evaluate {artifact.fingerprint} has two rows for system {key[0]!r}, task {key[1]!r}"
            )
        value = r["mean_recall"]
        scores[key] = Recall(
            k=text_key(r["k"]),
            mean_recall=None if value is None else float(value),
            instances=int(r["instances"] or 0),
            skipped=int(r["skipped"] or 0),
            failed=int(r["failed"] or 0),
        )
        systems[key[0]] = None
    found = {t for _s, t in scores}
    tasks = [t for t in ER_TASKS if t in found] + sorted(found - set(ER_TASKS))
    return RecallSection(systems=tuple(systems), tasks=tuple(tasks), scores=scores)


def load_export(source: Source) -> ExportSection:
    """The files of the release (side table ``files``) and its folder."""
    artifact = source.artifact
    if "files" not in artifact.table_names:
        raise ReportDataError(
            f"export {artifact.fingerprint} has no side table 'files' (side tables: {artifact.table_names})"
        )
    rows = read_columns(artifact, list(EXPORT_COLUMNS), table="files").to_pylist()
    release_dir = artifact.files / "release"
    return ExportSection(
        files=tuple(
            ExportFile(
                path=text_key(r["path"]), rows=r["rows"], bytes=r["bytes"], sha256=text_key(r["sha256"])
            )
            for r in rows
        ),
        release_dir=release_dir,
        release_dir_exists=release_dir.is_dir(),
    )


def recall_figure(recall: RecallSection) -> str | None:
    """The ER@K table as bars; None when nothing was scored."""
    if not recall.scores:
        return None
    values = {key: score.mean_recall for key, score in recall.scores.items()}
    return recall_bars(recall.systems, recall.tasks, values)


def recall_bars(
    systems: Sequence[str], tasks: Sequence[str], recall: Mapping[tuple[str, str], float | None]
) -> str:
    """Grouped horizontal bars: mean recall (%) of each system (a group) on each task (a bar).

    Horizontal, because system names (``dense:<model>+E6``) are long; a missing or unscored
    cell draws no bar rather than a 0 that would read as a result.
    """
    width = 0.8 / max(len(tasks), 1)
    with plots.styled():
        fig = plots.new_figure(8, 1.0 + 0.18 * max(len(systems), 1) * max(len(tasks), 1))
        ax = fig.add_subplot()
        for i, task in enumerate(tasks):
            values = [recall.get((s, task)) for s in systems]
            shown = [(y, 100 * v) for y, v in enumerate(values) if v is not None]
            bars = ax.barh(
                [y - 0.4 + width * (i + 0.5) for y, _v in shown],
                [v for _y, v in shown],
                height=width,
                color=TASK_COLOURS.get(task, plots.OTHER_COLOUR),
                label=task,
            )
            ax.bar_label(bars, labels=[f"{v:.1f}" for _y, v in shown], padding=2, fontsize=7)
        ax.set_yticks(range(len(systems)), list(systems))
        ax.invert_yaxis()
        ax.set_xlim(0, 112)  # room for the labels of 100 % bars
        ax.set_xticks([0, 25, 50, 75, 100])
        ax.set_xlabel("mean aspect recall (%)")
        fig.legend(loc="outside upper right", ncols=max(len(tasks), 1), fontsize=8, frameon=False)
        return plots.to_svg(fig, "recall-bars")


INSTANCES_TEMPLATE = """{% set ins = data %}
<div class="grid">
<table class="instances">
<thead><tr><th>instances</th><th class="num">value</th></tr></thead>
<tbody>
<tr><td>instances built</td>{{ num(ins.instances) }}</tr>
<tr><td>mean aspects</td><td class="num">{{ ins.mean_aspects | ratio }}</td></tr>
<tr><td>mean covered aspects</td><td class="num">{{ ins.mean_covered_aspects | ratio }}</td></tr>
<tr><td>mean pool size (sentences)</td><td class="num">{{ ins.mean_pool_size | ratio }}</td></tr>
<tr><td>mean aspects covered by the best 10 sentences</td><td class="num">{{ ins.mean_at_10_covered | ratio }}</td></tr>
</tbody></table>
<table class="optimal">
<thead><tr><th class="num">sentences in the optimal set</th><th class="num">all aspects</th><th class="num">results aspects</th></tr></thead>
<tbody>
{%- for n in ins.set_sizes %}<tr>{{ num(n) }}{{ num(ins.optimal.get(n, 0)) }}{{ num(ins.results_optimal.get(n, 0)) }}</tr>{% endfor %}
{%- if ins.without_results %}<tr><td>no results aspect</td><td class="num">–</td>{{ num(ins.without_results) }}</tr>{% endif %}
</tbody></table>
</div>
<p class="note">Instances per size of the exact minimum set of sentences covering every covered aspect (optimal)
and every results aspect (results optimal). Summaries left out for low coverage are counted in the Stages table.</p>
"""

RECALL_TEMPLATE = """{% set rc = data %}
<table class="er-at-k">
<thead><tr><th>System</th>{% for t in rc.tasks %}<th class="num">{{ t }}</th>{% endfor %}</tr></thead>
<tbody>
{%- for sys in rc.systems %}<tr><th>{{ sys }}</th>
{%- for t in rc.tasks %}{% set s = rc.score(sys, t) %}
<td class="num"{% if s %} title="{{ s.instances }} instances scored, {{ s.skipped }} skipped, {{ s.failed }} failed"{% endif %}>
{{- (s.mean_recall if s else none) | percent }}
{%- if s and (s.skipped or s.failed) %}<div class="muted small counts">
{%- if s.skipped %}{{ s.skipped | number }} skipped{% endif %}{% if s.skipped and s.failed %}, {% endif %}
{%- if s.failed %}{{ s.failed | number }} failed{% endif %}</div>{% endif %}</td>
{%- endfor %}</tr>
{%- endfor %}
</tbody></table>
<p class="note">Mean aspect recall over the instances scored
{%- if rc.instances | length == 1 %} ({{ rc.instances[0] | number }} per cell){% else %} ({{ rc.instances | map("number") | join(", ") }} depending on the cell; see each cell's tooltip){% endif %}.
@optimal: as many sentences as the instance's optimal set; Result tasks score the results aspects only.
Skipped: instances without a results aspect; failed: no valid LLM reply (scored 0).</p>
{%- if figure %}<figure>{{ figure }}<figcaption>Mean aspect recall per system and task.</figcaption></figure>{% endif %}
"""

EXPORT_TEMPLATE = """{% set ex = data %}
<p>Release folder: <span class="mono release-dir">{{ ex.release_dir }}</span>
{%- if not ex.release_dir_exists %} <span class="badge bad">missing</span>{% endif %}</p>
<table class="export-files">
<thead><tr><th>path</th><th class="num">rows</th><th class="num">bytes</th><th>sha256</th></tr></thead>
<tbody>
{%- for f in ex.files %}
<tr><td class="mono">{{ f.path }}</td>{{ num(f.rows) }}{{ num(f.bytes) }}
<td class="mono" title="{{ f.sha256 }}">{{ f.sha256 | truncate(16, true, "…", 0) }}</td></tr>
{%- endfor %}
</tbody></table>
<p class="note">Paths are relative to the release folder; <span class="mono">irforge release {{ r.flow }} --out DIR</span> copies it out.</p>
"""

SECTIONS: tuple[Section[Any], ...] = (
    Section("instances", "select", "Instances", load_instances, INSTANCES_TEMPLATE),
    Section("recall", "evaluate", "Evidence retrieval (ER@K)", load_recall, RECALL_TEMPLATE, recall_figure),
    Section("export", "export", "Export", load_export, EXPORT_TEMPLATE),
)
