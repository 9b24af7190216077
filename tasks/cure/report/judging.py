"""CURE's pooling and judging sections (CURE §2.3): pool sizes at the run's cut-off, the judge's labels.

The pool cut-off is the run's own (``tasks/common/report/cutoff.py``), applied by the one
``apply_cutoff`` the judge uses too (``tasks/common/rerank/cutoff.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow.compute as pc

from tasks.common.report import plots
from tasks.common.report.cutoff import JUDGE_STAGE, RunCutoff, run_cutoff
from tasks.common.report.sections import Source
from tasks.common.report.tables import int_sum, read_columns, text_key, value_counts
from tasks.common.rerank.cutoff import apply_cutoff
from tasks.cure.dataset.schema import ALL_SPLIT

EXAMPLES_PER_LABEL = 3
LABEL_COLOURS = {0: "#c4cad3", 1: "#f2b134", 2: "#2a9d8f"}


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

    @property
    def label_totals(self) -> dict[int, int]:
        """Judgements per score over every domain."""
        return {sc: sum(by.get(sc, 0) for by in self.labels.values()) for sc in self.scores}


def load_pool(source: Source) -> PoolSection:
    """Pool sizes under the run's cut-off: its judge's config, else its config file (``cutoff.py``)."""
    judge = source.stages.get(JUDGE_STAGE)
    cutoff = run_cutoff(judge.config if judge else None, source.record.config)
    rows = read_columns(source.artifact, ["query_id", "domain", "rank", cutoff.cutoff.scale])
    histograms = _histograms(source)
    pooled = apply_cutoff(rows, cutoff.cutoff)
    stored = value_counts(rows["domain"])
    pool_sizes = value_counts(pooled["domain"])
    per_domain = rows.group_by("domain").aggregate([("query_id", "count_distinct")]).to_pylist()
    queries = {text_key(r["domain"]): int(r["query_id_count_distinct"]) for r in per_domain}
    domains = tuple(
        PoolDomain(
            domain=d,
            queries=queries.get(d, 0),
            pairs_scored=sum(b.pairs for b in histograms.get(d, ())),
            pairs_stored=stored.get(d, 0),
            pool_size=pool_sizes.get(d, 0),
        )
        for d in sorted(set(histograms) | set(stored))
    )
    total = PoolDomain(
        domain=ALL_SPLIT,
        queries=int(pc.count_distinct(rows["query_id"]).as_py()),
        pairs_scored=sum(d.pairs_scored for d in domains),
        pairs_stored=rows.num_rows,
        pool_size=pooled.num_rows,
    )
    return PoolSection(cutoff, domains, total, histograms)


def _histograms(source: Source) -> dict[str, tuple[HistogramBin, ...]]:
    hist = read_columns(source.artifact, ["domain", "bin_low", "bin_high", "pairs"], table="score_histogram")
    hist = hist.sort_by([("domain", "ascending"), ("bin_low", "ascending")])
    histograms: dict[str, list[HistogramBin]] = {}
    for r in hist.to_pylist():
        histograms.setdefault(text_key(r["domain"]), []).append(
            HistogramBin(float(r["bin_low"]), float(r["bin_high"]), int(r["pairs"] or 0))
        )
    return {d: tuple(bins) for d, bins in histograms.items()}


JUDGE_COLUMNS = [
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
]


def load_judge(source: Source, per_label: int = EXAMPLES_PER_LABEL) -> JudgeSection:
    """Labels per domain and score, usage, and the first few judgements of each score."""
    rows = read_columns(source.artifact, JUDGE_COLUMNS)
    counts = rows.group_by(["domain", "score"]).aggregate([("query_id", "count")])
    labels: dict[str, dict[int, int]] = {}
    for r in counts.sort_by([("domain", "ascending"), ("score", "ascending")]).to_pylist():
        labels.setdefault(text_key(r["domain"]), {})[int(r["score"])] = int(r["query_id_count"])
    scores = tuple(sorted({s for by_score in labels.values() for s in by_score}))
    ordered = rows.sort_by([("domain", "ascending"), ("query_id", "ascending"), ("passage_id", "ascending")])
    examples = [
        JudgeExample(
            text_key(r["domain"]), str(r["query_id"]), str(r["passage_id"]), score, str(r["explanation"])
        )
        for score in scores
        for r in ordered.filter(pc.equal(ordered["score"], score)).slice(0, per_label).to_pylist()
    ]
    return JudgeSection(
        labels=labels,
        scores=scores,
        judgements=rows.num_rows,
        cached=int_sum(rows["cached"]),
        prompt_tokens=int_sum(rows["prompt_tokens"]),
        completion_tokens=int_sum(rows["completion_tokens"]),
        models=tuple(sorted(value_counts(rows["model"]))),
        prompts=tuple(sorted(value_counts(rows["prompt_sha256"]))),
        cost={str(k): float(v) for k, v in source.artifact.manifest.get("cost", {}).items()},
        examples=tuple(examples),
    )


def pool_figure(pool: PoolSection) -> str | None:
    """The score histograms with the run's cut-off drawn in (as a probability)."""
    return pool_histograms(pool.histograms, pool.cutoff.cutoff.probability) if pool.histograms else None


def pool_histograms(histograms: Mapping[str, Sequence[HistogramBin]], threshold: float) -> str:
    """One histogram per domain of all scored pairs' probabilities, with the pooling cut-off."""
    domains = sorted(histograms)
    columns = min(len(domains), 5) or 1
    rows = math.ceil(len(domains) / columns) or 1
    with plots.styled():
        fig = plots.new_figure(2.7 * columns, 2.1 * rows + 0.4)
        axes = fig.subplots(rows, columns, squeeze=False, sharex=True)
        for ax in axes.flat[len(domains) :]:
            ax.set_visible(False)
        for ax, domain in zip(axes.flat, domains, strict=False):
            bins = histograms[domain]
            ax.bar(
                [b.low for b in bins],
                [b.pairs for b in bins],
                width=[b.high - b.low for b in bins],
                align="edge",
                color=plots.BAR_COLOUR,
                edgecolor="white",
                linewidth=0.4,
            )
            ax.axvline(threshold, color=plots.THRESHOLD_COLOUR, linestyle="--", linewidth=1)
            if any(b.pairs for b in bins):
                ax.set_yscale("log")  # most pairs score near 0: a linear axis hides the pooled tail
            ax.set_xlim(0, 1)
            ax.set_title(domain.replace("_", " "), fontsize=8)
        fig.supxlabel(f"cross-encoder probability (dashed: pooling cut-off {threshold:g})", fontsize=8)
        fig.supylabel("pairs (log)", fontsize=8)
        return plots.to_svg(fig, "pool-histograms")


def label_figure(judge: JudgeSection) -> str | None:
    """Stacked horizontal bars: judgements per domain by relevance label."""
    labels = judge.labels
    if not labels:
        return None
    domains = sorted(labels)
    scores = sorted({s for by_score in labels.values() for s in by_score})
    with plots.styled():
        fig = plots.new_figure(8, 1.0 + 0.3 * max(len(domains), 1))
        ax = fig.add_subplot()
        left = [0] * len(domains)
        for score in scores:
            counts = [labels[d].get(score, 0) for d in domains]
            colour = LABEL_COLOURS.get(score, plots.OTHER_COLOUR)
            ax.barh(domains, counts, left=left, color=colour, label=f"score {score}")
            left = [a + b for a, b in zip(left, counts, strict=True)]
        ax.invert_yaxis()
        ax.set_xlabel("judgements")
        fig.legend(loc="outside upper right", ncols=max(len(scores), 1), fontsize=8, frameon=False)
        return plots.to_svg(fig, "label-distribution")


POOL_TEMPLATE = """{% set p, cut = data, data.cutoff.cutoff %}
<table>
<thead><tr><th>domain</th><th class="num">queries</th><th class="num">pairs scored</th><th class="num">pairs stored</th>
<th class="num">pool size ({{ "p" if cut.scale == "probability" else "logit" }} ≥ {{ cut.threshold }}
{%- if cut.max_per_query %}, best {{ cut.max_per_query }}{% endif %})</th><th class="num">mean pool per query</th></tr></thead>
<tbody>
{%- for d in p.domains + (p.total,) %}
<tr{% if loop.last %} class="total"{% endif %}><td>{{ d.domain }}</td>{{ num(d.queries) }}{{ num(d.pairs_scored) }}
{{ num(d.pairs_stored) }}{{ num(d.pool_size) }}<td class="num">{{ d.mean_pool_per_query | ratio }}</td></tr>
{%- endfor %}
</tbody></table>
<p class="note">Pairs scored: every query–passage pair the cross-encoder scored (the histograms' total).
Pool size: stored pairs whose {{ cut.scale }} is at least {{ cut.threshold }}
{%- if cut.max_per_query %}, at most the {{ cut.max_per_query }} best of each query{% endif %}
(this run's cut-off, from {{ p.cutoff.source }}); the mean is over the queries with stored pairs.
{%- set c = r.stage(section.stage).cost %}{% if c.get("scoring_s") %} Cross-encoder throughput in this computation:
{{ "{:,.0f}".format(c["pairs_scored"] / c["scoring_s"]) }} pairs/s.{% endif %}</p>
{%- if figure %}<figure>{{ figure }}<figcaption>Probabilities of all scored pairs per domain, 20 bins.</figcaption></figure>{% endif %}
"""

JUDGE_TEMPLATE = """{% set j = data %}
<div class="grid">
<table>
<thead><tr><th>domain</th>{% for sc in j.scores %}<th class="num">score {{ sc }}</th>{% endfor %}<th class="num">total</th></tr></thead>
<tbody>
{%- for domain, by_score in j.labels.items() %}
<tr><td>{{ domain }}</td>{% for sc in j.scores %}{{ num(by_score.get(sc, 0)) }}{% endfor %}{{ num(by_score.values() | sum) }}</tr>
{%- endfor %}
<tr class="total"><td>all</td>{% for sc in j.scores %}{{ num(j.label_totals[sc]) }}{% endfor %}{{ num(j.judgements) }}</tr>
</tbody></table>
<table>
<thead><tr><th>usage</th><th class="num">value</th></tr></thead>
<tbody>
<tr><td>judgements</td>{{ num(j.judgements) }}</tr>
<tr><td>answered from the request cache</td>{{ num(j.cached) }}</tr>
<tr><td>prompt tokens (all judgements)</td>{{ num(j.prompt_tokens) }}</tr>
<tr><td>completion tokens (all judgements)</td>{{ num(j.completion_tokens) }}</tr>
{%- for k, v in j.cost.items() %}<tr><td>{{ k | replace("_", " ") }} (billed)</td><td class="num">{{ v | cost(k) }}</td></tr>{% endfor %}
</tbody></table>
<div>
<h3>Exclusions</h3>
{{ reasons_table(r.stage(section.stage)) }}
</div>
</div>
<p class="note">Models: {{ j.models | join(", ") or "–" }} · prompt digests: {{ j.prompts | map("truncate", 16, true, "…", 0) | join(", ") or "–" }}.
Billed figures are those of the run that computed this artifact.</p>
{%- if figure %}<figure>{{ figure }}<figcaption>Relevance labels given by the judge, per domain.</figcaption></figure>{% endif %}
<h3>Example judgements</h3>
<table>
<thead><tr><th>domain</th><th>query</th><th>passage</th><th class="num">score</th><th>explanation</th></tr></thead>
<tbody>
{%- for e in j.examples %}
<tr><td>{{ e.domain }}</td><td class="mono">{{ e.query_id }}</td><td class="mono">{{ e.passage_id }}</td>{{ num(e.score) }}
<td class="text explanation">{{ e.explanation | truncate(600, true, "…", 0) }}</td></tr>
{%- endfor %}
</tbody></table>
"""
