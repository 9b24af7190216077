"""DOIs, PMIDs and PMCIDs written in a news page's text (``identifiers`` of ``tasks/crossgenre/stages/extract.py``).

- DOI: Crossref's recommended pattern ``10.\\d{4,9}/[-._;()/:A-Z0-9]+`` (case-insensitive;
  https://www.crossref.org/blog/dois-and-matching-regular-expressions/), which matches
  nearly all modern DOIs. Text around a DOI leaks into a match: trailing punctuation
  (``.,;:``) is trimmed, and so is a closing parenthesis without its opening one
  ("(doi:10.1/abc)"), while balanced ones stay (``10.1016/S2213-2600(19)30271-1``).
- PMID: "PMID: 123", "PMID 123", "PubMed ID: 123", and PubMed URLs written as text.
- PMCID: ``PMC`` + digits, and PMC article URLs written as text.

Values are normalised with ``tasks/common/text/identifiers.py`` (DOI lower-case, PMCID with
its prefix).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tasks.common.text.identifiers import normalise_doi, normalise_pmcid

_DOI = re.compile(r"(?<![\w.])10\.\d{4,9}/[-._;()/:A-Z0-9]+", re.IGNORECASE)
_PMID = re.compile(
    r"\b(?:PMID|PubMed\s+ID)\s*[:#=]?\s*(\d{1,8})\b"
    r"|(?:pubmed\.ncbi\.nlm\.nih\.gov|ncbi\.nlm\.nih\.gov/pubmed)/(\d{1,8})\b"
    r"|\bcitation_pmid=(\d{1,8})\b",
    re.IGNORECASE,
)
_PMCID = re.compile(r"\bPMC\s?(\d{4,9})\b|ncbi\.nlm\.nih\.gov/pmc/articles/PMC(\d{4,9})\b", re.IGNORECASE)
_TRAILING = ".,;:"


def find_identifiers(text: str) -> list[tuple[str, str]]:
    """``(kind, value)`` of every identifier in ``text``, in text order, each once."""
    found: list[tuple[int, str, str]] = []
    for match in _DOI.finditer(text):
        doi = trim_doi(match.group(0))
        if "/" in doi and not doi.endswith("/"):
            found.append((match.start(), "doi", normalise_doi(doi)))
    for match in _PMID.finditer(text):
        found.append((match.start(), "pmid", str(int(_group(match)))))
    for match in _PMCID.finditer(text):
        pmcid = normalise_pmcid(_group(match))
        if pmcid:
            found.append((match.start(), "pmcid", pmcid))
    return list(dict.fromkeys((kind, value) for _, kind, value in sorted(found)))


def _group(match: re.Match[str]) -> str:
    return next(g for g in match.groups() if g)


def trim_doi(raw: str) -> str:
    """A matched DOI without the punctuation of the sentence around it (module doc)."""
    doi = raw
    while doi:
        unbalanced = doi.endswith(")") and doi.count(")") > doi.count("(")
        if doi[-1] in _TRAILING or unbalanced:
            doi = doi[:-1]
        else:
            break
    return doi


def texts_of(values: object) -> Iterator[str]:
    """Every string inside a JSON value (for identifiers in JSON-LD ``citation`` objects); a
    schema.org ``PropertyValue`` naming a DOI/PMID/PMCID reads as "PMID: 123"."""
    if isinstance(values, str):
        yield values
    elif isinstance(values, dict):
        name, value = values.get("propertyID"), values.get("value")
        if isinstance(name, str) and isinstance(value, str | int):
            yield f"{name}: {value}"
        for value in values.values():
            yield from texts_of(value)
    elif isinstance(values, list):
        for value in values:
            yield from texts_of(value)
