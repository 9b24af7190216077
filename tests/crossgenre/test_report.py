"""The crossgenre sections of the run report, on a handmade run.

Funnel stages with known counts, a claims artifact whose queries come from twelve news
sites, a candidates artifact with its recall table and an evaluate artifact (the stages'
own schemas) are published through the engine and recorded as one run; the page is
written with the flow's sections (``tasks/crossgenre/report.py``) and read back with lxml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lxml import html as lxml_html

from irforge.engine import StageOutcome
from tasks.common.report.data import load_report
from tasks.common.report.html import write_report
from tasks.crossgenre.report import SECTIONS
from tasks.crossgenre.stages import evaluate
from tests.common.test_report import publish, record_run
from tests.crossgenre.collection import FUNNEL, Collection, Query, medline_docs, publish_funnel

FLOW = "crossgenre"
DOCS = medline_docs(20)
SITES = {f"site{i:02d}.example": n for i, n in enumerate([5, 4, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1])}  # 26 queries
QUERIES = [
    Query(f"q{site[4:6]}{j}", "test", (DOCS[(i + j) % 20]["doc_id"],), f"Headline {site} {j}", site=site)
    for i, (site, n) in enumerate(SITES.items())
    for j in range(n)
]
RECALL = [
    {"variant": v, "k": k, "recall": r, "queries": 26}
    for v, base in (("okapi", 0.2), ("plus", 0.25), ("plus_pre", 0.3))
    for k, r in zip((1, 5, 20, 100, 500), (base, base + 0.2, base + 0.3, base + 0.4, base + 0.5), strict=True)
]
RANKING = {  # (system, split) -> values of R@1, R@3, R@5, R@20, MRR
    ("bm25_plus_pre", "dev"): (0.25, 0.5, 0.5, 0.75, 0.4),
    ("bm25_plus_pre", "test"): (0.364, 0.481, 0.529, 0.671, 0.442),
    ("rerank:builtin:minilm-l6-cross-encoder", "test"): (0.626, 0.743, 0.783, 0.828, 0.695),
}


def _evaluate(root: Path, upstream: dict[str, str]) -> StageOutcome:
    rows = [
        {
            "system": system,
            "split": split,
            "metric": metric,
            "value": value,
            "queries": 4 if split == "dev" else 26,
        }
        for (system, split), values in RANKING.items()
        for metric, value in zip(evaluate.METRICS, values, strict=True)
    ]
    excluded = [{"system": "bm25_plus_pre", "split": "train", "reason": "no_queries", "detail": "none"}]
    table = pa.Table.from_pylist(rows, evaluate.SCHEMA)
    return publish(
        root, "evaluate", table, ("system", "split"), excluded=excluded, upstream=upstream, flow=FLOW
    )


def build_run(root: Path) -> dict[str, StageOutcome]:
    outcomes = publish_funnel(root)
    rankings = {q.query_id: {"plus_pre": [(d["doc_id"], 1.0) for d in DOCS[:3]]} for q in QUERIES}
    artifacts = Collection(DOCS, QUERIES, rankings, RECALL).publish(root)
    for name in ("claims", "candidates"):
        outcomes[name] = StageOutcome(artifacts[name], "computed", 0.1)
    outcomes["evaluate"] = _evaluate(root, {"candidates": artifacts["candidates"].fingerprint})
    record_run(root, "20261126T010000000000Z", "2026-11-26T01:00:00+00:00", outcomes, flow=FLOW)
    return outcomes


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    build_run(root)
    return root


@pytest.fixture(scope="module")
def page(root: Path) -> Any:
    return lxml_html.fromstring(write_report(root, FLOW, sections=SECTIONS).read_text(encoding="utf-8"))


def _rows(page: Any, table_class: str) -> list[list[str]]:
    return [
        [c.text_content().strip() for c in row.xpath("./th | ./td")]
        for row in page.xpath(f"//table[contains(@class, '{table_class}')]//tr")
    ]


def test_sections_render_without_problems(root: Path, page: Any) -> None:
    report = load_report(root, FLOW, None, sections=SECTIONS)
    assert report.section_problems == {}
    assert set(report.data) == {"funnel", "decisions", "sites", "recall", "ranking"}
    titles = [a.text_content() for a in page.xpath("//nav/a")]
    for title in ("From pages to claims", "News sites", "First-stage recall", "Ranking (R@k, MRR)"):
        assert title in titles
    assert not page.xpath("//p[@class='problem']")


def test_funnel(page: Any) -> None:
    rows = _rows(page, "funnel")
    assert rows[0] == ["stage", "step", "in", "kept", "excluded"]
    assert rows[1] == ["ingest", "news pages read", "14", "12", "duplicate_page 1, unreadable 1"]
    for row, (stage, (kept, reasons)) in zip(rows[1:6], FUNNEL.items(), strict=True):
        assert row[0] == stage and row[2:4] == [str(kept + sum(reasons.values())), str(kept)]
    assert rows[6] == ["claims", "claims (syndicated copies merged)", "26", "26", ""]


def test_single_study_decisions_by_rule(page: Any) -> None:
    rows = _rows(page, "decisions")
    assert rows == [
        ["decided by", "kept", "dropped"],
        ["one_work", "7", "0"],
        ["llm", "1", "0"],
        ["reported_work", "1", "0"],
        ["roundup", "0", "1"],  # an excluded table without decided_by: by reason
    ]


def test_top_sites_table_and_figure(page: Any) -> None:
    rows = _rows(page, "sites")
    assert rows[1:4] == [["site00.example", "5"], ["site01.example", "4"], ["site02.example", "3"]]
    assert len(rows) == 1 + 10 + 1 and rows[-1] == ["2 other sites", "2"]  # site10, site11: 1 each
    (chart,) = page.xpath("//section[@id='sites']//*[local-name()='svg'][@data-plot='news-sites']")
    assert "site00.example" in " ".join(t.text_content() for t in chart.xpath(".//*[local-name()='text']"))


def test_recall_per_variant(page: Any) -> None:
    rows = _rows(page, "recall-at-k")
    assert rows[0] == ["variant", "R@1", "R@5", "R@20", "R@100", "R@500"]
    assert rows[1:] == [
        ["okapi", "0.200", "0.400", "0.500", "0.600", "0.700"],
        ["plus", "0.250", "0.450", "0.550", "0.650", "0.750"],
        ["plus_pre", "0.300", "0.500", "0.600", "0.700", "0.800"],
    ]
    assert "over 26 queries" in page.xpath("string(//section[@id='recall']//p[@class='note'])")


def test_ranking_tables_per_split(page: Any) -> None:
    dev, test = (page.xpath(f"//table[@data-split='{s}']") for s in ("dev", "test"))
    assert [[c.text_content() for c in r.xpath("./th | ./td")] for r in test[0].xpath(".//tr")] == [
        ["system", "R@1", "R@3", "R@5", "R@20", "MRR"],
        ["bm25_plus_pre", "0.364", "0.481", "0.529", "0.671", "0.442"],
        ["rerank:builtin:minilm-l6-cross-encoder", "0.626", "0.743", "0.783", "0.828", "0.695"],
    ]
    assert len(dev[0].xpath(".//tbody/tr")) == 1
    headings = [h.text_content() for h in page.xpath("//section[@id='ranking']//h3")]
    assert headings == ["dev (4 queries)", "test (26 queries)"]
    note = page.xpath("string(//section[@id='ranking']//p[@class='note'][1])")
    assert "bm25_plus_pre on train (no_queries)" in note
