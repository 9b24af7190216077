"""What of an abstract a dense encoder sees: the paper's three variants (paper 003 §3.1).

- ``full``: the whole abstract;
- ``background_conclusion``: for a labelled abstract, its Background and Conclusion
  sections only (the paper's "BC-BERT MED A"); an unlabelled abstract, or a labelled one
  with neither section, is encoded whole;
- ``first_last_3``: labelled abstracts as ``background_conclusion``; the others by their
  first and last three sentences ("BC-BERT MED B": claims are seldom made in the middle),
  sentences split with pysbd (https://github.com/nipunsadvilkar/pySBD); an abstract of six
  sentences or fewer is whole.

Section labels are matched case-insensitively on their first word: ``background``,
``introduction``, ``context`` or ``rationale`` open an abstract; ``conclusion(s)``,
``interpretation`` or ``implications`` close it (the labels authors use, which NLM maps to
its BACKGROUND and CONCLUSIONS categories: https://www.nlm.nih.gov/bsd/policy/structured_abstracts.html).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pysbd

View = Literal["full", "background_conclusion", "first_last_3"]
VIEWS: tuple[View, ...] = ("full", "background_conclusion", "first_last_3")
OPENING = frozenset({"background", "backgrounds", "introduction", "context", "rationale"})
CLOSING = frozenset({"conclusion", "conclusions", "interpretation", "implications"})
EDGE_SENTENCES = 3
_FIRST_WORD = re.compile(r"[a-z]+")


@functools.cache
def _segmenter() -> pysbd.Segmenter:
    return pysbd.Segmenter(language="en", clean=False)


def _kind(label: str) -> str | None:
    found = _FIRST_WORD.search(label.lower())
    word = found.group() if found else ""
    return "opening" if word in OPENING else "closing" if word in CLOSING else None


def background_conclusion(sections: Sequence[Mapping[str, Any]]) -> str | None:
    """The Background and Conclusion sections' texts, joined; None when there is neither."""
    kept = [str(s["text"]) for s in sections if _kind(str(s["label"] or "")) is not None]
    return "\n\n".join(kept) if kept else None


def first_last(text: str, count: int = EDGE_SENTENCES) -> str:
    """The first and last ``count`` sentences (the whole text when it has ``2·count`` or fewer)."""
    sentences = [s.strip() for s in _segmenter().segment(text) if s.strip()]
    if len(sentences) <= 2 * count:
        return text
    return " ".join([*sentences[:count], *sentences[-count:]])


def abstract_view(row: Mapping[str, Any], view: View) -> str:
    """The text of a corpus row (``abstract``, ``sections``, ``labelled``) for ``view``."""
    abstract = str(row["abstract"])
    if view == "full":
        return abstract
    if row["labelled"]:
        return background_conclusion(row["sections"] or []) or abstract
    return abstract if view == "background_conclusion" else first_last(abstract)
