"""Stage ``segment``: text blocks → passages, following the document structure.

CURE "segmented [articles] into passages using the parsed document structure": one
paragraph (or list) is one passage, with two repairs.

**Short blocks** (fewer than ``merge_below_words`` words) merge only prose with prose
(``abstract``/``paragraph``) and ``list`` with ``list`` (a list never merges with a
paragraph: an introductory sentence stays with the prose before it), within one
section, and only with a neighbour adjacent in the article text (no excluded block
between). A short prose block merges only if it is *prose-like*, a short list only if it
is not *data-like*; it joins the next block of its section, else the passage before it,
if that one is joinable too: a short one on the same terms, a long prose one unless it
has no letters, starts with a figure/table label or is dense code or sequence (its share
of letters is not judged: number-dense Results prose is prose). A short block that
cannot merge stays a passage of its own, for the ``filter`` stage to judge: a figure
label, a code or sequence line is never folded into a paragraph, nor dropped here.

- *data-like*: no letters, or letters under half of the non-space characters; a
  figure/table label at the start ("FIGURE 1", "Table 2.", "Fig. 3A:", "S1 Table");
  code (braces, ``==``, ``<-``, ``snake_case``, ``call(x)``, shell prompts, FASTA
  headers ``>seq1``) at one sign per 8 words or denser; sequence tokens (10+ nucleotide
  or 20+ capital letters) for a third of the words or more.
- *prose-like*: not data-like, and either 2+ words that start with a letter, digit or
  opening quote/bracket and end like a sentence (``. ! ?``, maybe before a closing quote
  or bracket), or 4+ words with an English function word that are not a Title Case
  heading ("Role of the Funding Source").

**Long blocks** (more than ``split_above_words`` words) are cut at sentence boundaries
(pysbd; a boundary inside a token is not used) into the fewest pieces of at most
``split_above_words`` words, that is ``ceil(words / split_above_words)`` whenever the
sentences allow, and among those the most equal (least sum of squared piece sizes,
by dynamic programming), so no orphan tail is left where a balanced cut exists. A single
sentence is never cut: one longer than the limit becomes a piece of its own.

Merged blocks are joined by a blank line, so a passage's text is always exactly
``article_text[char_start:char_end]``. The output is a pure function of the blocks and
the config (deterministic).

Output columns (one row per passage):

- ``passage_id`` = ``<article_id>:<n>`` (n = 0-based passage index in the article;
  stable while the article's blocks and this stage's config do not change)
- ``article_id``, ``passage_index``, ``kind``, ``section_path``, ``text``
- ``char_start``, ``char_end``: span in the article text (see the ``parse`` stage)
- ``block_indexes``: the parse blocks whose text the passage overlaps
- ``n_words``: whitespace-delimited tokens (the unit of CURE's Table 5)

Excluded (one row per block): ``kind_excluded`` (the block's kind is not in ``kinds``).
Every other block lies in one passage or more (more when it was split).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import groupby, pairwise
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pysbd
from pydantic import Field, model_validator

from irforge.config import StrictModel
from irforge.parallel import CPU
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


# Common English function words: a short line with one of them reads as a sentence.
_FUNCTION_WORDS = (
    "a an the of in on at to for from by with without and or but nor as is are was were be been being "
    "has have had do does did that which who whom whose this these those it its we our they their "
    "not no than then into onto between after before during while when where if also may can could "
    "will would should must there here all each both such per via"
)
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS.split())
_LABEL = re.compile(
    r"(?:(?:supplementary|supporting|additional|extended\s+data)\s+)?"
    r"(?:fig(?:ure)?s?|tables?|tab|box(?:es)?|schemes?|charts?|panels?|plates?|appendix|"
    r"videos?|movies?|files?|algorithms?|listings?|eq(?:uation)?s?)\.?\s*"
    r"(?:[A-Z]?\d+[A-Za-z]?|[IVX]+)(?:\s*[-–,]\s*[A-Z]?\d+[A-Za-z]?)*"
    r"(?:\s*\(continued\))?\s*(?:[.:|—–-](?=\s|$)|$)"
    r"|S\d+\s+(?:fig|table|text|file|data(?:set)?|appendix|checklist|protocol|video|movie)\b",
    re.IGNORECASE,
)
_CODE = re.compile(
    r"[{}`\\]|==|!=|<-|:=|\+=|&&|\|\||"  # braces, backticks, backslashes, operators
    r"\b[A-Za-z]\w*_\w+|"  # snake_case identifiers
    r"\b[a-z][\w.]+\([^()\s]*\)|"  # calls: range(10), read.csv('x')
    r"^\s*(?:[$#]\s|>[A-Za-z])",  # shell prompts and comments, FASTA headers
    re.MULTILINE,
)
_SEQUENCE = re.compile(r"(?:[ACGTUN]{10,}|[acgtun]{10,}|[A-Z]{20,})[.,;:]?")
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*$")
_OPENERS = "\"'“‘(["
_CODE_WORDS_PER_SIGN = 8


def data_like(text: str) -> bool:
    """No letters or mostly digits and symbols, a figure/table label, code or sequence."""
    chars = "".join(text.split())
    letters = sum(c.isalpha() for c in chars)
    return not letters or 2 * letters < len(chars) or _marked(text)


def _marked(text: str) -> bool:
    """A figure/table label at the start, or dense code or sequence."""
    words = text.split()
    if not words or _LABEL.match(text):
        return True
    if _CODE_WORDS_PER_SIGN * len(_CODE.findall(text)) >= len(words):
        return True
    return 3 * sum(1 for w in words if _SEQUENCE.fullmatch(w)) >= len(words)


def prose_like(text: str) -> bool:
    """Whether a (short) block reads as a sentence; see the module docstring."""
    words = text.split()
    if not words or data_like(text):
        return False
    if len(words) >= 2 and _SENTENCE_END.search(text) and (text[0].isalnum() or text[0] in _OPENERS):
        return True
    bare = [w.strip(_OPENERS + "\"'”’)].,;:!?") for w in words]
    if len(words) < 4 or not any(w.lower() in FUNCTION_WORDS for w in bare):
        return False
    content = [w for w in bare if w[:1].isalpha() and w.lower() not in FUNCTION_WORDS]
    return not all(w[:1].isupper() for w in content)  # Title Case: a heading, not a sentence


@dataclass
class _Piece:
    kind: str
    section_path: tuple[str, ...]
    text: str
    char_start: int
    char_end: int
    spans: list[tuple[int, int, int]]  # (block_index, char_start, char_end) of its blocks
    joinable: bool = field(default=False, compare=False)

    @property
    def blocks(self) -> list[int]:
        return [index for index, _, _ in self.spans]

    @property
    def n_words(self) -> int:
        return len(self.text.split())

    @property
    def family(self) -> str:
        return "list" if self.kind == "list" else "prose"

    def joins(self, other: _Piece) -> bool:
        """Whether ``other`` (right after this piece) may be merged into it."""
        return (
            self.joinable
            and other.joinable
            and self.family == other.family
            and other.char_start == self.char_end + len(BLOCK_SEPARATOR)
        )

    def absorb(self, other: _Piece) -> None:
        """Append ``other`` (which follows this piece in the article)."""
        self.text = self.text + BLOCK_SEPARATOR + other.text
        self.char_end = other.char_end
        self.spans += other.spans
        if self.kind != other.kind:
            self.kind = "paragraph" if "paragraph" in (self.kind, other.kind) else self.kind


@lru_cache(maxsize=8)
def _segmenter(language: str) -> pysbd.Segmenter:
    return pysbd.Segmenter(language=language, clean=False, char_span=True)


def _piece(block: dict[str, Any], min_words: int) -> _Piece:
    text, kind = block["text"], block["kind"]
    start, end = block["char_start"], block["char_end"]
    piece = _Piece(kind, tuple(block["section_path"]), text, start, end, [(block["block_index"], start, end)])
    if piece.family == "list":
        piece.joinable = not data_like(text)
    elif piece.n_words >= min_words:  # number-dense Results prose has few letters: not judged by them
        piece.joinable = any(c.isalpha() for c in text) and not _marked(text)
    else:
        piece.joinable = prose_like(text)
    return piece


def _merge_short(pieces: list[_Piece], min_words: int) -> list[_Piece]:
    """Within one section: a short joinable piece joins the next piece, else the one before."""
    out: list[_Piece] = []
    carry: _Piece | None = None
    for piece in pieces:
        current = piece
        if carry is not None:
            if carry.joins(piece):
                carry.absorb(piece)
                current = carry
            else:
                _settle(out, carry)
            carry = None
        if current.joinable and current.n_words < min_words:
            carry = current
        else:
            out.append(current)
    if carry is not None:
        _settle(out, carry)
    return out


def _settle(out: list[_Piece], short: _Piece) -> None:
    """A short piece the next one would not take: into the passage before it, or alone."""
    if out and out[-1].joins(short):
        out[-1].absorb(short)
    else:
        out.append(short)


def _split_long(piece: _Piece, max_words: int, language: str) -> list[_Piece]:
    if piece.n_words <= max_words:
        return [piece]
    text = piece.text
    cuts = [0]
    for span in _segmenter(language).segment(text):
        if cuts[-1] < span.start < len(text) and (
            text[span.start - 1].isspace() or text[span.start].isspace()
        ):
            cuts.append(span.start)
    ends = [*cuts[1:], len(text)]
    counts = [len(text[a:b].split()) for a, b in zip(cuts, ends, strict=True)]
    starts = [cuts[i] for i in balanced_cuts(counts, max_words)]
    return [_slice(piece, a, b) for a, b in pairwise([*starts, len(text)])]


def balanced_cuts(counts: list[int], max_words: int) -> list[int]:
    """Split a run of sentences (their word ``counts``) into consecutive pieces.

    Returns the index of each piece's first sentence. The pieces are the fewest with at
    most ``max_words`` words each (a longer sentence is a piece of its own), and among
    those the ones with the least sum of squared sizes, i.e. the most equal.
    """
    n = len(counts)
    best: list[tuple[int, int]] = [(0, 0)] + [(n + 1, 0)] * n  # (pieces, sum of squares)
    back = [0] * (n + 1)
    for end in range(1, n + 1):
        size = 0
        for first in range(end - 1, -1, -1):
            size += counts[first]
            if size > max_words and first < end - 1:
                break  # several sentences over the limit: never needed
            pieces, squares = best[first]
            candidate = (pieces + 1, squares + size * size)
            if candidate < best[end]:
                best[end], back[end] = candidate, first
    firsts: list[int] = []
    end = n
    while end > 0:
        end = back[end]
        firsts.append(end)
    return firsts[::-1]


def _slice(piece: _Piece, start: int, end: int) -> _Piece:
    raw = piece.text[start:end]
    lead = len(raw) - len(raw.lstrip())
    text = raw.strip()
    begin = piece.char_start + start + lead
    stop = begin + len(text)
    spans = [s for s in piece.spans if s[1] < stop and s[2] > begin]
    return _Piece(piece.kind, piece.section_path, text, begin, stop, spans, piece.joinable)


def segment_article(blocks: list[dict[str, Any]], config: SegmentConfig) -> list[_Piece]:
    pieces = [_piece(b, config.merge_below_words) for b in blocks]
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
    version=2,
    config_type=SegmentConfig,
    upstream=("parse",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("article_id", "block_index"),
    source=upstream_source("parse", group_by="article_id"),
    process=process,
    resources=CPU,
    kept_keys=blocks_of_passages,
    description="Blocks → passages: one paragraph each, short ones merged, long ones split at sentences.",
)
