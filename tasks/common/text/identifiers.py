"""Article identifiers in the one form :class:`tasks.common.text.document.ArticleMeta` holds them."""

from __future__ import annotations


def normalise_doi(doi: str) -> str:
    """Lower-case DOI without resolver prefix ("https://doi.org/", "doi:")."""
    doi = doi.strip()
    lowered = doi.lower()
    for prefix in (
        "https://doi.org/",
        "http://doi.org/",
        "https://dx.doi.org/",
        "http://dx.doi.org/",
        "doi:",
    ):
        if lowered.startswith(prefix):
            lowered = lowered[len(prefix) :]
            break
    return lowered.strip()


def normalise_pmcid(value: str) -> str | None:
    """The PMC id with its "PMC" prefix (given with or without it), without a version suffix
    (``PMC6883395.3``: PubMed's id of a versioned article); None unless the rest is digits."""
    digits = value.strip().upper().removeprefix("PMC").strip()
    head, dot, version = digits.partition(".")
    if dot and head.isdigit() and version.isdigit():
        digits = head
    return f"PMC{digits}" if digits.isdigit() else None
