"""The spanish_sr sections of the run report, on handmade runs.

Stage artifacts with the stages' own schemas are published through the engine and recorded
as runs (``tests/common/test_report.py``: ``publish``, ``record_run``); ``evaluate``'s
``summary`` and ``significance`` tables are made from per-query rows by the stage's own
functions. The page is written with the flow's sections (``tasks/spanish_sr/report.py``) and
read back with lxml: a three-seed run, a one-seed run and a run that stopped after
``train_dense``.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lxml import html as lxml_html

from irforge.engine import StageOutcome
from irforge.stage import rows_to_table
from tasks.common.report.data import load_report
from tasks.common.report.html import write_report
from tasks.spanish_sr.report import SECTIONS
from tasks.spanish_sr.review_eval import significance_scores, summary_rows
from tasks.spanish_sr.significance import compare_table
from tasks.spanish_sr.stages import evaluate, train_dense, train_rerank
from tests.common.test_report import publish, record_run

FLOW = "spanish_sr"
FUNNEL = {  # stage -> (units kept, {reason: units excluded})
    "ingest": (30, {"unreadable_file": 1}),
    "clean": (24, {"duplicate": 4, "placeholder_abstract": 2}),
    "questions": (23, {"no_question": 1}),
}
SYSTEMS = ["bm25", "rrf", "dense"]  # the config's order, not the names'
MEASURES = ["AP", "nDCG"]
QUERIES = [  # query_id, review_id, kind
    ("r1-q", "r1", "question"),
    ("r1-e1", "r1", "expert"),
    ("r1-e2", "r1", "expert"),
    ("r2-q", "r2", "question"),
    ("r2-e1", "r2", "expert"),
]


def _value(q: int, seed: int, system: int, measure: int) -> float:
    """A made-up measure value in [0, 1], different for every cell."""
    return round((0.31 + 0.07 * q + 0.05 * seed + 0.11 * system + 0.13 * measure) % 1.0, 4)


def _per_query(seeds: list[int]) -> list[dict[str, Any]]:
    return [
        {"query_id": qid, "review_id": review, "query_kind": kind, "seed": seed}
        | {"system": system, "measure": measure, "value": _value(q, i, s, m)}
        for q, (qid, review, kind) in enumerate(QUERIES)
        for i, seed in enumerate(seeds)
        for s, system in enumerate(SYSTEMS)
        for m, measure in enumerate(MEASURES)
    ]


def _held_out(seeds: list[int]) -> list[dict[str, Any]]:
    return [
        {"seed": seed, "system": system, "measure": m, "value": _value(9, i, s, j), "queries": 6}
        for i, seed in enumerate(seeds)
        for s, system in enumerate(SYSTEMS)
        for j, m in enumerate(["RR", "R@1", "R@10"])
    ]


def _history(seeds: list[int], base: float) -> list[dict[str, Any]]:
    return [
        {"seed": seed, "epoch": e, "train_loss": None if e == 0 else base - 0.1 * e}
        | {"val_loss": base + 0.01 * i - 0.05 * e, "val_mrr": 0.5 + 0.1 * e + 0.01 * i}
        for i, seed in enumerate(seeds)
        for e in range(3)
    ]


def _models(root: Path, seeds: list[int]) -> dict[str, StageOutcome]:
    dense = [
        {"seed": s, "best_epoch": 2, "val_metric": 1.0, "val_loss": 1.0, "val_mrr": 0.7, "grid_point": "{}"}
        | {"train_pairs": 18, "val_pairs": 5, "model_dir": str(s)}
        for s in seeds
    ]
    rerank = [
        {"seed": s, "best_epoch": 1, "val_loss": 2.0, "val_mrr": 0.6, "train_lists": 18, "val_lists": 5}
        | {"model_dir": str(s), "max_length": 256}
        for s in seeds
    ]
    return {
        "train_dense": publish(
            root,
            "train_dense",
            rows_to_table(dense, train_dense.SCHEMA),
            ("seed",),
            tables={"history": rows_to_table(_history(seeds, 1.2), train_dense.HISTORY_SCHEMA)},
            flow=FLOW,
        ),
        "train_rerank": publish(
            root,
            "train_rerank",
            rows_to_table(rerank, train_rerank.SCHEMA),
            ("seed",),
            tables={"history": rows_to_table(_history(seeds, 2.4), train_rerank.HISTORY_SCHEMA)},
            flow=FLOW,
        ),
    }


def evaluate_tables(seeds: list[int]) -> tuple[list[dict[str, Any]], dict[str, pa.Table]]:
    rows = _per_query(seeds)
    return rows, {
        "summary": rows_to_table(summary_rows(rows), evaluate.SUMMARY_SCHEMA),
        "significance": compare_table(significance_scores(rows, MEASURES)),
        "runs": evaluate.RUNS_SCHEMA.empty_table(),
        "held_out": rows_to_table(_held_out(seeds), evaluate.HELD_OUT_SCHEMA),
    }


def build_run(root: Path, seeds: list[int], through: str = "evaluate", side_tables: bool = True) -> None:
    outcomes = {}
    for stage, (kept, reasons) in FUNNEL.items():
        excluded = [
            {"record_id": f"{stage}-x-{reason}-{i}", "reason": reason, "detail": f"record {i}"}
            for reason, n in reasons.items()
            for i in range(n)
        ]
        table = pa.table({"record_id": [f"{stage}-{i:02d}" for i in range(kept)]})
        outcomes[stage] = publish(root, stage, table, ("record_id",), excluded=excluded, flow=FLOW)
    outcomes.update(_models(root, seeds))
    if through == "train_dense":
        outcomes = {k: v for k, v in outcomes.items() if k != "train_rerank"}
    else:
        rows, tables = evaluate_tables(seeds)
        config = evaluate.EvaluateConfig.model_validate({"systems": SYSTEMS, "measures": MEASURES})
        outcomes["evaluate"] = publish(
            root,
            "evaluate",
            rows_to_table(rows, evaluate.SCHEMA),
            ("query_id",),
            tables=tables if side_tables else None,
            flow=FLOW,
            config=config,
        )
    record_run(root, "20261126T060000000000Z", "2026-11-26T06:00:00+00:00", outcomes, flow=FLOW)


def _page(root: Path) -> Any:
    return lxml_html.fromstring(write_report(root, FLOW, sections=SECTIONS).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def three_seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("three_seeds")
    build_run(root, [7, 42, 1234])
    return root


@pytest.fixture(scope="module")
def page(three_seeds: Path) -> Any:
    return _page(three_seeds)


def _rows(page: Any, xpath: str) -> list[list[str]]:
    return [[c.text_content().strip() for c in row.xpath("./th | ./td")] for row in page.xpath(xpath)]


def _table(page: Any, table_class: str) -> list[list[str]]:
    return _rows(page, f"//table[contains(concat(' ', @class, ' '), ' {table_class} ')]//tr")


def _cell(row: dict[str, Any]) -> str:
    return f"{row['mean']:.3f}" if row["std"] is None else f"{row['mean']:.3f} ± {row['std']:.3f}"


def test_sections_render_without_problems(three_seeds: Path, page: Any) -> None:
    report = load_report(three_seeds, FLOW, None, sections=SECTIONS)
    assert report.section_problems == {}
    assert list(report.data) == ["funnel", "retrieval", "significance", "training"]
    titles = [a.text_content() for a in page.xpath("//nav/a")]
    for section in SECTIONS:
        assert section.title in titles
    assert not page.xpath("//p[@class='problem']")


def test_funnel_from_the_manifests(page: Any) -> None:
    rows = _table(page, "funnel")
    assert rows[0] == ["stage", "reads", "in", "keeps", "kept", "excluded"]
    assert [r[0] for r in rows[1:]] == list(FUNNEL)
    for row, (kept, reasons) in zip(rows[1:], FUNNEL.values(), strict=True):
        assert [row[2], row[4]] == [str(kept + sum(reasons.values())), str(kept)]
    assert rows[2][5] == "duplicate 4, placeholder_abstract 2"


def test_retrieval_table_is_the_summary_over_seeds(page: Any) -> None:
    summary = evaluate_tables([7, 42, 1234])[1]["summary"].to_pylist()
    overall = {(r["system"], r["measure"]): r for r in summary if r["review_id"] == r["query_kind"] == "all"}
    rows = _table(page, "retrieval")
    assert rows[0] == ["system", *MEASURES]
    assert [r[0] for r in rows[1:]] == SYSTEMS
    for row in rows[1:]:
        assert row[1:] == [_cell(overall[(row[0], m)]) for m in MEASURES]
    # the summary's sd is over the three seeds' means over the queries
    per_seed = [statistics.fmean(_value(q, i, 0, 0) for q in range(len(QUERIES))) for i in range(3)]
    assert rows[1][1] == f"{statistics.fmean(per_seed):.3f} ± {statistics.stdev(per_seed):.3f}"
    by_kind = {
        (r["system"], r["query_kind"]): r for r in summary if r["review_id"] == "all" and r["measure"] == "AP"
    }
    kinds = _table(page, "map-by-kind")
    assert kinds[0] == ["MAP", "question", "expert"]
    assert kinds[1:] == [[s, _cell(by_kind[(s, "question")]), _cell(by_kind[(s, "expert")])] for s in SYSTEMS]
    note = page.xpath("string(//section[@id='retrieval']//p[@class='note'])")
    assert "(5)" in note and "mean ± sd over 3 seeds" in note


def test_map_figure_renders(page: Any) -> None:
    (chart,) = page.xpath("//section[@id='retrieval']//*[local-name()='svg'][@data-plot='map-by-query-kind']")
    texts = [t.text_content() for t in chart.xpath(".//*[local-name()='text']")]
    assert {"question", "expert", "MAP", *SYSTEMS} <= set(texts)
    caption = page.xpath("string(//section[@id='retrieval']//figcaption)")
    assert "error bars: the seeds' range" in caption


def test_significance_rows_are_the_table(page: Any) -> None:
    table = evaluate_tables([7, 42, 1234])[1]["significance"].to_pylist()
    rows = _table(page, "significance")
    assert rows[0][:4] == ["review", "measure", "n", "mean question"]
    assert len(rows) == 1 + len(table) == 1 + 2 * len(MEASURES)
    for row, r in zip(rows[1:], table, strict=True):
        assert row[:5] == [
            r["review"],
            r["metric"],
            str(len(SYSTEMS)),  # the systems paired, each averaged over the seeds
            f"{r['mean_question']:.3f}",
            f"{r['mean_expert']:.3f}",
        ]
        assert row[5] == r["test"] and row[8] == r["decision"]
        assert row[6] == ("–" if r["statistic"] is None else f"{r['statistic']:.3f}")
        p = r["p_value"]
        assert row[7] == ("–" if p is None else f"{p:.1e}" if p < 0.001 else f"{p:.3f}")


def test_training_histories_and_held_out(page: Any) -> None:
    dense = _rows(page, "//table[@data-stage='train_dense']//tr")
    assert dense[0] == ["seed", "epoch", "train loss", "val loss", "val MRR", "kept"]
    assert dense[1] == ["7", "0", "–", "1.200", "0.500", ""]
    assert dense[3] == ["7", "2", "1.000", "1.100", "0.700", "best"]
    rerank = _rows(page, "//table[@data-stage='train_rerank']//tr")
    assert len(rerank) == 1 + 3 * 3 and rerank[5] == ["42", "1", "2.300", "2.360", "0.610", "best"]
    held_out = _table(page, "held-out")
    assert held_out[0] == ["system", "RR", "R@1", "R@10"]
    rr = [_value(9, i, 0, 0) for i in range(3)]
    assert held_out[1][:2] == ["bm25", f"{statistics.fmean(rr):.3f} ± {statistics.stdev(rr):.3f}"]
    assert [r[0] for r in held_out[1:]] == SYSTEMS


def test_one_seed_shows_no_spread(tmp_path: Path) -> None:
    build_run(tmp_path, [42])
    page = _page(tmp_path)
    for section in ("retrieval", "training"):
        assert "±" not in page.xpath(f"string(//section[@id='{section}']//table)")
    rows = _table(page, "retrieval")
    summary = evaluate_tables([42])[1]["summary"].to_pylist()
    first = next(r for r in summary if r["review_id"] == r["query_kind"] == "all" and r["system"] == "bm25")
    assert rows[1][:2] == ["bm25", f"{first['mean']:.3f}"]
    assert "one seed" in page.xpath("string(//section[@id='retrieval']//p[@class='note'])")
    assert "error bars" not in page.xpath("string(//section[@id='retrieval']//figcaption)")


def test_run_stopped_before_evaluate_has_no_evaluate_sections(tmp_path: Path) -> None:
    build_run(tmp_path, [42], through="train_dense")
    report = load_report(tmp_path, FLOW, None, sections=SECTIONS)
    assert [s.id for s in report.sections] == ["funnel", "training"] and report.section_problems == {}
    page = _page(tmp_path)
    assert not page.xpath("//section[@id='retrieval' or @id='significance']")
    assert page.xpath("//table[@data-stage='train_dense']") and not page.xpath(
        "//table[@data-stage='train_rerank']"
    )
    assert not _table(page, "held-out")


def test_evaluate_without_its_side_tables_is_a_section_problem(tmp_path: Path) -> None:
    build_run(tmp_path, [42], side_tables=False)
    report = load_report(tmp_path, FLOW, None, sections=SECTIONS)
    assert "has no side table" in report.section_problems["evaluate"]  # the last of its two sections
    assert "retrieval" not in report.data and "significance" not in report.data
    assert report.data["training"].held_out is None  # the training histories still show
    page = _page(tmp_path)
    assert "This section could not be built" in page.xpath("string(//section[@id='retrieval'])")
    assert page.xpath("//table[@data-stage='train_rerank']") and not _table(page, "held-out")
