"""CURE's sections of its run report, on a small handmade run published with the real engine.

Handmade ``pool`` / ``judge`` / ``qrels`` / ``evaluate`` / ``release`` artifacts (the schemas
those stages write) go through :func:`irforge.engine.run_stage` and a real
:class:`irforge.runs.RunRecorder` (helpers of :mod:`tests.common.test_report`), so the report
reads exactly what a run leaves behind; its sections are those ``flows/registry.py`` hands
over. The page is then opened in headless Chromium and the assertions are on the DOM Chromium built.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lxml import html as lxml_html

from flows.registry import get_pipeline
from irforge.artifacts import Artifact
from irforge.config import StrictModel
from irforge.engine import StageOutcome
from tasks.common.report.data import RunReport, load_report
from tasks.common.report.html import render_report, write_report
from tasks.common.rerank.cutoff import PoolCutoff
from tests.common.test_report import (
    MISSING_FP,
    OLD_RUN_ID,
    RUN_ID,
    assert_self_contained,
    publish,
    record_run,
    stored_run,
)

FLOW = "cure"
SECTIONS = get_pipeline(FLOW).report_sections
SCRIPT_EXPLANATION = "<script>document.title='pwned'</script> Answers the query & cites dosage."
DOMAINS = ("dermatology", "genetics")
CONDITIONS = ("en-en", "fr-en", "es-en")
MODELS = ("bm25", "multilingual-e5-small")


class JudgeCutoffConfig(StrictModel):
    """Just the key of the judge's config that the report reads: the pool cut-off it applied."""

    pool: PoolCutoff


_publish = partial(publish, flow=FLOW)
_record = partial(record_run, flow=FLOW)


def _load(root: Path, run_id: str | None = None) -> RunReport:
    return load_report(root, FLOW, run_id, sections=SECTIONS)


def _pool_tables(histogram_pairs: bool = True) -> tuple[pa.Table, dict[str, pa.Table]]:
    rows = [
        # dermatology: 0.95, 0.6 and exactly 0.42 reach the cut-off; 0.41 and 0.1 do not.
        ("q1", "p1", "dermatology", 0.95),
        ("q1", "p2", "dermatology", 0.42),
        ("q1", "p3", "dermatology", 0.41),
        ("q2", "p4", "dermatology", 0.6),
        ("q2", "p5", "dermatology", 0.1),
        ("q3", "p6", "genetics", 0.8),
        ("q3", "p7", "genetics", 0.3),
    ]
    kept = pa.table(
        {
            "query_id": [r[0] for r in rows],
            "passage_id": [r[1] for r in rows],
            "domain": [r[2] for r in rows],
            "logit": pa.array([math.log(r[3] / (1 - r[3])) for r in rows], pa.float64()),
            "probability": pa.array([r[3] for r in rows], pa.float64()),
            "rank": pa.array(range(1, len(rows) + 1), pa.int64()),
        }
    )
    bins = [(d, i / 20, (i + 1) / 20, pairs) for d in DOMAINS for i, pairs in enumerate(_pairs(d))]
    histogram = {
        "domain": [b[0] for b in bins],
        "bin_low": pa.array([b[1] for b in bins], pa.float64()),
        "bin_high": pa.array([b[2] for b in bins], pa.float64()),
    }
    if histogram_pairs:
        histogram["pairs"] = pa.array([b[3] for b in bins], pa.int64())
    return kept, {"score_histogram": pa.table(histogram)}


def _pairs(domain: str) -> list[int]:
    # dermatology: 2 pairs in every bin (40); genetics: 30 near 0, 1 in each of the top 5 bins (35).
    return [2] * 20 if domain == "dermatology" else [30] + [0] * 14 + [1] * 5


def _judge_table() -> pa.Table:
    rows = [
        ("q1", "p1", "dermatology", 2, SCRIPT_EXPLANATION, False),
        ("q1", "p2", "dermatology", 1, "Partly relevant: mentions the drug, not the dose.", True),
        ("q2", "p4", "dermatology", 0, "Off topic.", False),
        ("q1", "p3", "dermatology", 0, "Different disease.", False),
        ("q3", "p6", "genetics", 2, "Directly answers.", True),
    ]
    return pa.table(
        {
            "query_id": [r[0] for r in rows],
            "passage_id": [r[1] for r in rows],
            "domain": [r[2] for r in rows],
            "score": pa.array([r[3] for r in rows], pa.int8()),
            "explanation": [r[4] for r in rows],
            "model": ["qwen2.5-7b-instruct"] * len(rows),
            "prompt_sha256": ["ab" * 32] * len(rows),
            "prompt_tokens": pa.array([100, 110, 90, 95, 120], pa.int64()),
            "completion_tokens": pa.array([20, 25, 10, 12, 30], pa.int64()),
            "cached": [r[5] for r in rows],
        }
    )


def _qrels_table() -> pa.Table:
    rows = [
        ("q1", "p1", "dermatology", 2, "human"),
        ("q2", "p4", "dermatology", 2, "human"),
        ("q1", "p9", "dermatology", 1, "containment"),
        ("q1", "p2", "dermatology", 2, "llm"),
        ("q1", "p3", "dermatology", 0, "llm"),
        ("q3", "p6", "genetics", 2, "human"),
        ("q3", "p7", "genetics", 1, "llm"),
    ]
    names = ("query_id", "passage_id", "domain", "score", "source")
    table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})
    return table.set_column(3, "score", pa.array([r[3] for r in rows], pa.int8()))


def _ndcg(model: str, condition: str, split: str) -> float:
    """A distinct, recognisable value per cell (e.g. 0.512 = model 1, condition 2, split 2)."""
    return round(
        (MODELS.index(model) + 1) / 10 + (CONDITIONS.index(condition) + 1) / 100 + _split_n(split) / 1000, 3
    )


def _split_n(split: str) -> int:
    return 0 if split == "all" else DOMAINS.index(split) + 1


def _evaluate_tables() -> tuple[pa.Table, dict[str, pa.Table]]:
    cells = [(m, c, s) for m in MODELS for c in CONDITIONS for s in ("all", *DOMAINS)]
    kept = pa.table(
        {
            "model": [m for m, _c, _s in cells],
            "condition": [c for _m, c, _s in cells],
            "split": [s for _m, _c, s in cells],
            "ndcg_at_10": pa.array([_ndcg(*cell) for cell in cells], pa.float64()),
            "recall_at_100": pa.array([_ndcg(*cell) + 0.5 for cell in cells], pa.float64()),
            "queries": pa.array([3 if s == "all" else 1 for _m, _c, s in cells], pa.int64()),
        }
    )
    agreement = pa.table(
        {
            "rater_a": ["expert"],
            "rater_b": ["llm"],
            "measure": ["cohen_kappa"],
            "kappa": pa.array([0.617], pa.float64()),
            "items": pa.array([5], pa.int64()),
        }
    )
    confusion = pa.table(
        {
            "rater_a": ["expert"] * 3,
            "rater_b": ["llm"] * 3,
            "label_a": pa.array([2, 2, 0], pa.int8()),
            "label_b": pa.array([2, 1, 0], pa.int8()),
            "count": pa.array([3, 1, 1], pa.int64()),
        }
    )
    return kept, {"agreement": agreement, "confusion": confusion}


def _release_table() -> pa.Table:
    return pa.table(
        {
            "config": ["corpus", "qrels"],
            "split": ["all", "dermatology"],
            "path": ["corpus/all.parquet", "qrels/dermatology.parquet"],
            "rows": pa.array([9, 4], pa.int64()),
            "bytes": pa.array([4096, 1234], pa.int64()),
            "sha256": ["cd" * 32, "ef" * 32],
        }
    )


def _pool_and_judge(root: Path, **judge: Any) -> tuple[StageOutcome, StageOutcome]:
    """The handmade ``pool`` and the ``judge`` over it (``judge``: more of its :func:`publish` arguments)."""
    rows, tables = _pool_tables()
    pool = _publish(root, "pool", rows, ("query_id", "passage_id"), tables=tables)
    upstream = {"pool": pool.artifact.fingerprint}
    return pool, _publish(
        root, "judge", _judge_table(), ("query_id", "passage_id"), upstream=upstream, **judge
    )


def build_run(root: Path) -> None:
    """A full handmade run (plus an older, smaller one) under ``root``."""
    pool, judge = _pool_and_judge(
        root,
        excluded=[
            {
                "reason": "invalid_reply",
                "detail": "not JSON: <b>score</b> two",
                "query_id": "q2",
                "passage_id": "p5",
            },
            {"reason": "truncated", "detail": "finish_reason=length", "query_id": "q3", "passage_id": "p7"},
        ],
        cost={
            "prompt_tokens": 1234,
            "completion_tokens": 321,
            "requests_sent": 7,
            "cache_hits": 2,
            "usd": 0.0,
        },
    )
    qrels = _publish(
        root,
        "qrels",
        _qrels_table(),
        ("query_id", "passage_id"),
        upstream={"judge": judge.artifact.fingerprint},
    )
    eval_rows, eval_tables = _evaluate_tables()
    evaluate = _publish(
        root,
        "evaluate",
        eval_rows,
        ("model", "condition", "split"),
        tables=eval_tables,
        upstream={"qrels": qrels.artifact.fingerprint},
    )
    release = _publish(
        root, "release", _release_table(), ("config", "split"), upstream={"qrels": qrels.artifact.fingerprint}
    )
    gone = StageOutcome(Artifact(root / FLOW / "translate" / MISSING_FP), "computed", 0.5)
    _record(root, OLD_RUN_ID, "2026-03-01T11:00:00+00:00", {"pool": pool})
    _record(
        root,
        RUN_ID,
        "2026-03-01T12:00:00+00:00",
        {
            "release": release,
            "evaluate": evaluate,
            "qrels": qrels,
            "judge": judge,
            "translate": gone,
            "pool": pool,
        },
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stored_run(tmp_path_factory, build_run)


@pytest.fixture(scope="module")
def page(store: Path) -> Path:
    return write_report(store, FLOW, RUN_ID, sections=SECTIONS)


def test_pool_sizes_counts_and_histograms(store: Path) -> None:
    pool = _load(store).data["pool"]
    derm, genetics = pool.domains
    assert (derm.domain, derm.queries, derm.pairs_scored, derm.pairs_stored, derm.pool_size) == (
        "dermatology",
        2,
        40,
        5,
        3,  # 0.95, 0.6 and 0.42 itself: the cut-off is inclusive
    )
    assert derm.mean_pool_per_query == 1.5
    assert (genetics.queries, genetics.pairs_scored, genetics.pairs_stored, genetics.pool_size) == (
        1,
        35,
        2,
        1,
    )
    assert (pool.total.queries, pool.total.pairs_scored, pool.total.pairs_stored, pool.total.pool_size) == (
        3,
        75,
        7,
        4,
    )
    assert [b.pairs for b in pool.histograms["genetics"]] == _pairs("genetics")
    assert pool.histograms["genetics"][0].low == 0.0 and pool.histograms["genetics"][-1].high == 1.0


def test_pool_sizes_follow_the_runs_configured_cutoff(tmp_path: Path) -> None:
    """Issue 15 §6: the report counts pools under the run's own cut-off, not a constant 0.42."""
    pool, judge = _pool_and_judge(tmp_path, config=JudgeCutoffConfig(pool=PoolCutoff(threshold=0.6)))
    _record(tmp_path, RUN_ID, "2026-03-01T12:00:00+00:00", {"pool": pool, "judge": judge})
    report = _load(tmp_path)
    pool_section = report.data["pool"]
    # 0.95 and 0.6 in dermatology, 0.8 in genetics (at 0.42 it would be 3, 1, 4).
    assert [d.pool_size for d in (*pool_section.domains, pool_section.total)] == [2, 1, 3]
    assert pool_section.cutoff.source == "the judge stage's config"
    assert "p ≥ 0.6" in render_report(report)

    # No judge in the run: the config file its record names (a logit cut-off, the best pair of each query).
    (tmp_path / f"{FLOW}.yaml").write_text(
        "stages:\n  judge:\n    pool: {threshold: -0.5, scale: logit, max_per_query: 1}\n", encoding="utf-8"
    )
    _record(tmp_path, "20260302T120000000000Z", "2026-03-02T12:00:00+00:00", {"pool": pool})
    pool_section = _load(tmp_path).data["pool"]
    assert pool_section.cutoff.cutoff.scale == "logit"
    # logit >= -0.5 is p >= 0.378: q1 has three such pairs but keeps its best one; q2 and q3 one each.
    assert [d.pool_size for d in (*pool_section.domains, pool_section.total)] == [2, 1, 3]


def test_judge_qrels_evaluate_release_sections(store: Path) -> None:
    report = _load(store)
    judge, qrels, evaluate = (report.data[s] for s in ("judge", "qrels", "evaluate"))
    assert judge.labels == {"dermatology": {0: 2, 1: 1, 2: 1}, "genetics": {2: 1}}
    assert (judge.judgements, judge.cached, judge.prompt_tokens, judge.completion_tokens) == (5, 2, 515, 97)
    assert judge.cost["requests_sent"] == 7 and judge.cost["usd"] == 0.0
    assert [e.score for e in judge.examples] == [0, 0, 1, 2, 2]
    assert report.stage("judge").excluded_by_reason == {"invalid_reply": 1, "truncated": 1}  # type: ignore[union-attr]

    assert qrels.sources == ("human", "containment", "llm")
    assert qrels.total("dermatology", "llm") == 2 and qrels.total("dermatology", "human", 2) == 2
    assert qrels.total(None, "human") == 3 and qrels.total() == 7
    assert qrels.queries == {"dermatology": 2, "genetics": 1}

    assert evaluate.models == MODELS and evaluate.conditions == CONDITIONS and evaluate.domains == DOMAINS
    score = evaluate.score("all", "multilingual-e5-small", "fr-en")
    assert score is not None and score.ndcg_at_10 == 0.22
    assert score.recall_at_100 == pytest.approx(0.72)
    assert [(a.rater_a, a.rater_b, a.measure, a.kappa, a.items) for a in evaluate.agreement] == [
        ("expert", "llm", "cohen_kappa", 0.617, 5)
    ]
    (confusion,) = evaluate.confusion
    assert confusion.labels == ("0", "1", "2") and confusion.counts[("2", "1")] == 1

    assert [(f.path, f.rows, f.bytes) for f in report.data["release"]] == [
        ("corpus/all.parquet", 9, 4096),
        ("qrels/dermatology.parquet", 4, 1234),
    ]


def test_stages_in_dependency_order_and_missing_artifact_shown(store: Path) -> None:
    report = _load(store)
    assert report.run_id == RUN_ID and report.status == "completed"
    assert [s.name for s in report.stages] == ["pool", "translate", "judge", "qrels", "evaluate", "release"]
    translate = report.stage("translate")
    assert translate is not None and translate.missing
    assert translate.problem is not None and MISSING_FP in translate.problem
    assert report.section_problems == {}
    judge = report.stage("judge")
    assert judge is not None and [e.reason for e in judge.excluded_examples] == ["invalid_reply", "truncated"]


def test_unreadable_section_is_explained_not_raised(tmp_path: Path) -> None:
    rows, tables = _pool_tables(histogram_pairs=False)
    pool = _publish(tmp_path, "pool", rows, ("query_id", "passage_id"), tables=tables)
    gone = StageOutcome(Artifact(tmp_path / FLOW / "judge" / MISSING_FP), "computed", 0.1)
    _record(tmp_path, RUN_ID, "2026-03-01T12:00:00+00:00", {"pool": pool, "judge": gone})
    report = _load(tmp_path)
    assert "pool" not in report.data and "judge" not in report.data
    assert "lack column(s) ['pairs']" in report.section_problems["pool"]
    page = lxml_html.fromstring(render_report(report))
    (pool_problem,) = page.xpath("//section[@id='pool']//p[@class='problem']")
    assert "score_histogram" in pool_problem.text_content() and "['pairs']" in pool_problem.text_content()
    (judge_problem,) = page.xpath("//section[@id='judge']//p[@class='problem']")
    assert f"artifact missing: {tmp_path / FLOW / 'judge' / MISSING_FP}" in judge_problem.text_content()


def test_written_page_is_self_contained(store: Path, page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert text == render_report(_load(store))
    assert_self_contained(text)
    assert "&lt;script&gt;document.title" in text  # the judge's explanation, as text


CHROMIUM = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium, chromium-browser or google-chrome binary on PATH"
)


@dataclass(frozen=True)
class Rendered:
    dom: Any  # the lxml tree of the DOM Chromium built
    screenshot: Path


def _chromium(page: Path, profile: Path, *args: str) -> str:
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def rendered(page: Path, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    work = tmp_path_factory.mktemp("chromium")
    dom = _chromium(page, work / "profile", "--dump-dom")
    screenshot = work / "report.png"
    _chromium(page, work / "profile", f"--screenshot={screenshot}", "--window-size=1280,2000")
    return Rendered(lxml_html.fromstring(dom), screenshot)


def _cells(row: Any) -> list[str]:
    return [c.text_content().strip() for c in row.xpath("./th | ./td")]


@needs_chromium
def test_chromium_dom_has_sections_tables_and_plots(rendered: Rendered) -> None:
    dom = rendered.dom
    assert [h.text_content() for h in dom.xpath("//h2")] == [
        "Stages",
        "Timings",
        "Pooling",
        "LLM judging",
        "Qrels",
        "Evaluation",
        "Release",
        "Stage details",
    ]
    assert "irforge · cure" in dom.xpath("string(//h1)") and "completed" in dom.xpath("string(//h1)")
    assert len(dom.xpath("//*[local-name()='svg']")) == 3  # timings, pool histograms, labels
    assert dom.xpath("//*[local-name()='svg'][@data-plot='pool-histograms']//*[local-name()='text']")

    table7 = dom.xpath("//table[contains(@class, 'table7')]")[0]
    header = _cells(table7.xpath(".//thead/tr")[1])
    assert header == [*CONDITIONS, *CONDITIONS]
    body = {cells[0]: cells[1:] for cells in map(_cells, table7.xpath(".//tbody/tr"))}
    assert body["bm25"] == ["0.110", "0.120", "0.130", "0.610", "0.620", "0.630"]
    assert body["multilingual-e5-small"] == ["0.210", "0.220", "0.230", "0.710", "0.720", "0.730"]
    per_domain = _cells(dom.xpath("//table[contains(@class, 'per-domain')]/tbody/tr")[0])
    assert per_domain == ["dermatology", "bm25", "0.111", "0.121", "0.131", "0.611", "0.621", "0.631"]

    pool_rows = [_cells(r) for r in dom.xpath("//section[@id='pool']//table/tbody/tr")]
    assert pool_rows[0] == ["dermatology", "2", "40", "5", "3", "1.50"]
    assert pool_rows[-1] == ["all", "3", "75", "7", "4", "1.33"]

    summary = {cells[0]: cells for cells in map(_cells, dom.xpath("//section[@id='summary']//tbody/tr"))}
    assert summary["translate"][1] == "missing"
    assert "invalid_reply 1, truncated 1" in summary["judge"]


@needs_chromium
def test_chromium_shows_untrusted_text_as_text(rendered: Rendered) -> None:
    dom = rendered.dom
    assert not dom.xpath("//script")
    explanations = [e.text_content() for e in dom.xpath("//td[contains(@class, 'explanation')]")]
    assert SCRIPT_EXPLANATION in explanations
    details = " ".join(dom.xpath("//table[contains(@class, 'examples')]//td/text()"))
    assert "not JSON: <b>score</b> two" in details
    assert not dom.xpath("//table[contains(@class, 'examples')]//b")
    assert dom.xpath("string(//title)") == f"irforge cure · run {RUN_ID}"  # the script never ran


@needs_chromium
def test_chromium_screenshot_is_a_real_picture(rendered: Rendered) -> None:
    from PIL import Image

    assert rendered.screenshot.stat().st_size > 20_000
    with Image.open(rendered.screenshot) as image:
        assert image.size == (1280, 2000)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, tables and plots, not a blank page


def test_figures_are_drawn_once_for_the_same_artifacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report of the same artifacts reads its figures back (issue 26: drawing was most of a
    reused run); a change of an artifact draws that run's figures anew, equal to a fresh render."""
    from tasks.common.report import plots

    root = tmp_path / "store"
    build_run(root)
    drawn: list[str] = []
    to_svg = plots.to_svg

    def counting(fig: Any, name: str) -> str:
        drawn.append(name)
        return to_svg(fig, name)

    monkeypatch.setattr(plots, "to_svg", counting)
    first = write_report(root, FLOW, RUN_ID, sections=SECTIONS).read_text(encoding="utf-8")
    assert len(drawn) >= 2 and "stage-times" not in drawn  # the pool and judge figures; timings are bars
    assert 'data-plot="stage-times"' in first
    drawn.clear()
    again = write_report(root, FLOW, RUN_ID, sections=SECTIONS).read_text(encoding="utf-8")
    assert drawn == [] and again == first
    assert again == render_report(_load(root))  # what a render without the cache draws
    drawn.clear()
    older = write_report(root, FLOW, OLD_RUN_ID, sections=SECTIONS)  # other stages: other figures
    assert drawn and older.read_text(encoding="utf-8") == render_report(_load(root, OLD_RUN_ID))
