"""Reading MEDLINE / PubMed XML, streaming, with what could not be read said, not dropped.

Formats: NLM's ``<PubmedArticleSet>`` (the baseline and update files, and what ``efetch
db=pubmed retmode=xml`` answers: ``PubmedArticle`` = ``MedlineCitation`` + ``PubmedData``;
``PubmedBookArticle`` is skipped with a reason) and the older ``<MedlineCitationSet>`` (bare
``MedlineCitation`` elements). Element meanings: https://www.nlm.nih.gov/bsd/mms/medlineelements.html;
DTD: https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd. Files are ``.xml`` or gzip
(sniffed by magic number, whatever the name).

:func:`read_medline` yields, in document order, one item per top-level element: a
:class:`Citation` (a record read), a :class:`Deletion` (``<DeleteCitation>``) or an
:class:`Unreadable` (a book article, a record without a usable PMID, or the damage that ends
a truncated or malformed file: the records before it are still yielded). Records are numbered
1, 2, ... in file order (``DeleteCitation`` is not a record). Update semantics across files
live in :mod:`tasks.common.pubmed.local`.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from lxml import etree

from tasks.common.pubmed.port import PubmedRecord, Section
from tasks.common.text.identifiers import normalise_pmcid

_ROOTS = ("PubmedArticleSet", "MedlineCitationSet")
_RECORDS = ("PubmedArticle", "PubmedBookArticle", "MedlineCitation")
_YEAR = re.compile(r"\b(1[5-9]\d\d|2\d\d\d)\b")
_GZIP_MAGIC = b"\x1f\x8b"

UnreadableReason = Literal["book_article", "malformed_record", "damaged_file"]


@dataclass(frozen=True)
class Citation:
    number: int
    record: PubmedRecord
    version: int  # ``<PMID Version>``: versioned records (e.g. F1000Research) share a PMID
    xml: str | None = None  # the element's own XML, when asked for (a reply cache keeps it)


@dataclass(frozen=True)
class Deletion:
    pmids: tuple[str, ...]


@dataclass(frozen=True)
class Unreadable:
    number: int  # the record that could not be read (for damage: the first one not read)
    reason: UnreadableReason
    detail: str
    pmid: str | None = None


Item = Citation | Deletion | Unreadable


def read_medline(path: Path, *, keep_xml: bool = False) -> Iterator[Item]:
    """The items of one MEDLINE/PubMed XML file (module docstring). A file that cannot be
    opened is one :class:`Unreadable` ``damaged_file`` item."""
    try:
        raw = path.open("rb")
    except OSError as err:
        yield Unreadable(1, "damaged_file", f"cannot open: {err.strerror}")
        return
    with raw:
        magic = raw.read(2)
        raw.seek(0)
        stream = _Gunzip(raw) if magic == _GZIP_MAGIC else raw
        yield from _items(stream, keep_xml)


def read_medline_bytes(data: bytes, *, keep_xml: bool = False) -> Iterator[Item]:
    """The items of one XML document held in memory (an ``efetch`` reply)."""
    yield from _items(io.BytesIO(data), keep_xml)


class _Gunzip:
    """Gzip members decompressed as they are read. A truncated or corrupt stream ends the data
    instead of raising, so the parser still delivers every element before the damage
    (:class:`gzip.GzipFile` loses its buffered tail then); the damage is kept in ``error``."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(31)
        self._buffer = b""
        self._done = False
        self.error: str | None = None

    def read(self, size: int = -1) -> bytes:
        while not self._done and (size < 0 or len(self._buffer) < size):
            chunk = self._raw.read(1 << 16)
            if not chunk:
                if not self._inflate.eof:
                    self.error = "truncated: the gzip data ends before its end-of-stream marker"
                self._done = True
                break
            try:
                self._buffer += self._inflate_chunk(chunk)
            except zlib.error as err:
                self.error = f"corrupt gzip data: {_one_line(str(err))}"
                self._done = True
        if size < 0:
            out, self._buffer = self._buffer, b""
        else:
            out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out

    def _inflate_chunk(self, chunk: bytes) -> bytes:
        data = b""
        while chunk:
            if self._inflate.eof:  # the next member of a multi-member file
                self._inflate = zlib.decompressobj(31)
            data += self._inflate.decompress(chunk)
            chunk = self._inflate.unused_data if self._inflate.eof else b""
        return data


def _items(stream: IO[bytes] | _Gunzip, keep_xml: bool) -> Iterator[Item]:
    context = etree.iterparse(
        stream,
        events=("end",),
        tag=(*_RECORDS, "DeleteCitation"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
    )
    number = 0
    try:
        for _event, element in context:
            parent = element.getparent()
            if parent is None or parent.getparent() is not None:
                continue  # a MedlineCitation inside a PubmedArticle: handled with its article
            if parent.tag not in _ROOTS:
                yield Unreadable(number + 1, "damaged_file", f"not MEDLINE/PubMed XML: root <{parent.tag}>")
                return
            if element.tag == "DeleteCitation":
                yield Deletion(tuple(t for p in element.iterfind("PMID") if (t := _text(p))))
            else:
                number += 1
                yield _record_item(element, number, keep_xml)
            element.clear(keep_tail=True)
            while element.getprevious() is not None:
                del parent[0]
    except etree.XMLSyntaxError as err:
        failure = getattr(stream, "error", None) or f"malformed XML: {_one_line(str(err))}"
        yield Unreadable(number + 1, "damaged_file", failure)
        return
    root = getattr(context, "root", None)
    if number == 0 and root is not None and root.tag not in _ROOTS:
        yield Unreadable(1, "damaged_file", f"not MEDLINE/PubMed XML: root <{root.tag}>")


def _record_item(element: Any, number: int, keep_xml: bool) -> Item:
    if element.tag == "PubmedBookArticle":
        pmid = _text(element.find("BookDocument/PMID")) or None
        return Unreadable(number, "book_article", "a PubMed Bookshelf record (no journal article)", pmid)
    citation = element if element.tag == "MedlineCitation" else element.find("MedlineCitation")
    pmid_el = None if citation is None else citation.find("PMID")
    pmid = _text(pmid_el)
    if citation is None or not pmid.isdigit():
        return Unreadable(number, "malformed_record", f"no numeric PMID (got {pmid[:40]!r})", pmid or None)
    version_text = pmid_el.get("Version", "1") if pmid_el is not None else "1"
    version = int(version_text) if version_text.isdigit() else 1
    xml = etree.tostring(element, encoding="unicode") if keep_xml else None
    data = element.find("PubmedData")
    return Citation(number, record_of(citation, data), version, xml)


def record_of(citation: Any, data: Any = None) -> PubmedRecord:
    """The record of a ``MedlineCitation`` element (and its article's ``PubmedData``, if any)."""
    article = citation.find("Article")
    if article is None:
        article = etree.Element("Article")
    sections = _sections(article)
    ids = {} if data is None else _article_ids(data)
    elocations = [
        (e.get("EIdType", ""), _text(e)) for e in article.iterfind("ELocationID") if e.get("ValidYN") != "N"
    ]
    doi = ids.get("doi", [None])[0] or next((v for k, v in elocations if k == "doi" and v), None)
    pmcid = next((p for v in ids.get("pmc", []) if (p := normalise_pmcid(v))), None) or _other_pmcid(citation)
    pii = tuple(dict.fromkeys([*ids.get("pii", []), *(v for k, v in elocations if k == "pii" and v)]))
    issue = article.find("Journal/JournalIssue")
    return PubmedRecord(
        pmid=_text(citation.find("PMID")),
        title=_text(article.find("ArticleTitle")) or _text(article.find("VernacularTitle")),
        abstract="\n\n".join(s.text for s in sections),
        sections=sections,
        labelled=any(s.label for s in sections),
        mesh=tuple(
            t for d in citation.iterfind("MeshHeadingList/MeshHeading/DescriptorName") if (t := _text(d))
        ),
        publication_types=tuple(
            t for p in article.iterfind("PublicationTypeList/PublicationType") if (t := _text(p))
        ),
        journal=_text(article.find("Journal/Title")) or _text(citation.find("MedlineJournalInfo/MedlineTA")),
        year=_year(issue),
        doi=doi,
        pmcid=pmcid,
        pii=pii,
        authors=_authors(article),
        volume=_text(None if issue is None else issue.find("Volume")) or None,
        issue=_text(None if issue is None else issue.find("Issue")) or None,
    )


def _sections(article: Any) -> tuple[Section, ...]:
    out = []
    for part in article.iterfind("Abstract/AbstractText"):
        text = _text(part)
        if not text:
            continue
        label = part.get("Label") or ""
        if not label and part.get("NlmCategory") not in (None, "", "UNASSIGNED"):
            label = part.get("NlmCategory").capitalize()
        out.append(Section(label.strip(), text))
    return tuple(out)


def _article_ids(data: Any) -> dict[str, list[str]]:
    """``PubmedData/ArticleIdList`` by IdType (the article's own ids, not its references')."""
    ids: dict[str, list[str]] = {}
    for item in data.iterfind("ArticleIdList/ArticleId"):
        if value := _text(item):
            ids.setdefault(item.get("IdType", ""), []).append(value)
    return ids


def _other_pmcid(citation: Any) -> str | None:
    """The PMCID the older format gives as ``<OtherID Source="NLM">PMC123 [Available on ...]``."""
    for other in citation.iterfind("OtherID"):
        value = _text(other).split(" ")[0]
        if other.get("Source") == "NLM" and value.upper().startswith("PMC"):
            return normalise_pmcid(value)
    return None


def _year(issue: Any) -> int | None:
    if issue is None:
        return None
    year = _text(issue.find("PubDate/Year"))
    if year.isdigit():
        return int(year)
    found = _YEAR.search(_text(issue.find("PubDate/MedlineDate")))
    return int(found.group(1)) if found else None


def _authors(article: Any) -> tuple[str, ...]:
    names = []
    for author in article.iterfind("AuthorList/Author"):
        if author.get("ValidYN") == "N":
            continue
        last = _text(author.find("LastName"))
        name = (
            f"{last} {_text(author.find('Initials'))}".strip()
            if last
            else _text(author.find("CollectiveName"))
        )
        if name:
            names.append(name)
    return tuple(names)


def _text(element: Any) -> str:
    """The element's text with its inline markup's text (``<i>``, ``<sup>`` ...), spaces collapsed."""
    if element is None:
        return ""
    return " ".join("".join(element.itertext()).split())


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
