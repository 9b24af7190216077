"""Stage ``parse``: article files → text blocks in document order.

JATS XML is read with lxml (title, abstract, body sections and paragraphs; tables,
figures, references and formulas left out; section titles kept as the block's section
path). Publisher HTML goes through jusText with the stoplist of the page's language;
headings become the section path of the paragraphs after them. Text is repaired with
ftfy (mojibake, HTML entities left over) unless ``fix_text`` is off.

Output columns (one row per block):

- ``article_id``, ``block_index`` (0-based, document order)
- ``kind``: ``abstract`` | ``paragraph`` | ``list``
- ``section_path``: enclosing section titles, outermost first
- ``text``
- ``char_start``, ``char_end``: the block's span in the article text, which is all
  blocks of the article joined by a blank line (``"\\n\\n"``)

Excluded (one row per article): ``changed_since_ingest`` (the file's bytes differ from
the digest ingest recorded), ``unreadable``, ``malformed_xml``, ``not_jats``,
``malformed_html``, ``no_text`` (nothing left after parsing) — ``detail`` carries the
parser's message.
"""

from __future__ import annotations

from typing import Any, Literal

import ftfy
import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.fingerprint import digest_bytes
from irforge.parallel import CPU
from irforge.stage import (
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
    upstream_source,
)
from tasks.common.text.document import InputRejected, ParsedArticle
from tasks.common.text.reading import parse_article
from tasks.common.text.sniff import sniff

BLOCK_SEPARATOR = "\n\n"


class JusTextConfig(StrictModel):
    """jusText's classifier thresholds (its defaults: https://github.com/miso-belica/jusText)."""

    length_low: int = Field(70, ge=0, description="Shorter paragraphs (characters) are 'short'.")
    length_high: int = Field(200, ge=0, description="Longer paragraphs with enough stop words are 'good'.")
    stopwords_low: float = Field(0.30, ge=0, le=1, description="Stop-word density below which text is 'bad'.")
    stopwords_high: float = Field(0.32, ge=0, le=1, description="Stop-word density for 'good'.")
    max_link_density: float = Field(0.2, ge=0, le=1, description="More link text than this is 'bad'.")
    max_heading_distance: int = Field(200, ge=0, description="Characters a heading may precede good text by.")


class ParseConfig(StrictModel):
    html_default_language: str = Field(
        "en", min_length=2, max_length=2, description="ISO 639-1 language for HTML pages that declare none."
    )
    fix_text: bool = Field(True, description="Repair mojibake and stray entities with ftfy.")
    citation_numbers: Literal["drop", "bracket"] = Field(
        "drop",
        description=(
            "Reference numbers set as superscripts ('cells<sup>5,6</sup>'): drop them, or keep them "
            "bracketed ('cells [5,6]'); bracketed citations in the text stay either way."
        ),
    )
    justext: JusTextConfig = JusTextConfig()


SCHEMA = pa.schema(
    [
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("block_index", pa.int32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("section_path", pa.list_(pa.string()), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("char_start", pa.int32(), nullable=False),
        pa.field("char_end", pa.int32(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("article_id", pa.string(), nullable=False),
    pa.field("source_path", pa.string(), nullable=False),
)


def _read(row: dict[str, Any], ctx: StageContext[ParseConfig]) -> ParsedArticle:
    try:
        data = (ctx.base_dir / row["source_path"]).read_bytes()
    except OSError as err:
        raise InputRejected("unreadable", str(err.strerror)) from None
    if digest_bytes(data) != row["digest"]:
        raise InputRejected("changed_since_ingest", "the file changed after ingest: rerun ingest")
    return read_article(data, row["source_path"], ctx.config)


def read_article(data: bytes, name: str, config: ParseConfig) -> ParsedArticle:
    """One article file's bytes → blocks, as this stage reads them (``irforge quality`` too)."""
    return parse_article(
        data,
        sniff(name, data),
        default_language=config.html_default_language,
        justext_params=config.justext.model_dump(),
        citation_numbers=config.citation_numbers,
    )


def blocks_to_rows(article_id: str, parsed: ParsedArticle, fix_text: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    offset = 0
    for block in parsed.blocks:
        text = ftfy.fix_text(block.text) if fix_text else block.text
        text = text.strip()
        if not text:
            continue
        rows.append(
            {
                "article_id": article_id,
                "block_index": len(rows),
                "kind": block.kind,
                "section_path": list(block.section_path),
                "text": text,
                "char_start": offset,
                "char_end": offset + len(text),
            }
        )
        offset += len(text) + len(BLOCK_SEPARATOR)
    return rows


def process(chunk: pa.Table, ctx: StageContext[ParseConfig]) -> ChunkResult:
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for row in chunk.to_pylist():
        try:
            rows = blocks_to_rows(row["article_id"], _read(row, ctx), ctx.config.fix_text)
            if not rows:
                raise InputRejected("no_text", "no text block left after parsing")
        except InputRejected as err:
            excluded.append(
                {
                    "reason": err.reason,
                    "detail": err.detail,
                    "article_id": row["article_id"],
                    "source_path": row["source_path"],
                }
            )
            continue
        kept.extend(rows)
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


SPEC: StageSpec[ParseConfig] = StageSpec(
    name="parse",
    version=2,
    config_type=ParseConfig,
    upstream=("ingest",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("article_id",),
    source=upstream_source("ingest"),
    process=process,
    resources=CPU,
    description="JATS (lxml) and HTML (jusText) → text blocks with section paths and offsets.",
)
