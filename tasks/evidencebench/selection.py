"""Exact evidence-set selection and the ER@K aspect recall (EvidenceBench §2.2-2.3, App. A.6).

An instance's alignment says which sentence of the paper is a source of information for
which study aspect ("covers" it). From that sentence x aspect matrix this module computes,
exactly (integer programs solved by HiGHS through :func:`scipy.optimize.milp`, never a
greedy approximation):

* :func:`min_cover`: the smallest number of sentences covering every coverable aspect
  (the released ``optimal``) and one such selection;
* :func:`max_coverage`: the most aspects that ``k`` sentences can cover (the released @10
  and, for results aspects, @5 selections).

Ties are broken deterministically: among the selections of the smallest size reaching the
target coverage, the one whose ascending index tuple is lexicographically smallest.

:func:`aspect_recall` is Eq. (1) of the paper with the conventions of the authors' released
evaluation code: the denominator is the number of aspects any sentence covers, and a
selection longer than K scores the mean recall of its K-sentence subsets (the authors
estimate that mean by shuffling 100,000 times; here it is computed exactly).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import comb
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

AspectGroup = Literal["all", "results"]
Task = Literal["ER@optimal", "ER@10", "Result-ER@optimal", "Result-ER@5"]

# Instances whose alignment covers fewer aspects than this are dropped (paper §2.2, footnote 1).
MIN_COVERED_FRACTION = 0.7
# The fixed K of the @K tasks (§4): 10 sentences for all aspects, 5 for results aspects.
TASK_K: dict[Task, tuple[AspectGroup, int | None]] = {
    "ER@optimal": ("all", None),
    "ER@10": ("all", 10),
    "Result-ER@optimal": ("results", None),
    "Result-ER@5": ("results", 5),
}
# HiGHS answers these ``milp`` statuses for a solved and for an infeasible program.
_OPTIMAL, _INFEASIBLE = 0, 2


@dataclass(frozen=True)
class Selection:
    """Chosen sentence indices (ascending) and the aspect ids they cover (in aspect order)."""

    sentences: tuple[int, ...]
    covered: tuple[str, ...]


@dataclass(frozen=True)
class Coverage:
    """Which sentence covers which aspect: ``matrix[sentence, aspect]`` over ``aspects``."""

    name: str
    aspects: tuple[str, ...]
    matrix: npt.NDArray[np.bool_]

    @property
    def n_sentences(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def coverable(self) -> tuple[str, ...]:
        """The aspects at least one sentence covers."""
        return tuple(self.aspects[j] for j in np.flatnonzero(self.matrix.any(axis=0)))

    @property
    def covered_fraction(self) -> float:
        """Share of the aspects that some sentence covers (1.0 when there are no aspects)."""
        return len(self.coverable) / len(self.aspects) if self.aspects else 1.0

    def covered_by(self, sentences: Sequence[int]) -> tuple[str, ...]:
        """The aspects covered by ``sentences`` (validated: in range, no repeats)."""
        rows = self._rows(sentences)
        return tuple(self.aspects[j] for j in np.flatnonzero(self.matrix[rows].any(axis=0)))

    def recall(self, sentences: Sequence[int], k: int | None = None) -> float:
        """Aspect recall of ``sentences``; over ``k`` of them, the mean over their k-subsets."""
        rows = self._rows(sentences)
        coverable = self.matrix.any(axis=0)
        total = int(coverable.sum())
        if total == 0:
            raise ValueError(f"{self.name}: no sentence covers any of its {len(self.aspects)} aspects")
        if k is not None and k < 1:
            raise ValueError(f"{self.name}: K must be at least 1, got {k}")
        hits = self.matrix[rows][:, coverable].sum(axis=0) if rows else np.zeros(total, dtype=int)
        if k is None or len(rows) <= k:
            return int((hits > 0).sum()) / total
        # A K-subset drawn uniformly misses an aspect only if it avoids all its c covering picks.
        n, subsets = len(rows), comb(len(rows), k)
        return sum(1 - comb(n - int(c), k) / subsets for c in hits) / total

    def _rows(self, sentences: Sequence[int]) -> list[int]:
        rows = [int(s) for s in sentences]
        bad = [s for s in rows if not 0 <= s < self.n_sentences]
        if bad:
            raise ValueError(f"{self.name}: sentence indices {bad} outside the pool of {self.n_sentences}")
        if len(set(rows)) != len(rows):
            raise ValueError(f"{self.name}: selection {rows} repeats a sentence index")
        return rows


def coverage(instance: Mapping[str, Any], aspects: AspectGroup = "all", name: str = "instance") -> Coverage:
    """The sentence x aspect matrix of one instance in the released schema (App. A.6).

    ``aspect2sentence_indices`` is the source; ``sentence_index2aspects``, when present,
    must say the same. ``aspects="results"`` keeps the ``results_aspect_list_ids`` columns
    (none when that field is null, as released for instances without results aspects).
    """
    try:
        pool = instance["paper_as_candidate_pool"]
        all_ids = list(instance["aspect_list_ids"])
        results = list(instance.get("results_aspect_list_ids") or [])
        a2s: Mapping[str, Sequence[int]] = instance["aspect2sentence_indices"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{name}: not an EvidenceBench instance ({exc!r} missing or malformed)") from exc
    if len(set(all_ids)) != len(all_ids):
        raise ValueError(f"{name}: aspect_list_ids repeats an aspect id")
    unknown = sorted(set(a2s) - set(all_ids)) + sorted(set(results) - set(all_ids))
    if unknown:
        raise ValueError(f"{name}: aspects {unknown} are not in aspect_list_ids")
    missing = [a for a in all_ids if a not in a2s]
    if missing:
        raise ValueError(f"{name}: aspects {missing} have no entry in aspect2sentence_indices")
    n = len(pool)
    full = np.zeros((n, len(all_ids)), dtype=bool)
    for j, aspect in enumerate(all_ids):
        for s in a2s[aspect]:
            if not (isinstance(s, int) and 0 <= s < n):
                raise ValueError(f"{name}: {aspect} points at sentence {s!r}, outside the pool of {n}")
            full[s, j] = True
    s2a: Mapping[str, Sequence[str]] | None = instance.get("sentence_index2aspects")
    if s2a is not None:
        column = {a: j for j, a in enumerate(all_ids)}
        other = np.zeros_like(full)
        for key, listed in s2a.items():
            if not (str(key).isdigit() and int(key) < n) or any(a not in column for a in listed):
                raise ValueError(f"{name}: sentence_index2aspects[{key!r}] = {listed!r} is out of range")
            other[int(key), [column[a] for a in listed]] = True
        if not np.array_equal(full, other):
            s, j = np.argwhere(full != other)[0]
            raise ValueError(
                f"{name}: aspect2sentence_indices and sentence_index2aspects disagree "
                f"on sentence {s} and {all_ids[j]}"
            )
    keep = all_ids if aspects == "all" else results
    index = {a: j for j, a in enumerate(all_ids)}
    return Coverage(name, tuple(keep), full[:, [index[a] for a in keep]])


def min_cover(cov: Coverage) -> Selection:
    """The fewest sentences covering every coverable aspect, lexicographically smallest."""
    problem = _Problem(cov)
    need = problem.n_aspects
    size = problem.optimum(need=need, max_size=problem.n_candidates, objective="size")
    return problem.selection(problem.lexmin(need=need, size=size))


def max_coverage(cov: Coverage, k: int) -> Selection:
    """The most aspects ``k`` sentences can cover, by the fewest sentences, lexicographically smallest.

    The selection may hold fewer than ``k`` sentences when fewer already reach the maximum.
    """
    if k < 1:
        raise ValueError(f"{cov.name}: k must be at least 1, got {k}")
    problem = _Problem(cov)
    k = min(k, problem.n_candidates)
    need = problem.optimum(need=0, max_size=k, objective="coverage")
    size = problem.optimum(need=need, max_size=k, objective="size")
    return problem.selection(problem.lexmin(need=need, size=size))


def aspect_recall(
    selection: Sequence[int],
    instance: Mapping[str, Any],
    aspects: AspectGroup = "all",
    k: int | None = None,
    name: str = "instance",
) -> float:
    """Aspect recall (Eq. 1) of a system's sentence indices on one instance.

    The denominator counts the aspects of the group some sentence covers; with ``k``, a
    longer selection scores the mean recall of its ``k``-subsets (authors' evaluation code).
    """
    return coverage(instance, aspects, name).recall(selection, k)


def task_recall(
    selection: Sequence[int], instance: Mapping[str, Any], task: Task, name: str = "instance"
) -> float:
    """Aspect recall for one of the four tasks, K being the fixed K or the exact optimum."""
    group, k = TASK_K[task]
    cov = coverage(instance, group, name)
    return cov.recall(selection, k if k is not None else len(min_cover(cov).sentences))


def evaluations(instance: Mapping[str, Any], name: str = "instance") -> dict[str, dict[str, Any] | None]:
    """The four ``*_evaluation`` fields of the released schema, recomputed exactly.

    The results fields are null when the instance has no coverable results aspect, as released.
    """
    out: dict[str, dict[str, Any] | None] = {}
    groups: tuple[tuple[AspectGroup, str, int], ...] = (("all", "", 10), ("results", "results_", 5))
    for group, prefix, k in groups:
        cov = coverage(instance, group, name)
        if not cov.coverable:
            out[f"{prefix}evidence_retrieval_at_optimal_evaluation"] = None
            out[f"{prefix}evidence_retrieval_at_{k}_evaluation"] = None
            continue
        best, top = min_cover(cov), max_coverage(cov, k)
        out[f"{prefix}evidence_retrieval_at_optimal_evaluation"] = {
            "optimal": len(best.sentences),
            "one_selection_of_sentences": list(best.sentences),
            "covered_aspects": list(best.covered),
        }
        out[f"{prefix}evidence_retrieval_at_{k}_evaluation"] = {
            "one_selection_of_sentences": list(top.sentences),
            "covered_aspects": list(top.covered),
        }
    return out


class _Problem:
    """The coverage integer program over the sentences that cover some aspect.

    Variables: ``x_i`` (candidate sentence i chosen) and ``y_a`` (aspect a covered), binary;
    ``y_a <= sum of x_i over the sentences covering a``, ``sum y >= need``, ``sum x <= max_size``.
    """

    def __init__(self, cov: Coverage) -> None:
        self.cov = cov
        useful = cov.matrix.any(axis=0)
        self.candidates = np.flatnonzero(cov.matrix[:, useful].any(axis=1))
        block = cov.matrix[np.ix_(self.candidates, np.flatnonzero(useful))].astype(float)
        self.n_candidates, self.n_aspects = block.shape
        c, m = self.n_candidates, self.n_aspects
        rows = np.zeros((m + 2, c + m))
        rows[:m, :c] = -block.T
        rows[:m, c:] = np.eye(m)
        rows[m, c:] = 1.0  # covered aspects
        rows[m + 1, :c] = 1.0  # chosen sentences
        self.rows = rows

    def _solve(
        self, objective: npt.NDArray[np.float64], need: int, max_size: int, lower: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.bool_] | None:
        from scipy.optimize import Bounds, LinearConstraint, milp  # type: ignore[import-untyped]  # noqa: PLC0415

        c, m = self.n_candidates, self.n_aspects
        upper = np.ones(c + m)
        upper[:c] = np.where(lower[:c] < 0, 0.0, 1.0)  # -1 marks a sentence fixed out
        lo = np.clip(lower, 0.0, 1.0)
        constraint = LinearConstraint(
            self.rows,
            np.r_[np.full(m, -np.inf), need, -np.inf],
            np.r_[np.zeros(m), np.inf, max_size],
        )
        res = milp(objective, integrality=np.ones(c + m), bounds=Bounds(lo, upper), constraints=constraint)
        if res.status == _INFEASIBLE:
            return None
        if res.status != _OPTIMAL:
            raise RuntimeError(f"{self.cov.name}: the selection program failed: {res.message}")
        return np.asarray(res.x[:c] > 0.5)

    def optimum(self, need: int, max_size: int, objective: Literal["size", "coverage"]) -> int:
        """Fewest sentences reaching ``need`` aspects, or most aspects within ``max_size``."""
        c, m = self.n_candidates, self.n_aspects
        if m == 0:
            return 0
        weights = np.r_[np.ones(c), np.zeros(m)] if objective == "size" else np.r_[np.zeros(c), -np.ones(m)]
        chosen = self._solve(weights, need, max_size, np.zeros(c + m))
        if chosen is None:
            raise RuntimeError(f"{self.cov.name}: no selection of {max_size} reaches {need} aspects")
        if objective == "size":
            return int(chosen.sum())
        covering = self.rows[:m, :c] @ chosen < 0  # aspects with a chosen covering sentence
        return int(covering.sum())

    def lexmin(self, need: int, size: int) -> list[int]:
        """The lexicographically smallest set of ``size`` sentences covering ``need`` aspects.

        Candidates are decided in ascending order: a sentence is taken when some feasible
        selection still contains it alongside the earlier decisions.
        """
        c, m = self.n_candidates, self.n_aspects
        if size == 0:
            return []
        # Preferring low indices makes the witness agree with the answer for most candidates.
        weights = np.r_[np.arange(1, c + 1, dtype=float), np.zeros(m)]
        lower = np.zeros(c + m)
        witness = self._solve(weights, need, size, lower)
        if witness is None:
            raise RuntimeError(f"{self.cov.name}: no selection of {size} reaches {need} aspects")
        taken = 0
        for i in range(c):
            if taken == size:
                break
            lower[i] = 1.0
            if not witness[i]:
                found = self._solve(weights, need, size, lower)
                if found is None:
                    lower[i] = -1.0
                    continue
                witness = found
            taken += 1
        return [int(self.candidates[i]) for i in range(c) if lower[i] > 0]

    def selection(self, sentences: list[int]) -> Selection:
        return Selection(tuple(sentences), self.cov.covered_by(sentences))
