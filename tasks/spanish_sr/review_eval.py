"""Runs of the second stage and the tables of ``evaluate``: summaries over seeds and Table 5's inputs (paper 004 §4.4–§5).

- :func:`reranked`: the reranker reorders the top ``depth`` of a first-stage ranking by its
  logit (then record id); the records below ``depth`` follow in first-stage order, so a
  measure at a deeper cut still sees them (paper 004 Algorithm 1, step 4: the reranker sees
  the retriever's subset only).
- :func:`summary_rows`: per review (and ``all``), query kind (and ``all``), system and
  measure, each seed's mean over the queries, then the mean, sample standard deviation
  (null with one seed), minimum and maximum over seeds — paper 004 averages three seeds.
- :func:`significance_scores`: per review and measure, one value per system and query kind
  (the mean over the seeds and that review's queries of the kind), the input of
  :func:`tasks.spanish_sr.significance.compare_table`. Paper 004 pairs the rows of its Tables
  3–4, each a system averaged over three seeds; a system × seed unit would count BM25 (the
  same in every seed) once per seed, pairs that are not independent.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from tasks.common.rerank.port import Reranker
from tasks.spanish_sr.significance import EXPERT, QUESTION, SCORES_SCHEMA

ALL = "all"
Ranked = list[tuple[str, float | None]]
"""A ranking: ``(record_id, score)`` best first; a score may be None (below the rerank depth)."""


def reranked(
    first: Mapping[str, Sequence[str]],
    queries: Mapping[str, str],
    abstracts: Mapping[str, str],
    reranker: Reranker,
    depth: int,
) -> dict[str, Ranked]:
    """Each query's first-stage ranking with its top ``depth`` reordered by the reranker's logit
    (ties: record id); every pair of every query is scored in one call."""
    pairs = [(qid, rid) for qid, ids in first.items() for rid in ids[:depth]]
    logits = reranker.score([queries[q] for q, _ in pairs], [abstracts[r] for _, r in pairs]).logit
    scored: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for (qid, rid), logit in zip(pairs, logits.tolist(), strict=True):
        scored[qid].append((rid, logit))
    out: dict[str, Ranked] = {}
    for qid, ids in first.items():
        head = sorted(scored.get(qid, []), key=lambda p: (-p[1], p[0]))
        out[qid] = [*head, *((rid, None) for rid in ids[depth:])]
    return out


def as_run(ranking: Ranked) -> dict[str, float]:
    """A ranking as an ir-measures run: strictly decreasing scores in rank order."""
    return {rid: float(len(ranking) - i) for i, (rid, _) in enumerate(ranking)}


def summary_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows ``{review_id, query_kind, system, measure, mean, std, min, max, seeds, queries}``
    from per-query rows ``{query_id, review_id, query_kind, seed, system, measure, value}``."""
    cells: dict[tuple[str, str, str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    queries: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in rows:
        for review in (r["review_id"], ALL):
            for kind in (r["query_kind"], ALL):
                cells[(review, kind, r["system"], r["measure"])][r["seed"]].append(r["value"])
                queries[(review, kind)].add(r["query_id"])
    out = []
    for (review, kind, system, measure), by_seed in sorted(cells.items()):
        means = [math.fsum(v) / len(v) for _, v in sorted(by_seed.items())]
        out.append(
            {"review_id": review, "query_kind": kind, "system": system, "measure": measure}
            | {
                "mean": math.fsum(means) / len(means),
                "std": statistics.stdev(means) if len(means) > 1 else None,
            }
            | {
                "min": min(means),
                "max": max(means),
                "seeds": len(means),
                "queries": len(queries[(review, kind)]),
            }
        )
    return out


def significance_scores(rows: Sequence[Mapping[str, Any]], measures: Sequence[str]) -> pa.Table:
    """:data:`SCORES_SCHEMA` rows: review, measure, unit = the system, query kind, mean value over seeds and queries."""
    values: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        if r["measure"] in measures and r["query_kind"] in (QUESTION, EXPERT):
            values[(r["review_id"], r["measure"], r["system"], r["query_kind"])].append(r["value"])
    table = [
        {
            "review": review,
            "metric": measure,
            "unit": unit,
            "query_kind": kind,
            "value": math.fsum(v) / len(v),
        }
        for (review, measure, unit, kind), v in sorted(values.items())
    ]
    return pa.Table.from_pylist(table, schema=SCORES_SCHEMA)
