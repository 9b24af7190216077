"""The run report of an ``evidencebench`` run: its own sections, not CURE's.

Both flows have a stage named ``evaluate`` with different tables, so each flow hands the
report its own sections (``tasks/evidencebench/report.py``, through ``flows/registry.py``). Handmade ``select`` / ``evaluate`` / ``export`` artifacts (the schemas those
stages write) are published through the real engine with the helpers of
:mod:`tests.common.test_report`, and the page is checked with lxml.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lxml import html as lxml_html

from flows.registry import get_pipeline
from irforge.artifacts import Artifact
from irforge.engine import StageOutcome
from tasks.common.report.data import RunReport, load_report
from tasks.common.report.html import render_report, write_report
from tasks.evidencebench.stages import evaluate as eb_evaluate
from tasks.evidencebench.stages import export as eb_export
from tasks.evidencebench.stages import select as eb_select
from tests.common.test_report import MISSING_FP, publish, record_run, stored_run

FLOW = "evidencebench"
SECTIONS = get_pipeline(FLOW).report_sections
_publish = partial(publish, flow=FLOW)
RUN_ID = "20261123T080000000000Z"
TASKS = ("ER@optimal", "ER@10", "Result-ER@optimal", "Result-ER@5")
SYSTEMS = ("oracle", "bm25", "llm:default")
# instance → (n_aspects, covered_aspects, pool_size, optimal, at_10_covered, results_optimal)
INSTANCES: dict[str, tuple[int, int, int, int, int, int | None]] = {
    "i1": (4, 4, 30, 2, 4, 1),
    "i2": (3, 3, 20, 1, 3, 1),
    "i3": (5, 4, 40, 2, 4, None),  # no results aspect: skipped by the Result tasks
}
RECALL = {"oracle": 1.0, "bm25": 0.25, "llm:default": 0.125}
RELEASE_FILES = {
    "release/evidencebench.json": b"{}",
    "release/data/test.parquet": b"PAR1",
    "release/README.md": b"# card",
}


def _select_table() -> pa.Table:
    rows: list[dict[str, Any]] = []
    for unit, (n, covered, pool, optimal, at_10, results) in INSTANCES.items():
        rows.append(
            {
                "instance_id": f"evidencebench_irforge_{unit}",
                "unit_id": unit,
                "review_id": "PMC1",
                "cited_ref_id": "R1",
                "paper_id": f"paper-{unit}",
                "hypothesis": "A lowers B.",
                "summary": "A lowered B in 40 patients.",
                "aspects": [f"aspect {j}" for j in range(n)],
                "aspect_labels": ["results"] * n,
                "aspect_covered": [j < covered for j in range(n)],
                "n_aspects": n,
                "covered_aspects": covered,
                "pool_size": pool,
                "optimal": optimal,
                "at_10_covered": at_10,
                "results_optimal": results,
                "results_at_5_covered": results,
                "instance": json.dumps({"id": unit}),
            }
        )
    return pa.Table.from_pylist(rows, eb_select.SCHEMA)


def _evaluate_tables() -> tuple[pa.Table, dict[str, pa.Table]]:
    scored = [u for u, spec in INSTANCES.items() if spec[5] is not None]
    rows, per_instance = [], []
    for system in SYSTEMS:
        for task in TASKS:
            units = scored if task.startswith("Result") else list(INSTANCES)
            # llm:default got no valid reply for one instance on ER@optimal: scored 0, counted.
            failed = 1 if (system, task) == ("llm:default", "ER@optimal") else 0
            rows.append(
                {
                    "system": system,
                    "task": task,
                    "k": {"ER@10": "10", "Result-ER@5": "5"}.get(task, "optimal"),
                    "mean_recall": RECALL[system],
                    "instances": len(units),
                    "skipped": len(INSTANCES) - len(units),
                    "failed": failed,
                }
            )
            per_instance += [
                {"system": system, "task": task, "instance_id": u, "recall": RECALL[system], "failed": False}
                for u in units
            ]
    return (
        pa.Table.from_pylist(rows, eb_evaluate.SCHEMA),
        {"per_instance": pa.Table.from_pylist(per_instance, eb_evaluate.PER_INSTANCE_SCHEMA)},
    )


def _export_tables() -> tuple[pa.Table, dict[str, pa.Table]]:
    kept = pa.Table.from_pylist(
        [
            {
                "instance_id": f"evidencebench_irforge_{u}",
                "unit_id": u,
                "paper_id": f"paper-{u}",
                "n_aspects": spec[1],
                "optimal": spec[3],
            }
            for u, spec in INSTANCES.items()
        ],
        eb_export.SCHEMA,
    )
    files = pa.Table.from_pylist(
        [
            {
                "path": path.removeprefix("release/"),
                "rows": 3 if "README" not in path else 0,
                "bytes": len(content),
                "sha256": f"{i:x}" * 64,
            }
            for i, (path, content) in enumerate(RELEASE_FILES.items(), start=10)
        ],
        eb_export.FILES_SCHEMA,
    )
    return kept, {"files": files}


def _after(*upstream: StageOutcome) -> dict[str, str]:
    return {o.artifact.stage: o.artifact.fingerprint for o in upstream}


def build_run(root: Path) -> dict[str, StageOutcome]:
    harvest = _publish(root, "harvest", pa.table({"unit_id": list(INSTANCES)}), ("unit_id",))
    low = [{"unit_id": "i4", "reason": "low_coverage", "detail": "1 of 4 aspects covered"}]
    select = _publish(root, "select", _select_table(), ("unit_id",), excluded=low, upstream=_after(harvest))
    rows, tables = _evaluate_tables()
    evaluate = _publish(root, "evaluate", rows, ("system", "task"), tables=tables, upstream=_after(select))
    rows, tables = _export_tables()
    export = _publish(
        root,
        "export",
        rows,
        ("instance_id",),
        tables=tables,
        files=RELEASE_FILES,
        upstream=_after(select, harvest),
    )
    outcomes = {"harvest": harvest, "select": select, "evaluate": evaluate, "export": export}
    record_run(root, RUN_ID, "2026-11-23T08:00:00+00:00", outcomes, flow=FLOW)
    return outcomes


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stored_run(tmp_path_factory, build_run)


@pytest.fixture(scope="module")
def page(store: Path) -> Any:
    return lxml_html.fromstring(write_report(store, FLOW, sections=SECTIONS).read_text(encoding="utf-8"))


def _load(root: Path, run_id: str | None = None) -> RunReport:
    return load_report(root, FLOW, run_id, sections=SECTIONS)


def _cells(row: Any) -> list[str]:
    return [c.text_content().strip() for c in row.xpath("./th | ./td")]


def _rows(page: Any, table_class: str) -> list[list[str]]:
    return [_cells(r) for r in page.xpath(f"//table[contains(@class, '{table_class}')]//tr")]


def test_sections_are_the_flows_own(store: Path, page: Any) -> None:
    report = _load(store)
    assert report.section_problems == {}
    assert set(report.data) == {"instances", "recall", "export"}  # CURE's sections: not loaded
    titles = ["Stages", "Timings", "Instances", "Evidence retrieval (ER@K)", "Export", "Stage details"]
    assert [a.text_content() for a in page.xpath("//nav/a")] == titles
    assert [h.text_content() for h in page.xpath("//h2")] == titles
    assert "could not be built" not in page.text_content()
    assert not page.xpath("//p[@class='problem']")


def test_instances_match_the_select_artifact(store: Path, page: Any) -> None:
    instances = _load(store).data["instances"]
    assert instances.instances == len(INSTANCES)
    assert instances.mean_aspects == 4.0
    assert instances.mean_covered_aspects == pytest.approx(11 / 3)
    assert instances.mean_pool_size == 30.0
    assert dict(instances.optimal) == {1: 1, 2: 2}
    assert dict(instances.results_optimal) == {1: 2} and instances.without_results == 1

    summary = dict(r for r in _rows(page, "instances") if len(r) == 2)
    assert summary["instances built"] == "3"
    assert (summary["mean aspects"], summary["mean covered aspects"]) == ("4.00", "3.67")
    assert summary["mean pool size (sentences)"] == "30.00"
    assert _rows(page, "optimal")[1:] == [["1", "1", "2"], ["2", "2", "0"], ["no results aspect", "–", "1"]]
    stages = {r[0]: r for r in map(_cells, page.xpath("//section[@id='summary']//tbody/tr"))}
    assert "low_coverage 1" in stages["select"]  # the exclusions, in the generic stage table


def test_er_at_k_table_and_chart(page: Any) -> None:
    header, *_body = _rows(page, "er-at-k")
    assert header == ["System", *TASKS]
    # Per system: each cell's recall, and its small "skipped / failed" text where there is one.
    table = {
        row.xpath("string(./th)"): [
            (td.text.strip(), td.xpath("string(./div[contains(@class, 'counts')])"))
            for td in row.xpath("./td")
        ]
        for row in page.xpath("//table[contains(@class, 'er-at-k')]/tbody/tr")
    }
    assert list(table) == list(SYSTEMS)
    assert [value for value, _counts in table["oracle"]] == ["100.0 %"] * 4
    assert table["bm25"] == [("25.0 %", ""), ("25.0 %", ""), ("25.0 %", "1 skipped"), ("25.0 %", "1 skipped")]
    assert table["llm:default"][:3] == [("12.5 %", "1 failed"), ("12.5 %", ""), ("12.5 %", "1 skipped")]
    (cell,) = page.xpath("//table[contains(@class, 'er-at-k')]//tr[th='oracle']/td[1]")
    assert cell.get("title") == "3 instances scored, 0 skipped, 0 failed"
    note = page.xpath("string(//section[@id='recall']//p[@class='note'])")
    assert "2, 3 depending on the cell" in note

    (chart,) = page.xpath("//section[@id='recall']//*[local-name()='svg'][@data-plot='recall-bars']")
    texts = " ".join(t.text_content() for t in chart.xpath(".//*[local-name()='text']"))
    assert all(s in texts for s in SYSTEMS) and all(t in texts for t in TASKS)
    assert "100.0" in texts


def test_export_lists_the_release_files(store: Path, page: Any) -> None:
    export = _load(store).data["export"]
    assert (
        export.release_dir_exists and (export.release_dir / "data" / "test.parquet").read_bytes() == b"PAR1"
    )
    assert export.release_dir.name == "release" and export.release_dir.parent.name == "files"
    header, *body = _rows(page, "export-files")
    assert header == ["path", "rows", "bytes", "sha256"]
    assert body == [
        ["evidencebench.json", "3", "2", "a" * 15 + "…"],
        ["data/test.parquet", "3", "4", "b" * 15 + "…"],
        ["README.md", "0", "6", "c" * 15 + "…"],
    ]
    assert page.xpath("string(//span[contains(@class, 'release-dir')])") == str(export.release_dir)


def test_missing_artifact_and_unknown_flow(tmp_path: Path) -> None:
    eb = tmp_path / "eb"
    outcomes = build_run(eb)
    gone = StageOutcome(Artifact(eb / FLOW / "select" / MISSING_FP), "computed", 0.1)
    record_run(eb, "later", "2026-11-23T09:00:00+00:00", {**outcomes, "select": gone}, flow=FLOW)
    report = _load(eb)
    assert report.run_id == "later" and "instances" not in report.data and "recall" in report.data
    page = lxml_html.fromstring(render_report(report))
    (problem,) = page.xpath("//section[@id='instances']//p[@class='problem']")
    assert "artifact missing" in problem.text_content()

    # A flow without sections of its own: its ``evaluate`` is not read as CURE's (nor as ours).
    other = tmp_path / "other"
    rows, tables = _evaluate_tables()
    evaluate = publish(other, "evaluate", rows, ("system", "task"), tables=tables, flow="someflow")
    record_run(other, RUN_ID, "2026-11-23T08:00:00+00:00", {"evaluate": evaluate}, flow="someflow")
    report = load_report(other, "someflow", sections=())
    assert report.sections == () and report.section_problems == {} and report.data == {}
    page = lxml_html.fromstring(render_report(report))
    assert [a.text_content() for a in page.xpath("//nav/a")] == ["Stages", "Timings", "Stage details"]
    assert page.xpath("//details[@id='stage-evaluate']")
