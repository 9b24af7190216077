"""Section titles that mark back matter, shared by the JATS and HTML readers.

Converted files (old BMC JATS, publisher HTML) put acknowledgements, funding, competing
interests and the like in the body as ordinary sections; the readers drop them as JATS
drops ``<back>`` (docs/decisions/passage-quality.md lists what CURE keeps).
"""

from __future__ import annotations

import re

# Section titles of back matter. Converted files (old BMC, publisher HTML) put these in
# the body as ordinary sections; they are dropped like <back> is, by both readers.
_BACK_MATTER_TITLES = frozenset(
    {
        "references", "reference", "bibliography", "literature cited", "references and notes",
        "works cited", "acknowledgments", "acknowledgements", "acknowledgment", "acknowledgement",
        "funding", "funding information", "grant information", "financial support",
        "author contributions", "authors' contributions", "authors' information", "contributions", "author information",
        "authors and affiliations", "competing interests", "competing financial interests",
        "conflict of interest", "conflicts of interest", "conflict of interest statement",
        "declaration of competing interest", "disclosure", "disclosures", "ethics declarations",
        "additional information", "supplementary information", "supplementary material",
        "supplementary materials", "supporting information", "additional files",
        "electronic supplementary material", "rights and permissions", "about this article",
        "comments", "decision letter", "author response", "footnotes", "notes", "abbreviations",
        "list of abbreviations", "glossary", "appendices", "article and author information",
        "data availability", "data availability statement", "availability of data and materials",
        "code availability", "reporting summary", "pre-publication history", "open peer review",
        "publisher's note", "keywords", "institutional review board statement",
        "informed consent statement", "ethics statement", "ethics approval and consent to participate",
        "consent for publication", "contributions des auteurs", "remerciements", "financement",
        "liens d'intérêts", "références", "contribuciones de los autores", "agradecimientos",
        "financiación", "conflicto de intereses", "referencias",
    }
)  # fmt: skip
# Sub-sections of an abstract or summary that are not its text: link lists ("Where can I
# get more information?") and registry numbers ("Trial Registration").
NOT_ABSTRACT_TEXT = re.compile(r"\b(?:additional|further|more)\s+information\b|\bregistration\b")
# Ethics sub-sections inside Methods are the study's methods; at the top level they are
# back matter (declarations).
ETHICS_TITLES = frozenset(
    {"ethics statement", "ethics", "ethical approval", "ethics approval", "ethical considerations",
     "ethics approval and consent to participate", "informed consent statement",
     "institutional review board statement"}
)  # fmt: skip
# A paragraph of an abstract that only points elsewhere (PLOS: "Please see later in the
# article for the Editors' Summary").
SUMMARY_POINTER = re.compile(
    r"^please see (?:later in )?the article for the \w+'? summary\.?$", re.IGNORECASE
)
BACK_MATTER_SEC_TYPES = frozenset(
    {"supplementary-material", "coi-statement", "ack", "author-contributions", "funding-information",
     "data-availability", "display-objects"}
)  # fmt: skip


def is_back_matter_title(title: str) -> bool:
    """True for "References", "5. Acknowledgements:", "Appendix A", "Amendments from Version 1", ... (any case)."""
    key = section_key(title)
    return key in _BACK_MATTER_TITLES or _BACK_MATTER_PATTERN.search(key) is not None


# Appendices, and a versioned article's notes on what changed ("Amendments from Version 1").
_BACK_MATTER_PATTERN = re.compile(r"^appendi(?:x|ces)\b|\bamendments from version \d+$")


def section_key(title: str) -> str:
    """A section title without its number, case-folded: "5. Acknowledgements:" → "acknowledgements"."""
    plain = " ".join(title.replace("\u2019", "'").split())
    return re.sub(r"^(?:\d+(?:\.\d+)*\.?|[IVX]+\.)\s*", "", plain).strip(" :.").casefold()
