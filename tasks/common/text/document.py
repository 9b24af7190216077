"""The in-memory shape of one parsed article, shared by the JATS and HTML readers.

Readers turn bytes into an :class:`ParsedArticle`: metadata plus the article's text
blocks in document order. Stages turn these into Arrow rows; nothing here knows about
Parquet or the stage engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ArticleFormat = Literal["jats", "html"]

# What a block is. "abstract" and "paragraph" are prose; "list" is one list (a CURE
# passage may be "a short list"); "heading" blocks are not emitted as blocks: a heading
# becomes the section path of the blocks that follow it.
BlockKind = Literal["abstract", "paragraph", "list"]


class InputRejected(Exception):
    """A file that cannot be taken in; ``reason`` is a short stable code for exclusion tables."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ArticleMeta:
    """What the file itself says about the article (never guessed from elsewhere)."""

    title: str | None = None
    journal: str | None = None
    pmid: str | None = None
    pmcid: str | None = None  # always with the "PMC" prefix
    doi: str | None = None  # lower-cased, without a resolver prefix
    license: str | None = None  # normalised, e.g. "CC-BY-4.0", "CC0-1.0", "public-domain"; None if unknown
    license_url: str | None = None
    license_text: str | None = None
    language: str | None = None  # ISO 639-1 when the file declares it
    article_type: str | None = None

    def article_id(self, digest: str) -> str:
        """A stable id: the PMCID, else ``doi:<doi>``, else ``file:`` + the file digest's head."""
        if self.pmcid:
            return self.pmcid
        if self.doi:
            return f"doi:{self.doi}"
        return f"file:{digest[:16]}"


@dataclass(frozen=True)
class Block:
    """One text block in document order.

    ``section_path`` holds the titles of the enclosing sections, outermost first
    (e.g. ``("Methods", "Statistical analysis")``; ``("Abstract",)`` for the abstract).
    """

    kind: BlockKind
    section_path: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Dropped:
    """Text a reader left out, and why (``removed:figure``, ``justext:bad``, ``jats:fig``...):
    what ``irforge quality`` names when a labelled prose block went missing."""

    reason: str
    text: str


@dataclass(frozen=True)
class ParsedArticle:
    meta: ArticleMeta
    blocks: list[Block] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
