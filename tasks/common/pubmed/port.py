"""PubMed records by identifier: the port every PubMed source implements.

Two adapters (``tasks/common/pubmed/config.py`` builds the configured one): local MEDLINE /
PubMed XML files (NLM's baseline and update files, https://www.nlm.nih.gov/databases/download/pubmed_medline.html)
and NCBI's E-utilities (ID converter and ``efetch``,
https://www.ncbi.nlm.nih.gov/books/NBK25501/, https://pmc.ncbi.nlm.nih.gov/tools/id-converter-api/).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from irforge.errors import IrforgeError

IdKind = Literal["doi", "pmid", "pmcid", "pii"]


@dataclass(frozen=True, order=True)
class ArticleId:
    """One identifier of a publication, normalised: DOI lower-case without resolver prefix,
    PMID digits, PMCID ``PMC<digits>``, PII as the publisher writes it or without punctuation."""

    kind: IdKind
    value: str


@dataclass(frozen=True)
class Section:
    """One part of an abstract; ``label`` is empty for an unlabelled abstract."""

    label: str
    text: str


@dataclass(frozen=True)
class PubmedRecord:
    pmid: str
    title: str
    abstract: str  # the sections' texts joined by a blank line; "" without an abstract
    sections: tuple[Section, ...]
    labelled: bool  # the abstract has labelled sections (Background, Results ...)
    mesh: tuple[str, ...]  # MeSH descriptor names
    publication_types: tuple[str, ...]
    journal: str
    year: int | None
    doi: str | None
    pmcid: str | None
    pii: tuple[str, ...]
    authors: tuple[str, ...]  # "Last Initials", in order
    volume: str | None
    issue: str | None


class PubmedError(IrforgeError):
    """A PubMed source that cannot answer (unreadable files, a server that keeps failing)."""


class PubmedSource(Protocol):
    def pmids_for(self, ids: Sequence[ArticleId]) -> Mapping[ArticleId, str | None]:
        """The PMID of each identifier; None when PubMed has no record for it."""
        ...

    def records(self, pmids: Sequence[str]) -> Mapping[str, PubmedRecord]:
        """The record of each PMID PubMed has (a PMID it lacks or deleted is absent)."""
        ...

    def close(self) -> None: ...
