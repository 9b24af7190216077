"""The MEDLINE/PubMed XML reader, the update semantics across files and the local adapter.

Expected values were read from the XML with ``zcat | grep`` (not produced by the reader):
``data/crossgenre/medline/`` is real NLM data (README there lists its quirks).
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest

from irforge.errors import ConfigError
from tasks.common.pubmed.config import PubmedConfig, describe_pubmed, medline_files, pubmed_source
from tasks.common.pubmed.local import LocalPubmed, load_local, pii_forms, scan_medline
from tasks.common.pubmed.medline import Citation, Deletion, Unreadable, read_medline, read_medline_bytes
from tasks.common.pubmed.port import ArticleId

MEDLINE = Path(__file__).resolve().parents[2] / "data" / "crossgenre" / "medline"
TESTFILE = MEDLINE / "testfiles" / "pubmed20n1016.xml.gz"
UPDATE_1016 = MEDLINE / "pubmed_sample" / "updatefiles" / "pubmed20n1016.xml.gz"


def _citations(path: Path) -> dict[str, Citation]:
    return {i.record.pmid: i for i in read_medline(path) if isinstance(i, Citation)}


def test_a_structured_abstract_with_its_labels_ids_and_authors() -> None:
    record = _citations(TESTFILE)["31839558"].record
    assert record.title == (
        "Effect of obstructive sleep apnoea and its treatment with continuous positive airway pressure on "
        "the prevalence of cardiovascular events in patients with acute coronary syndrome (ISAACC study): "
        "a randomised controlled trial."
    )
    assert [s.label for s in record.sections] == [
        "BACKGROUND",
        "METHODS",
        "FINDINGS",
        "INTERPRETATION",
        "FUNDING",
    ]
    assert record.labelled
    assert record.sections[-1].text.startswith("ResMed (Australia), Fondo de Investigación Sanitaria")
    assert record.abstract == "\n\n".join(s.text for s in record.sections)
    # The DOI is both in ELocationID and in PubmedData/ArticleIdList; the PII too.
    assert record.doi == "10.1016/S2213-2600(19)30271-1"
    assert record.pii == ("S2213-2600(19)30271-1",)
    assert record.pmcid is None
    assert record.journal == "The Lancet. Respiratory medicine"
    assert record.year == 2019
    assert (record.volume, record.issue) == (None, None)  # ahead of print
    assert record.authors[:2] == ("Sánchez-de-la-Torre M", "Sánchez-de-la-Torre A")
    assert len(record.authors) == 27 and "Spanish Sleep Network" in record.authors
    assert record.publication_types[0] == "Journal Article"


def test_a_record_without_abstract_keeps_its_metadata() -> None:
    record = _citations(MEDLINE / "pubmed_sample" / "baseline" / "pubmed21n1062.xml.gz")["33272385"].record
    assert (record.abstract, record.sections, record.labelled) == ("", (), False)
    assert (
        record.title
        == "Reply: Insights From HeartLogic Multisensor Monitoring During the COVID-19 Pandemic in New York City."
    )
    assert record.publication_types == ("Letter", "Comment")
    assert (record.journal, record.year, record.volume, record.issue) == (
        "JACC. Heart failure",
        2020,
        "8",
        "12",
    )
    assert (record.pmcid, record.doi, record.pii) == (
        "PMC7553140",
        "10.1016/j.jchf.2020.10.001",
        ("S2213-1779(20)30562-X",),
    )


def test_inline_markup_text_is_kept_and_medline_dates_give_a_year() -> None:
    versions = [i for i in read_medline(TESTFILE) if isinstance(i, Citation) and i.record.pmid == "31828225"]
    assert [v.version for v in versions] == [2, 3, 4]
    assert versions[-1].record.title == (
        "Detection of diverse Wolbachia 16S rRNA sequences at low titers from malaria vectors in Kayin state, Myanmar."
    )
    record = _citations(UPDATE_1016)["30716142"].record  # <MedlineDate>2019 May/June</MedlineDate>
    assert record.year == 2019
    assert record.journal == "The International journal of oral & maxillofacial implants"


def test_every_real_file_reads_whole_and_the_counts_match_the_files() -> None:
    files = medline_files(PubmedConfig(medline=["."]), MEDLINE)
    assert len(files) == 18 and files[0][1] == "data-raw/baseline/pubmed20n1015.xml.gz"
    entries, records = scan_medline(files)
    # 1,254 <PubmedArticle> elements in the 18 files (grep -o | wc -l), 1,215 distinct PMIDs.
    assert len(entries) == 1254
    assert len(records) == 1215
    assert sum(e.fate == "superseded" for e in entries) == 1254 - 1215
    assert all(e.fate in ("current", "superseded") for e in entries)


def test_within_a_file_the_highest_version_wins() -> None:
    entries, records = scan_medline(
        [(MEDLINE / "data-raw" / "baseline" / "pubmed20n1015.xml.gz", "b.xml.gz")]
    )
    # Versions 1, 2 and 3 of an F1000Research article, each with its versioned DOI.
    assert records["31814964"].doi == "10.12688/f1000research.19766.3"
    fates = [e.fate for e in entries if e.pmid == "31814964"]
    assert fates == ["superseded", "superseded", "current"]
    # its ArticleIdList says PMC6883395.3: the PMC id is kept without the version
    assert records["31814964"].pmcid == "PMC6883395"


def test_a_later_file_replaces_a_record_and_a_delete_citation_removes_it() -> None:
    baseline = MEDLINE / "data-raw" / "baseline" / "pubmed20n1015.xml.gz"
    sample = MEDLINE / "pubmed_sample" / "baseline" / "pubmed20n1015.xml.gz"
    entries, _records = scan_medline([(baseline, "a"), (sample, "b")])
    [first, second] = [e for e in entries if e.pmid == "31826360"]
    assert (first.source, first.fate) == ("a", "superseded") and "read again from b" in first.detail
    assert (second.source, second.fate) == ("b", "current")

    # 31839613 is a record of testfiles/…1016 and in the DeleteCitation of updatefiles/…1016.
    entries, records = scan_medline([(TESTFILE, "records"), (UPDATE_1016, "update")])
    assert "31839613" not in records and "31839618" not in records
    [deleted] = [e for e in entries if e.pmid == "31839613"]
    assert deleted.fate == "deleted" and "DeleteCitation in update" in deleted.detail
    _entries, records = scan_medline([(UPDATE_1016, "update"), (TESTFILE, "records")])
    assert "31839613" in records  # deleted before it was read: the later record stands


def test_the_update_file_has_a_delete_citation_item() -> None:
    deletions = [i for i in read_medline(UPDATE_1016) if isinstance(i, Deletion)]
    assert len(deletions) == 1
    assert len(deletions[0].pmids) == 262 and "31839613" in deletions[0].pmids


def _complete_records(xml: bytes) -> int:
    return xml.count(b"</PubmedArticle>")


def test_a_truncated_gzip_file_keeps_the_records_before_the_damage(tmp_path: Path) -> None:
    data = TESTFILE.read_bytes()
    cut = tmp_path / "cut.xml.gz"
    cut.write_bytes(data[: len(data) // 2])
    readable = zlib.decompressobj(31).decompress(data[: len(data) // 2])
    items = list(read_medline(cut))
    citations = [i for i in items if isinstance(i, Citation)]
    assert len(citations) == _complete_records(readable) > 300
    damage = items[-1]
    assert isinstance(damage, Unreadable) and damage.reason == "damaged_file"
    assert damage.number == len(citations) + 1 and "truncated" in damage.detail

    entries, records = scan_medline([(cut, "cut.xml.gz")])
    assert len(records) == len(citations)
    assert entries[-1].fate == "damaged_file"
    assert entries[-1].detail.startswith(f"cut.xml.gz record {len(citations) + 1}: truncated")


def test_truncated_or_foreign_xml_is_reported_not_raised(tmp_path: Path) -> None:
    xml = gzip.decompress(TESTFILE.read_bytes())[:200_000]
    items = list(read_medline_bytes(xml))
    assert sum(isinstance(i, Citation) for i in items) == _complete_records(xml)
    assert isinstance(items[-1], Unreadable) and items[-1].detail.startswith("malformed XML")

    [foreign] = read_medline_bytes(b"<article><front><article-meta/></front></article>")
    assert isinstance(foreign, Unreadable) and "root <article>" in foreign.detail
    [missing] = read_medline(tmp_path / "nowhere.xml")
    assert (
        isinstance(missing, Unreadable)
        and missing.reason == "damaged_file"
        and "cannot open" in missing.detail
    )


OLD_FORMAT = b"""<?xml version="1.0"?>
<MedlineCitationSet>
<MedlineCitation Owner="NLM" Status="MEDLINE">
  <PMID>11111111</PMID>
  <Article>
    <Journal><JournalIssue><Volume>12</Volume><Issue>3</Issue>
      <PubDate><MedlineDate>1998 Winter-Spring</MedlineDate></PubDate></JournalIssue>
      <Title>Journal of made-up results</Title></Journal>
    <ArticleTitle>Salt and <i>mice</i>: a trial.</ArticleTitle>
    <ELocationID EIdType="doi" ValidYN="Y">10.5555/Made.Up.1</ELocationID>
    <Abstract><AbstractText>One paragraph   over
      two lines.</AbstractText></Abstract>
    <AuthorList><Author><LastName>Roe</LastName><Initials>JA</Initials></Author>
      <Author ValidYN="N"><LastName>Wrong</LastName><Initials>X</Initials></Author>
      <Author><CollectiveName>Salt Study Group</CollectiveName></Author></AuthorList>
    <PublicationTypeList><PublicationType>Clinical Trial</PublicationType></PublicationTypeList>
  </Article>
  <MedlineJournalInfo><MedlineTA>J Made Up</MedlineTA></MedlineJournalInfo>
  <OtherID Source="NLM">PMC123456 [Available on 1999-01-01]</OtherID>
  <MeshHeadingList><MeshHeading><DescriptorName>Sodium Chloride</DescriptorName></MeshHeading></MeshHeadingList>
</MedlineCitation>
<MedlineCitation><PMID>not-a-pmid</PMID><Article><ArticleTitle>x</ArticleTitle></Article></MedlineCitation>
<MedlineCitation><PMID>22222222</PMID><Article><ArticleTitle>Second</ArticleTitle></Article></MedlineCitation>
<DeleteCitation><PMID>22222222</PMID></DeleteCitation>
</MedlineCitationSet>
"""


def test_the_older_medline_citation_set_format(tmp_path: Path) -> None:
    path = tmp_path / "old.xml"
    path.write_bytes(OLD_FORMAT)
    items = list(read_medline(path))
    first = items[0]
    assert isinstance(first, Citation) and first.number == 1
    record = first.record
    assert record.title == "Salt and mice: a trial."
    assert record.abstract == "One paragraph over two lines." and not record.labelled
    assert record.doi == "10.5555/Made.Up.1"  # from ELocationID: this format has no PubmedData
    assert record.pmcid == "PMC123456"
    assert (record.year, record.volume, record.issue) == (1998, "12", "3")
    assert record.authors == ("Roe JA", "Salt Study Group")
    assert record.mesh == ("Sodium Chloride",) and record.publication_types == ("Clinical Trial",)
    malformed = items[1]
    assert isinstance(malformed, Unreadable) and (malformed.number, malformed.reason) == (
        2,
        "malformed_record",
    )
    assert isinstance(items[3], Deletion) and items[3].pmids == ("22222222",)

    entries, records = scan_medline([(path, "old.xml")])
    assert list(records) == ["11111111"]
    assert [(e.number, e.fate) for e in entries] == [(1, "current"), (2, "malformed_record"), (3, "deleted")]


BOOK_AND_IDS = b"""<PubmedArticleSet>
<PubmedBookArticle><BookDocument><PMID Version="1">33333333</PMID></BookDocument></PubmedBookArticle>
<PubmedArticle><MedlineCitation><PMID Version="1">44444444</PMID><Article>
  <ArticleTitle>A</ArticleTitle><ELocationID EIdType="doi" ValidYN="Y">10.1/elocation</ELocationID>
  <ELocationID EIdType="pii" ValidYN="Y">5550001</ELocationID>
  <Abstract><AbstractText NlmCategory="METHODS">Methods only.</AbstractText></Abstract></Article></MedlineCitation>
  <PubmedData><ArticleIdList><ArticleId IdType="pubmed">44444444</ArticleId>
  <ArticleId IdType="doi">10.1/Shared</ArticleId><ArticleId IdType="pii">5550001</ArticleId></ArticleIdList>
  <ReferenceList><Reference><ArticleIdList><ArticleId IdType="doi">10.9/cited</ArticleId></ArticleIdList>
  </Reference></ReferenceList></PubmedData></PubmedArticle>
<PubmedArticle><MedlineCitation><PMID Version="1">4444</PMID><Article><ArticleTitle>B</ArticleTitle></Article>
  </MedlineCitation><PubmedData><ArticleIdList><ArticleId IdType="doi">10.1/shared</ArticleId>
  <ArticleId IdType="pii">555-0001</ArticleId></ArticleIdList></PubmedData></PubmedArticle>
</PubmedArticleSet>"""


def test_book_articles_are_skipped_with_a_reason_and_identifier_ties_are_explicit(tmp_path: Path) -> None:
    path = tmp_path / "ids.xml"
    path.write_bytes(BOOK_AND_IDS)
    items = list(read_medline(path))
    assert isinstance(items[0], Unreadable) and (items[0].reason, items[0].pmid) == (
        "book_article",
        "33333333",
    )
    record = _citations(path)["44444444"].record
    assert (
        record.doi == "10.1/Shared"
    )  # ArticleIdList before ELocationID; a reference's DOI is not the article's
    assert record.pii == ("5550001",)
    assert [(s.label, s.text) for s in record.sections] == [("Methods", "Methods only.")]

    source = LocalPubmed(*scan_medline([(path, "ids.xml")]))
    found = source.pmids_for(
        [ArticleId("doi", "10.1/SHARED"), ArticleId("pii", "5550001"), ArticleId("doi", "10.9/cited")]
    )
    # A DOI on two records: the lowest PMID; a PII on two records (they collide): none.
    assert list(found.values()) == ["4444", None, None]


def test_pii_forms_give_elsevier_s_written_form() -> None:
    assert pii_forms("S0920996419305389") == ("S0920996419305389", "S0920-9964(19)30538-9")
    assert "S0140-6736(22)02324-8" in pii_forms("PIIS0140-6736(22)02324-8")
    assert pii_forms("2786581") == ("2786581",)


def test_the_config_lists_files_in_order_and_fails_on_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"pubmed\.medline is empty"):
        medline_files(PubmedConfig(), MEDLINE)
    with pytest.raises(ConfigError, match=r"pubmed.medline: .*nowhere.xml does not exist"):
        medline_files(PubmedConfig(medline=["nowhere.xml"]), MEDLINE)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"holds no \.xml or \.xml\.gz file"):
        medline_files(PubmedConfig(medline=["empty"]), tmp_path)
    config = PubmedConfig(
        medline=["pubmed_sample/updatefiles/pubmed20n1016.xml.gz", "pubmed_sample/baseline"]
    )
    names = [name for _path, name in medline_files(config, MEDLINE)]
    assert names[0] == "pubmed_sample/updatefiles/pubmed20n1016.xml.gz"
    assert names[1:] == sorted(names[1:]) and len(names) == 8
    described = describe_pubmed(config, MEDLINE)
    assert described["engine"] == "local" and [n for n, _d in described["files"]] == names
    assert describe_pubmed(PubmedConfig(engine="eutils"), MEDLINE) == {"engine": "eutils"}


def test_the_local_source_is_read_once_per_process_while_files_are_unchanged(tmp_path: Path) -> None:
    config = PubmedConfig(medline=["pubmed_sample/baseline/pubmed22n1114.xml.gz"])
    first = pubmed_source(config, MEDLINE, None)
    assert pubmed_source(config, MEDLINE, tmp_path) is first
    assert isinstance(first, LocalPubmed) and "34874420" in first.all_records()
    copy = tmp_path / "copy.xml.gz"
    copy.write_bytes((MEDLINE / "pubmed_sample/baseline/pubmed22n1114.xml.gz").read_bytes())
    before = load_local([(copy, "copy")])
    copy.write_bytes(gzip.compress(b"<PubmedArticleSet></PubmedArticleSet>"))
    assert load_local([(copy, "copy")]) is not before
    assert not load_local([(copy, "copy")]).all_records()
