"""The cited research paper as EvidenceBench's candidate pool: indexed, typed text elements.

EvidenceBench (App. A.6) presents a paper as an ordered list of text elements
(``paper_as_candidate_pool``) with one type per element (``sentence_types_in_candidate_pool``):
``abstract``, ``section_name`` or ``normal_paragraph``. Alignment windows, decomposition
prompts and the evaluated systems all address sentences by their index in this list, so it
is built once per paper, here, from the paper's JATS XML.

What becomes an element, in document order (the shape of the released PMC-derived pools):

- the abstract's sentences, typed ``abstract``; the titles of a structured abstract's parts
  ("Background", "Results") are elements of their own, also typed ``abstract``, as in the
  released pools; author / editors' summaries follow the abstract the same way, under their
  own title;
- every body section title, typed ``section_name``, where the section starts (nested
  sections give one element per level; boxed text counts as a section under its title);
- the sentences of body paragraphs, typed ``normal_paragraph``; a list item is split on its
  own, so items without a final full stop do not run into each other.

Text leaves :func:`tasks.common.text.jats.parse_jats` already cleaned: figures, tables, captions,
display formulas, footnotes, the reference list and back matter are left out (the paper's
footnote 1: figures and tables are not part of the pool), inline formulas read
``[formula]``. The article title is not an element unless asked for: the released
PMC-derived pools start at the abstract. Section titles come from the blocks' section
paths, so a section without any text (only a figure, say) leaves no title behind, and two
consecutive sibling sections with the same title read as one.

Sentences are split with pysbd (rule-based, offline; the paper used Stanza, which needs
model downloads), so boundaries can differ from the released pools in places.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import pysbd

from tasks.common.text.document import Block, InputRejected
from tasks.common.text.jats import parse_jats

ElementType = Literal["section_name", "abstract", "normal_paragraph"]

# parse_jats roots the main abstract's section path at this synthetic title; it is not text
# of the paper, so it never becomes an element.
_MAIN_ABSTRACT_ROOT = "Abstract"


@dataclass(frozen=True)
class PoolElement:
    """One text element of a paper's candidate pool.

    ``section_path`` holds the enclosing section titles, outermost first; for a title
    element it ends with that title. ``paragraph`` is the position of the source text block
    (abstract paragraph, body paragraph or list) among the paper's blocks, so sentences of
    one paragraph share it; ``None`` for titles.
    """

    index: int
    type: ElementType
    text: str
    section_path: tuple[str, ...]
    paragraph: int | None


def paper_pool(
    data: bytes, source: str, *, include_title: bool = False, language: str = "en"
) -> list[PoolElement]:
    """The candidate pool of one JATS article; ``source`` names it in errors.

    Raises :class:`InputRejected` (``malformed_xml``, ``not_jats``, ``no_body``) with
    ``source`` in the message when the bytes are not a JATS article with body text.
    """
    try:
        article = parse_jats(data)
    except InputRejected as err:
        raise InputRejected(err.reason, f"{source}: {err.detail}") from err
    if not any(block.kind != "abstract" for block in article.blocks):
        raise InputRejected(
            "no_body", f"{source}: the article has no body text (the pool needs the full text)"
        )
    elements: list[PoolElement] = []
    if include_title and article.meta.title:
        elements.append(_element(elements, "section_name", article.meta.title, (), None))
    previous: tuple[bool, tuple[str, ...]] = (False, ())
    for paragraph, block in enumerate(article.blocks):
        in_abstract = block.kind == "abstract"
        _add_titles(elements, block, previous[1] if previous[0] == in_abstract else ())
        previous = (in_abstract, block.section_path)
        kind: ElementType = "abstract" if in_abstract else "normal_paragraph"
        for sentence in _sentences(block.text, language):
            elements.append(_element(elements, kind, sentence, block.section_path, paragraph))
    return elements


def read_paper_pool(path: Path, *, include_title: bool = False, language: str = "en") -> list[PoolElement]:
    """:func:`paper_pool` of a JATS file; errors name the file."""
    return paper_pool(path.read_bytes(), str(path), include_title=include_title, language=language)


def candidate_pool_fields(elements: Sequence[PoolElement]) -> tuple[list[str], list[str]]:
    """The released schema's ``paper_as_candidate_pool`` and ``sentence_types_in_candidate_pool``."""
    for position, element in enumerate(elements):
        if element.index != position:
            raise ValueError(f"pool element at position {position} has index {element.index}")
    return [e.text for e in elements], [e.type for e in elements]


def _add_titles(elements: list[PoolElement], block: Block, previous_path: tuple[str, ...]) -> None:
    """Title elements for the sections ``block`` enters that the previous block was not in."""
    path = block.section_path
    shared = 0
    while shared < min(len(path), len(previous_path)) and path[shared] == previous_path[shared]:
        shared += 1
    in_abstract = block.kind == "abstract"
    for depth in range(shared, len(path)):
        if in_abstract and depth == 0 and path[0] == _MAIN_ABSTRACT_ROOT:
            continue
        kind: ElementType = "abstract" if in_abstract else "section_name"
        elements.append(_element(elements, kind, path[depth], path[: depth + 1], None))


def _element(
    elements: list[PoolElement],
    kind: ElementType,
    text: str,
    section_path: tuple[str, ...],
    paragraph: int | None,
) -> PoolElement:
    return PoolElement(len(elements), kind, text, section_path, paragraph)


@lru_cache(maxsize=8)
def _segmenter(language: str) -> pysbd.Segmenter:
    return pysbd.Segmenter(language=language, clean=False)


def _sentences(text: str, language: str) -> list[str]:
    """Sentences of a block; each line (one list item) is split on its own."""
    out: list[str] = []
    for line in text.split("\n"):
        if line.strip():
            out.extend(s.strip() for s in _segmenter(language).segment(line) if s.strip())
    return out
