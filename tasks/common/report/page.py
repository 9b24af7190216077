"""The page around a run report: its style, header, stage table, timings and stage details.

Each flow section (``tasks/common/report/sections.py``) goes between the timings and the
details, wrapped in its ``<section>`` with its title and the problems of its stage; its body
template is the flow's own. Rendered by ``tasks/common/report/html.py`` (autoescaping on).
"""

STYLE = """
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

PAGE = """<!DOCTYPE html>
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
<nav>{% for id, title in nav %}<a href="#{{ id }}">{{ title }}</a>{% endfor %}</nav>
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
<figure>{{ timings }}<figcaption>Wall time of each stage in this run (a reused stage only looked its artifact up).</figcaption></figure>
</section>

{%- for section in r.sections %}
<section id="{{ section.id }}">
<h2>{{ section.title }}</h2>
{{ stage_problem(section.stage) }}
{%- if section.id in r.data %}{% set data, figure = r.data[section.id], figures[section.id] %}{% include bodies[section.id] %}{% endif %}
</section>
{%- endfor %}

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
