"""Stage ``resolve`` on real MEDLINE records (local source): references → PMIDs → records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tasks.common.pubmed.config import EutilsConfig, PubmedConfig
from tasks.common.pubmed.port import PubmedError
from tasks.crossgenre.stages.resolve import INPUT_SCHEMA, SPEC, ResolveConfig
from tests.crossgenre.conftest import MEDLINE, NEWS, artifact_of, run_one
from tests.fakes.eutils_server import FakeEutils, RecordedRequest

FILES = [
    "testfiles/pubmed20n1016.xml.gz",
    "pubmed_sample/baseline/pubmed22n1114.xml.gz",
    "data-raw/baseline/pubmed20n1015.xml.gz",
    "extdata/pubmed20n0000.xml.gz",
]


def ref(kind: str, value: str, url: str | None = None) -> dict[str, Any]:
    return {"id_kind": kind, "id_value": value, "url": url}


def page(page_id: str, *cited: dict[str, Any]) -> dict[str, Any]:
    return {
        "page_id": page_id,
        "url": f"https://news.example/{page_id}",
        "site": "news.example",
        "headline": f"Headline of {page_id}",
        "published": "2021-12-08",
        "cited": list(cited),
    }


def run(root: Path, pages: list[dict[str, Any]], chunk_rows: int = 500, **config: Any) -> Any:
    upstream = artifact_of(root, "single_study", pa.Table.from_pylist(pages, schema=INPUT_SCHEMA))
    cfg = ResolveConfig(pubmed=PubmedConfig(engine="local", medline=FILES), **config)
    return run_one(root, SPEC, cfg, {"single_study": upstream}, base_dir=MEDLINE, chunk_rows=chunk_rows)


BAD_DOI = ref("doi", "10.9999/does-not-exist", "https://doi.org/10.9999/does-not-exist")
PAGES = [
    page("doi", ref("doi", "10.1001/JAMA.2021.20178", "https://doi.org/10.1001/jama.2021.20178")),
    page("pmid", ref("pmid", "31839957", "https://pubmed.ncbi.nlm.nih.gov/31839957/")),
    page(
        "pii_and_doi",  # a publisher link and a doi.org link to one paper: one PMID
        ref(
            "pii",
            "S0920-9964(19)30538-9",
            "https://www.sciencedirect.com/science/article/pii/S0920996419305389",
        ),
        ref("doi", "10.1016/j.schres.2019.11.031"),
    ),
    page("pmcid", ref("pmcid", "6878737")),
    page("pii_from_url", ref("pii", "S0920996419305389")),  # the PII as a link writes it
    page("bad_doi", BAD_DOI),
    page("not_in_pubmed", ref("pmid", "99999999")),
    page("no_abstract", ref("pmid", "31809477")),
    page("mixed", ref("pmid", "31839957"), BAD_DOI),
    page(
        "no_identifier",
        ref("url", "https://www.journal.example/article/42", "https://www.journal.example/article/42"),
    ),
]
BY_ID = {p["page_id"]: p for p in PAGES}
BAD_DOI_TEXT = "doi 10.9999/does-not-exist (https://doi.org/10.9999/does-not-exist)"


def test_references_resolve_to_pmids_and_failures_are_excluded(tmp_path: Path) -> None:
    outcome = run(tmp_path, PAGES)
    kept = {r["page_id"]: r["pmids"] for r in outcome.artifact.read().to_pylist()}
    assert kept == {
        "doi": ["34874420"],
        "pmid": ["31839957"],
        "pii_and_doi": ["31839552"],
        "pmcid": ["31839682"],
        "pii_from_url": ["31839552"],
    }
    excluded = {
        r["page_id"]: (r["reason"], r["pmid"], r["detail"]) for r in outcome.artifact.excluded().to_pylist()
    }
    assert excluded == {
        "bad_doi": ("unresolved_link", None, f"{BAD_DOI_TEXT}: no PMID for it in the local MEDLINE files"),
        # Local files are a subset: absent from them is not absent from PubMed, and says so.
        "not_in_pubmed": (
            "not_in_local_medline",
            "99999999",
            "99999999: no record in the local MEDLINE files (PubMed may have one: engine eutils asks it)",
        ),
        "no_abstract": ("no_abstract", "31809477", "31809477"),
        "mixed": ("unresolved_link", None, f"{BAD_DOI_TEXT}: no PMID for it in the local MEDLINE files"),
        "no_identifier": (
            "unresolved_link",
            None,
            "url https://www.journal.example/article/42: no PMID for it in the local MEDLINE files",
        ),
    }
    counts = outcome.artifact.manifest["counts"]
    assert counts["excluded_by_reason"] == {"no_abstract": 1, "not_in_local_medline": 1, "unresolved_link": 3}
    assert (counts["units_in"], counts["units_kept"]) == (10, 5)


def test_every_gold_study_doi_resolves_to_its_gold_pmid(tmp_path: Path) -> None:
    gold = [json.loads(line) for line in (NEWS / "gold.jsonl").read_text(encoding="utf-8").splitlines()]
    claims = [g for g in gold if g["expected_outcome"] == "claim"]
    assert len(claims) == 12
    pages = [page(g["file"], ref("doi", g["doi"], g["primary_study_link"])) for g in claims]
    upstream = artifact_of(tmp_path, "single_study", pa.Table.from_pylist(pages, schema=INPUT_SCHEMA))
    config = ResolveConfig(pubmed=PubmedConfig(engine="local", medline=["."]))  # every demo file
    outcome = run_one(tmp_path, SPEC, config, {"single_study": upstream}, base_dir=MEDLINE)
    assert outcome.artifact.excluded().num_rows == 0
    assert {r["page_id"]: r["pmids"] for r in outcome.artifact.read().to_pylist()} == {
        g["file"]: [g["pmid"]] for g in claims
    }


def test_records_hold_the_pubmed_record_of_each_kept_pmid(tmp_path: Path) -> None:
    records = run(tmp_path, PAGES).artifact.read(table="records").to_pylist()
    assert [r["pmid"] for r in records] == ["31839552", "31839682", "31839957", "34874420"]
    jama = records[-1]
    assert jama["title"].startswith("Effects of Mediterranean Diet or Mindfulness-Based Stress Reduction")
    assert (jama["journal"], jama["year"], jama["doi"]) == ("JAMA", 2021, "10.1001/jama.2021.20178")
    assert jama["labelled"] is True and len(jama["sections"]) == 8
    assert jama["sections"][0]["label"] == "Importance"
    assert jama["sections"][0]["text"].startswith("Being born small for gestational age (SGA)")
    assert "NCT03166332" in jama["abstract"]
    assert records[1]["pmcid"] == "PMC6878737"


def test_allow_partial_keeps_good_pmids_and_names_what_was_dropped(tmp_path: Path) -> None:
    outcome = run(tmp_path, [BY_ID["mixed"], BY_ID["bad_doi"]], allow_partial=True)
    kept = outcome.artifact.read().to_pylist()
    assert [(r["page_id"], r["pmids"]) for r in kept] == [("mixed", ["31839957"])]
    assert kept[0]["dropped"] == [
        "unresolved_link: doi 10.9999/does-not-exist (https://doi.org/10.9999/does-not-exist)"
    ]
    # Nothing good at all: still excluded.
    assert outcome.artifact.excluded().column("page_id").to_pylist() == ["bad_doi"]


def test_a_pmid_cited_from_two_chunks_has_a_record_in_each(tmp_path: Path) -> None:
    pages = [BY_ID["pmid"], BY_ID["doi"], page("again", ref("pmid", "31839957")), BY_ID["pmcid"]]
    outcome = run(tmp_path, pages, chunk_rows=2)
    pmids = outcome.artifact.read(table="records").column("pmid").to_pylist()
    assert pmids == ["31839957", "34874420", "31839682", "31839957"]  # sorted within each chunk


@pytest.mark.parametrize("missing", ["nowhere/pubmed99n0001.xml.gz"])
def test_a_missing_medline_file_is_a_one_line_error(tmp_path: Path, missing: str) -> None:
    upstream = artifact_of(
        tmp_path, "single_study", pa.Table.from_pylist([BY_ID["doi"]], schema=INPUT_SCHEMA)
    )
    cfg = ResolveConfig(pubmed=PubmedConfig(engine="local", medline=[missing]))
    with pytest.raises(Exception, match="pubmed99n0001") as err:
        run_one(tmp_path, SPEC, cfg, {"single_study": upstream}, base_dir=MEDLINE)
    assert "\n" not in str(err.value)


def _request_key(r: RecordedRequest) -> tuple[str, str]:
    return r.path, repr(sorted(r.params.items()))


@pytest.mark.parametrize(
    "answered_fetches",
    [
        pytest.param(1, id="check-fetch-fails"),
        pytest.param(2, id="records-fetch-fails"),
    ],
)
def test_eutils_failure_fails_the_stage_and_the_rerun_repeats_no_answered_request(
    tmp_path: Path, answered_fetches: int
) -> None:
    # Chunk 1 fetches records only (PMIDs as written). Chunk 2 converts a DOI (ID converter) and a
    # DOI + PII (esearch, then a fetch checking the hits), then fetches the records it lacks.
    pages = [BY_ID["pmid"], BY_ID["no_abstract"], BY_ID["doi"], BY_ID["pii_and_doi"]]
    upstream = artifact_of(tmp_path, "single_study", pa.Table.from_pylist(pages, schema=INPUT_SCHEMA))
    with FakeEutils([MEDLINE / f for f in FILES]) as server:
        eutils = EutilsConfig(
            base_url=server.base_url, idconv_url=server.idconv_url, max_attempts=2, requests_per_second=1000
        )
        config = ResolveConfig(pubmed=PubmedConfig(engine="eutils", eutils=eutils))

        def run_stage() -> Any:
            return run_one(tmp_path, SPEC, config, {"single_study": upstream}, chunk_rows=2)

        # Every attempt (max_attempts=2) of one fetch of chunk 2 fails.
        server.inject(500, times=2, after=answered_fetches, path="efetch.fcgi")
        with pytest.raises(PubmedError) as err:
            run_stage()
        assert "\n" not in str(err.value) and "500" in str(err.value)
        first = list(server.requests)
        fetches = [r.status for r in first if r.path.endswith("efetch.fcgi")]
        assert fetches == [200] * answered_fetches + [500, 500]
        assert any(r.status == 200 and not r.path.endswith("efetch.fcgi") for r in first)  # conversions

        outcome = run_stage()
        second = server.requests[len(first) :]
    assert outcome.state == "resumed" and outcome.artifact.manifest["chunks"] == {"total": 2, "resumed": 1}
    answered_before = {_request_key(r) for r in first if r.status == 200}
    assert second and not answered_before & {_request_key(r) for r in second}
    kept = {r["page_id"]: r["pmids"] for r in outcome.artifact.read().to_pylist()}
    assert kept == {"pmid": ["31839957"], "doi": ["34874420"], "pii_and_doi": ["31839552"]}
    assert outcome.artifact.excluded().column("reason").to_pylist() == ["no_abstract"]


def test_with_eutils_a_pmid_pubmed_lacks_is_not_in_pubmed(tmp_path: Path) -> None:
    pages = [BY_ID["pmid"], BY_ID["not_in_pubmed"]]
    upstream = artifact_of(tmp_path, "single_study", pa.Table.from_pylist(pages, schema=INPUT_SCHEMA))
    with FakeEutils([MEDLINE / f for f in FILES]) as server:
        eutils = EutilsConfig(
            base_url=server.base_url, idconv_url=server.idconv_url, requests_per_second=1000
        )
        config = ResolveConfig(pubmed=PubmedConfig(engine="eutils", eutils=eutils))
        outcome = run_one(tmp_path, SPEC, config, {"single_study": upstream})
    excluded = outcome.artifact.excluded().to_pylist()
    assert [(r["reason"], r["detail"]) for r in excluded] == [
        ("not_in_pubmed", "99999999: PubMed has no such record")
    ]
