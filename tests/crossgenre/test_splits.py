"""Stage ``splits``: whole groups per split, near the configured proportions, seeded."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from irforge.errors import IrforgeError
from tasks.crossgenre.stages.splits import SPEC, SplitsConfig, SplitSizes
from tests.crossgenre.conftest import artifact_of, run_one

CLAIMS = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("pmids", pa.list_(pa.string()), nullable=False),
        pa.field("cluster_id", pa.string(), nullable=False),
    ]
)


def claims(rows: list[tuple[str, list[str], str]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"query_id": q, "pmids": p, "cluster_id": c} for q, p, c in rows], schema=CLAIMS
    )


def synthetic(n: int, seed: int) -> list[tuple[str, list[str], str]]:
    """n queries: most cite their own PMID, some share one (groups of 2-6), a few two PMIDs."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        pmids = [str(rng.randrange(n))] if rng.random() < 0.3 else [f"own{i}"]
        if rng.random() < 0.05:
            pmids.append(str(rng.randrange(n)))
        rows.append((f"q{i:05d}", pmids, f"q{i:05d}"))
    return rows


def run(root: Path, rows: list[tuple[str, list[str], str]], **config: Any) -> Any:
    upstream = artifact_of(root, "claims", claims(rows))
    return run_one(root, SPEC, SplitsConfig(**config), {"claims": upstream})


def split_map(outcome: Any) -> dict[str, str]:
    return {r["query_id"]: r["split"] for r in outcome.artifact.read().to_pylist()}


def test_groups_are_components_of_shared_pmids_and_clusters(tmp_path: Path) -> None:
    rows = [
        ("q1", ["p1"], "q1"),
        ("q2", ["p1", "p2"], "q2"),
        ("q3", ["p2"], "q3"),  # via q2
        ("q4", ["p4"], "q4"),
        ("q5", ["p5"], "c56"),
        ("q6", ["p6"], "c56"),  # same syndication cluster as q5
    ]
    kept = run(tmp_path, rows).artifact.read().to_pylist()
    assert {r["query_id"]: r["group_id"] for r in kept} == {
        "q1": "q1", "q2": "q1", "q3": "q1", "q4": "q4", "q5": "q5", "q6": "q5",
    }  # fmt: skip
    splits = {r["query_id"]: r["split"] for r in kept}
    assert splits["q1"] == splits["q2"] == splits["q3"] and splits["q5"] == splits["q6"]


def test_no_pmid_or_cluster_straddles_splits_and_sizes_near_target(tmp_path: Path) -> None:
    rows = synthetic(2000, seed=7)
    outcome = run(tmp_path, rows)
    splits = split_map(outcome)
    assert len(splits) == 2000
    by_label: dict[str, set[str]] = defaultdict(set)
    for q, pmids, cluster in rows:
        for label in [*pmids, f"cluster:{cluster}"]:
            by_label[label].add(splits[q])
    assert all(len(s) == 1 for s in by_label.values())

    group_sizes = Counter(r["group_id"] for r in outcome.artifact.read().to_pylist())
    largest = max(group_sizes.values())
    assert largest > 1
    achieved = Counter(splits.values())
    for split, share in (("train", 3000), ("dev", 1000), ("test", 1034)):
        target = 2000 * share / 5034
        assert abs(achieved[split] - target) <= largest, (split, achieved[split], target)
    sizes = {r["split"]: r for r in outcome.artifact.read(table="sizes").to_pylist()}
    assert {s: r["queries"] for s, r in sizes.items()} == dict(achieved)
    assert sizes["dev"]["target"] == pytest.approx(2000 * 1000 / 5034)
    groups_per_split = Counter(
        {r["group_id"]: r["split"] for r in outcome.artifact.read().to_pylist()}.values()
    )
    assert {s: r["groups"] for s, r in sizes.items()} == dict(groups_per_split)


def test_same_seed_same_splits_other_seed_other_splits(tmp_path: Path) -> None:
    rows = synthetic(300, seed=1)
    first = split_map(run(tmp_path / "a", rows, seed=5))
    again = split_map(run(tmp_path / "b", rows, seed=5))
    other = split_map(run(tmp_path / "c", rows, seed=6))
    assert first == again
    assert first != other


def test_counts_with_a_remainder_split(tmp_path: Path) -> None:
    rows = [(f"q{i}", [f"p{i}"], f"q{i}") for i in range(10)]
    config = {"sizes": SplitSizes(train=None, dev=2, test=3), "counts": True}
    achieved = Counter(split_map(run(tmp_path, rows, **config)).values())
    assert achieved == {"train": 5, "dev": 2, "test": 3}


def test_counts_that_do_not_fit_the_queries_are_an_error(tmp_path: Path) -> None:
    rows = [(f"q{i}", [f"p{i}"], f"q{i}") for i in range(4)]
    with pytest.raises(IrforgeError, match="sizes count 6 queries but claims has 4"):
        run(tmp_path, rows, sizes=SplitSizes(train=2, dev=2, test=2), counts=True)


def test_a_null_size_needs_counts() -> None:
    with pytest.raises(ValueError, match="null"):
        SplitsConfig(sizes=SplitSizes(train=None))
