"""Stage ``segment``: text blocks → passages, following the document structure.

CURE "segmented [articles] into passages using the parsed document structure": one
paragraph (or list) is one passage, with two repairs:

- a block shorter than ``merge_below_words`` joins the next block of the same section
  (or, being the last of its section, the passage before it), so captions-like stubs
  ("Data are available on request.") do not become passages of their own;
- a block longer than ``split_above_words`` is cut at sentence boundaries (pysbd) into
  the fewest pieces that fit, of near-equal length; a single sentence is never cut.

Blocks are never merged across sections. Merged blocks are joined by a blank line, so a
passage's text is always exactly ``article_text[char_start:char_end]``.

Output columns (one row per passage):

- ``passage_id`` = ``<article_id>:<n>`` (n = 0-based passage index in the article;
  stable while the article's blocks and this stage's config do not change)
- ``article_id``, ``passage_index``, ``kind``, ``section_path``, ``text``
- ``char_start``, ``char_end``: span in the article text (see the ``parse`` stage)
- ``block_indexes``: the parse blocks the passage came from
- ``n_words``: whitespace-delimited tokens (the unit of CURE's Table 5)

Excluded (one row per block): ``kind_excluded`` (the block's kind is not in ``kinds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import groupby
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pysbd
from pydantic import Field, model_validator

from irforge.config import StrictModel
from irforge.stage import (
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    key_set,
    rows_to_table,
    upstream_source,
)
from tasks.cure.stages.parse import BLOCK_SEPARATOR


class SegmentConfig(StrictModel):
    kinds: tuple[str, ...] = Field(
        ("abstract", "paragraph", "list"), description="Block kinds that become passages."
    )
    merge_below_words: int = Field(
        15, ge=0, description="Blocks with fewer words merge with a neighbour (0: never)."
    )
    split_above_words: int = Field(
        350, ge=20, description="Blocks with more words are split at sentence boundaries."
    )
    language: str = Field("en", description="pysbd language for sentence boundaries.")

    @model_validator(mode="after")
    def _merge_below_split(self) -> SegmentConfig:
        if self.merge_below_words >= self.split_above_words:
            raise ValueError("merge_below_words must be smaller than split_above_words")
        return self


SCHEMA = pa.schema(
    [
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("passage_index", pa.int32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("section_path", pa.list_(pa.string()), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("char_start", pa.int32(), nullable=False),
        pa.field("char_end", pa.int32(), nullable=False),
        pa.field("block_indexes", pa.list_(pa.int32()), nullable=False),
        pa.field("n_words", pa.int32(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("article_id", pa.string(), nullable=False),
    pa.field("block_index", pa.int32(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
)


@dataclass
class _Piece:
    kind: str
    section_path: tuple[str, ...]
    text: str
    char_start: int
    char_end: int
    blocks: list[int]

    @property
    def n_words(self) -> int:
        return len(self.text.split())

    def absorb(self, other: _Piece) -> None:
        """Append ``other`` (which follows this piece in the article)."""
        self.text = self.text + BLOCK_SEPARATOR + other.text
        self.char_end = other.char_end
        self.blocks += other.blocks
        if self.kind != other.kind:
            self.kind = "paragraph" if "paragraph" in (self.kind, other.kind) else self.kind


@lru_cache(maxsize=8)
def _segmenter(language: str) -> pysbd.Segmenter:
    return pysbd.Segmenter(language=language, clean=False, char_span=True)


def _merge_short(pieces: list[_Piece], min_words: int) -> list[_Piece]:
    """Within one section: fold short pieces into the next one (or the previous, if last)."""
    out: list[_Piece] = []
    carry: _Piece | None = None
    for piece in pieces:
        current = piece
        if carry is not None:
            carry.absorb(piece)
            current, carry = carry, None
        if current.n_words < min_words:
            carry = current
        else:
            out.append(current)
    if carry is not None:
        if out:
            out[-1].absorb(carry)
        else:
            out.append(carry)
    return out


def _split_long(piece: _Piece, max_words: int, language: str) -> list[_Piece]:
    words = piece.n_words
    if words <= max_words:
        return [piece]
    spans = _segmenter(language).segment(piece.text)
    target = words / math.ceil(words / max_words)
    out: list[_Piece] = []
    start, count = 0, 0
    for span in spans:
        n = len(span.sent.split())
        # Close the current piece when this sentence would push it past the balanced size.
        if count and (count + n > max_words or count + n / 2 > target):
            out.append(_slice(piece, start, span.start))
            start, count = span.start, 0
        count += n
    out.append(_slice(piece, start, len(piece.text)))
    return out


def _slice(piece: _Piece, start: int, end: int) -> _Piece:
    raw = piece.text[start:end]
    lead = len(raw) - len(raw.lstrip())
    text = raw.strip()
    begin = piece.char_start + start + lead
    return _Piece(piece.kind, piece.section_path, text, begin, begin + len(text), list(piece.blocks))


def segment_article(blocks: list[dict[str, Any]], config: SegmentConfig) -> list[_Piece]:
    pieces = [
        _Piece(
            b["kind"], tuple(b["section_path"]), b["text"], b["char_start"], b["char_end"], [b["block_index"]]
        )
        for b in blocks
    ]
    passages: list[_Piece] = []
    for _, section in groupby(pieces, key=lambda p: p.section_path):
        for merged in _merge_short(list(section), config.merge_below_words):
            passages += _split_long(merged, config.split_above_words, config.language)
    return passages


def process(chunk: pa.Table, ctx: StageContext[SegmentConfig]) -> ChunkResult:
    config = ctx.config
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    rows = chunk.to_pylist()
    for article_id, group in groupby(rows, key=lambda r: r["article_id"]):
        blocks = []
        for b in group:
            if b["kind"] in config.kinds:
                blocks.append(b)
            else:
                detail = f"kind {b['kind']!r} not in {list(config.kinds)}"
                excluded.append(
                    {
                        "reason": "kind_excluded",
                        "detail": detail,
                        "article_id": article_id,
                        "block_index": b["block_index"],
                        "text": b["text"],
                    }
                )
        for index, p in enumerate(segment_article(blocks, config)):
            kept.append(
                {
                    "passage_id": f"{article_id}:{index}",
                    "article_id": article_id,
                    "passage_index": index,
                    "kind": p.kind,
                    "section_path": list(p.section_path),
                    "text": p.text,
                    "char_start": p.char_start,
                    "char_end": p.char_end,
                    "block_indexes": p.blocks,
                    "n_words": p.n_words,
                }
            )
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


def blocks_of_passages(kept: pa.Table) -> set[tuple[Any, ...]]:
    """The (article_id, block_index) units the passages cover, for row accounting."""
    lists = kept.column("block_indexes")
    parents = pc.list_parent_indices(lists)
    exploded = pa.table(
        {"article_id": pc.take(kept.column("article_id"), parents), "block_index": pc.list_flatten(lists)}
    )
    return key_set(exploded, ("article_id", "block_index"))


SPEC: StageSpec[SegmentConfig] = StageSpec(
    name="segment",
    version=1,
    config_type=SegmentConfig,
    upstream=("parse",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("article_id", "block_index"),
    source=upstream_source("parse", group_by="article_id"),
    process=process,
    kept_keys=blocks_of_passages,
    description="Blocks → passages: one paragraph each, short ones merged, long ones split at sentences.",
)
