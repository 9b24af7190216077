"""Retrieval effectiveness of a run against qrels: nDCG@10 and Recall@100 (CURE Table 7).

Computed with ``ir-measures`` through its pytrec_eval provider (trec_eval's definitions, the
same library MTEB uses), per query, then averaged here:

- The mean is over the queries **that have qrels**. A query with qrels and no (or an empty)
  run scores 0 on every measure; run entries of queries without qrels are ignored. (trec_eval
  on its own averages only over the queries present in the run.)
- ``nDCG@k`` uses the graded labels as linear gains (gain = label, discount log2(rank + 1),
  trec_eval's ``ndcg_cut``), not ``2^label - 1``.
- ``R@k`` counts a passage as relevant when its label is ≥ 1 (ir-measures' default
  ``rel=1``): partially relevant (1) and relevant (2) both count. ``R(rel=2)@100`` counts
  only the 2s.
- A query whose judgements are all 0 has no relevant passage: pytrec_eval gives it 0 on both
  measures, and it counts in the mean (it has qrels).
- Ties: trec_eval orders equal scores by document id *descending*, which would reorder a
  run's ties behind its back. The run is therefore ranked here first, by score descending
  then passage id ascending (the project's rule for every cut list), and handed to pytrec_eval as
  strictly decreasing scores, so the order evaluated is the order the retriever meant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

import ir_measures
from ir_measures.measures.base import Measure

from irforge.errors import IrforgeError

Qrels = Mapping[str, Mapping[str, int]]
"""query id -> passage id -> graded label (0, 1, 2)."""
Run = Mapping[str, Mapping[str, float]]
"""query id -> passage id -> retrieval score (higher is better)."""

DEFAULT_MEASURES: Final = ("nDCG@10", "R@100")


class EvaluationError(IrforgeError):
    """Qrels, a run or a measure cannot be evaluated; the message names which and why."""


def evaluate(qrels: Qrels, run: Run, measures: Sequence[str] = DEFAULT_MEASURES) -> dict[str, float]:
    """Mean of each measure over the queries of ``qrels``, keyed by the measure as written."""
    per_query = evaluate_per_query(qrels, run, measures)
    return {
        name: math.fsum(values[name] for values in per_query.values()) / len(per_query) for name in measures
    }


def evaluate_per_query(
    qrels: Qrels, run: Run, measures: Sequence[str] = DEFAULT_MEASURES
) -> dict[str, dict[str, float]]:
    """Each query of ``qrels`` (sorted by id) -> measure as written -> value."""
    parsed = _parse(measures)
    judged = _checked_qrels(qrels)
    ranked = {qid: _ranked(qid, docs) for qid, docs in run.items() if qid in judged and docs}
    values = {qid: dict.fromkeys(parsed.values(), 0.0) for qid in sorted(judged)}
    if ranked:
        for metric in ir_measures.pytrec_eval.iter_calc(list(parsed), judged, ranked):
            values[metric.query_id][parsed[metric.measure]] = float(metric.value)
    return values


def _parse(measures: Sequence[str]) -> dict[Measure, str]:
    if isinstance(measures, str):
        raise EvaluationError(f"measures must be a list of names, got the string {measures!r}")
    if not measures:
        raise EvaluationError("no measure to compute")
    parsed: dict[Measure, str] = {}
    for name in measures:
        try:
            measure = ir_measures.parse_measure(name)
        except (ValueError, NameError, SyntaxError) as err:
            raise EvaluationError(
                f"unknown measure {name!r} (ir-measures syntax, e.g. 'nDCG@10', 'R@100')"
            ) from err
        if not ir_measures.pytrec_eval.supports(measure):
            raise EvaluationError(f"measure {name!r} is not computed by pytrec_eval")
        if measure in parsed:
            raise EvaluationError(f"measure {name!r} is asked twice (as {parsed[measure]!r})")
        parsed[measure] = name
    return parsed


def _checked_qrels(qrels: Qrels) -> dict[str, dict[str, int]]:
    if not qrels:
        raise EvaluationError("no qrels: nothing to evaluate against")
    checked: dict[str, dict[str, int]] = {}
    for qid, docs in qrels.items():
        if not docs:
            raise EvaluationError(f"qrels of query {qid!r} are empty: leave the query out instead")
        for pid, label in docs.items():
            if isinstance(label, bool) or not isinstance(label, int):
                raise EvaluationError(f"qrels label of ({qid!r}, {pid!r}) is {label!r}, not an integer")
        checked[str(qid)] = {str(pid): label for pid, label in docs.items()}
    return checked


def _ranked(qid: str, docs: Mapping[str, float]) -> dict[str, float]:
    """The run of one query as strictly decreasing scores n, n-1, ..., 1: score desc, then id asc."""
    for pid, score in docs.items():
        if not isinstance(score, int | float) or not math.isfinite(score):
            raise EvaluationError(f"run score of ({qid!r}, {pid!r}) is {score!r}, not a finite number")
    order = sorted(docs, key=lambda pid: (-docs[pid], pid))
    return {str(pid): float(len(order) - rank) for rank, pid in enumerate(order)}


__all__ = ["DEFAULT_MEASURES", "EvaluationError", "Qrels", "Run", "evaluate", "evaluate_per_query"]
