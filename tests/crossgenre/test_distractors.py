"""Stage ``distractors`` on the real MEDLINE files (and, for engine eutils, the fake NCBI).

Expected counts were read from the XML with ``zcat | sed | grep``: pubmed22n1114 (baseline
sample) holds 33 ``PubmedArticle`` elements, 28 distinct PMIDs (34853674 in versions 1-4,
34853675 in 1-3) and two records without ``<Abstract>`` (34872418, 34876690).
"""

from __future__ import annotations

import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from irforge.artifacts import Artifact
from irforge.errors import ConfigError
from tasks.common.pubmed.config import EutilsConfig, PubmedConfig
from tasks.common.pubmed.local import load_local
from tasks.crossgenre.corpus import CORPUS_SCHEMA, record_row
from tasks.crossgenre.stages.distractors import SPEC, DistractorsConfig
from tests.crossgenre.conftest import MEDLINE, artifact_of, run_one
from tests.fakes.eutils_server import FakeEutils

SAMPLE = "pubmed_sample/baseline/pubmed22n1114.xml.gz"
CITED = ["34867626", "34870689", "34874420"]  # gold.jsonl's p02, p06, p01 cite these


def _claims(root: Path, cited: list[str]) -> Artifact:
    records = load_local([(MEDLINE / SAMPLE, SAMPLE)]).records(cited)
    corpus = pa.Table.from_pylist([record_row(records[p]) for p in cited], schema=CORPUS_SCHEMA)
    queries = pa.table({"query_id": [f"q{p}" for p in cited], "page_id": [f"q{p}" for p in cited]})
    return artifact_of(root / "upstream", "claims", queries, {"corpus": corpus})


def _run(root: Path, base_dir: Path = MEDLINE, **config: Any) -> tuple[pa.Table, pa.Table]:
    outcome = run_one(root, SPEC, DistractorsConfig(**config), {"claims": _claims(root, CITED)}, base_dir)
    return outcome.artifact.read(), outcome.artifact.excluded()


def test_uncited_abstracts_of_one_real_file(tmp_path: Path) -> None:
    kept, excluded = _run(tmp_path, pubmed=PubmedConfig(medline=[SAMPLE]))
    reasons = Counter(excluded.column("reason").to_pylist())
    assert reasons == {"superseded": 5, "cited": 3, "no_abstract": 2}
    assert kept.num_rows == 28 - 3 - 2
    ids = kept.column("doc_id").to_pylist()
    assert ids == sorted(ids, key=int) and not set(ids) & {*CITED, "34872418", "34876690"}
    assert set(kept.column("source").to_pylist()) == {SAMPLE}
    superseded = excluded.filter(pc.equal(excluded.column("reason"), "superseded"))
    assert Counter(superseded.column("doc_id").to_pylist()) == {"34853674": 3, "34853675": 2}
    assert kept.schema.field("abstract").type == pa.large_string()
    row = kept.filter(pc.equal(kept.column("doc_id"), "34853674")).to_pylist()[0]
    assert row["abstract"] and row["title"].startswith("Seroprevalence and characterisation of herpes simp")


def test_a_seeded_sample_over_all_files_is_deterministic(tmp_path: Path) -> None:
    everything, excluded = _run(tmp_path / "all", pubmed=PubmedConfig(medline=["."]))
    assert everything.num_rows + excluded.num_rows == 1254  # every record element read is one unit
    assert Counter(excluded.column("reason").to_pylist())["superseded"] == 1254 - 1215
    first, dropped = _run(tmp_path / "a", pubmed=PubmedConfig(medline=["."]), max_docs=100, seed=42)
    again, _ = _run(tmp_path / "b", pubmed=PubmedConfig(medline=["."]), max_docs=100, seed=42)
    other, _ = _run(tmp_path / "c", pubmed=PubmedConfig(medline=["."]), max_docs=100, seed=7)
    chosen = first.column("doc_id").to_pylist()
    assert len(chosen) == 100 and chosen == again.column("doc_id").to_pylist()
    assert chosen != other.column("doc_id").to_pylist()
    assert set(chosen) < set(everything.column("doc_id").to_pylist())
    sampled_out = [r for r in dropped.to_pylist() if r["reason"] == "sampled_out"]
    assert len(sampled_out) == everything.num_rows - 100
    assert f"of {everything.num_rows} eligible abstracts (seed 42)" in sampled_out[0]["detail"]


def test_a_truncated_file_keeps_its_readable_records_and_reports_the_damage(tmp_path: Path) -> None:
    data = (MEDLINE / "testfiles" / "pubmed20n1016.xml.gz").read_bytes()
    files = tmp_path / "files"
    files.mkdir()
    (files / "cut.xml.gz").write_bytes(data[:100_000])
    complete = zlib.decompressobj(31).decompress(data[:100_000]).count(b"</PubmedArticle>")
    kept, excluded = _run(tmp_path, base_dir=files, pubmed=PubmedConfig(medline=["cut.xml.gz"]))
    [damage] = [r for r in excluded.to_pylist() if r["reason"] == "malformed_record"]
    assert damage["record"] == complete + 1 and damage["source"] == "cut.xml.gz" and damage["doc_id"] is None
    assert damage["detail"].startswith(f"cut.xml.gz record {complete + 1}: truncated")
    assert kept.num_rows + excluded.num_rows == complete + 1


def test_engine_eutils_fetches_the_listed_pmids(tmp_path: Path) -> None:
    listing = tmp_path / "pmids.txt"
    listing.write_text(
        "# distractor PMIDs\n34849994\n\n34874420\n34872418\nabc\n99999999\n34849994\n34853153\n",
        encoding="utf-8",
    )
    with FakeEutils([MEDLINE / SAMPLE]) as server:
        eutils = EutilsConfig(base_url=server.base_url, idconv_url=server.idconv_url, requests_per_second=100)
        config = {"pubmed": PubmedConfig(engine="eutils", eutils=eutils), "pmids_file": "pmids.txt"}
        kept, excluded = _run(tmp_path, base_dir=tmp_path, pmids=["34856980"], **config)
        fetched = [r.param("id") for r in server.requests]
    assert kept.column("doc_id").to_pylist() == ["34849994", "34853153", "34856980"]
    by_line = {(r["source"], r["record"]): (r["reason"], r["doc_id"]) for r in excluded.to_pylist()}
    assert by_line == {
        ("pmids.txt", 4): ("cited", "34874420"),
        ("pmids.txt", 5): ("no_abstract", "34872418"),
        ("pmids.txt", 6): ("malformed_record", None),
        ("pmids.txt", 7): ("not_in_pubmed", "99999999"),
        ("pmids.txt", 8): ("duplicate_pmid", "34849994"),
    }
    assert (
        kept.filter(pc.equal(kept.column("doc_id"), "34856980")).column("source")[0].as_py() == "config:pmids"
    )
    assert len(fetched) == 1 and "abc" not in (fetched[0] or "")


def test_the_pmid_list_belongs_to_engine_eutils(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="engine eutils needs pmids or pmids_file"):
        _run(tmp_path / "a", pubmed=PubmedConfig(engine="eutils"))
    with pytest.raises(ConfigError, match="pmids / pmids_file are for engine eutils"):
        _run(tmp_path / "b", pubmed=PubmedConfig(medline=[SAMPLE]), pmids=["1"])
    with pytest.raises(ConfigError, match=r"pmids_file: .*missing\.txt does not exist"):
        _run(tmp_path / "c", pubmed=PubmedConfig(engine="eutils"), pmids_file="missing.txt")
