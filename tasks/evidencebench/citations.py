"""A paragraph's sentences and the references each cites (EvidenceBench §3, App. H.1).

Sentence boundaries by pysbd, as in the CURE ``segment`` stage. A range written as two
citations joined by a dash ("[3]–[5]") cites every reference between them in
reference-list order, and so does one citation whose text is a range ("3–5"). A numbered
citation that pysbd leaves at the very start of a sentence ("... was seen. [4] Next ...")
belongs to the sentence before it, which is extended over it ("... was seen. [4]"); an
author-year one there ("(Doe, 2020) showed ...") stays, being the sentence's subject.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import pysbd

from tasks.evidencebench.paragraphs import Citation, Paragraph

_DASHES = frozenset({"-", "\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2212"})
_BRACKETS = " []()"  # around a range's dash in "[3]–[5]", "(3)–(5)"
_RANGE_TEXT = re.compile(r"^\W*(\d+)\s*[-\u2010-\u2014\u2212]\s*(\d+)\W*$")
# What may precede a citation at the start of a sentence and still leave it "leading".
_LEADING_NOISE = re.compile(r"^[\s\[\](),;.:]*$")
# What closes a citation that moves back to the sentence before: "[4]", "(4).", "4,"
_CLOSING = re.compile(r"[\])]*[.,;:]?")
# Numbered citations ("[4]", "4", "4, 5"); author-year ones can open a sentence as its subject.
_NUMBERED = re.compile(r"^[\W\d]*$")


@dataclass
class Sentence:
    index: int
    start: int
    end: int
    citations: list[Citation] = field(default_factory=list)
    refs: tuple[str, ...] = ()


@lru_cache(maxsize=8)
def _segmenter(language: str) -> pysbd.Segmenter:
    return pysbd.Segmenter(language=language, clean=False, char_span=True)


def split_sentences(
    paragraph: Paragraph, order: dict[str, int], ref_ids: list[str], language: str
) -> list[Sentence]:
    text = paragraph.text
    sentences: list[Sentence] = []
    for span in _segmenter(language).segment(text):
        raw = text[span.start : span.end]
        start = span.start + len(raw) - len(raw.lstrip())
        end = span.start + len(raw.rstrip())
        if end > start:
            sentences.append(Sentence(index=len(sentences), start=start, end=end))
    for citation in paragraph.citations:
        owner = _owner(sentences, citation, text)
        owner.citations.append(citation)
        following = sentences[owner.index + 1] if owner.index + 1 < len(sentences) else None
        if following is not None and citation.start >= following.start:  # moved back: re-cut
            closing = _CLOSING.match(text, citation.end)
            owner.end = closing.end() if closing else citation.end
            following.start = owner.end + len(text[owner.end :]) - len(text[owner.end :].lstrip())
    kept = [s for s in sentences if s.end > s.start]  # "[4]." alone is no sentence once re-cut
    for index, sentence in enumerate(kept):
        sentence.index = index
        sentence.refs = _cited_refs(sentence.citations, text, order, ref_ids)
    return kept


def _owner(sentences: list[Sentence], citation: Citation, text: str) -> Sentence:
    """The sentence a citation belongs to; a citation leading a sentence closes the one before."""
    for i, sentence in enumerate(sentences):
        if sentence.start <= citation.start < sentence.end or i == len(sentences) - 1:
            leading = (
                i > 0
                and _NUMBERED.match(citation.text) is not None
                and _LEADING_NOISE.match(_without_citations(text, sentence, citation.start)) is not None
            )
            return sentences[i - 1] if leading else sentence
    raise ValueError("a paragraph with citations has no sentences")  # pragma: no cover


def _without_citations(text: str, sentence: Sentence, upto: int) -> str:
    """The sentence's text before ``upto`` with earlier citations blanked out."""
    chars = list(text[sentence.start : upto])
    for citation in sentence.citations:
        for i in range(max(citation.start, sentence.start), min(citation.end, upto)):
            chars[i - sentence.start] = " "
    return "".join(chars)


def _cited_refs(
    citations: list[Citation], text: str, order: dict[str, int], ref_ids: list[str]
) -> tuple[str, ...]:
    """Distinct rids cited, in order, with dash ranges expanded over the reference list."""
    cited: list[str] = []
    for i, citation in enumerate(citations):
        cited.extend(citation.rids)
        cited.extend(_text_range(citation, order, ref_ids))
        if i + 1 < len(citations):
            following = citations[i + 1]
            if text[citation.end : following.start].strip(_BRACKETS) in _DASHES:
                cited.extend(_between(citation.rids[-1], following.rids[0], order, ref_ids))
    return tuple(dict.fromkeys(cited))


def _between(first: str, last: str, order: dict[str, int], ref_ids: list[str]) -> list[str]:
    """The references strictly between two range ends (none if either is unknown)."""
    if first not in order or last not in order:
        return []
    low, high = sorted((order[first], order[last]))
    return ref_ids[low + 1 : high]


def _text_range(citation: Citation, order: dict[str, int], ref_ids: list[str]) -> list[str]:
    """One xref written "3–5" with one rid: the rid and the references that follow it."""
    match = _RANGE_TEXT.match(citation.text)
    if match is None or len(citation.rids) != 1 or citation.rids[0] not in order:
        return []
    width = int(match.group(2)) - int(match.group(1))
    start = order[citation.rids[0]]
    return ref_ids[start + 1 : start + 1 + width] if width > 0 else []
