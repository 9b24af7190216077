"""Both PubMed adapters answer the same: local MEDLINE files, and E-utilities (the real HTTP
client with its reply cache against ``tests/fakes/eutils_server.py`` serving the same files).

Expected PMIDs were read from the XML (``zcat | grep``) and from ``data/crossgenre/news/gold.jsonl``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.common.pubmed.config import EutilsConfig, PubmedConfig, pubmed_source
from tasks.common.pubmed.eutils import EutilsPubmed
from tasks.common.pubmed.local import LocalPubmed
from tasks.common.pubmed.port import ArticleId, PubmedSource
from tests.fakes.eutils_server import FakeEutils

MEDLINE = Path(__file__).resolve().parents[2] / "data" / "crossgenre" / "medline"
ALL_FILES = sorted(MEDLINE.rglob("*.xml.gz"))
RECORDS_THEN_UPDATE = [
    MEDLINE / "testfiles" / "pubmed20n1016.xml.gz",
    MEDLINE / "pubmed_sample" / "updatefiles" / "pubmed20n1016.xml.gz",
]


def _local(files: list[Path]) -> LocalPubmed:
    source = pubmed_source(PubmedConfig(medline=[str(f.relative_to(MEDLINE)) for f in files]), MEDLINE, None)
    assert isinstance(source, LocalPubmed)
    return source


def _eutils(server: FakeEutils, cache: Path) -> EutilsPubmed:
    config = EutilsConfig(base_url=server.base_url, idconv_url=server.idconv_url, requests_per_second=200)
    return EutilsPubmed(config, cache)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeEutils]:
    with FakeEutils(ALL_FILES) as fake:
        yield fake


@pytest.fixture(params=["local", "eutils"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PubmedSource]:
    if request.param == "local":
        yield _local(ALL_FILES)
        return
    eutils = _eutils(request.getfixturevalue("server"), tmp_path / "replies.sqlite")
    yield eutils
    eutils.close()


CASES = [
    (ArticleId("doi", "10.1001/JAMA.2021.20178"), "34874420"),  # in PMC: the ID converter knows it
    (ArticleId("doi", "10.1056/nejmoa1911149"), "31826360"),  # not in PMC: found by esearch
    (ArticleId("doi", "https://doi.org/10.1016/S2213-2600(19)30271-1"), "31839558"),
    (ArticleId("doi", "10.12688/f1000research.19766.3"), "31814964"),  # the DOI of the current version
    (ArticleId("pmcid", "PMC8652606"), "34874420"),
    (ArticleId("pmcid", "pmc8636330"), "34867626"),
    (ArticleId("pii", "S0920-9964(19)30538-9"), "31839552"),
    (ArticleId("pii", "S0920996419305389"), "31839552"),  # ScienceDirect URLs drop the punctuation
    (ArticleId("pii", "PIIS0140-6736(22)02324-8"), "36442484"),  # The Lancet's URL form
    (ArticleId("pii", "2786581"), "34870689"),  # JAMA's numeric article id, stored as PII
    (ArticleId("pii", "2844426"), "41604152"),
    (ArticleId("pmid", "31839957"), "31839957"),
    (ArticleId("pmid", "99999999"), None),
    (ArticleId("pmid", "abc"), None),
    (ArticleId("doi", "10.1234/not.in.pubmed"), None),
    (ArticleId("doi", "10.12688/f1000research.19766.1"), None),  # a superseded version's DOI
    (ArticleId("pii", "S0000-0000(00)00000-0"), None),
    (ArticleId("pmcid", "PMC1"), None),
]


def test_identifiers_map_to_the_same_pmids(source: PubmedSource) -> None:
    found = source.pmids_for([article_id for article_id, _ in CASES])
    assert found == dict(CASES)


def test_records_carry_the_current_version(source: PubmedSource) -> None:
    records = source.records(["31814964", "33272385", "99999999", "31839558"])
    assert sorted(records) == ["31814964", "31839558", "33272385"]
    assert records["31814964"].doi == "10.12688/f1000research.19766.3"
    assert records["33272385"].abstract == "" and records["33272385"].pmcid == "PMC7553140"
    assert records["31839558"].labelled and records["31839558"].sections[2].label == "FINDINGS"


def test_every_record_round_trips_through_efetch_unchanged(server: FakeEutils, tmp_path: Path) -> None:
    local = _local(ALL_FILES)
    pmids = sorted(local.all_records(), key=int)
    assert len(pmids) == 1215
    with_eutils = _eutils(server, tmp_path / "replies.sqlite")
    try:
        fetched = with_eutils.records(pmids)
    finally:
        with_eutils.close()
    assert fetched == local.records(pmids)


def test_a_deleted_pmid_is_absent_from_both(tmp_path: Path) -> None:
    local = _local(RECORDS_THEN_UPDATE)
    with FakeEutils(RECORDS_THEN_UPDATE) as fake:
        remote = _eutils(fake, tmp_path / "replies.sqlite")
        try:
            for adapter in (local, remote):
                assert sorted(adapter.records(["31839613", "31839558"])) == ["31839558"]
                assert adapter.pmids_for([ArticleId("pmid", "31839613")]) == {
                    ArticleId("pmid", "31839613"): None
                }
        finally:
            remote.close()
