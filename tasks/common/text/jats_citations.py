"""Reference numbers set as superscripts in JATS ("cells<sup>5,6</sup>"): dropped or bracketed.

Glued to the word before them they become search tokens ("cells5"); bracketed citations
in the running text ("[5]") are left as they are (issue 18, docs/decisions/passage-quality.md).
"""

from __future__ import annotations

import re
from typing import Literal

from lxml import etree

CitationNumbers = Literal["drop", "bracket"]


def citation_superscripts(article: etree._Element, mode: CitationNumbers) -> None:
    """Drop (or bracket) reference numbers glued to words: a ``<sup>`` holding only citation
    links and numbers, or a bare numeric ``<xref ref-type="bibr">`` right after a word."""
    for el in list(article.iter()):
        if not isinstance(el.tag, str) or el.getparent() is None:
            continue
        name = _local(el)
        text = "".join(str(t) for t in el.itertext()).strip()
        if not text or not _CITATION_NUMBERS.match(text):
            continue
        links = [c for c in el if isinstance(c.tag, str)]
        if name == "sup" and links and all(_local(c) == "xref" for c in links):
            _replace(el, "" if mode == "drop" else f" [{text}]")
        elif name == "xref" and el.get("ref-type") == "bibr" and _local(el.getparent()) != "sup":
            before = _text_before(el)
            if before[-1:].isalnum() or before[-1:] in (".", ",", ")"):
                _replace(el, "" if mode == "drop" else f" [{text}]")


_CITATION_NUMBERS = re.compile(r"^\d+(?:\s*[,–—-]\s*\d+)*$")


def _text_before(el: etree._Element) -> str:
    previous = el.getprevious()
    if previous is not None:
        return previous.tail or ""
    parent = el.getparent()
    return (parent.text or "") if parent is not None else ""


def _replace(el: etree._Element, text: str) -> None:
    """Remove ``el``, keeping its tail, with ``text`` in its place."""
    parent = el.getparent()
    assert parent is not None
    previous = el.getprevious()
    tail = text + (el.tail or "")
    if previous is not None:
        previous.tail = (previous.tail or "") + tail
    else:
        parent.text = (parent.text or "") + tail
    parent.remove(el)


def _local(el: etree._Element) -> str:
    return str(etree.QName(el).localname)
