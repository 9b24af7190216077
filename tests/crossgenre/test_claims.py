"""Stage ``claims``: syndicated headlines kept once, one corpus document per cited PMID, qrels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from irforge.errors import IrforgeError
from tasks.common.pubmed.config import PubmedConfig
from tasks.crossgenre.corpus import RECORDS_SCHEMA
from tasks.crossgenre.stages import resolve
from tasks.crossgenre.stages.claims import SPEC, ClaimsConfig
from tasks.crossgenre.stages.resolve import SCHEMA as RESOLVED
from tests.crossgenre.conftest import MEDLINE, NEWS, artifact_of, run_one

HEADLINE = "Low-dose CT screening finds lung cancers earlier in people who never smoked"  # 75 chars


def page(
    page_id: str, headline: str, pmids: list[str], published: str | None = "2025-01-10"
) -> dict[str, Any]:
    site = f"{page_id}.example"
    return {
        "page_id": page_id,
        "url": f"https://{site}/story",
        "site": site,
        "headline": headline,
        "published": published,
        "pmids": pmids,
        "dropped": [],
    }


def record(pmid: str) -> dict[str, Any]:
    return {
        "pmid": pmid,
        "title": f"Title {pmid}",
        "abstract": f"BACKGROUND: b{pmid}\n\nRESULTS: r{pmid}",
        "sections": [{"label": "BACKGROUND", "text": f"b{pmid}"}, {"label": "RESULTS", "text": f"r{pmid}"}],
        "labelled": True,
        "mesh": ["Humans"],
        "publication_types": ["Journal Article"],
        "journal": "JAMA",
        "year": 2025,
        "doi": f"10.1/{pmid}",
        "pmcid": None,
    }


def run(tmp_path: Path, pages: list[dict[str, Any]], pmids: list[str], **config: Any) -> Any:
    records = pa.Table.from_pylist([record(p) for p in pmids], schema=RECORDS_SCHEMA)
    upstream = artifact_of(
        tmp_path, "resolve", pa.Table.from_pylist(pages, schema=RESOLVED), {"records": records}
    )
    return run_one(tmp_path, SPEC, ClaimsConfig(**config), {"resolve": upstream})


def test_syndicated_copies_kept_once_earliest_first(tmp_path: Path) -> None:
    copy = HEADLINE.replace("earlier", "early")  # 3 edits of 75 characters: similarity 0.960
    pages = [
        page("b", HEADLINE, ["111"], published="2025-01-12"),
        page("c", copy, ["111", "222"], published="2025-01-10"),  # earliest: the representative
        page("a", HEADLINE.upper(), ["111"], published=None),  # same after case folding; undated
        page("d", "Mediterranean diet in pregnancy cuts the number of small babies", ["333"]),
    ]
    outcome = run(tmp_path, pages, ["111", "222", "333"])
    kept = {r["page_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert sorted(kept) == ["c", "d"]
    assert kept["c"]["query_id"] == "c" and kept["c"]["cluster_id"] == "c"
    assert kept["c"]["cluster_size"] == 3 and kept["d"]["cluster_size"] == 1
    assert kept["c"]["pmids"] == ["111", "222"]  # the representative's own citations
    excluded = sorted(outcome.artifact.excluded().to_pylist(), key=lambda r: r["page_id"])
    assert [(r["page_id"], r["reason"], r["cluster_id"]) for r in excluded] == [
        ("a", "duplicate_headline", "c"),
        ("b", "duplicate_headline", "c"),
    ]
    assert excluded[0]["detail"] == "representative c, similarity 0.960"
    assert excluded[0]["url"] == "https://a.example/story"


def test_ties_on_date_go_to_smallest_page_id(tmp_path: Path) -> None:
    pages = [page("zz", HEADLINE, ["111"]), page("mm", HEADLINE, ["111"]), page("yy", HEADLINE, ["111"])]
    kept = run(tmp_path, pages, ["111"]).artifact.read().to_pylist()
    assert [(r["query_id"], r["cluster_size"]) for r in kept] == [("mm", 3)]


def test_same_headline_different_study_needs_shared_pmid(tmp_path: Path) -> None:
    generic = "New study links coffee to a longer life"
    pages = [page("p1", generic, ["111"]), page("p2", generic, ["222"])]
    separate = run(tmp_path / "shared", pages, ["111", "222"])
    assert sorted(separate.artifact.read().column("query_id").to_pylist()) == ["p1", "p2"]
    merged = run(tmp_path / "any", pages, ["111", "222"], require_shared_pmid=False)
    assert merged.artifact.read().column("query_id").to_pylist() == ["p1"]
    assert merged.artifact.excluded().column("page_id").to_pylist() == ["p2"]


def test_threshold_decides_how_close_is_a_copy(tmp_path: Path) -> None:
    # 8 substituted characters of 75: similarity 67/75 = 0.893, below 0.9 and above 0.85.
    edited = "".join("#" if i % 10 == 0 else c for i, c in enumerate(HEADLINE))
    assert len(HEADLINE) == 75 and sum(a != b for a, b in zip(edited, HEADLINE, strict=True)) == 8
    pages = [page("p1", HEADLINE, ["111"]), page("p2", edited, ["111"])]
    assert run(tmp_path / "strict", pages, ["111"]).artifact.read().num_rows == 2
    loose = run(tmp_path / "loose", pages, ["111"], threshold=0.85)
    assert loose.artifact.read().column("cluster_size").to_pylist() == [2]


def test_corpus_has_one_document_per_cited_pmid_and_qrels_per_citation(tmp_path: Path) -> None:
    pages = [
        page("p1", "Tea drinkers live longer, cohort of half a million suggests", ["222", "111"]),
        page("p2", "Green tea habit tied to a longer lifespan in Chinese adults", ["111"]),
        page("p3", "CPAP does not prevent heart events after acute coronary syndrome", ["333"]),
    ]
    # "111" twice in the records: resolve writes a record once per chunk that cites it.
    outcome = run(tmp_path, pages, ["111", "222", "333", "111"])
    corpus = outcome.artifact.read(table="corpus").to_pylist()
    assert [r["doc_id"] for r in corpus] == ["111", "222", "333"]
    assert corpus[0] == {
        "doc_id": "111",
        "title": "Title 111",
        "abstract": "BACKGROUND: b111\n\nRESULTS: r111",
        "sections": [{"label": "BACKGROUND", "text": "b111"}, {"label": "RESULTS", "text": "r111"}],
        "labelled": True,
        "mesh": ["Humans"],
        "publication_types": ["Journal Article"],
        "journal": "JAMA",
        "year": 2025,
    }
    qrels = [
        (r["query_id"], r["doc_id"], r["relevance"]) for r in outcome.artifact.read(table="qrels").to_pylist()
    ]
    assert qrels == [("p1", "111", 1), ("p1", "222", 1), ("p2", "111", 1), ("p3", "333", 1)]
    assert outcome.artifact.read().column("pmids").to_pylist() == [["111", "222"], ["111"], ["333"]]


def test_uncited_records_stay_out_and_a_missing_record_is_an_error(tmp_path: Path) -> None:
    pages = [page("p1", HEADLINE, ["111"])]
    corpus = run(tmp_path / "extra", pages, ["111", "999"]).artifact.read(table="corpus")
    assert corpus.column("doc_id").to_pylist() == ["111"]
    with pytest.raises(IrforgeError, match=r"lacks cited PMID.*111"):
        run(tmp_path / "missing", pages, ["999"])


def test_on_resolved_gold_pages_a_syndicated_copy_is_merged(tmp_path: Path) -> None:
    gold = [json.loads(line) for line in (NEWS / "gold.jsonl").read_text(encoding="utf-8").splitlines()]
    claims = [g for g in gold if g["expected_outcome"] == "claim"]
    pages = [
        {
            **page(g["file"], g["headline"], []),
            "cited": [{"id_kind": "doi", "id_value": g["doi"], "url": None}],
        }
        for g in claims
    ]
    copy = {**pages[0], "page_id": "copy", "published": "2025-02-01", "headline": claims[0]["headline"] + "."}
    pages.append(copy)
    upstream = artifact_of(tmp_path, "single_study", pa.Table.from_pylist(pages, schema=resolve.INPUT_SCHEMA))
    resolved = run_one(
        tmp_path,
        resolve.SPEC,
        resolve.ResolveConfig(pubmed=PubmedConfig(medline=["."])),
        {"single_study": upstream},
        base_dir=MEDLINE,
    ).artifact
    outcome = run_one(tmp_path, SPEC, ClaimsConfig(), {"resolve": resolved})
    kept = outcome.artifact.read().to_pylist()
    assert len(kept) == len(claims) == 12
    assert outcome.artifact.excluded().column("page_id").to_pylist() == ["copy"]
    assert next(r for r in kept if r["page_id"] == claims[0]["file"])["cluster_size"] == 2
    corpus = outcome.artifact.read(table="corpus").to_pylist()
    assert [r["doc_id"] for r in corpus] == sorted(g["pmid"] for g in claims)
    records = {r["pmid"]: r for r in resolved.read(table="records").to_pylist()}
    for row in corpus:
        assert row == {k: records[row["doc_id"]][k] for k in row if k != "doc_id"} | {"doc_id": row["doc_id"]}
