"""The run report's generic parts and a flow's sections, on a handmade run of a toy flow.

Handmade artifacts go through :func:`irforge.engine.run_stage` and a real
:class:`irforge.runs.RunRecorder`, so the report reads exactly what a run leaves behind; the
toy flow's sections (``tasks/common/report/sections.py``) are written here, as a flow package
writes its own (``tasks/cure/report/``). :func:`publish` and :func:`record_run` serve the flows'
report tests too.
"""

from __future__ import annotations

from collections.abc import Callable
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
from tasks.common.report.data import RunReport, load_report
from tasks.common.report.figure_cache import FOLDER as FIGURES
from tasks.common.report.html import render_report, write_report
from tasks.common.report.records import ReportError
from tasks.common.report.sections import Section, Source
from tasks.common.report.tables import read_columns

FLOW = "toy"
RUN_ID = "20260301T120000000000Z"
OLD_RUN_ID = "zz-older-run"  # sorts after RUN_ID by name: "latest" must go by started_at
MISSING_FP = "0123456789abcdef"
UNTRUSTED = "<b>bold</b> & <script>document.title='pwned'</script>"


class HandmadeConfig(StrictModel):
    what: str = "handmade"


def publish(
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


def record_run(
    root: Path, run_id: str, started_at: str, outcomes: dict[str, StageOutcome], flow: str = FLOW
) -> None:
    """A run record of ``flow`` naming ``outcomes``, written by the engine's own recorder."""
    recorder = RunRecorder(ArtifactStore(root), flow, run_id, root / f"{flow}.yaml")
    recorder.record["started_at"] = started_at
    for name, outcome in outcomes.items():
        recorder.stage_done(name, outcome)
    recorder.finish("completed")


def stored_run(factory: pytest.TempPathFactory, build: Callable[[Path], object]) -> Path:
    """An artifact root holding what ``build`` publishes (for a module-scoped fixture)."""
    root = factory.mktemp("artifacts")
    build(root)
    return root


def assert_self_contained(text: str) -> None:
    """The page runs nothing, loads nothing and links only within itself; data stays text."""
    tree = lxml_html.fromstring(text)
    assert not tree.xpath("//script | //link | //iframe | //img | //object | //b")
    assert not tree.xpath("//*[@src]")
    assert all(h.startswith("#") for h in tree.xpath("//@href"))  # in-page anchors only


def _rows_made(source: Source) -> int:
    return read_columns(source.artifact, ["id"]).num_rows


def _widths(source: Source) -> int:
    return read_columns(source.artifact, ["width"]).num_rows  # ``check`` rows have none


ROWS_TEMPLATE = """
<p class="rows">{{ data | number }} rows in {{ section.stage }}; first exclusion:
{{ r.stage(section.stage).excluded_examples[0].detail }}</p>
{%- if figure %}<figure>{{ figure }}</figure>{% endif %}"""
SECTIONS: tuple[Section[Any], ...] = (
    Section(
        "rows", "make", "Rows made", _rows_made, ROWS_TEMPLATE, lambda n: f'<svg data-plot="toy">{n}</svg>'
    ),
    Section("widths", "check", "Widths", _widths, "<p>never drawn</p>"),
    Section("later", "publish", "Published", _rows_made, "<p>not in the run</p>"),
)


def _load(root: Path, run_id: str | None = None) -> RunReport:
    return load_report(root, FLOW, run_id, sections=SECTIONS)


def build_run(root: Path, make_missing: bool = False) -> None:
    """A toy run ``make`` → ``check`` (plus an older run of ``make`` alone) under ``root``."""
    rows = pa.table({"id": ["a", "b", "c"]})
    excluded = [{"id": "d", "reason": "odd", "detail": UNTRUSTED}]
    make = publish(root, "make", rows, ("id",), excluded=excluded)
    check = publish(root, "check", rows, ("id",), upstream={"make": make.artifact.fingerprint})
    if make_missing:
        make = StageOutcome(Artifact(root / FLOW / "make" / MISSING_FP), "computed", 0.1)
    record_run(root, OLD_RUN_ID, "2026-03-01T11:00:00+00:00", {"make": make})
    record_run(root, RUN_ID, "2026-03-01T12:00:00+00:00", {"check": check, "make": make})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stored_run(tmp_path_factory, build_run)


@pytest.fixture(scope="module")
def page(store: Path) -> Path:
    return write_report(store, FLOW, sections=SECTIONS)


def test_the_flows_sections_whose_stage_ran(store: Path, page: Path) -> None:
    report = _load(store)
    assert [s.name for s in report.stages] == ["make", "check"]
    assert [s.id for s in report.sections] == ["rows", "widths"]  # ``publish`` is not in the run
    assert report.data == {"rows": 3}
    tree = lxml_html.fromstring(page.read_text(encoding="utf-8"))
    assert [a.text_content() for a in tree.xpath("//nav/a")] == [
        "Stages",
        "Timings",
        "Rows made",
        "Widths",
        "Stage details",
    ]
    (rows,) = tree.xpath("//section[@id='rows']/p[@class='rows']")
    assert rows.text_content() == f"3 rows in make; first exclusion:\n{UNTRUSTED}"
    assert tree.xpath("//section[@id='rows']/figure/svg[@data-plot='toy']")


def test_unreadable_section_is_explained_not_raised(store: Path, tmp_path: Path) -> None:
    report = _load(store)
    assert "lack column(s) ['width']" in report.section_problems["check"]
    page = lxml_html.fromstring(render_report(report))
    (problem,) = page.xpath("//section[@id='widths']//p[@class='problem']")
    assert problem.text_content().startswith("This section could not be built: ReportDataError")
    assert "never drawn" not in page.text_content()

    build_run(tmp_path, make_missing=True)
    report = _load(tmp_path)
    assert "rows" not in report.data
    page = lxml_html.fromstring(render_report(report))
    (problem,) = page.xpath("//section[@id='rows']//p[@class='problem']")
    assert f"artifact missing: {tmp_path / FLOW / 'make' / MISSING_FP}" in problem.text_content()


def test_latest_run_goes_by_start_time_and_unknown_runs_are_errors(store: Path, tmp_path: Path) -> None:
    assert _load(store).run_id == RUN_ID
    older = _load(store, OLD_RUN_ID)
    assert [s.name for s in older.stages] == ["make"] and [s.id for s in older.sections] == ["rows"]
    with pytest.raises(ReportError, match="no run 'nope'"):
        _load(store, "nope")
    with pytest.raises(ReportError, match="has no run records"):
        _load(tmp_path)
    runs = tmp_path / FLOW / "runs"
    runs.mkdir(parents=True)
    (runs / "broken.json").write_text('{"flow": "toy"}', encoding="utf-8")
    with pytest.raises(ReportError, match=r"broken\.json cannot be read.*run_id"):
        _load(tmp_path)


def test_written_page_is_atomic_and_self_contained(store: Path, page: Path) -> None:
    assert page == store / FLOW / "reports" / f"{RUN_ID}.html"
    # No temp file left behind, beside the page or in the figure cache.
    assert sorted(p.name for p in page.parent.iterdir()) == sorted([page.name, FIGURES])
    assert all(p.suffix == ".svg" and not p.name.startswith(".") for p in (page.parent / FIGURES).iterdir())
    text = page.read_text(encoding="utf-8")
    assert text == render_report(_load(store))
    assert_self_contained(text)
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;script&gt;document.title" in text  # an exclusion's detail


def test_timing_bars_scale_to_the_longest_stage_and_escape_names() -> None:
    """The timings figure is plain SVG (issue 26: no matplotlib per run): bars in proportion,
    a name taken from data stays text."""
    from tasks.common.report.timing_bars import BAR_WIDTH, stage_times

    svg = lxml_html.fromstring(stage_times([("ingest", 2.0), ("<b>x</b>", 0.5), ("filter", 0.0)]))
    widths = [float(r.get("width")) for r in svg.iter("rect")]
    assert widths == [BAR_WIDTH, BAR_WIDTH / 4, 0.0]
    labels = [t.text_content() for t in svg.iter("text")]
    assert "<b>x</b>" in labels and not list(svg.iter("b"))
    assert "2.00 s" in labels and "0.50 s" in labels
    assert lxml_html.fromstring(stage_times([])).get("data-plot") == "stage-times"


def test_a_report_of_cached_figures_imports_no_matplotlib(store: Path) -> None:
    """A run's report with nothing new to draw costs no matplotlib import (issue 26)."""
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; "
        "from tasks.common.report.html import write_report; "
        f"write_report(Path({str(store)!r}), {FLOW!r}, sections=()); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
