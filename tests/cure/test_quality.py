"""``irforge quality cure``: the labelled passage set, its scoring, and the floors in CI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.registry import get_pipeline
from irforge.errors import IrforgeError
from tasks.cure.quality.blocks import html_blocks, jats_blocks
from tasks.cure.quality.gold import load_gold, read_labels
from tasks.cure.quality.measure import Stages, _align_prose_first, score
from tasks.cure.quality.report import Floors, failed_floors, score_all, summary_line
from tasks.cure.stages.filter import FilterConfig
from tests.conftest import REPO

GOLD = REPO / "data" / "passage_gold"


def _stages(**filter_overrides: object) -> Stages:
    config, _ = get_pipeline("cure").load(None)
    s = config.stages  # type: ignore[attr-defined]
    return Stages(s.parse, s.segment, FilterConfig(**{**s.filter.model_dump(), **filter_overrides}))


# --- the real labelled set, with the floors ------------------------------------


@pytest.fixture(scope="module")
def gold_scores() -> list:  # type: ignore[type-arg]
    return score_all(GOLD, _stages())


def test_gold_set_meets_every_floor(gold_scores: list) -> None:  # type: ignore[type-arg]
    assert failed_floors(gold_scores, Floors()) == []
    line = summary_line(gold_scores)
    assert line.startswith("JATS recall ") and " | HTML recall " in line


def test_gold_set_covers_twelve_html_publishers_and_every_sample(gold_scores: list) -> None:  # type: ignore[type-arg]
    html = {s.publisher for s in gold_scores if s.fmt == "html"}
    assert len(html) >= 12, sorted(html)
    entries = json.loads((GOLD / "SOURCES.json").read_text())
    assert all(e["licence"].startswith(("CC-BY", "CC0", "public-domain")) for e in entries)
    assert {e["file"] for e in entries} == {
        p.name.removesuffix(".labels") for p in (GOLD / "labels").iterdir()
    }


def test_every_document_keeps_most_of_its_prose(gold_scores: list) -> None:  # type: ignore[type-arg]
    for s in gold_scores:
        assert s.prose_words > 150, s.name  # the bioRxiv page shows only its abstract
        assert s.prose_words_kept >= 0.95 * s.prose_words, (s.name, s.lost)


# --- labels ----------------------------------------------------------------------------


def test_labels_are_ranges_of_prose_the_rest_chrome(tmp_path: Path) -> None:
    path = tmp_path / "a.labels"
    path.write_text("# a: 6 blocks\nprose 1 3-4  # abstract\n\n# a comment\n")
    assert read_labels(path, 6) == ["chrome", "prose", "chrome", "prose", "prose", "chrome"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# a: 5 blocks\nprose 1\n", "a.labels:1: labelled 5 blocks but the document has 6"),
        ("prose 1\n", "a.labels:1: the first line must say how many blocks"),
        ("# a: 6 blocks\nprose 1 7\n", "a.labels:2: '7' is not a block or range within 0-5"),
        ("# a: 6 blocks\nprose 4-2\n", "a.labels:2: '4-2' is not a block"),
        ("# a: 6 blocks\nchrome 1\n", "a.labels:2: a line starts with 'prose'"),
    ],
)
def test_bad_labels_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "a.labels"
    path.write_text(text)
    with pytest.raises(IrforgeError, match=message.replace("(", r"\(")) as err:
        read_labels(path, 6)
    assert "\n" not in str(err.value)


# --- source blocks ---------------------------------------------------------------------


def test_html_blocks_keep_inline_text_and_skip_scripts() -> None:
    page = (
        b"<html><body><nav><a href='/'>Home</a></nav><script>var x = 1;</script>"
        b"<p>Power is <button class='cite'>Smith 2010</button> high<sup><a href='#r1'>1</a></sup>.</p>"
        b"<div>Outer <p>inner</p> tail</div></body></html>"
    )
    blocks = [(b.where.split("/")[-1], b.text) for b in html_blocks(page, "utf-8")]
    assert blocks == [
        ("nav", "Home"),
        ("p", "Power is Smith 2010 high."),
        ("div", "Outer"),
        ("p", "inner"),
        ("div", "tail"),
    ]


def test_jats_blocks_leave_out_citation_numbers_only() -> None:
    xml = (
        b'<article><body><sec><title>Intro</title><p>Cells<sup><xref ref-type="bibr" rid="B1">1</xref></sup>'
        b' grow [<xref ref-type="bibr" rid="B2">2</xref>] as Smith <xref ref-type="bibr" rid="B3">(2010)</xref>'
        b" said.</p></sec></body></article>"
    )
    texts = [b.text for b in jats_blocks(xml)]
    assert texts == ["Intro", "Cells grow [] as Smith said."]


# --- alignment and attribution on small documents --------------------------------------


def test_alignment_gives_a_word_to_the_prose_before_the_chrome() -> None:
    gold = ["treatment", "of", "tb", "treatment", "of", "tb", "is", "long"]
    prose = [False, False, False, True, True, True, True, True]
    g2o, o2g = _align_prose_first(gold, prose, ["treatment", "of", "tb", "is", "long"])
    assert o2g == [3, 4, 5, 6, 7]
    assert g2o[:3] == [-1, -1, -1]


def _one_doc(tmp_path: Path, xml: bytes, labels: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "labels").mkdir()
    (tmp_path / "docs" / "t.nxml.gz").write_bytes(gzip.compress(xml))
    (tmp_path / "labels" / "t.nxml.labels").write_text(labels)
    entry = {"file": "t.nxml", "format": "jats", "publisher": "Test", "licence": "CC0"}
    (tmp_path / "SOURCES.json").write_text(json.dumps([entry]))
    return tmp_path


_ARTICLE = (
    b"<article><front><article-meta><title-group><article-title>Lung oxygen</article-title></title-group>"
    b"<abstract><p>We measured the oxygen uptake of the lung in twelve healthy adults at rest and during"
    b" exercise, and compared it with the uptake predicted by the model.</p></abstract></article-meta></front>"
    b"<body><sec><title>Results</title><p>Of 516 patients, 62 (12%) had 3.4 &#177; 1.2 mg/dl and 44 (8.5%)"
    b" had 2.1 &#177; 0.3 mg/dl at 12 months (p = 0.002), which was lower than in the controls.</p>"
    b"<fig><caption><p>Figure 1. Oxygen uptake of the lung at rest and during exercise in twelve adults.</p>"
    b"</caption></fig></sec></body></article>"
)


def test_a_small_document_scores_full_recall_and_precision(tmp_path: Path) -> None:
    # blocks: 0 title-group, 1 abstract p, 2 Results title, 3 Results p, 4 caption p
    folder = _one_doc(tmp_path, _ARTICLE, "# t: 5 blocks\nprose 1 3\n")
    [doc] = load_gold(folder)
    result = score(doc, _stages())
    assert (result.prose_blocks, result.prose_blocks_kept, result.lost) == (2, 2, [])
    assert result.prose_words == result.prose_words_kept
    assert (result.passages, result.prose_passages) == (2, 2)


def test_a_lost_block_names_its_stage_and_rule(tmp_path: Path) -> None:
    folder = _one_doc(tmp_path, _ARTICLE, "# t: 5 blocks\nprose 1 3 4\n")
    [doc] = load_gold(folder)
    result = score(doc, _stages(min_alpha_word_ratio=0.8))  # the paper's threshold: Results dropped
    lost = {b.block: (b.stage, b.rule) for b in result.lost}
    assert lost == {3: ("filter", "min_alpha_word_ratio"), 4: ("parse", "jats:fig")}


def test_quality_command_exits_1_under_a_floor_with_the_summary_last(tmp_path: Path) -> None:
    folder = _one_doc(tmp_path, _ARTICLE, "# t: 5 blocks\nprose 1 3 4\n")
    result = CliRunner().invoke(app, ["quality", "cure", "--gold", str(folder)])
    assert result.exit_code == 1, result.output
    # Words: abstract 27 + Results 36 kept, caption 15 lost: 63 / 78.
    assert result.output.rstrip().splitlines()[-1] == "JATS recall 80.8% precision 100.0%"
    assert "JATS recall" in result.output and "jats:fig" in result.output


def test_quality_command_refuses_other_flows() -> None:
    result = CliRunner().invoke(app, ["quality", "spanish_sr"])
    assert result.exit_code == 2
    assert "'spanish_sr' has no labelled set" in result.output


def test_blocks_option_lists_a_file_for_labelling(tmp_path: Path) -> None:
    article = tmp_path / "t.nxml"
    article.write_bytes(_ARTICLE)
    result = CliRunner().invoke(app, ["quality", "cure", "--blocks", str(article)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "# t.nxml: 5 blocks (index, words, where, text)"
    assert lines[2].split("\t")[:3] == ["1", "27", "front/article-meta/abstract/p"]
    bad = tmp_path / "notes.json"
    bad.write_text('{"a": 1}')
    result = CliRunner().invoke(app, ["quality", "cure", "--blocks", str(bad)])
    assert result.exit_code == 2 and "notes.json: not an article file" in result.output
