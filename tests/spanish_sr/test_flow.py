"""The spanish_sr demo config (flows/configs/spanish_sr.yaml) through the registry and the engine,
as a Prefect run does it, up to the BM25 grid: the 300 real CT-EBM-SP abstracts all survive
cleaning (they are clean Spanish), become title questions, and give the 5 x 5 grid."""

from __future__ import annotations

from pathlib import Path

from flows.registry import get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.pipeline import Selection, execute_step, select_steps


def test_the_demo_config_runs_through_the_registry_up_to_the_bm25_grid(tmp_path: Path) -> None:
    pipeline = get_pipeline("spanish_sr")
    config, base_dir = pipeline.load(None)
    store = ArtifactStore(tmp_path)
    steps = select_steps(pipeline, pipeline.plan(config, base_dir), Selection(until="bm25"), store)
    outcomes = {s.name: execute_step(s, store, "spanish_sr", config.execution) for s in steps}
    assert list(outcomes) == ["ingest", "clean", "questions", "bm25"]
    counts = {name: o.manifest["counts"]["rows_out"] for name, o in outcomes.items()}
    assert counts == {"ingest": 300, "clean": 300, "questions": 300, "bm25": 25}
    grid = outcomes["bm25"].artifact.read().to_pylist()
    assert sum(r["chosen"] for r in grid) == 1
    params = outcomes["bm25"].artifact.read(table="params").to_pylist()
    assert [(p["k1"], p["b"]) for p in params] == [(r["k1"], r["b"]) for r in grid if r["chosen"]]
