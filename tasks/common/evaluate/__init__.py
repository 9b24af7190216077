"""Evaluation of a released collection (CURE §4): baseline runs, their effectiveness, and
agreement between relevance raters.

:mod:`tasks.common.evaluate.baselines` makes BM25 and dense runs over a split,
:mod:`tasks.common.evaluate.metrics` scores a run against qrels (nDCG@10, Recall@100 with
ir-measures), :mod:`tasks.common.evaluate.agreement` computes Cohen's and Fleiss' κ.
"""
