"""Retrieval baselines for EvidenceBench and their ER@K scores (EvidenceBench §4, App. E.6, E.8).

A baseline ranks one instance's candidate pool (``paper_as_candidate_pool``, one sentence per
entry) with the hypothesis as the query and keeps the top K of the ranking for each of the
four tasks of :data:`tasks.evidencebench.selection.TASK_K`: K is the instance's exact ``optimal``
for the @optimal tasks, 10 for ER@10 and 5 for Result-ER@5. Rankers:

* :class:`BM25Ranker`: Lucene's BM25 over the pool with :mod:`bm25s`, indexed per instance
  (the IDF is the paper's own, as in the authors' BM25 row of Table 11);
* :class:`DenseRanker`: exact cosine similarity under an :class:`~tasks.common.embed.port.Encoder`.

Scores are ordered highest first, ties broken by the lower sentence index, so a ranking is
deterministic. An optional query prefix per aspect group is prepended verbatim to the
hypothesis: :data:`E6_PREFIXES` are the instructions of App. E.6 (one for all aspects, one
for results aspects). Hypothesis negation (App. E.8) is :func:`negated_set`: the negated
texts come from the caller (an LLM step), the rest of the instance is unchanged.

:func:`evaluate` scores any system's selections with :func:`~tasks.evidencebench.selection.task_recall`
and averages over instances; an instance without a coverable aspect in a task's group (the
released results fields are null for instances without results aspects) is skipped for that
task and named in the result.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from tasks.common.embed.port import Encoder
from tasks.evidencebench.selection import TASK_K, AspectGroup, Task, coverage, min_cover, task_recall

E6_INSTRUCTION_ALL = (
    "From a biomedical experiment, find important and representative details that would form "
    "the most effective set of evidence relevant to the hypothesis"
)
E6_INSTRUCTION_RESULTS = (
    "From a biomedical paper, find important and representative details about experiment outcomes, "
    "results and analyses that would form the most effective set of evidence relevant to the hypothesis."
)
# The instruction and the hypothesis are concatenated with one space (App. E.6 gives no separator).
E6_PREFIXES: dict[AspectGroup, str] = {
    "all": E6_INSTRUCTION_ALL + " ",
    "results": E6_INSTRUCTION_RESULTS + " ",
}

Selections = Mapping[Task, Sequence[int]]
System = Callable[[str, Mapping[str, Any]], Selections]
"""A system: ``(instance name, instance) -> sentence indices per task`` (tasks it is asked about)."""


class Ranker(Protocol):
    """Orders every sentence of a pool for a query: sentence indices, best first."""

    def __call__(self, query: str, sentences: Sequence[str]) -> list[int]: ...


def rank_by_score(scores: npt.ArrayLike) -> list[int]:
    """Indices by descending score, equal scores by ascending index; NaN is refused."""
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or np.isnan(values).any():
        raise ValueError(f"scores must be a 1-d array without NaN, got shape {values.shape}")
    return [int(i) for i in np.lexsort((np.arange(values.size), -values))]


@dataclass(frozen=True)
class BM25Ranker:
    """BM25 (``bm25s``, Lucene variant) over the pool's sentences, indexed per call.

    Tokens are ``bm25s.tokenize``'s: lowercased word runs of two or more characters, English
    stop words removed, no stemming. A query with no token left scores every sentence 0, so
    the ranking is the pool order.
    """

    k1: float = 1.5
    b: float = 0.75
    stopwords: str = "english"

    def __call__(self, query: str, sentences: Sequence[str]) -> list[int]:
        if not sentences:
            return []
        import bm25s  # type: ignore[import-untyped]  # noqa: PLC0415 -- imported when it ranks (planning needs none)

        retriever = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        retriever.index(self._tokens(list(sentences)), show_progress=False)
        query_tokens = self._tokens([query])[0]
        scores = retriever.get_scores(query_tokens) if query_tokens else np.zeros(len(sentences))
        return rank_by_score(scores)

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        import bm25s  # noqa: PLC0415

        tokens: list[list[str]] = bm25s.tokenize(
            texts, stopwords=self.stopwords, return_ids=False, show_progress=False
        )
        return tokens


class DenseRanker:
    """Exact cosine similarity between the query and each sentence under ``encoder``.

    The encoder's vectors are unit length, so the dot product is the cosine. The vectors of
    the last ``cached_pools`` pools are kept (least recently used dropped first), so ranking
    a pool for several queries, or for several systems in turn, encodes its sentences once.
    """

    def __init__(self, encoder: Encoder, cached_pools: int = 1) -> None:
        if cached_pools < 1:
            raise ValueError(f"cached_pools must be at least 1, got {cached_pools}")
        self.encoder = encoder
        self.cached_pools = cached_pools
        self._pools: OrderedDict[tuple[str, ...], npt.NDArray[np.float32]] = OrderedDict()

    def __call__(self, query: str, sentences: Sequence[str]) -> list[int]:
        if not sentences:
            return []
        query_vector = self.encoder.encode([query], kind="query")[0]
        return rank_by_score(self._pool_vectors(tuple(sentences)) @ query_vector)

    def _pool_vectors(self, pool: tuple[str, ...]) -> npt.NDArray[np.float32]:
        vectors = self._pools.get(pool)
        if vectors is None:
            vectors = self.encoder.encode(pool, kind="passage")
            self._pools[pool] = vectors
            if len(self._pools) > self.cached_pools:
                self._pools.popitem(last=False)
        self._pools.move_to_end(pool)
        return vectors

    def __repr__(self) -> str:
        return f"DenseRanker({self.encoder!r})"


def task_sizes(instance: Mapping[str, Any], name: str = "instance") -> dict[Task, int]:
    """The K of each task the instance can be scored on (see :data:`TASK_K`).

    A task whose aspect group no sentence covers (no results aspects) is left out.
    """
    sizes: dict[Task, int] = {}
    for task, (group, k) in TASK_K.items():
        cov = coverage(instance, group, name)
        if cov.coverable:
            sizes[task] = k if k is not None else len(min_cover(cov).sentences)
    return sizes


def pool_and_hypothesis(instance: Mapping[str, Any], name: str) -> tuple[list[str], str]:
    """The instance's candidate pool and hypothesis, checked: ValueError for a blank or missing one."""
    hypothesis = instance.get("hypothesis")
    pool = instance.get("paper_as_candidate_pool")
    if not isinstance(hypothesis, str) or not hypothesis.strip():
        raise ValueError(f"{name}: the hypothesis is missing or blank")
    if not isinstance(pool, list) or not pool:
        raise ValueError(f"{name}: paper_as_candidate_pool is missing or empty")
    blank = [i for i, s in enumerate(pool) if not isinstance(s, str) or not s.strip()]
    if blank:
        raise ValueError(f"{name}: candidate-pool sentences {blank[:10]} are blank or not text")
    return pool, hypothesis


@dataclass(frozen=True)
class RankingBaseline:
    """A :data:`System`: rank the pool with ``prefixes[group] + hypothesis``, keep each task's top K."""

    ranker: Ranker
    prefixes: Mapping[AspectGroup, str] = field(default_factory=dict)

    def __call__(self, name: str, instance: Mapping[str, Any]) -> dict[Task, list[int]]:
        pool, hypothesis = pool_and_hypothesis(instance, name)
        rankings: dict[str, list[int]] = {}
        out: dict[Task, list[int]] = {}
        for task, k in task_sizes(instance, name).items():
            query = self.prefixes.get(TASK_K[task][0], "") + hypothesis
            if query not in rankings:
                rankings[query] = self.ranker(query, pool)
            out[task] = rankings[query][:k]
        return out


def negated_set(
    data: Mapping[str, Mapping[str, Any]], negations: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """The instances with each hypothesis replaced by its negation (App. E.8), all else unchanged.

    Every instance needs a non-blank negation that differs from its hypothesis, and every
    negation must name an instance of ``data``.
    """
    missing = sorted(set(data) - set(negations))
    unknown = sorted(set(negations) - set(data))
    if missing or unknown:
        raise ValueError(f"negations missing for {missing[:10]}, given for unknown instances {unknown[:10]}")
    out: dict[str, dict[str, Any]] = {}
    for name, instance in data.items():
        text = negations[name]
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{name}: the negated hypothesis is blank")
        if normalised(text) == normalised(str(instance.get("hypothesis", ""))):
            raise ValueError(f"{name}: the negated hypothesis is the hypothesis itself")
        out[name] = {**instance, "hypothesis": text}
    return out


def normalised(text: str) -> str:
    """``text`` with its whitespace folded and its case removed: how a negation is compared."""
    return " ".join(text.split()).casefold()


@dataclass(frozen=True)
class TaskScore:
    """Mean aspect recall of one task over the instances it applies to (NaN when it applies to none)."""

    mean: float
    per_instance: dict[str, float]
    skipped: tuple[str, ...]  # instances without a coverable aspect of the task's group


def evaluate(data: Mapping[str, Mapping[str, Any]], system: System) -> dict[Task, TaskScore]:
    """Score ``system`` on every instance and task with :func:`task_recall`; mean per task.

    The system must answer every task an instance can be scored on; answers for the other
    tasks are ignored.
    """
    if not data:
        raise ValueError("no instances to evaluate")
    recalls: dict[Task, dict[str, float]] = {task: {} for task in TASK_K}
    skipped: dict[Task, list[str]] = {task: [] for task in TASK_K}
    for name, instance in data.items():
        selections = system(name, instance)
        for task, (group, _) in TASK_K.items():
            if not coverage(instance, group, name).coverable:
                skipped[task].append(name)
                continue
            if task not in selections:
                raise ValueError(f"{name}: the system gave no selection for {task}")
            recalls[task][name] = task_recall(selections[task], instance, task, name)
    out: dict[Task, TaskScore] = {}
    for task, scores in recalls.items():
        mean = float(np.mean(list(scores.values()))) if scores else float("nan")
        out[task] = TaskScore(mean, scores, tuple(skipped[task]))
    return out
