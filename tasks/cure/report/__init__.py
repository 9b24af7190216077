"""CURE's own sections of its run report (``tasks/common/report/sections.py``), in page order:
``pool`` (score histograms, pool sizes at the run's cut-off), ``judge`` (label distribution,
tokens), ``qrels`` (judgements by source and score), ``evaluate`` (the shape of CURE's
Table 7, rater agreement) and ``release`` (the files written)."""

from __future__ import annotations

from typing import Any

from tasks.common.report.sections import Section
from tasks.cure.report.judging import (
    JUDGE_TEMPLATE,
    POOL_TEMPLATE,
    label_figure,
    load_judge,
    load_pool,
    pool_figure,
)
from tasks.cure.report.results import (
    EVALUATE_TEMPLATE,
    QRELS_TEMPLATE,
    RELEASE_TEMPLATE,
    load_evaluate,
    load_qrels,
    load_release,
)

SECTIONS: tuple[Section[Any], ...] = (
    Section("pool", "pool", "Pooling", load_pool, POOL_TEMPLATE, pool_figure),
    Section("judge", "judge", "LLM judging", load_judge, JUDGE_TEMPLATE, label_figure),
    Section("qrels", "qrels", "Qrels", load_qrels, QRELS_TEMPLATE),
    Section("evaluate", "evaluate", "Evaluation", load_evaluate, EVALUATE_TEMPLATE),
    Section("release", "release", "Release", load_release, RELEASE_TEMPLATE),
)
