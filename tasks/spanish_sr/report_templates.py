"""The spanish_sr report sections' Jinja templates (:mod:`tasks.spanish_sr.report` fills them)."""

FUNNEL_TEMPLATE = """
<table class="funnel">
<thead><tr><th>stage</th><th>reads</th><th class="num">in</th><th>keeps</th><th class="num">kept</th><th>excluded</th></tr></thead>
<tbody>
{%- for s in data %}
<tr><td class="mono">{{ s.stage }}</td><td>{{ s.entering }}</td>{{ num(s.units_in) }}<td>{{ s.kept_label }}</td>{{ num(s.kept) }}
<td>{% for reason, n in s.excluded.items() %}{{ reason }} {{ n | number }}{% if not loop.last %}, {% endif %}{% endfor %}
{%- if s.units_in is none %}<span class="muted">not in this run</span>{% endif %}</td></tr>
{%- endfor %}
</tbody></table>
<p class="note">Units each stage read and kept, from its manifest; the details of its exclusions are in the Stages table.</p>
"""

GRID_MACRO = """{% macro grid_table(g, cls, corner) %}
<table class="{{ cls }}">
<thead><tr><th>{{ corner }}</th>{% for c in g.columns %}<th class="num">{{ c }}</th>{% endfor %}</tr></thead>
<tbody>
{%- for row in g.rows %}<tr><th class="mono">{{ row }}</th>{% for c in g.columns %}<td class="num">{{ g.text(row, c) }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table>
{%- endmacro %}"""

RETRIEVAL_TEMPLATE = (
    GRID_MACRO
    + """{% set rt = data %}
{{ grid_table(rt.measures, "retrieval", "system") }}
<p class="note">Every review's queries{% if rt.queries is not none %} ({{ rt.queries | number }}){% endif %} together;
{% if rt.seeds > 1 %}mean ± sd over {{ rt.seeds }} seeds{% else %}one seed{% endif %}. AP averaged is MAP (ir-measures, trec_eval's definitions).</p>
{%- if rt.map_by_kind.cells %}
{{ grid_table(rt.map_by_kind, "map-by-kind", "MAP") }}
{%- endif %}
{%- if figure %}<figure>{{ figure }}<figcaption>MAP per system and query kind{% if rt.seeds > 1 %} (error bars: the seeds' range){% endif %}.</figcaption></figure>{% endif %}
"""
)

SIGNIFICANCE_TEMPLATE = """
<table class="significance">
<thead><tr><th>review</th><th>measure</th><th class="num">n</th><th class="num">mean question</th><th class="num">mean expert</th>
<th>test</th><th class="num">statistic</th><th class="num">p</th><th>decision</th><th>note</th></tr></thead>
<tbody>
{%- for c in data %}<tr><td class="mono">{{ c.review }}</td><td>{{ c.metric }}</td>{{ num(c.n) }}
<td class="num">{{ c.mean_question | metric }}</td><td class="num">{{ c.mean_expert | metric }}</td>
<td>{{ c.test }}</td><td class="num">{{ c.statistic | metric }}</td><td class="num">{{ c.p_text }}</td><td>{{ c.decision }}</td><td>{{ c.note }}</td></tr>
{%- endfor %}
</tbody></table>
<p class="note">Paired over the systems (n), each averaged over the seeds; expert − question, so a positive statistic favours the expert queries.
Shapiro–Wilk on the differences picks the paired t-test or Wilcoxon's signed-rank test.</p>
"""

TRAINING_TEMPLATE = (
    GRID_MACRO
    + """{% set tr = data %}
{%- for m in tr.models %}
<h3>{{ m.label }} <span class="muted small">({{ m.stage }})</span></h3>
<table class="history" data-stage="{{ m.stage }}">
<thead><tr><th class="num">seed</th><th class="num">epoch</th><th class="num">train loss</th><th class="num">val loss</th><th class="num">val MRR</th><th>kept</th></tr></thead>
<tbody>
{%- for e in m.epochs %}<tr>{{ num(e.seed) }}{{ num(e.epoch) }}<td class="num">{{ e.train_loss | metric }}</td>
<td class="num">{{ e.val_loss | metric }}</td><td class="num">{{ e.val_mrr | metric }}</td><td>{% if e.best %}best{% endif %}</td></tr>{% endfor %}
</tbody></table>
{%- endfor %}
<p class="note">Epoch 0 is the base model before training; "best" marks the epoch whose weights were saved.</p>
{%- if tr.held_out %}
<h3>Held-out questions</h3>
{{ grid_table(tr.held_out, "held-out", "system") }}
<p class="note">Self-retrieval of each seed's validation questions{% if tr.held_out_queries is not none %} ({{ tr.held_out_queries | number }}){% endif %}: the question's own record is the one relevant; mean ± sd over seeds when several.</p>
{%- endif %}
"""
)
