"""The crossgenre flow's own sections of its run report (``tasks/common/report/sections.py``).

- ``funnel`` (stage ``claims``): pages in → extracted → citing research → one study →
  resolved → claims, from the run's stage manifests (paper 003 §2);
- ``decisions`` (``single_study``): how many pages each rule and the LLM kept and dropped;
- ``sites`` (``claims``): queries per news site, the top ten (the paper's Fig. 1);
- ``recall`` (``candidates``): first-stage recall@k per BM25 variant (Table 2);
- ``ranking`` (``evaluate``): R@1/3/5/20 and MRR per system and split (Table 3).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tasks.common.report import plots
from tasks.common.report.sections import Section, Source
from tasks.common.report.tables import ReportDataError, read_columns, text_key
from tasks.crossgenre.card import FUNNEL, FunnelStep

TOP_SITES = 10
METRICS = ("R@1", "R@3", "R@5", "R@20", "MRR")
SPLIT_ORDER = ("train", "dev", "test")


@dataclass(frozen=True)
class SitesSection:
    queries: int
    top: tuple[tuple[str, int], ...]
    others: int  # queries of the sites below the top ten
    other_sites: int


@dataclass(frozen=True)
class RecallSection:
    variants: tuple[str, ...]
    ks: tuple[int, ...]
    recall: Mapping[tuple[str, int], float]
    queries: int | None

    def value(self, variant: str, k: int) -> float | None:
        return self.recall.get((variant, k))


@dataclass(frozen=True)
class RankingSection:
    splits: tuple[str, ...]
    systems: tuple[str, ...]  # in the artifact's order
    values: Mapping[tuple[str, str, str], float]  # (split, system, metric) → value
    queries: Mapping[str, int]  # split → queries
    excluded: tuple[tuple[str, str, str], ...]  # (system, split, reason)

    def value(self, split: str, system: str, metric: str) -> float | None:
        return self.values.get((split, system, metric))

    def systems_in(self, split: str) -> tuple[str, ...]:
        return tuple(s for s in self.systems if any((split, s, m) in self.values for m in METRICS))


def load_funnel(source: Source) -> tuple[FunnelStep, ...]:
    steps = []
    for stage, label in FUNNEL:
        report = source.stages.get(stage)
        if report is None or report.missing:
            steps.append(FunnelStep(stage, label, None, None, {}))
            continue
        steps.append(
            FunnelStep(
                stage, label, report.count("units_in"), report.count("units_kept"), report.excluded_by_reason
            )
        )
    return tuple(steps)


@dataclass(frozen=True)
class DecisionsSection:
    rows: tuple[tuple[str, int, int], ...]  # (decided_by, kept, dropped), most pages first


def load_decisions(source: Source) -> DecisionsSection:
    """single_study's kept and excluded pages by the rule (or ``llm``) that decided them."""
    kept = Counter(read_columns(source.artifact, ["decided_by"]).column("decided_by").to_pylist())
    excluded = source.artifact.excluded()
    by = "decided_by" if "decided_by" in excluded.schema.names else "reason"
    dropped = Counter(excluded.column(by).to_pylist())
    rules = sorted(set(kept) | set(dropped), key=lambda r: (-(kept[r] + dropped[r]), r))
    return DecisionsSection(tuple((r, kept[r], dropped[r]) for r in rules))


def load_sites(source: Source) -> SitesSection:
    sites = Counter(text_key(s) for s in read_columns(source.artifact, ["site"]).column("site").to_pylist())
    ranked = sorted(sites.items(), key=lambda kv: (-kv[1], kv[0]))
    rest = ranked[TOP_SITES:]
    return SitesSection(sum(sites.values()), tuple(ranked[:TOP_SITES]), sum(n for _s, n in rest), len(rest))


def load_recall(source: Source) -> RecallSection:
    artifact = source.artifact
    if "recall" not in artifact.table_names:
        raise ReportDataError(f"candidates {artifact.fingerprint} has no side table 'recall'")
    rows = read_columns(artifact, ["variant", "k", "recall", "queries"], table="recall").to_pylist()
    recall = {(text_key(r["variant"]), int(r["k"])): float(r["recall"]) for r in rows}
    queries = {int(r["queries"]) for r in rows}
    return RecallSection(
        variants=tuple(dict.fromkeys(v for v, _k in recall)),
        ks=tuple(sorted({k for _v, k in recall})),
        recall=recall,
        queries=queries.pop() if len(queries) == 1 else None,
    )


def load_ranking(source: Source) -> RankingSection:
    artifact = source.artifact
    rows = read_columns(artifact, ["system", "split", "metric", "value", "queries"]).to_pylist()
    values: dict[tuple[str, str, str], float] = {}
    queries: dict[str, int] = {}
    for r in rows:
        key = (text_key(r["split"]), text_key(r["system"]), text_key(r["metric"]))
        if key in values:
            raise ReportDataError(f"evaluate {artifact.fingerprint} has two rows for {key}")
        values[key] = float(r["value"])
        queries[key[0]] = int(r["queries"])
    found = {s for s, _y, _m in values}
    splits = [s for s in SPLIT_ORDER if s in found] + sorted(found - set(SPLIT_ORDER))
    excluded = tuple(
        (text_key(r["system"]), text_key(r["split"]), text_key(r["reason"]))
        for r in artifact.excluded().to_pylist()
    )
    return RankingSection(
        splits=tuple(splits),
        systems=tuple(dict.fromkeys(y for _s, y, _m in values)),
        values=values,
        queries=queries,
        excluded=excluded,
    )


def sites_figure(sites: SitesSection) -> str | None:
    """Horizontal bars: queries of the top sites (the paper's Fig. 1)."""
    if not sites.top:
        return None
    with plots.styled():
        fig = plots.new_figure(7, 0.8 + 0.28 * len(sites.top))
        ax = fig.add_subplot()
        bars = ax.barh([s for s, _n in sites.top], [n for _s, n in sites.top], color=plots.BAR_COLOUR)
        ax.bar_label(bars, padding=3, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("queries")
        ax.margins(x=0.12)
        return plots.to_svg(fig, "news-sites")


FUNNEL_TEMPLATE = """
<table class="funnel">
<thead><tr><th>stage</th><th>step</th><th class="num">in</th><th class="num">kept</th><th>excluded</th></tr></thead>
<tbody>
{%- for s in data %}
<tr><td class="mono">{{ s.stage }}</td><td>{{ s.label }}</td>{{ num(s.units_in) }}{{ num(s.kept) }}
<td>{% for reason, n in s.excluded.items() %}{{ reason }} {{ n | number }}{% if not loop.last %}, {% endif %}{% endfor %}
{%- if s.units_in is none %}<span class="muted">not in this run</span>{% endif %}</td></tr>
{%- endfor %}
</tbody></table>
<p class="note">Units each stage read and kept (pages, then claims); a stage's exclusions are in the Stages table too.</p>
"""

DECISIONS_TEMPLATE = """
<table class="decisions">
<thead><tr><th>decided by</th><th class="num">kept</th><th class="num">dropped</th></tr></thead>
<tbody>
{%- for rule, kept, dropped in data.rows %}<tr><td class="mono">{{ rule }}</td>{{ num(kept) }}{{ num(dropped) }}</tr>{% endfor %}
</tbody></table>
<p class="note">Pages citing research, by the single-study rule that decided them (llm: the model's verdict on a page
the rules left undecided; its reason is in the decision column of the artifact).</p>
"""

SITES_TEMPLATE = """{% set st = data %}
<table class="sites">
<thead><tr><th>site</th><th class="num">queries</th></tr></thead>
<tbody>
{%- for site, n in st.top %}<tr><td class="mono">{{ site }}</td>{{ num(n) }}</tr>{% endfor %}
{%- if st.other_sites %}<tr><td>{{ st.other_sites | number }} other sites</td>{{ num(st.others) }}</tr>{% endif %}
</tbody></table>
<p class="note">{{ st.queries | number }} queries (claims) by the site that published the article.</p>
{%- if figure %}<figure>{{ figure }}<figcaption>Queries per news site (top {{ st.top | length }}).</figcaption></figure>{% endif %}
"""

RECALL_TEMPLATE = """{% set rc = data %}
<table class="recall-at-k">
<thead><tr><th>variant</th>{% for k in rc.ks %}<th class="num">R@{{ k }}</th>{% endfor %}</tr></thead>
<tbody>
{%- for v in rc.variants %}<tr><th>{{ v }}</th>{% for k in rc.ks %}<td class="num">{{ rc.value(v, k) | metric }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table>
<p class="note">Share of cited abstracts in each variant's top k{% if rc.queries is not none %}, over {{ rc.queries | number }} queries{% endif %}.
okapi: BM25; plus: BM25+; plus_pre: BM25+ with lower-casing, stop words, stems and abbreviation expansion.</p>
"""

RANKING_TEMPLATE = """{% set rk = data %}
{%- for split in rk.splits %}
<h3>{{ split }} <span class="muted small">({{ rk.queries[split] | number }} queries)</span></h3>
<table class="ranking" data-split="{{ split }}">
<thead><tr><th>system</th>{% for m in metrics %}<th class="num">{{ m }}</th>{% endfor %}</tr></thead>
<tbody>
{%- for sys in rk.systems_in(split) %}<tr><th class="mono">{{ sys }}</th>
{%- for m in metrics %}<td class="num">{{ rk.value(split, sys, m) | metric }}</td>{% endfor %}</tr>
{%- endfor %}
</tbody></table>
{%- endfor %}
{%- if rk.excluded %}<p class="note">Not evaluated: {% for sys, split, reason in rk.excluded %}{{ sys }} on {{ split }} ({{ reason }}){% if not loop.last %}; {% endif %}{% endfor %}.</p>{% endif %}
<p class="note">Recall of the cited abstracts at k and mean reciprocal rank (ir-measures); a reranker reorders the top of the BM25+† list.</p>
"""


def _with_metrics(template: str) -> str:
    return "{% set metrics = " + repr(list(METRICS)) + " %}" + template


SECTIONS: tuple[Section[Any], ...] = (
    Section("funnel", "claims", "From pages to claims", load_funnel, FUNNEL_TEMPLATE),
    Section("decisions", "single_study", "Single-study decisions", load_decisions, DECISIONS_TEMPLATE),
    Section("sites", "claims", "News sites", load_sites, SITES_TEMPLATE, sites_figure),
    Section("recall", "candidates", "First-stage recall", load_recall, RECALL_TEMPLATE),
    Section("ranking", "evaluate", "Ranking (R@k, MRR)", load_ranking, _with_metrics(RANKING_TEMPLATE)),
)
