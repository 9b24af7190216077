"""Early cut-off (issue 29 §1, irforge/contents.py): a stage recomputed under a new
fingerprint whose output is byte-identical to an earlier artifact's leaves every downstream
stage fresh; ``status`` says so; different output still recomputes downstream."""

from __future__ import annotations

from pathlib import Path

from irforge.artifacts import ArtifactStore
from irforge.contents import CONTENTS, canonical, content_digest
from irforge.status import flow_status
from tests.engine.toy_pipeline import (
    TOY,
    NumbersConfig,
    SquareConfig,
    ToyConfig,
    ToyStages,
    chunks_logged,
    run_toy,
)


def _config(log: Path, **numbers: object) -> ToyConfig:
    return ToyConfig(
        stages=ToyStages(numbers=NumbersConfig(**numbers), square=SquareConfig(log_file=str(log)))
    )  # type: ignore[arg-type]


def test_an_upstream_recomputed_to_the_same_output_leaves_downstream_fresh(tmp_path: Path) -> None:
    root, log = tmp_path / "store", tmp_path / "square.log"
    first = run_toy(root, _config(log))
    computed = len(chunks_logged(log))
    assert computed and {o.state for o in first.values()} == {"computed"}

    # sleep_s is part of numbers' fingerprint, not of its output: numbers recomputes, square does not.
    again = run_toy(root, _config(log, sleep_s=0.001))
    assert again["numbers"].state == "computed"
    assert again["numbers"].artifact.fingerprint != first["numbers"].artifact.fingerprint
    assert again["square"].state == "reused"
    assert again["square"].artifact.fingerprint == first["square"].artifact.fingerprint
    assert len(chunks_logged(log)) == computed  # no chunk of square ran again

    store = ArtifactStore(root)
    new_numbers = again["numbers"].artifact.fingerprint
    assert canonical(store, "toy", "numbers", new_numbers) == first["numbers"].artifact.fingerprint
    statuses = {s.stage: s for s in flow_status(TOY, _config(log, sleep_s=0.001), root, store)}
    assert statuses["square"].state == "fresh"
    assert statuses["square"].changed == [
        f"upstream numbers recomputed, output unchanged (as {first['numbers'].artifact.fingerprint})"
    ]


def test_different_output_recomputes_downstream(tmp_path: Path) -> None:
    root, log = tmp_path / "store", tmp_path / "square.log"
    first = run_toy(root, _config(log))
    computed = len(chunks_logged(log))
    other = run_toy(root, _config(log, count=50))
    assert other["square"].state == "computed"
    assert other["square"].artifact.fingerprint != first["square"].artifact.fingerprint
    assert len(chunks_logged(log)) > computed


def test_the_digest_covers_every_file_but_the_manifest_and_the_first_holder_stays(tmp_path: Path) -> None:
    root, log = tmp_path / "store", tmp_path / "square.log"
    first = run_toy(root, _config(log))["numbers"].artifact
    digest = first.manifest["content"]
    assert digest == content_digest(first.path)
    (first.path / "manifest.json").write_text((first.path / "manifest.json").read_text() + " ")
    assert content_digest(first.path) == digest
    held = (root / "toy" / "numbers" / CONTENTS / digest).read_text().strip()
    assert held == first.fingerprint
    run_toy(root, _config(log, sleep_s=0.001))  # same content, another fingerprint: the first stays
    assert (root / "toy" / "numbers" / CONTENTS / digest).read_text().strip() == first.fingerprint


def test_accounting_columns_are_left_out_of_the_digest_and_nothing_else(tmp_path: Path) -> None:
    """An LLM stage rerun from its reply cache writes ``cached`` true and ``attempts`` 0 where
    the first run asked: the same rows, so the same content (irforge.contents.accounting)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from irforge.contents import accounting

    kept = pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("answer", pa.string()),
            accounting(pa.field("attempts", pa.int32())),
            accounting(pa.field("cached", pa.bool_())),
        ]
    )
    excluded = pa.schema([pa.field("reason", pa.string()), accounting(pa.field("attempts", pa.int32()))])

    def artifact(name: str, answer: str, attempts: int, cached: bool, schema: pa.Schema = kept) -> Path:
        folder = tmp_path / name
        (folder / "files").mkdir(parents=True)
        rows = {"id": ["a", "b"], "answer": [answer, "no"], "attempts": [attempts, 1], "cached": [cached] * 2}
        pq.write_table(pa.table(rows, schema=schema), folder / "part-00000.parquet")
        pq.write_table(
            pa.table({"reason": ["x"], "attempts": [attempts]}, schema=excluded), folder / "excluded.parquet"
        )
        (folder / "files" / "note.txt").write_text("same")
        return folder

    asked, from_cache = artifact("asked", "yes", 2, False), artifact("cache", "yes", 0, True)
    assert content_digest(asked) == content_digest(from_cache)
    assert content_digest(artifact("other", "maybe", 0, True)) != content_digest(from_cache)
    unmarked = pa.schema([f.remove_metadata() for f in kept])  # undeclared: every byte counts
    assert content_digest(artifact("plain1", "yes", 2, False, unmarked)) != content_digest(
        artifact("plain2", "yes", 0, True, unmarked)
    )
    (from_cache / "files" / "note.txt").write_text("changed")
    assert content_digest(asked) != content_digest(from_cache)


def test_files_a_stage_wrote_count_as_bytes_whatever_their_name(tmp_path: Path) -> None:
    """``files/`` holds what a stage wrote (a release folder, an index): a ``.parquet`` name there
    is no table of the artifact, and is hashed as bytes, never parsed (evidencebench's export
    publishes a 4-byte one in its tests)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "artifact"
    (folder / "files" / "release").mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a"]}), folder / "part-00000.parquet")
    (folder / "files" / "release" / "data.parquet").write_bytes(b"PAR1")
    first = content_digest(folder)
    (folder / "files" / "release" / "data.parquet").write_bytes(b"PAR2")
    assert content_digest(folder) != first
    (folder / "excluded.parquet").write_bytes(b"not a table")  # damaged: its bytes count
    damaged = content_digest(folder)
    (folder / "excluded.parquet").write_bytes(b"not a table!")
    assert content_digest(folder) != damaged
