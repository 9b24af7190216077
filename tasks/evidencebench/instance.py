"""One EvidenceBench instance in the released schema (App. A.6), built from an alignment.

The released instances list only aspects that some sentence covers (every aspect id of the
37 dev instances has at least one sentence), name them ``<instance id>_aspect_<j>`` with j
the aspect's position in the full aspect list (13 of the 37 dev instances skip numbers: the
dropped aspects keep theirs, the others are not renumbered), give ``results_aspect_list_ids``
as null when no aspect is a result, and hold @K selections of exactly K sentences.
:func:`build_instance` does the same: uncovered aspects are left out (the caller has already
applied the 70 % coverage rule), the exact selections come from
:func:`tasks.evidencebench.selection.evaluations`, and an @K selection that reaches the maximum
coverage with fewer than K sentences is padded with the lowest unused indices (padding
cannot change what is covered: the coverage is already the maximum).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasks.evidencebench.selection import MIN_COVERED_FRACTION, evaluations

RELEASED_FIELDS = (
    "hypothesis",
    "paper_as_candidate_pool",
    "aspect_list_ids",
    "results_aspect_list_ids",
    "aspect2sentence_indices",
    "sentence_index2aspects",
    "evidence_retrieval_at_optimal_evaluation",
    "evidence_retrieval_at_10_evaluation",
    "results_evidence_retrieval_at_optimal_evaluation",
    "results_evidence_retrieval_at_5_evaluation",
    "sentence_types_in_candidate_pool",
    "paper_id",
)
"""The fields of a released instance, in the released order."""


def covered_fraction(aspect_sentences: Sequence[Sequence[int]]) -> float:
    """The share of aspects that at least one sentence covers (0 for no aspects)."""
    if not aspect_sentences:
        return 0.0
    return sum(1 for s in aspect_sentences if s) / len(aspect_sentences)


def enough_coverage(aspect_sentences: Sequence[Sequence[int]]) -> bool:
    """Paper §2.2: an instance is kept when at least 70 % of its aspects are covered."""
    return covered_fraction(aspect_sentences) >= MIN_COVERED_FRACTION


def low_coverage(aspect_sentences: Sequence[Sequence[int]]) -> str | None:
    """Why an instance fails the 70 % rule (``"1 of 3 aspects have a sentence (33% < 70%)"``), or None."""
    if enough_coverage(aspect_sentences):
        return None
    covered = sum(1 for s in aspect_sentences if s)
    return (
        f"{covered} of {len(aspect_sentences)} aspects have a sentence "
        f"({covered_fraction(aspect_sentences):.0%} < {MIN_COVERED_FRACTION:.0%})"
    )


def _pad(selection: list[int], k: int, n: int) -> list[int]:
    chosen = set(selection)
    spare = (i for i in range(n) if i not in chosen)
    return selection + [next(spare) for _ in range(min(k, n) - len(selection))]


def build_instance(
    instance_id: str,
    *,
    hypothesis: str,
    pool: Sequence[str],
    pool_types: Sequence[str],
    paper_id: str,
    aspect_sentences: Sequence[Sequence[int]],
    results: Sequence[bool],
) -> dict[str, Any]:
    """The released-schema instance: ``aspect_sentences[j]`` are aspect j's pool indices,
    ``results[j]`` says whether aspect j is a result. Uncovered aspects are left out; the
    others keep their position j in their id ``<instance_id>_aspect_<j>``."""
    if len(pool) != len(pool_types):
        raise ValueError(f"{instance_id}: {len(pool)} pool sentences but {len(pool_types)} types")
    if len(aspect_sentences) != len(results):
        raise ValueError(f"{instance_id}: {len(aspect_sentences)} aspects but {len(results)} result flags")
    ids: list[str] = []
    result_ids: list[str] = []
    a2s: dict[str, list[int]] = {}
    s2a: dict[str, list[str]] = {str(i): [] for i in range(len(pool))}
    for j, (sentences, is_result) in enumerate(zip(aspect_sentences, results, strict=True)):
        if not sentences:
            continue
        aspect_id = f"{instance_id}_aspect_{j}"
        ids.append(aspect_id)
        if is_result:
            result_ids.append(aspect_id)
        a2s[aspect_id] = sorted({int(s) for s in sentences})
        for s in a2s[aspect_id]:
            if not 0 <= s < len(pool):
                raise ValueError(f"{instance_id}: aspect {j} points at sentence {s}, outside the pool")
            s2a[str(s)].append(aspect_id)
    instance: dict[str, Any] = {
        "hypothesis": hypothesis,
        "paper_as_candidate_pool": list(pool),
        "aspect_list_ids": ids,
        "results_aspect_list_ids": result_ids or None,
        "aspect2sentence_indices": a2s,
        "sentence_index2aspects": s2a,
        "sentence_types_in_candidate_pool": list(pool_types),
        "paper_id": paper_id,
    }
    instance.update(evaluations(instance, instance_id))
    for key, k in (
        ("evidence_retrieval_at_10_evaluation", 10),
        ("results_evidence_retrieval_at_5_evaluation", 5),
    ):
        found = instance[key]
        if found is not None:
            found["one_selection_of_sentences"] = _pad(
                list(found["one_selection_of_sentences"]), k, len(pool)
            )
    return {name: instance[name] for name in RELEASED_FIELDS}
