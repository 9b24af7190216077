"""ingest → parse → segment → filter on the real sample articles and on broken inputs."""

from __future__ import annotations

import itertools
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from irforge.engine import StageOutcome
from irforge.pipeline import Selection
from irforge.stage import StageContext
from tasks.common.text.gopher import RULES
from tasks.cure.stages import ingest
from tasks.cure.stages.parse import BLOCK_SEPARATOR, ParseConfig
from tasks.cure.stages.parse import process as parse_process
from tasks.cure.stages.segment import SegmentConfig, data_like, prose_like, segment_article
from tests.conftest import REPO, SAMPLES, needs_samples, run_cure
from tests.cure.test_segment import _blocks

DEMO = REPO / "data" / "demo"


@pytest.fixture(scope="module")
def samples_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, StageOutcome]:
    if not (SAMPLES / "articles" / "SOURCES.json").is_file():
        pytest.skip(f"the shared sample articles are not at {SAMPLES}")
    root = tmp_path_factory.mktemp("samples")
    return run_cure(root, ["articles", "reviews", "html"], SAMPLES)


def _by(table: pa.Table, key: str) -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in table.to_pylist()}


def _accounting_holds(outcome: StageOutcome) -> None:
    c = outcome.manifest["counts"]
    assert c["units_in"] == c["units_kept"] + c["units_excluded"]
    assert c["rows_excluded"] == sum(c["excluded_by_reason"].values())


@needs_samples
def test_ingest_records_ids_formats_and_licences_from_the_files(samples_run: dict[str, StageOutcome]) -> None:
    art = samples_run["ingest"].artifact
    assert art.excluded().num_rows == 0
    rows = {Path(r["source_path"]).name: r for r in art.read().to_pylist()}
    assert len(rows) == 23
    for folder in ("articles", "reviews"):
        for src in json.loads((SAMPLES / folder / "SOURCES.json").read_text()):
            row = rows[src["file"]]
            assert row["format"] == "jats"
            assert row["doi"] == src["ids"]["doi"].lower()
            if "pmc" in src.get("ids", {}):
                assert row["article_id"] == f"PMC{src['ids']['pmc']}"
    lysis = rows["1471-2180-11-174.nxml"]
    assert (lysis["article_id"], lysis["pmid"], lysis["journal"]) == (
        "PMC3166277",
        "21810267",
        "BMC Microbiology",
    )
    assert (lysis["license"], lysis["license_known"]) == ("CC-BY-2.0", True)
    assert rows["ehp-116-1694.nxml"]["license"] == "public-domain"
    nature = rows["nature_s41586-021-03819-2_alphafold.html"]
    assert (nature["format"], nature["article_id"]) == ("html", "doi:10.1038/s41586-021-03819-2")
    assert nature["title"] == "Highly accurate protein structure prediction with AlphaFold"
    # Paths are stored relative to the config's folder, so fingerprints do not depend on the checkout.
    assert lysis["source_path"] == "articles/1471-2180-11-174.nxml"


@needs_samples
def test_parse_blocks_are_in_order_with_consistent_offsets(samples_run: dict[str, StageOutcome]) -> None:
    outcome = samples_run["parse"]
    assert outcome.artifact.excluded().num_rows == 0
    blocks = outcome.artifact.read().to_pylist()
    per_article: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for b in blocks:
        per_article[b["article_id"]].append(b)
    assert len(per_article) == 23
    for rows in per_article.values():
        assert [r["block_index"] for r in rows] == list(range(len(rows)))
        for prev, cur in itertools.pairwise(rows):
            assert cur["char_start"] == prev["char_end"] + len(BLOCK_SEPARATOR)
        assert all(r["char_end"] - r["char_start"] == len(r["text"]) for r in rows)
    lysis = per_article["PMC3166277"]
    assert lysis[0]["kind"] == "abstract" and lysis[0]["section_path"] == ["Abstract", "Background"]
    holin = next(r for r in lysis if r["text"].startswith("It has long been known that different holin"))
    assert holin["section_path"] == ["Results", "Effect of allelic variation in holin sequence"]
    _accounting_holds(outcome)


@needs_samples
def test_segment_passages_cover_every_block_with_exact_offsets(samples_run: dict[str, StageOutcome]) -> None:
    blocks = samples_run["parse"].artifact.read().to_pylist()
    passages = samples_run["segment"].artifact.read().to_pylist()
    article_text: dict[str, list[str]] = defaultdict(list)
    block_words: dict[tuple[str, int], int] = {}
    for b in blocks:
        article_text[b["article_id"]].append(b["text"])
        block_words[(b["article_id"], b["block_index"])] = len(b["text"].split())
    texts = {a: BLOCK_SEPARATOR.join(t) for a, t in article_text.items()}
    covered: dict[tuple[str, int], int] = defaultdict(int)
    by_article: dict[str, list[int]] = defaultdict(list)
    for p in passages:
        assert p["passage_id"] == f"{p['article_id']}:{p['passage_index']}"
        assert texts[p["article_id"]][p["char_start"] : p["char_end"]] == p["text"]
        assert p["n_words"] == len(p["text"].split())
        by_article[p["article_id"]].append(p["passage_index"])
        for b in set(p["block_indexes"]):
            covered[(p["article_id"], b)] += 1
    assert set(covered) == set(block_words)
    for idx in by_article.values():
        assert idx == list(range(len(idx)))
    long_blocks = [k for k, n in block_words.items() if n > 350]
    assert long_blocks, "the samples have paragraphs over 350 words"
    for key in long_blocks:
        assert covered[key] >= 2  # split into several passages

    # A passage under 15 words that shares its section is either not a sentence (a label,
    # code, a sequence line: never folded into prose, left to the filter) or a sentence whose
    # neighbours in the section could not take it (see the segment stage's docstring).
    def section(p: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
        return (p["article_id"], tuple(p["section_path"]))

    def joinable(p: dict[str, Any]) -> bool:
        prose = p["kind"] != "list" and p["n_words"] < 15
        return prose_like(p["text"]) if prose else not data_like(p["text"])

    for i, p in enumerate(passages):
        if p["n_words"] < 15 and p["kind"] != "list" and prose_like(p["text"]):
            around = [
                q for q in passages[max(i - 1, 0) : i] + passages[i + 1 : i + 2] if section(q) == section(p)
            ]
            assert not [q for q in around if q["kind"] != "list" and joinable(q)], p["text"]
    _accounting_holds(samples_run["segment"])


@needs_samples
def test_filter_keeps_scientific_paragraphs_and_drops_boilerplate(
    samples_run: dict[str, StageOutcome],
) -> None:
    outcome = samples_run["filter"]
    kept = _by(outcome.artifact.read(), "passage_id")
    excluded = outcome.artifact.excluded().to_pylist()
    total = len(kept) + len(excluded)
    assert total == samples_run["segment"].artifact.num_rows
    assert len(kept) / total >= 0.95
    assert {e["reason"] for e in excluded} <= set(RULES)
    for e in excluded:
        assert e["detail"].startswith(e["reason"])
    lysis = [p for p in kept.values() if p["article_id"] == "PMC3166277"]
    assert any(
        p["text"].startswith("Using a microscope-mounted, temperature-controlled perfusion") for p in lysis
    )
    # A trial-registration line of an abstract is not text (parse leaves it out); a short
    # abstract section without two of Gopher's eight stop words is (the scientific profile).
    texts = [p["text"] for p in kept.values()] + [e["text"] for e in excluded]
    assert not any("ISRCTN63787732" in t and len(t.split()) < 10 for t in texts)
    assert not [e for e in excluded if e["reason"] in ("min_alpha_word_ratio", "top_4gram_char_frac")]
    _accounting_holds(outcome)


def _broken_corpus(folder: Path) -> None:
    folder.mkdir()
    good = DEMO / "articles" / "demo1_dentistry_class2_timing.xml"
    shutil.copy(good, folder / "good.xml")
    shutil.copy(good, folder / "good_copy.xml")  # same bytes twice
    data = good.read_bytes()
    (folder / "truncated.xml").write_bytes(data[: len(data) // 2])
    (folder / "empty.xml").write_bytes(b"")
    (folder / "image.xml").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (folder / "latin1.xml").write_bytes(
        b'<?xml version="1.0" encoding="UTF-8"?><article><front><article-meta><title-group>'
        b"<article-title>Caf\xe9</article-title></title-group></article-meta></front></article>"
    )
    (folder / "menu.html").write_bytes(
        b'<html lang="en"><head><title>Menu</title></head><body><ul>'
        + b"".join(b'<li><a href="/s%d">Section %d</a></li>' % (i, i) for i in range(20))
        + b"</ul></body></html>"
    )
    (folder / "notes.txt").write_text("not an article")  # not a configured extension: never discovered


def test_broken_inputs_are_excluded_with_reasons_and_the_run_completes(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    _broken_corpus(corpus)
    out = run_cure(tmp_path / "artifacts", ["corpus"], tmp_path)
    ingest_excluded = {Path(r["source_path"]).name: r for r in out["ingest"].artifact.excluded().to_pylist()}
    assert {k: v["reason"] for k, v in ingest_excluded.items()} == {
        "good_copy.xml": "duplicate_content",
        "truncated.xml": "malformed_xml",
        "empty.xml": "empty_file",
        "image.xml": "binary_content",
        "latin1.xml": "undecodable",
    }
    assert "good.xml" in ingest_excluded["good_copy.xml"]["detail"]
    assert "0xe9" in ingest_excluded["latin1.xml"]["detail"]
    assert "line" in ingest_excluded["truncated.xml"]["detail"].lower()
    parse_excluded = out["parse"].artifact.excluded().to_pylist()
    assert [(Path(r["source_path"]).name, r["reason"]) for r in parse_excluded] == [("menu.html", "no_text")]
    assert out["filter"].artifact.num_rows > 10  # the good article went all the way through
    for outcome in out.values():
        _accounting_holds(outcome)


def test_same_article_twice_keeps_one_file(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    good = (DEMO / "articles" / "demo2_dermatology_psoriasis_nbuvb.xml").read_bytes()
    (corpus / "a.xml").write_bytes(good)
    (corpus / "b.xml").write_bytes(good.replace(b"</article>", b"<!-- another copy --></article>"))
    out = run_cure(tmp_path / "artifacts", ["corpus"], tmp_path, Selection(until="ingest"))
    assert [r["source_path"] for r in out["ingest"].artifact.read().to_pylist()] == ["corpus/a.xml"]
    (dropped,) = out["ingest"].artifact.excluded().to_pylist()
    assert (dropped["source_path"], dropped["reason"]) == ("corpus/b.xml", "duplicate_article")
    assert "PMC0000002" in dropped["detail"]


def test_duplicate_article_prefers_jats_over_html() -> None:
    rows = [
        {**dict.fromkeys(ingest.SCHEMA.names), "article_id": "doi:10.1/x", "source_path": p, "format": f,
         "digest": d, "size_bytes": 1, "encoding": "utf-8", "license": "unknown", "license_known": False}
        for p, f, d in [("a.html", "html", "1"), ("b.xml", "jats", "2")]
    ]  # fmt: skip
    result = ingest.finalize(pa.Table.from_pylist(rows, ingest.SCHEMA), None)  # type: ignore[arg-type]
    assert result.kept.column("source_path").to_pylist() == ["b.xml"]
    assert result.excluded.column("source_path").to_pylist() == ["a.html"]


def test_missing_source_folder_is_a_config_error(tmp_path: Path) -> None:
    from irforge.errors import ConfigError

    with pytest.raises(ConfigError, match=r"stages\.ingest\.sources\[0\]: no such folder.*'nowhere'"):
        run_cure(tmp_path / "artifacts", ["nowhere"], tmp_path)


def test_parse_refuses_a_file_changed_since_ingest(tmp_path: Path) -> None:
    path = tmp_path / "a.xml"
    path.write_bytes((DEMO / "articles" / "demo2_dermatology_psoriasis_nbuvb.xml").read_bytes())
    row = {"article_id": "PMC0000002", "source_path": "a.xml", "digest": "0" * 32}
    ctx = StageContext(ParseConfig(), tmp_path)
    result = parse_process(pa.Table.from_pylist([row]), ctx)
    assert result.kept.num_rows == 0
    assert result.excluded.column("reason").to_pylist() == ["changed_since_ingest"]


def _words(n: int, word: str = "word") -> str:
    return " ".join([word] * n)


def test_short_blocks_merge_forward_then_backward_never_across_sections() -> None:
    short, long = "Data are available on request.", _words(40)
    blocks = _blocks(
        ("paragraph", ("Methods",), short),
        ("paragraph", ("Methods",), long),
        ("paragraph", ("Methods",), long),
        ("paragraph", ("Methods",), short),  # last of its section: joins the passage before
        ("paragraph", ("Results",), short),  # alone in its section: stays alone
    )
    passages = segment_article(blocks, SegmentConfig())
    assert [p.blocks for p in passages] == [[0, 1], [2, 3], [4]]
    assert passages[0].text == short + BLOCK_SEPARATOR + long
    assert [p.section_path for p in passages] == [("Methods",), ("Methods",), ("Results",)]


def test_long_block_splits_at_sentences_into_balanced_pieces() -> None:
    sentence = "The patients were followed for twelve months after the end of treatment. "
    text = (sentence * 60).strip()  # 60 sentences of 12 words = 720 words
    (block,) = _blocks(("paragraph", ("Discussion",), text))
    passages = segment_article([block], SegmentConfig(split_above_words=350))
    assert len(passages) == 3  # ceil(720 / 350)
    assert all(p.n_words == 240 for p in passages)
    assert all(p.text.endswith("treatment.") for p in passages)
    assert BLOCK_SEPARATOR.join(p.text for p in passages).replace(BLOCK_SEPARATOR, " ") == text
    assert all(text[p.char_start : p.char_end] == p.text for p in passages)


def test_one_huge_sentence_is_never_cut() -> None:
    (block,) = _blocks(("paragraph", ("Results",), _words(500) + "."))
    assert len(segment_article([block], SegmentConfig(split_above_words=350))) == 1
