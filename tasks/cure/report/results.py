"""CURE's qrels, evaluation (the shape of CURE's Table 7, rater agreement) and release sections."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tasks.common.report.sections import Source
from tasks.common.report.tables import ReportDataError, read_columns, text_key
from tasks.cure.dataset.schema import ALL_SPLIT
from tasks.cure.stages.qrels import SOURCES

CONDITIONS = ("en-en", "fr-en", "es-en")  # query-language → passage-language, as in CURE's Table 7
RELEASE_COLUMNS = ("config", "split", "path", "rows", "bytes", "sha256")


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

    @property
    def split_models(self) -> dict[str, set[str]]:
        """Per split, the models that have a score in it (a row per model that was evaluated there)."""
        found: dict[str, set[str]] = {}
        for split, model, _condition in self.scores:
            found.setdefault(split, set()).add(model)
        return found


@dataclass(frozen=True)
class ReleaseFile:
    config: str
    split: str
    path: str
    rows: int | None
    bytes: int | None
    sha256: str


def load_qrels(source: Source) -> QrelsSection:
    """Judgements per (domain, source, score), and queries per domain."""
    rows = read_columns(source.artifact, ["query_id", "passage_id", "domain", "score", "source"])
    grouped = rows.group_by(["domain", "source", "score"]).aggregate([("query_id", "count")]).to_pylist()
    counts = {
        (text_key(r["domain"]), text_key(r["source"]), int(r["score"])): int(r["query_id_count"])
        for r in grouped
    }
    per_domain = rows.group_by("domain").aggregate([("query_id", "count_distinct")]).to_pylist()
    queries = {text_key(r["domain"]): int(r["query_id_count_distinct"]) for r in per_domain}
    found_sources = {s for _d, s, _sc in counts}
    sources = [s for s in SOURCES if s in found_sources] + sorted(found_sources - set(SOURCES))
    return QrelsSection(
        counts=counts,
        queries=queries,
        domains=tuple(sorted({d for d, _s, _sc in counts})),
        sources=tuple(sources),
        scores=tuple(sorted({sc for _d, _s, sc in counts})),
    )


def load_evaluate(source: Source) -> EvaluateSection:
    """NDCG@10 and Recall@100 per (split, model, condition), and the raters' agreement tables."""
    artifact = source.artifact
    rows = read_columns(artifact, ["model", "condition", "split", "ndcg_at_10", "recall_at_100", "queries"])
    scores: dict[tuple[str, str, str], Score] = {}
    models: dict[str, None] = {}  # insertion-ordered set
    for r in rows.to_pylist():
        key = (text_key(r["split"]), text_key(r["model"]), text_key(r["condition"]))
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
        domains=tuple(sorted({s for s, _m, _c in scores} - {ALL_SPLIT})),
        scores=scores,
        agreement=_agreement(source) if "agreement" in tables else (),
        confusion=_confusion(source) if "confusion" in tables else (),
    )


def _agreement(source: Source) -> tuple[Agreement, ...]:
    has_measure = "measure" in source.artifact.schema(table="agreement").names
    columns = ["rater_a", "rater_b", "kappa", "items", *(["measure"] if has_measure else [])]
    rows = read_columns(source.artifact, columns, table="agreement").to_pylist()
    return tuple(
        Agreement(text_key(r["rater_a"]), text_key(r["rater_b"]), r.get("measure"), r["kappa"], r["items"])
        for r in rows
    )


def _confusion(source: Source) -> tuple[Confusion, ...]:
    columns = ["rater_a", "rater_b", "label_a", "label_b", "count"]
    table = read_columns(source.artifact, columns, table="confusion")
    pairs: dict[tuple[str, str], dict[tuple[Any, Any], int]] = {}
    for r in table.to_pylist():
        cells = pairs.setdefault((text_key(r["rater_a"]), text_key(r["rater_b"])), {})
        cell = (r["label_a"], r["label_b"])
        cells[cell] = cells.get(cell, 0) + int(r["count"] or 0)
    matrices = []
    for (a, b), cells in pairs.items():
        values = {v for cell in cells for v in cell}
        # Labels sort by value (0 < 1 < 2), not as text; None last.
        labels = sorted(
            values, key=lambda v: (v is None, v if isinstance(v, int | float) else 0, text_key(v))
        )
        counts = {(text_key(la), text_key(lb)): n for (la, lb), n in cells.items()}
        matrices.append(Confusion(a, b, tuple(text_key(v) for v in labels), counts))
    return tuple(matrices)


def load_release(source: Source) -> tuple[ReleaseFile, ...]:
    """The files a release stage wrote: from its rows, else from a side table listing them."""
    artifact = source.artifact
    for table in (None, *artifact.table_names):
        if set(RELEASE_COLUMNS) <= set(artifact.schema(table=table).names):
            rows = artifact.read(columns=list(RELEASE_COLUMNS), table=table).to_pylist()
            return tuple(
                ReleaseFile(
                    config=text_key(r["config"]),
                    split=text_key(r["split"]),
                    path=text_key(r["path"]),
                    rows=r["rows"],
                    bytes=r["bytes"],
                    sha256=text_key(r["sha256"]),
                )
                for r in rows
            )
    raise ReportDataError(
        f"release {artifact.fingerprint} has no rows or side table with columns {list(RELEASE_COLUMNS)} "
        f"(side tables: {artifact.table_names})"
    )


QRELS_TEMPLATE = """{% set q = data %}
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
"""

EVALUATE_TEMPLATE = """
{%- macro score_cells(ev, split, model) %}
{%- for metric in ("ndcg_at_10", "recall_at_100") %}{% for c in ev.conditions %}
{%- set s = ev.score(split, model, c) %}<td class="num">{{ (s[metric] if s else none) | metric }}</td>
{%- endfor %}{% endfor %}
{%- endmacro %}
{%- macro metric_head(ev, first=none) %}
<thead><tr>{% if first %}<th rowspan="2">{{ first }}</th>{% endif %}<th rowspan="2">Model</th>
<th colspan="{{ ev.conditions | length }}">NDCG@10</th><th colspan="{{ ev.conditions | length }}">Recall@100</th></tr>
<tr>{% for _ in range(2) %}{% for c in ev.conditions %}<th class="num">{{ c }}</th>{% endfor %}{% endfor %}</tr></thead>
{%- endmacro %}{% set ev = data %}
<h3>Baselines (split all)</h3>
<table class="table7">{{ metric_head(ev) }}
<tbody>
{%- for m in ev.models %}<tr><th>{{ m }}</th>{{ score_cells(ev, "all", m) }}</tr>{% endfor %}
</tbody></table>
<p class="note">Conditions are query language → passage language, as in CURE's Table 7.</p>
{%- if ev.domains %}
<h3>Per domain</h3>
<table class="per-domain">
{{ metric_head(ev, "Domain") }}
<tbody>
{%- for d in ev.domains %}{% set models = ev.models | select("in", ev.split_models[d]) | list %}
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
"""

RELEASE_TEMPLATE = """
<table>
<thead><tr><th>config</th><th>split</th><th>path</th><th class="num">rows</th><th class="num">bytes</th><th>sha256</th></tr></thead>
<tbody>
{%- for f in data %}
<tr><td>{{ f.config }}</td><td>{{ f.split }}</td><td class="mono">{{ f.path }}</td>{{ num(f.rows) }}{{ num(f.bytes) }}
<td class="mono" title="{{ f.sha256 }}">{{ f.sha256 | truncate(16, true, "…", 0) }}</td></tr>
{%- endfor %}
</tbody></table>
"""
