"""The dedup stage on the demo annotations and on planted variants of real paragraphs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO, run_cure

ARTICLE = REPO / "data" / "demo" / "articles" / "demo2_dermatology_psoriasis_nbuvb.xml"
BASE = (
    "Phototherapy was given three times a week in a whole-body cabinet. The starting dose was based on skin "
    "type and increased at each visit unless erythema had occurred, following a standard protocol."
)


def _record(i: int, query: str, passage: str) -> dict[str, Any]:
    return {"id": f"r{i}", "query": query, "language": "en", "domains": "Dermatology", "status": "validated",
            "passage": passage, "doi": "10.5555/irforge.demo.2"}  # fmt: skip


def _run(tmp_path: Path, records: list[dict[str, Any]], **dedup: Any) -> Any:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.xml").write_bytes(ARTICLE.read_bytes())
    (tmp_path / "export.json").write_text(json.dumps(records))
    return run_cure(
        tmp_path / "artifacts", ["corpus"], tmp_path, annotations={"sources": ["export.json"]}, dedup=dedup
    )["dedup"].artifact


def test_variants_merge_into_the_longest_and_containment_gives_partial_relevance(tmp_path: Path) -> None:
    typo = BASE.replace("cabinet", "cabinnet")  # one character longer than BASE
    spaced_case = BASE.replace("Phototherapy was", "phototherapy  was").upper()
    truncated = BASE[: int(len(BASE) * 0.95)]
    inner = "The starting dose was based on skin type and increased at each visit"
    records = [
        _record(1, "How often was phototherapy given?", BASE),
        _record(2, "How was the UVB dose chosen?", typo),
        _record(3, "What cabinet was used for phototherapy?", spaced_case),
        _record(4, "How was erythema handled?", truncated),
        _record(5, "How was the starting dose set?", inner),
        _record(
            6,
            "Unrelated question about adherence?",
            "Adherence to topical treatment was checked at each visit by counting returned tubes.",
        ),
    ]
    art = _run(tmp_path, records)
    rows = {r["record_key"].rsplit(":", 1)[1]: r for r in art.read().to_pylist()}
    variant_rows = [rows[k] for k in ("1", "2", "3", "4")]
    assert len({r["cluster_id"] for r in variant_rows}) == 1
    # The longest represents them; typo and spaced_case tie (one extra character): the first wins.
    assert {r["canonical_passage"] for r in variant_rows} == {typo}
    assert rows["5"]["cluster_id"] != rows["1"]["cluster_id"]
    assert rows["6"]["cluster_id"] == rows["6"]["record_key"]
    assert all(r["relevance"] == 2 for r in rows.values())
    (cluster,) = [c for c in art.read(table="clusters").to_pylist() if len(c["members"]) > 1]
    assert len(cluster["members"]) == 4 and cluster["min_similarity"] >= 0.9
    containment = art.read(table="containment").to_pylist()
    assert [(c["outer_cluster_id"], c["inner_cluster_id"], c["relevance"]) for c in containment] == [
        (rows["1"]["cluster_id"], rows["5"]["cluster_id"], 1)
    ]
    assert containment[0]["query_id"] == rows["5"]["query_id"]


def test_demo_annotations_cluster_the_typed_variant_and_the_contained_sentence(tmp_path: Path) -> None:
    demo = yaml.safe_load((REPO / "flows" / "configs" / "cure.yaml").read_text())
    configs = REPO / "flows" / "configs"
    annotations = demo["stages"]["annotations"]
    annotations["sources"] = [str((configs / s).resolve()) for s in annotations["sources"]]
    sources = [str((configs / s).resolve()) for s in demo["stages"]["ingest"]["sources"]]
    art = run_cure(tmp_path, sources, tmp_path, annotations=annotations, dedup={})["dedup"].artifact
    rows = {r["record_key"].rsplit(":", 1)[1]: r for r in art.read().to_pylist()}
    # Records 3 and 4 are the same passage typed twice (case and spacing differ).
    assert rows["3"]["cluster_id"] == rows["4"]["cluster_id"]
    # Record 7's passage is one sentence of record 6's: partially relevant for record 7's query.
    containment = art.read(table="containment").to_pylist()
    assert [(c["outer_cluster_id"], c["query_id"]) for c in containment] == [
        (rows["6"]["cluster_id"], rows["7"]["query_id"])
    ]
    assert art.manifest["counts"]["units_in"] == art.manifest["counts"]["units_kept"] == len(rows)
