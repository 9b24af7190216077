"""The PubMed port over local MEDLINE / PubMed XML files (the offline default).

Files are read in the order given (NLM's baseline before its update files), with NLM's update
semantics (https://www.nlm.nih.gov/databases/download/pubmed_medline_faq.html): a later
record of a PMID replaces the earlier one; within one file the highest ``<PMID Version>``
wins, and of equal versions the last one; ``<DeleteCitation>`` removes PMIDs read before it.
Every record element read is one :class:`Entry` saying what became of it (``current``,
``superseded``, ``deleted``, or why it could not be read), so a stage can account for all.

Identifier lookups (:meth:`LocalPubmed.pmids_for`): DOI case-insensitively, PMCID, PII as
written (``S0920-9964(19)30538-9``) or without punctuation (``S0920996419305389``, also
after a ``PII`` prefix as in Lancet URLs), which covers JAMA's numeric article ids that
MEDLINE stores as PII. A DOI or PMCID on several records gives the lowest PMID; a PII on
several records (numeric PIIs of different publishers collide) gives none.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from tasks.common.pubmed.medline import Citation, Deletion, Unreadable, read_medline
from tasks.common.pubmed.port import ArticleId, PubmedRecord
from tasks.common.text.identifiers import normalise_doi, normalise_pmcid

Fate = Literal["current", "superseded", "deleted", "book_article", "malformed_record", "damaged_file"]

_ELSEVIER_PII = re.compile(r"S(\d{4})(\d{3}[\dX])(\d{2})(\d{5})([\dX])")


@dataclass(frozen=True)
class Entry:
    """One record element read: where it is (``source`` as configured, 1-based ``number``),
    its PMID when known, and what became of it (``detail`` names the file and record)."""

    source: str
    number: int
    pmid: str | None
    fate: Fate
    detail: str


def pii_key(value: str) -> str:
    """A PII compared without case and punctuation: ``S0920-9964(19)30538-9`` → ``S0920996419305389``."""
    return re.sub(r"[^0-9A-Z]", "", value.upper())


def pii_keys(value: str) -> tuple[str, ...]:
    """The keys a written PII may match: itself, and without a ``PII`` prefix (``PIIS0140...``)."""
    key = pii_key(value)
    return (key, key[3:]) if key.startswith("PII") and len(key) > 3 else (key,)


def is_elsevier_pii(key: str) -> bool:
    """Whether ``key`` (a :func:`pii_key`) has an Elsevier PII's shape (``S0140673619323177``)."""
    return _ELSEVIER_PII.fullmatch(key) is not None


def pii_forms(value: str) -> tuple[str, ...]:
    """How PubMed may store a PII given as ``value``: as given, and for an Elsevier PII written
    without punctuation, Elsevier's written form (``S0920-9964(19)30538-9``)."""
    forms = [value.strip()]
    for key in pii_keys(value):
        if found := _ELSEVIER_PII.fullmatch(key):
            a, b, yy, serial, check = found.groups()
            forms.append(f"S{a}-{b}({yy}){serial}-{check}")
        forms.append(key)
    return tuple(dict.fromkeys(f for f in forms if f))


class _Reading:
    """The state while files are read in order: the current record of each PMID."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.current: dict[
            str, tuple[int, int, int, PubmedRecord]
        ] = {}  # pmid → entry, file, version, record

    def _retire(self, index: int, fate: Fate, detail: str) -> None:
        old = self.entries[index]
        self.entries[index] = Entry(old.source, old.number, old.pmid, fate, detail)

    def citation(self, item: Citation, source: str, file_index: int) -> None:
        pmid, here = item.record.pmid, f"{source} record {item.number}"
        known = self.current.get(pmid)
        if known is not None and known[1] == file_index and known[2] > item.version:
            later = self.entries[known[0]]
            detail = (
                f"{here}: version {item.version} of PMID {pmid}; record {later.number} has version {known[2]}"
            )
            self.entries.append(Entry(source, item.number, pmid, "superseded", detail))
            return
        if known is not None:
            self._retire(known[0], "superseded", f"PMID {pmid} is read again from {here}")
        self.current[pmid] = (len(self.entries), file_index, item.version, item.record)
        self.entries.append(Entry(source, item.number, pmid, "current", here))

    def deletion(self, item: Deletion, source: str) -> None:
        for pmid in item.pmids:
            known = self.current.pop(pmid, None)
            if known is not None:
                self._retire(known[0], "deleted", f"PMID {pmid} is deleted by a DeleteCitation in {source}")

    def unreadable(self, item: Unreadable, source: str) -> None:
        detail = f"{source} record {item.number}: {item.detail}"
        self.entries.append(Entry(source, item.number, item.pmid, item.reason, detail))


def scan_medline(files: Sequence[tuple[Path, str]]) -> tuple[list[Entry], dict[str, PubmedRecord]]:
    """Read ``(path, shown name)`` files in order: every entry, and the current record of each PMID."""
    reading = _Reading()
    for file_index, (path, source) in enumerate(files):
        for item in read_medline(path):
            if isinstance(item, Citation):
                reading.citation(item, source, file_index)
            elif isinstance(item, Deletion):
                reading.deletion(item, source)
            else:
                reading.unreadable(item, source)
    records = {pmid: state[3] for pmid, state in reading.current.items()}
    return reading.entries, records


class LocalPubmed:
    """:class:`~tasks.common.pubmed.port.PubmedSource` over records read from files (module doc)."""

    def __init__(self, entries: Sequence[Entry], records: Mapping[str, PubmedRecord]) -> None:
        self.entries = tuple(entries)
        self._records = dict(records)
        self._doi: dict[str, set[str]] = {}
        self._pmcid: dict[str, set[str]] = {}
        self._pii: dict[str, set[str]] = {}
        for pmid, record in self._records.items():
            if record.doi:
                self._doi.setdefault(normalise_doi(record.doi), set()).add(pmid)
            if record.pmcid:
                self._pmcid.setdefault(record.pmcid, set()).add(pmid)
            for pii in record.pii:
                for key in pii_keys(pii):
                    self._pii.setdefault(key, set()).add(pmid)

    def pmids_for(self, ids: Sequence[ArticleId]) -> dict[ArticleId, str | None]:
        return {article_id: self._pmid_of(article_id) for article_id in ids}

    def _pmid_of(self, article_id: ArticleId) -> str | None:
        value = article_id.value.strip()
        if article_id.kind == "pmid":
            return value if value in self._records else None
        if article_id.kind == "doi":
            return lowest_pmid(self._doi.get(normalise_doi(value), ()))
        if article_id.kind == "pmcid":
            pmcid = normalise_pmcid(value)
            return lowest_pmid(self._pmcid.get(pmcid, ())) if pmcid else None
        found = {pmid for key in pii_keys(value) for pmid in self._pii.get(key, ())}
        return next(iter(found)) if len(found) == 1 else None

    def records(self, pmids: Sequence[str]) -> dict[str, PubmedRecord]:
        return {p: self._records[p] for p in pmids if p in self._records}

    def all_records(self) -> Mapping[str, PubmedRecord]:
        """Every current record, by PMID (read-only: the reading is shared, see :func:`load_local`)."""
        return MappingProxyType(self._records)

    def close(self) -> None:
        pass


def lowest_pmid(pmids: Iterable[str]) -> str | None:
    """The numerically lowest PMID (the tie-break of an identifier on several records)."""
    return min(pmids, key=lambda p: (len(p), p), default=None)


@functools.lru_cache(maxsize=4)
def _cached_scan(files: tuple[tuple[Path, str, int, int], ...]) -> LocalPubmed:
    return LocalPubmed(*scan_medline([(path, source) for path, source, _size, _mtime in files]))


def load_local(files: Sequence[tuple[Path, str]]) -> LocalPubmed:
    """The files read once per process while they are unchanged (size and mtime): stages that
    plan, list and process the same files share one reading."""
    key = []
    for path, source in files:
        stat = path.stat()
        key.append((path, source, stat.st_size, stat.st_mtime_ns))
    return _cached_scan(tuple(key))
