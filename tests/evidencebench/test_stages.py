"""harvest → papers of the evidencebench flow: the demo pair, broken inputs, the real samples."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from flows.registry import get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.errors import ConfigError
from irforge.pipeline import Selection, execute_step, select_steps
from tests.conftest import REPO, SAMPLES

DEMO = REPO / "data" / "evidence_demo"
needs_samples = pytest.mark.skipif(
    not (SAMPLES / "reviews" / "SOURCES.json").is_file()
    or not (SAMPLES / "articles" / "SOURCES.json").is_file(),
    reason=f"the shared sample reviews and articles are not at {SAMPLES} (they live beside the checkout)",
)


def _config(reviews: list[str], papers: list[str] | None) -> dict[str, Any]:
    stages: dict[str, Any] = {"harvest": {"reviews": reviews}}
    if papers is not None:
        stages["papers"] = {"papers": papers}
    return {"execution": {"chunk_rows": 500}, "stages": stages}


def _fingerprints(base_dir: Path, reviews: list[str], papers: list[str]) -> dict[str, str]:
    pipeline = get_pipeline("evidencebench")
    config = validate_config(pipeline.config_type, _config(reviews, papers), "test config")
    return {name: plan.fingerprint for name, plan in pipeline.plan(config, base_dir).items()}


def run_evidencebench(
    root: Path, base_dir: Path, reviews: list[str], papers: list[str] | None = None
) -> dict[str, StageOutcome]:
    """Run the flow's stages the way the Prefect tasks do (same engine calls), without a server."""
    pipeline = get_pipeline("evidencebench")
    config = validate_config(pipeline.config_type, _config(reviews, papers), "test config")
    store = ArtifactStore(root)
    steps = select_steps(pipeline, pipeline.plan(config, base_dir), Selection(), store)
    return {s.name: execute_step(s, store, "evidencebench", config.execution) for s in steps}


def _accounting_holds(outcome: StageOutcome) -> dict[str, Any]:
    counts: dict[str, Any] = outcome.manifest["counts"]
    assert counts["units_in"] == counts["units_kept"] + counts["units_excluded"]
    assert counts["rows_excluded"] == sum(counts["excluded_by_reason"].values())
    return counts


def _by(table: pa.Table, key: str) -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in table.to_pylist()}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, StageOutcome]:
    return run_evidencebench(tmp_path_factory.mktemp("demo"), DEMO, ["review.xml"], ["papers"])


def test_harvest_keeps_the_demo_summaries_with_references_context_and_licence(
    demo_run: dict[str, StageOutcome],
) -> None:
    outcome = demo_run["harvest"]
    counts = _accounting_holds(outcome)
    assert counts["units_in"] == 12  # every body sentence of the review
    kept = _by(outcome.artifact.read(), "unit_id")
    assert sorted(kept) == ["PMC0091100:1:0", "PMC0091100:2:0", "PMC0091100:5:0"]
    first = kept["PMC0091100:1:0"]
    assert (first["review_id"], first["source_path"], first["section_path"]) == (
        "PMC0091100",
        "review.xml",
        ["Randomised trials"],
    )
    assert (first["cited_ref_id"], first["cited_pmid"], first["cited_pmcid"], first["cited_doi"]) == (
        "R3",
        "91000003",
        "PMC0091003",
        "10.5555/irforge.evidence-demo.3",
    )
    assert first["sentence"].startswith("In a randomised trial of 212 adults")
    assert first["paragraph"][first["sentence_start"] : first["sentence_end"]] == first["sentence"]
    [span] = first["citation_spans"]
    assert first["paragraph"][span["start"] : span["end"]] == "3"
    assert (first["review_doi"], first["review_license"]) == (
        "10.5555/irforge.evidence-demo.review",
        "CC0-1.0",
    )
    # Context: the paragraph before, within the same section.
    assert kept["PMC0091100:2:0"]["context_before"] == [first["paragraph"]]
    assert kept["PMC0091100:5:0"]["cited_ref_id"] == "R5"


def test_harvest_excludes_the_other_sentences_with_their_reasons(demo_run: dict[str, StageOutcome]) -> None:
    excluded = _by(demo_run["harvest"].artifact.excluded(), "unit_id")
    assert Counter(r["reason"] for r in excluded.values()) == {
        "no_citation": 5,
        "multiple_citations": 2,
        "cited_twice_in_section": 2,
    }
    assert excluded["PMC0091100:0:0"]["cited_ref_ids"] == ["R1", "R2"]
    assert excluded["PMC0091100:3:1"]["cited_ref_ids"] == ["R7", "R8", "R9"]  # the range [7]–[9]
    twice = [u for u, r in excluded.items() if r["reason"] == "cited_twice_in_section"]
    assert sorted(twice) == ["PMC0091100:3:0", "PMC0091100:4:0"]
    assert all(excluded[u]["cited_ref_ids"] == ["R6"] for u in twice)


def test_papers_builds_pools_of_the_found_papers_and_reports_the_missing_one(
    demo_run: dict[str, StageOutcome],
) -> None:
    outcome = demo_run["papers"]
    counts = _accounting_holds(outcome)
    assert (counts["units_in"], counts["units_kept"], counts["units_excluded"]) == (3, 2, 1)
    rows = outcome.artifact.read().to_pylist()
    pools: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        pools.setdefault(row["paper_id"], []).append(row)
    assert sorted(pools) == ["PMC0091003", "pmid:91000004"]
    for pool in pools.values():
        assert [r["element_index"] for r in pool] == list(range(len(pool)))
        assert {r["element_type"] for r in pool} == {"abstract", "section_name", "normal_paragraph"}
    trial = pools["PMC0091003"]
    assert trial[0]["source_path"] == "papers/91000003.xml"
    assert (trial[0]["element_type"], trial[0]["text"], trial[0]["paragraph"]) == (
        "abstract",
        "Background",
        None,
    )
    assert trial[1]["text"] == "Falls cause much of the injury burden in later life."
    assert trial[1]["section_path"] == ["Abstract", "Background"]
    pilot = pools["pmid:91000004"]
    assert (pilot[16]["element_type"], pilot[16]["text"]) == ("section_name", "Discussion")
    assert pilot[-1]["text"] == "A larger trial should test whether it also prevents falls."
    citations = outcome.artifact.read(table="citations").to_pylist()
    assert citations == [
        {"unit_id": "PMC0091100:1:0", "paper_id": "PMC0091003", "matched_by": "pmid"},
        {"unit_id": "PMC0091100:2:0", "paper_id": "pmid:91000004", "matched_by": "pmid"},
    ]
    [missing] = outcome.artifact.excluded().to_pylist()
    assert (missing["reason"], missing["paper_id"], missing["summary_ids"]) == (
        "paper_not_found",
        "pmid:91000005",
        ["PMC0091100:5:0"],
    )
    assert "pmid '91000005'" in missing["detail"]


def _without_body(xml: str) -> str:
    return re.sub(r"<body>.*</body>", "", xml, flags=re.DOTALL)


def test_broken_reviews_and_papers_are_excluded_with_file_and_reason(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    (inputs / "reviews").mkdir(parents=True)
    (inputs / "papers").mkdir()
    shutil.copy(DEMO / "review.xml", inputs / "reviews" / "a_review.xml")
    shutil.copy(DEMO / "review.xml", inputs / "reviews" / "b_same_review.xml")
    (inputs / "reviews" / "broken.xml").write_text("<article><front><article-meta>")
    (inputs / "reviews" / "not_jats.xml").write_text("<html><body><p>A page [1].</p></body></html>")
    shutil.copy(DEMO / "papers" / "91000003.xml", inputs / "papers" / "trial.xml")
    pilot = (DEMO / "papers" / "91000004.xml").read_text()
    (inputs / "papers" / "pilot_abstract_only.xml").write_text(_without_body(pilot))
    (inputs / "papers" / "garbled.xml").write_text("<article>")

    outcomes = run_evidencebench(tmp_path / "artifacts", inputs, ["reviews"], ["papers"])

    harvest = outcomes["harvest"]
    _accounting_holds(harvest)
    assert harvest.artifact.count_rows() == 3  # the first copy's summaries, once
    whole = {
        r["source_path"]: (r["reason"], r["unit_id"])
        for r in harvest.artifact.excluded().to_pylist()
        if r["sentence"] is None
    }
    assert whole["reviews/b_same_review.xml"] == ("duplicate_review", "PMC0091100")
    assert whole["reviews/broken.xml"][0] == "malformed_xml"
    assert whole["reviews/broken.xml"][1].startswith("file:")
    assert whole["reviews/not_jats.xml"][0] == "not_jats"
    assert len(whole) == 3

    papers = outcomes["papers"]
    _accounting_holds(papers)
    assert set(papers.artifact.read().column("paper_id").to_pylist()) == {"PMC0091003"}
    excluded = _by(papers.artifact.excluded(), "paper_id")
    assert {k: r["reason"] for k, r in excluded.items()} == {
        "pmid:91000004": "no_body",
        "pmid:91000005": "paper_not_found",
        "file:papers/garbled.xml": "malformed_xml",
    }
    assert excluded["pmid:91000004"]["source_path"] == "papers/pilot_abstract_only.xml"
    assert excluded["pmid:91000004"]["summary_ids"] == ["PMC0091100:2:0"]
    assert excluded["file:papers/garbled.xml"]["summary_ids"] == []


def test_fingerprints_follow_the_review_and_paper_files(tmp_path: Path) -> None:
    shutil.copytree(DEMO, tmp_path / "demo")
    base = tmp_path / "demo"
    before = _fingerprints(base, ["review.xml"], ["papers"])
    review = base / "review.xml"
    review.write_text(review.read_text().replace("212 adults", "213 adults"))
    after_review = _fingerprints(base, ["review.xml"], ["papers"])
    assert after_review["harvest"] != before["harvest"]
    assert after_review["papers"] != before["papers"]  # downstream of harvest
    paper = base / "papers" / "91000004.xml"
    paper.write_text(paper.read_text().replace("pilot", "feasibility", 1))
    after_paper = _fingerprints(base, ["review.xml"], ["papers"])
    assert after_paper["harvest"] == after_review["harvest"]
    assert after_paper["papers"] != after_review["papers"]


def test_a_review_pattern_matching_nothing_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"stages\.harvest\.reviews\[0\].*nowhere"):
        _fingerprints(tmp_path, ["nowhere"], ["papers"])


@needs_samples
def test_both_stages_on_the_real_sample_reviews_and_articles(tmp_path: Path) -> None:
    outcomes = run_evidencebench(tmp_path, SAMPLES, ["reviews"], ["articles"])
    harvest = outcomes["harvest"]
    counts = _accounting_holds(harvest)
    kept = harvest.artifact.read().to_pylist()
    assert counts["units_kept"] == len(kept) == 154
    reviews = Counter(r["source_path"] for r in kept)
    assert reviews["reviews/10_1186_s12943-025-02501-9.xml"] == 59
    assert reviews["reviews/journal.pmed.1001473.xml"] == 20
    assert all(r["sentence"] is not None for r in harvest.artifact.excluded().to_pylist())  # no review lost
    assert {r["review_license"] for r in kept} == {"CC-BY-4.0", "CC-BY"}
    for r in kept:
        assert r["paragraph"][r["sentence_start"] : r["sentence_end"]] == r["sentence"]
        assert any((r["cited_pmid"], r["cited_pmcid"], r["cited_doi"], r["cited_title"]))

    papers = outcomes["papers"]
    _accounting_holds(papers)
    # The sample reviews do not cite the sample articles: every cited paper is reported missing.
    assert papers.artifact.count_rows() == 0
    excluded = papers.artifact.excluded().to_pylist()
    assert {r["reason"] for r in excluded} == {"paper_not_found"}
    cited = {s for r in excluded for s in r["summary_ids"]}
    assert cited == {r["unit_id"] for r in kept}  # every summary is accounted for, once
    assert sum(len(r["summary_ids"]) for r in excluded) == len(kept)
