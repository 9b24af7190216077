"""Linking an annotated passage to its article and to the corpus passage it was copied from.

Annotators typed (or pasted) passages by hand, so the text rarely equals the parsed
passage byte for byte. Matching goes from strict to loose, on normalised text (NFKC,
case-folded, whitespace collapsed): ``exact`` (equal), ``contained`` (the annotated text
is part of one corpus passage), ``fuzzy`` (rapidfuzz similarity ≥ the threshold, whole
or partial alignment); otherwise ``unmatched`` and the passage is kept as a new passage
of its article. ``no_article`` when the article itself is not in the corpus.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rapidfuzz import fuzz, process

Link = Literal["exact", "contained", "fuzzy", "unmatched", "no_article"]

_DOI = re.compile(r"\b(10\.\d{4,9}/[^\s?#\"'<>]+)", re.IGNORECASE)
_PMCID = re.compile(r"\b(PMC\d+)\b", re.IGNORECASE)
_PMID_URL = re.compile(r"pubmed(?:\.ncbi\.nlm\.nih\.gov)?/(\d+)", re.IGNORECASE)


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@dataclass(frozen=True)
class ArticleRef:
    url: str | None = None
    title: str | None = None
    doi: str | None = None
    pmid: str | None = None
    pmcid: str | None = None

    def identifiers(self) -> tuple[str | None, str | None, str | None]:
        """(pmcid, doi, pmid), taking what the URL says where a field is empty."""
        url = self.url or ""
        pmcid = self.pmcid or (m.group(1) if (m := _PMCID.search(url)) else None)
        doi = self.doi or (m.group(1) if (m := _DOI.search(url)) else None)
        pmid = self.pmid or (m.group(1) if (m := _PMID_URL.search(url)) else None)
        pmcid = (
            pmcid.upper() if pmcid and pmcid.upper().startswith("PMC") else (f"PMC{pmcid}" if pmcid else None)
        )
        doi = doi.lower().rstrip(".") if doi else None
        return pmcid, doi, (str(pmid) if pmid else None)


class ArticleIndex:
    """Corpus articles by PMCID, DOI, PMID and normalised title (rows of the ingest stage)."""

    def __init__(self, articles: Sequence[dict[str, Any]]) -> None:
        self._by: dict[str, dict[str, str]] = {"pmcid": {}, "doi": {}, "pmid": {}, "title": {}}
        for a in articles:
            for key in ("pmcid", "doi", "pmid"):
                if a.get(key):
                    self._by[key].setdefault(str(a[key]).lower(), a["article_id"])
            if a.get("title"):
                self._by["title"].setdefault(normalise(a["title"]), a["article_id"])

    def find(self, ref: ArticleRef) -> str | None:
        pmcid, doi, pmid = ref.identifiers()
        for key, value in (("pmcid", pmcid), ("doi", doi), ("pmid", pmid)):
            if value and value.lower() in self._by[key]:
                return self._by[key][value.lower()]
        if ref.title:
            return self._by["title"].get(normalise(ref.title))
        return None


@dataclass(frozen=True)
class PassageLink:
    passage_id: str | None
    link: Link
    score: float


def link_passage(text: str, candidates: Sequence[tuple[str, str]], threshold: float) -> PassageLink:
    """Best corpus passage (id, text) for an annotated ``text``; ties go to the first passage."""
    if not candidates:
        return PassageLink(None, "unmatched", 0.0)
    needle = normalise(text)
    hay = [normalise(t) for _, t in candidates]
    for (pid, _), h in zip(candidates, hay, strict=True):
        if h == needle:
            return PassageLink(pid, "exact", 1.0)
    for (pid, _), h in zip(candidates, hay, strict=True):
        if needle and needle in h:
            return PassageLink(pid, "contained", 1.0)
    whole = process.extractOne(needle, hay, scorer=fuzz.ratio)
    partial = process.extractOne(needle, hay, scorer=fuzz.partial_ratio)
    best_whole = (whole[1] / 100.0, -whole[2]) if whole else (0.0, 0)
    best_partial = (partial[1] / 100.0, -partial[2]) if partial else (0.0, 0)
    # A partial alignment only counts when the annotated text is the shorter one.
    if partial and len(needle) > len(hay[partial[2]]):
        best_partial = (0.0, 0)
    score, neg_index = max(best_whole, best_partial)
    if score >= threshold:
        return PassageLink(candidates[-neg_index][0], "fuzzy", round(score, 4))
    return PassageLink(None, "unmatched", round(score, 4))
