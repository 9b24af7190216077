"""Render a :class:`~tasks.common.report.data.RunReport` as one self-contained HTML page.

The page has inline CSS and inline SVG figures, and no script, link or remote resource: it
opens from a file, offline, years later. It is rendered with Jinja2 with autoescaping on, so
every string taken from data (passage ids, LLM explanations, exclusion details: untrusted
text) reaches the page as text, never as markup; only the SVG made by
:mod:`tasks.common.report.plots` is inserted as markup.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from jinja2 import Environment, StrictUndefined
from markupsafe import Markup

from tasks.common.report import plots
from tasks.common.report.data import RunReport, load_report

STATE_CLASS = {
    "computed": "ok",
    "resumed": "warn",
    "reused": "info",
    "completed": "ok",
    "failed": "bad",
    "missing": "bad",
    "unfinished": "warn",
}
_STYLE = """
:root { --fg:#1f2933; --muted:#616e7c; --line:#d9dee5; --soft:#f4f6f9; --accent:#3d6fb6; }
* { box-sizing:border-box; }
body { font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif; color:var(--fg);
  margin:0; background:#fff; }
header { background:#1f2f46; color:#fff; padding:20px 32px 16px; }
header h1 { margin:0 0 4px; font-size:22px; font-weight:600; }
header .run { font-family:ui-monospace,"DejaVu Sans Mono",monospace; color:#c9d6ea; }
header dl { display:grid; grid-template-columns:repeat(auto-fill,minmax(210px,1fr)); gap:8px 24px; margin:14px 0 0; }
header dt { font-size:11px; text-transform:uppercase; letter-spacing:.05em; color:#9fb3cf; }
header dd { margin:0; word-break:break-all; }
nav { position:sticky; top:0; background:var(--soft); border-bottom:1px solid var(--line); padding:8px 32px;
  z-index:1; }
nav a { color:var(--accent); margin-right:18px; text-decoration:none; font-weight:500; }
main { padding:8px 32px 40px; max-width:1400px; }
section { margin-top:28px; }
h2 { font-size:18px; border-bottom:2px solid var(--line); padding-bottom:4px; margin:0 0 12px; }
h3 { font-size:15px; margin:18px 0 8px; }
table { border-collapse:collapse; margin:6px 0 14px; font-size:13px; }
th, td { border-bottom:1px solid var(--line); padding:4px 10px; text-align:left; vertical-align:top; }
thead th { background:var(--soft); font-weight:600; border-bottom:2px solid var(--line); }
thead th[colspan] { text-align:center; }
tbody tr:nth-child(even) { background:#fafbfc; }
tr.total td, tr.total th { font-weight:600; border-top:2px solid var(--line); }
.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
.mono { font-family:ui-monospace,"DejaVu Sans Mono",monospace; font-size:12px; }
.muted { color:var(--muted); }
.small { font-size:12px; }
.text { max-width:640px; white-space:pre-wrap; word-break:break-word; }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; font-weight:600;
  background:#e4e7eb; color:#323f4b; }
.badge.ok { background:#d5f0e3; color:#146c43; } .badge.info { background:#dbe8fb; color:#1d4f91; }
.badge.warn { background:#fdf0cf; color:#8a5a00; } .badge.bad { background:#fbdada; color:#a61b1b; }
header .badge { font-size:13px; vertical-align:middle; margin-left:8px; }
.problem { background:#fff4f4; border-left:4px solid #d1495b; padding:8px 12px; margin:8px 0; }
.note { color:var(--muted); font-size:12px; margin:2px 0 10px; }
figure { margin:8px 0 16px; }
figcaption { color:var(--muted); font-size:12px; }
svg.plot { max-width:100%; height:auto; display:block; }
details { border:1px solid var(--line); border-radius:6px; margin:8px 0; padding:6px 12px; }
details > summary { cursor:pointer; font-weight:600; }
details dl { display:grid; grid-template-columns:max-content 1fr; gap:2px 16px; margin:8px 0; }
details dt { color:var(--muted); } details dd { margin:0; }
pre { background:var(--soft); padding:8px 12px; overflow-x:auto; font-size:12px; max-height:360px; }
caption { caption-side:top; text-align:left; white-space:nowrap; font-size:12px; color:var(--muted);
  padding-bottom:4px; }
.grid { display:flex; flex-wrap:wrap; gap:24px; align-items:flex-start; }
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>irforge {{ r.flow }} · run {{ r.run_id }}</title>
<style>{{ style }}</style>
</head>
<body>
{%- macro num(v) %}<td class="num">{{ v | number }}</td>{% endmacro %}
{%- macro badge(state) %}<span class="badge {{ state_class.get(state, '') }}">{{ state }}</span>{% endmacro %}
{%- macro problem(text) %}<p class="problem">{{ text }}</p>{% endmacro %}
{%- macro reasons_table(stage) %}
{%- if stage.excluded_by_reason %}
<table><thead><tr><th>excluded because</th><th class="num">rows</th></tr></thead><tbody>
{%- for reason, n in stage.excluded_by_reason.items() %}<tr><td>{{ reason }}</td>{{ num(n) }}</tr>{% endfor %}
</tbody></table>
{%- else %}<p class="note">No rows excluded.</p>{% endif %}
{%- endmacro %}
{%- macro stage_problem(name) %}
{%- set stage = r.stage(name) %}
{%- if stage.problem %}{{ problem(stage.problem) }}{% endif %}
{%- if name in r.section_problems %}{{ problem("This section could not be built: " ~ r.section_problems[name]) }}{% endif %}
{%- endmacro %}
{%- macro score_cells(ev, split, model) %}
{%- for metric in ("ndcg_at_10", "recall_at_100") %}{% for c in ev.conditions %}
{%- set s = ev.score(split, model, c) %}<td class="num">{{ (s[metric] if s else none) | metric }}</td>
{%- endfor %}{% endfor %}
{%- endmacro %}
{%- macro metric_head(ev, first) %}
<thead><tr><th rowspan="2">{{ first }}</th><th rowspan="2">Model</th>
<th colspan="{{ ev.conditions | length }}">NDCG@10</th><th colspan="{{ ev.conditions | length }}">Recall@100</th></tr>
<tr>{% for _ in range(2) %}{% for c in ev.conditions %}<th class="num">{{ c }}</th>{% endfor %}{% endfor %}</tr></thead>
{%- endmacro %}

<header>
<h1>irforge · {{ r.flow }} {{ badge(r.status) }}</h1>
<div class="run">run {{ r.run_id }}</div>
<dl>
<div><dt>config</dt><dd>{{ r.record.config or "–" }}</dd></div>
<div><dt>started</dt><dd>{{ r.record.started_at | when }}</dd></div>
<div><dt>finished</dt><dd>{{ r.record.finished_at | when }}</dd></div>
<div><dt>total time</dt><dd>{{ r.total_s | seconds }}</dd></div>
<div><dt>stages</dt><dd>{{ stage_states }}</dd></div>
</dl>
</header>
<nav>{% for id, title in sections %}<a href="#{{ id }}">{{ title }}</a>{% endfor %}</nav>
<main>

<section id="summary">
<h2>Stages</h2>
<table>
<thead><tr><th>stage</th><th>state</th><th>fingerprint</th><th class="num">rows in</th><th class="num">kept</th>
<th class="num">excluded</th><th>excluded by reason</th><th class="num">time</th><th class="num">rows/s</th>
<th>cost</th></tr></thead>
<tbody>
{%- for s in r.stages %}
<tr>
<td><a href="#stage-{{ s.name }}">{{ s.name }}</a></td>
<td>{{ badge("missing" if s.missing else s.record.state) }}</td>
<td class="mono">{{ s.record.fingerprint or "–" }}</td>
{{ num(s.count("rows_in")) }}{{ num(s.count("rows_out")) }}{{ num(s.count("rows_excluded")) }}
<td class="small">{% for reason, n in s.excluded_by_reason.items() %}{{ reason }} {{ n | number }}{% if not loop.last %}, {% endif %}{% endfor %}</td>
<td class="num">{{ s.record.wall_s | seconds }}{% if s.record.state == "reused" and s.computed_wall_s is not none %}
<div class="muted small">computed in {{ s.computed_wall_s | seconds }}</div>{% endif %}</td>
<td class="num">{{ s.rows_per_s | rate }}</td>
<td class="small">{% for k, v in s.cost.items() %}{{ k | replace("_", " ") }} {{ v | cost(k) }}{% if not loop.last %}, {% endif %}{% endfor %}</td>
</tr>
{%- endfor %}
</tbody>
</table>
</section>

<section id="timings">
<h2>Timings</h2>
<figure>{{ plots.times }}<figcaption>Wall time of each stage in this run (a reused stage only looked its artifact up).</figcaption></figure>
</section>

{%- if r.has_section("pool") %}
<section id="pool">
<h2>Pooling</h2>
{{ stage_problem("pool") }}
{%- set p = r.pool %}{% if p %}{% set cut = p.cutoff.cutoff %}
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
{%- set c = r.stage("pool").cost %}{% if c.get("scoring_s") %} Cross-encoder throughput in this computation:
{{ "{:,.0f}".format(c["pairs_scored"] / c["scoring_s"]) }} pairs/s.{% endif %}</p>
{%- if plots.pool %}<figure>{{ plots.pool }}<figcaption>Probabilities of all scored pairs per domain, 20 bins.</figcaption></figure>{% endif %}
{%- endif %}
</section>
{%- endif %}

{%- if r.has_section("judge") %}
<section id="judge">
<h2>LLM judging</h2>
{{ stage_problem("judge") }}
{%- set j = r.judge %}{% if j %}
<div class="grid">
<table>
<thead><tr><th>domain</th>{% for sc in j.scores %}<th class="num">score {{ sc }}</th>{% endfor %}<th class="num">total</th></tr></thead>
<tbody>
{%- for domain, by_score in j.labels.items() %}
<tr><td>{{ domain }}</td>{% for sc in j.scores %}{{ num(by_score.get(sc, 0)) }}{% endfor %}{{ num(by_score.values() | sum) }}</tr>
{%- endfor %}
<tr class="total"><td>all</td>{% for sc in j.scores %}{{ num(label_totals[sc]) }}{% endfor %}{{ num(j.judgements) }}</tr>
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
{{ reasons_table(r.stage("judge")) }}
</div>
</div>
<p class="note">Models: {{ j.models | join(", ") or "–" }} · prompt digests: {{ j.prompts | map("truncate", 16, true, "…", 0) | join(", ") or "–" }}.
Billed figures are those of the run that computed this artifact.</p>
{%- if plots.labels %}<figure>{{ plots.labels }}<figcaption>Relevance labels given by the judge, per domain.</figcaption></figure>{% endif %}
<h3>Example judgements</h3>
<table>
<thead><tr><th>domain</th><th>query</th><th>passage</th><th class="num">score</th><th>explanation</th></tr></thead>
<tbody>
{%- for e in j.examples %}
<tr><td>{{ e.domain }}</td><td class="mono">{{ e.query_id }}</td><td class="mono">{{ e.passage_id }}</td>{{ num(e.score) }}
<td class="text explanation">{{ e.explanation | truncate(600, true, "…", 0) }}</td></tr>
{%- endfor %}
</tbody></table>
{%- endif %}
</section>
{%- endif %}

{%- if r.has_section("qrels") %}
<section id="qrels">
<h2>Qrels</h2>
{{ stage_problem("qrels") }}
{%- set q = r.qrels %}{% if q %}
<table>
<thead>
<tr><th rowspan="2">domain</th>{% for src in q.sources %}<th colspan="{{ q.scores | length }}">{{ src }}</th>{% endfor %}
<th rowspan="2" class="num">judgements</th><th rowspan="2" class="num">queries</th><th rowspan="2" class="num">per query</th></tr>
<tr>{% for src in q.sources %}{% for sc in q.scores %}<th class="num">{{ sc }}</th>{% endfor %}{% endfor %}</tr>
</thead>
<tbody>
{%- for d in q.domains %}
<tr><td>{{ d }}</td>{% for src in q.sources %}{% for sc in q.scores %}{{ num(q.total(d, src, sc)) }}{% endfor %}{% endfor %}
{{ num(q.total(d)) }}{{ num(q.queries.get(d, 0)) }}<td class="num">{{ (q.total(d) / q.queries[d] if q.queries.get(d) else none) | ratio }}</td></tr>
{%- endfor %}
<tr class="total"><td>all</td>{% for src in q.sources %}{% for sc in q.scores %}{{ num(q.total(none, src, sc)) }}{% endfor %}{% endfor %}
{% set all_queries = q.queries.values() | sum %}{{ num(q.total()) }}{{ num(all_queries) }}<td class="num">{{ (q.total() / all_queries if all_queries else none) | ratio }}</td></tr>
</tbody></table>
<p class="note">Judgements by source (human annotation, containment of an annotated passage, LLM judge) and relevance score.</p>
{%- endif %}
</section>
{%- endif %}

{%- if r.has_section("evaluate") %}
<section id="evaluate">
<h2>Evaluation</h2>
{{ stage_problem("evaluate") }}
{%- set ev = r.evaluate %}{% if ev %}
<h3>Baselines (split all)</h3>
<table class="table7">
<thead><tr><th rowspan="2">Model</th>
<th colspan="{{ ev.conditions | length }}">NDCG@10</th><th colspan="{{ ev.conditions | length }}">Recall@100</th></tr>
<tr>{% for _ in range(2) %}{% for c in ev.conditions %}<th class="num">{{ c }}</th>{% endfor %}{% endfor %}</tr></thead>
<tbody>
{%- for m in ev.models %}<tr><th>{{ m }}</th>{{ score_cells(ev, "all", m) }}</tr>{% endfor %}
</tbody></table>
<p class="note">Conditions are query language → passage language, as in CURE's Table 7.</p>
{%- if ev.domains %}
<h3>Per domain</h3>
<table class="per-domain">
{{ metric_head(ev, "Domain") }}
<tbody>
{%- for d in ev.domains %}{% set models = ev.models | select("in", split_models[d]) | list %}
{%- for m in models %}<tr>{% if loop.first %}<th rowspan="{{ models | length }}">{{ d }}</th>{% endif %}<td>{{ m }}</td>{{ score_cells(ev, d, m) }}</tr>{% endfor %}
{%- endfor %}
</tbody></table>
{%- endif %}
{%- if ev.agreement %}
<h3>Rater agreement</h3>
<table class="agreement"><thead><tr><th>rater a</th><th>rater b</th><th>measure</th><th class="num">κ</th><th class="num">items</th></tr></thead><tbody>
{%- for a in ev.agreement %}<tr><td>{{ a.rater_a }}</td><td>{{ a.rater_b }}</td><td>{{ (a.measure or "–") | replace("_", " ") }}</td>
<td class="num">{{ a.kappa | metric }}</td>{{ num(a.items) }}</tr>{% endfor %}
</tbody></table>
{%- endif %}
{%- if ev.confusion %}
<h3>Confusion between raters</h3>
<div class="grid">
{%- for c in ev.confusion %}
<table class="confusion"><caption>{{ c.rater_a }} (rows) vs {{ c.rater_b }} (columns)</caption>
<thead><tr><th></th>{% for lb in c.labels %}<th class="num">{{ lb }}</th>{% endfor %}</tr></thead><tbody>
{%- for la in c.labels %}<tr><th>{{ la }}</th>{% for lb in c.labels %}{{ num(c.counts.get((la, lb), 0)) }}{% endfor %}</tr>{% endfor %}
</tbody></table>
{%- endfor %}
</div>
{%- endif %}
{%- endif %}
</section>
{%- endif %}

{%- if r.has_section("release") %}
<section id="release">
<h2>Release</h2>
{{ stage_problem("release") }}
{%- if r.release is not none %}
<table>
<thead><tr><th>config</th><th>split</th><th>path</th><th class="num">rows</th><th class="num">bytes</th><th>sha256</th></tr></thead>
<tbody>
{%- for f in r.release %}
<tr><td>{{ f.config }}</td><td>{{ f.split }}</td><td class="mono">{{ f.path }}</td>{{ num(f.rows) }}{{ num(f.bytes) }}
<td class="mono" title="{{ f.sha256 }}">{{ f.sha256 | truncate(16, true, "…", 0) }}</td></tr>
{%- endfor %}
</tbody></table>
{%- endif %}
</section>
{%- endif %}

{%- if r.has_section("instances") %}
<section id="instances">
<h2>Instances</h2>
{{ stage_problem("select") }}
{%- set ins = r.instances %}{% if ins %}
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
{%- endif %}
</section>
{%- endif %}

{%- if r.has_section("recall") %}
<section id="recall">
<h2>Evidence retrieval (ER@K)</h2>
{{ stage_problem("evaluate") }}
{%- set rc = r.recall %}{% if rc %}
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
{%- if plots.recall %}<figure>{{ plots.recall }}<figcaption>Mean aspect recall per system and task.</figcaption></figure>{% endif %}
{%- endif %}
</section>
{%- endif %}

{%- if r.has_section("export") %}
<section id="export">
<h2>Export</h2>
{{ stage_problem("export") }}
{%- set ex = r.export %}{% if ex %}
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
{%- endif %}
</section>
{%- endif %}

<section id="details">
<h2>Stage details</h2>
{%- for s in r.stages %}
<details id="stage-{{ s.name }}"{% if s.missing or s.problem %} open{% endif %}>
<summary>{{ s.name }} {{ badge("missing" if s.missing else s.record.state) }}</summary>
{%- if s.problem %}{{ problem(s.problem) }}{% endif %}
{%- if not s.missing %}
<dl>
<dt>artifact</dt><dd class="mono">{{ s.artifact.path }}</dd>
<dt>created</dt><dd>{{ s.manifest.get("created_at", "–") }}</dd>
<dt>upstream</dt><dd>{{ s.upstream | join(", ") or "–" }}</dd>
<dt>units in / kept / excluded</dt><dd>{{ s.count("units_in") | number }} / {{ s.count("units_kept") | number }} / {{ s.count("units_excluded") | number }}</dd>
<dt>chunks</dt><dd>{{ s.manifest.get("chunks", {}).get("total") | number }} ({{ s.manifest.get("chunks", {}).get("resumed", 0) | number }} resumed)</dd>
<dt>processing time</dt><dd>{{ s.manifest.get("process_s") | seconds }} of {{ s.computed_wall_s | seconds }} wall</dd>
<dt>side tables</dt><dd>{% for t, n in s.side_tables.items() %}{{ t }} ({{ n | number }} rows){% if not loop.last %}, {% endif %}{% else %}–{% endfor %}</dd>
<dt>cost</dt><dd>{% for k, v in s.cost.items() %}{{ k }} {{ v | cost(k) }}{% if not loop.last %}, {% endif %}{% else %}–{% endfor %}</dd>
</dl>
{{ reasons_table(s) }}
{%- if s.excluded_examples %}
<table class="examples"><thead><tr><th>reason</th><th>detail (first rows of each reason)</th></tr></thead><tbody>
{%- for e in s.excluded_examples %}<tr><td>{{ e.reason }}</td><td class="text small">{{ (e.detail or "–") | truncate(400, true, "…", 0) }}</td></tr>{% endfor %}
</tbody></table>
{%- endif %}
<p class="note">stage config</p>
<pre class="config">{{ s.config | pretty_json }}</pre>
{%- endif %}
</details>
{%- endfor %}
</section>
</main>
</body>
</html>
"""


def _number(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def _rate(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f}"


def _metric(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _cost(value: float, name: str) -> str:
    if name == "usd":
        return f"${value:,.4f}"
    return _number(value)


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 60:
        return f"{value:.2f} s"
    minutes, secs = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _when(value: Any) -> str:
    return "–" if value is None else str(value.isoformat(sep=" "))


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _environment() -> Environment:
    env = Environment(autoescape=True, undefined=StrictUndefined)
    env.filters.update(
        number=_number,
        rate=_rate,
        ratio=_ratio,
        metric=_metric,
        percent=_percent,
        cost=_cost,
        seconds=_seconds,
        when=_when,
        pretty_json=_pretty_json,
    )
    return env


_PAGE = _environment().from_string(_TEMPLATE)


def render_report(report: RunReport) -> str:
    """The report as one HTML page (a string)."""
    figures = {
        "times": Markup(plots.stage_times([(s.name, s.record.wall_s or 0.0) for s in report.stages])),
        "pool": Markup(plots.pool_histograms(report.pool.histograms, report.pool.cutoff.cutoff.probability))
        if report.pool and report.pool.histograms
        else None,
        "labels": Markup(plots.label_distribution(report.judge.labels))
        if report.judge and report.judge.labels
        else None,
        "recall": Markup(_recall_plot(report)) if report.recall and report.recall.scores else None,
    }
    return _PAGE.render(
        r=report,
        style=Markup(_STYLE),
        plots=figures,
        sections=_sections(report),
        state_class=STATE_CLASS,
        stage_states=_stage_states(report),
        label_totals=_label_totals(report),
        split_models=_split_models(report),
    )


def write_report(root: Path, flow: str, run_id: str | None = None) -> Path:
    """Write ``<root>/<flow>/reports/<run_id>.html`` (temp file + rename) and return its path."""
    report = load_report(root, flow, run_id)
    page = render_report(report)
    path = root / flow / "reports" / f"{report.run_id}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(page)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _recall_plot(report: RunReport) -> str:
    assert report.recall is not None
    rc = report.recall
    recall = {key: score.mean_recall for key, score in rc.scores.items()}
    return plots.recall_bars(rc.systems, rc.tasks, recall)


def _sections(report: RunReport) -> list[tuple[str, str]]:
    present = [(s.id, s.title) for s in report.sections]
    return [("summary", "Stages"), ("timings", "Timings"), *present, ("details", "Stage details")]


def _stage_states(report: RunReport) -> str:
    states: dict[str, int] = {}
    for s in report.stages:
        state = "missing" if s.missing else s.record.state
        states[state] = states.get(state, 0) + 1
    shown = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    return f"{len(report.stages)} ({shown})"


def _label_totals(report: RunReport) -> dict[int, int]:
    if report.judge is None:
        return {}
    return {sc: sum(by.get(sc, 0) for by in report.judge.labels.values()) for sc in report.judge.scores}


def _split_models(report: RunReport) -> dict[str, set[str]]:
    """Per split, the models that have a score in it (a row per model that was evaluated there)."""
    found: dict[str, set[str]] = {}
    if report.evaluate is not None:
        for split, model, _condition in report.evaluate.scores:
            found.setdefault(split, set()).add(model)
    return found
