"""One entry point over the format-specific readers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks.common.text.document import ArticleMeta, ParsedArticle
from tasks.common.text.html import parse_html, read_html_metadata
from tasks.common.text.jats import parse_jats
from tasks.common.text.jats_citations import CitationNumbers
from tasks.common.text.sniff import Sniffed


def parse_article(
    data: bytes,
    sniffed: Sniffed,
    *,
    default_language: str = "en",
    justext_params: Mapping[str, Any] | None = None,
    citation_numbers: CitationNumbers = "drop",
) -> ParsedArticle:
    if sniffed.format == "jats":
        return parse_jats(data, citation_numbers=citation_numbers)
    return parse_html(
        data,
        encoding=sniffed.encoding,
        default_language=default_language,
        justext_params=justext_params,
        citation_numbers=citation_numbers,
    )


def read_metadata(data: bytes, sniffed: Sniffed) -> ArticleMeta:
    """Only what ingest needs: for HTML this skips jusText's paragraph classification."""
    if sniffed.format == "jats":
        return parse_jats(data).meta
    return read_html_metadata(data, encoding=sniffed.encoding)
