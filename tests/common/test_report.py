"""The per-run HTML report, on a small handmade run published with the real engine.

Handmade ``pool`` / ``judge`` / ``qrels`` / ``evaluate`` / ``release`` artifacts (the schemas
those stages write) go through :func:`irforge.engine.run_stage` and a real
:class:`irforge.runs.RunRecorder`, so the report reads exactly what a run leaves behind. The
page is then opened in headless Chromium and the assertions are on the DOM Chromium built.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lxml import html as lxml_html

from irforge.artifacts import Artifact, ArtifactStore
from irforge.config import ExecutionConfig, StrictModel
from irforge.engine import StageOutcome, StagePlan, run_stage
from irforge.runs import RunRecorder
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema
from tasks.common.report.data import ReportError, load_report
from tasks.common.report.html import render_report, write_report
from tasks.common.rerank.cutoff import PoolCutoff

FLOW = "cure"
RUN_ID = "20260301T120000000000Z"
OLD_RUN_ID = "zz-older-run"  # sorts after RUN_ID by name: "latest" must go by started_at
MISSING_FP = "0123456789abcdef"
SCRIPT_EXPLANATION = "<script>document.title='pwned'</script> Answers the query & cites dosage."
DOMAINS = ("dermatology", "genetics")
CONDITIONS = ("en-en", "fr-en", "es-en")
MODELS = ("bm25", "multilingual-e5-small")


class HandmadeConfig(StrictModel):
    what: str = "handmade"


class JudgeCutoffConfig(StrictModel):
    """Just the key of the judge's config that the report reads: the pool cut-off it applied."""

    pool: PoolCutoff


def _publish(
    root: Path,
    name: str,
    kept: pa.Table,
    key: tuple[str, ...],
    *,
    excluded: list[dict[str, Any]] | None = None,
    tables: dict[str, pa.Table] | None = None,
    cost: dict[str, float] | None = None,
    upstream: dict[str, str] | None = None,
    files: dict[str, bytes] | None = None,
    flow: str = FLOW,
    config: StrictModel | None = None,
) -> StageOutcome:
    """Publish ``kept`` (plus excluded rows, side tables, cost, files) as stage ``name`` via the engine.

    ``files`` (path relative to the artifact's ``files/`` → content) are written the way a stage
    writes them, into ``ctx.files_dir``, so they are published with the artifact.
    """
    excluded_schema = exclusion_schema(*(kept.schema.field(k) for k in key))
    excluded_table = pa.Table.from_pylist(excluded or [], excluded_schema)
    units = pa.concat_tables([kept.select(list(key)), excluded_table.select(list(key))])
    result = ChunkResult(kept, excluded_table, tables or {}, cost or {})
    config = config or HandmadeConfig()
    spec: StageSpec[StrictModel] = StageSpec(
        name=name,
        version=1,
        config_type=type(config),
        upstream=tuple(upstream or {}),
        schema=kept.schema,
        excluded_schema=excluded_schema,
        key=key,
        source=lambda _ctx, _inputs: TableSource(units),
        process=lambda _chunk, ctx: _write_files(ctx, files or {}, result),
        tables={n: t.schema for n, t in (tables or {}).items()},
        whole_input=True,
    )
    plan = StagePlan.make(spec, StageContext(config, root), upstream or {})
    return run_stage(plan, ArtifactStore(root), flow, ExecutionConfig())


def _write_files(ctx: StageContext[StrictModel], files: dict[str, bytes], result: ChunkResult) -> ChunkResult:
    if files:
        assert ctx.files_dir is not None, "run through the stage engine"
        for relative, content in files.items():
            path = ctx.files_dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    return result


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


def _record(
    root: Path, run_id: str, started_at: str, outcomes: dict[str, StageOutcome], flow: str = FLOW
) -> None:
    recorder = RunRecorder(ArtifactStore(root), flow, run_id, root / f"{flow}.yaml")
    recorder.record["started_at"] = started_at
    for name, outcome in outcomes.items():
        recorder.stage_done(name, outcome)
    recorder.finish("completed")


def build_run(root: Path) -> None:
    """A full handmade run (plus an older, smaller one) under ``root``."""
    pool_rows, pool_tables = _pool_tables()
    pool = _publish(root, "pool", pool_rows, ("query_id", "passage_id"), tables=pool_tables)
    judge = _publish(
        root,
        "judge",
        _judge_table(),
        ("query_id", "passage_id"),
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
        upstream={"pool": pool.artifact.fingerprint},
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
    root = tmp_path_factory.mktemp("artifacts")
    build_run(root)
    return root


@pytest.fixture(scope="module")
def page(store: Path) -> Path:
    return write_report(store, FLOW)


def test_pool_sizes_counts_and_histograms(store: Path) -> None:
    pool = load_report(store, FLOW).pool
    assert pool is not None
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
    rows, tables = _pool_tables()
    pool = _publish(tmp_path, "pool", rows, ("query_id", "passage_id"), tables=tables)
    judge = _publish(
        tmp_path,
        "judge",
        _judge_table(),
        ("query_id", "passage_id"),
        upstream={"pool": pool.artifact.fingerprint},
        config=JudgeCutoffConfig(pool=PoolCutoff(threshold=0.6)),
    )
    _record(tmp_path, RUN_ID, "2026-03-01T12:00:00+00:00", {"pool": pool, "judge": judge})
    report = load_report(tmp_path, FLOW)
    assert report.pool is not None
    # 0.95 and 0.6 in dermatology, 0.8 in genetics (at 0.42 it would be 3, 1, 4).
    assert [d.pool_size for d in (*report.pool.domains, report.pool.total)] == [2, 1, 3]
    assert report.pool.cutoff.source == "the judge stage's config"
    assert "p ≥ 0.6" in render_report(report)

    # No judge in the run: the config file its record names (a logit cut-off, the best pair of each query).
    (tmp_path / f"{FLOW}.yaml").write_text(
        "stages:\n  judge:\n    pool: {threshold: -0.5, scale: logit, max_per_query: 1}\n", encoding="utf-8"
    )
    _record(tmp_path, "20260302T120000000000Z", "2026-03-02T12:00:00+00:00", {"pool": pool})
    pool_section = load_report(tmp_path, FLOW).pool
    assert pool_section is not None and pool_section.cutoff.cutoff.scale == "logit"
    # logit >= -0.5 is p >= 0.378: q1 has three such pairs but keeps its best one; q2 and q3 one each.
    assert [d.pool_size for d in (*pool_section.domains, pool_section.total)] == [2, 1, 3]


def test_judge_qrels_evaluate_release_sections(store: Path) -> None:
    report = load_report(store, FLOW)
    judge, qrels, evaluate = report.judge, report.qrels, report.evaluate
    assert judge is not None and qrels is not None and evaluate is not None
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

    assert report.release is not None
    assert [(f.path, f.rows, f.bytes) for f in report.release] == [
        ("corpus/all.parquet", 9, 4096),
        ("qrels/dermatology.parquet", 4, 1234),
    ]


def test_stages_in_dependency_order_and_missing_artifact_shown(store: Path) -> None:
    report = load_report(store, FLOW)
    assert report.run_id == RUN_ID and report.status == "completed"
    assert [s.name for s in report.stages] == ["pool", "translate", "judge", "qrels", "evaluate", "release"]
    translate = report.stage("translate")
    assert translate is not None and translate.missing
    assert translate.problem is not None and MISSING_FP in translate.problem
    assert report.section_problems == {}
    judge = report.stage("judge")
    assert judge is not None and [e.reason for e in judge.excluded_examples] == ["invalid_reply", "truncated"]


def test_latest_run_goes_by_start_time_and_unknown_runs_are_errors(store: Path, tmp_path: Path) -> None:
    assert load_report(store, FLOW).run_id == RUN_ID
    older = load_report(store, FLOW, OLD_RUN_ID)
    assert [s.name for s in older.stages] == ["pool"] and older.judge is None
    with pytest.raises(ReportError, match="no run 'nope'"):
        load_report(store, FLOW, "nope")
    with pytest.raises(ReportError, match="has no run records"):
        load_report(tmp_path, FLOW)
    runs = tmp_path / FLOW / "runs"
    runs.mkdir(parents=True)
    (runs / "broken.json").write_text('{"flow": "cure"}', encoding="utf-8")
    with pytest.raises(ReportError, match=r"broken\.json cannot be read.*run_id"):
        load_report(tmp_path, FLOW)


def test_unreadable_section_is_explained_not_raised(tmp_path: Path) -> None:
    rows, tables = _pool_tables(histogram_pairs=False)
    pool = _publish(tmp_path, "pool", rows, ("query_id", "passage_id"), tables=tables)
    gone = StageOutcome(Artifact(tmp_path / FLOW / "judge" / MISSING_FP), "computed", 0.1)
    _record(tmp_path, RUN_ID, "2026-03-01T12:00:00+00:00", {"pool": pool, "judge": gone})
    report = load_report(tmp_path, FLOW)
    assert report.pool is None and report.judge is None
    assert "lack column(s) ['pairs']" in report.section_problems["pool"]
    page = lxml_html.fromstring(render_report(report))
    (pool_problem,) = page.xpath("//section[@id='pool']//p[@class='problem']")
    assert "score_histogram" in pool_problem.text_content() and "['pairs']" in pool_problem.text_content()
    (judge_problem,) = page.xpath("//section[@id='judge']//p[@class='problem']")
    assert f"artifact missing: {tmp_path / FLOW / 'judge' / MISSING_FP}" in judge_problem.text_content()


def test_written_page_is_atomic_and_self_contained(store: Path, page: Path) -> None:
    assert page == store / FLOW / "reports" / f"{RUN_ID}.html"
    assert [p.name for p in page.parent.iterdir()] == [page.name]  # no temp file left behind
    text = page.read_text(encoding="utf-8")
    assert text == render_report(load_report(store, FLOW))
    tree = lxml_html.fromstring(text)
    assert not tree.xpath("//script | //link | //iframe | //img | //object")
    assert not tree.xpath("//*[@src]")
    assert all(h.startswith("#") for h in tree.xpath("//@href"))  # in-page anchors only
    assert "&lt;script&gt;document.title" in text


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
