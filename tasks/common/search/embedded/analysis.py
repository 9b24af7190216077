"""How the embedded index analyses text, its tantivy schema, and BM25's constants.

``text`` uses tantivy's ``default`` tokenizer (split on every non-alphanumeric character,
drop tokens of 40+ bytes, lowercase): see ``tasks/common/search/embedded/__init__.py`` for
why. Queries are analysed in Python by a :class:`tantivy.TextAnalyzer` built from the same
components, never by tantivy's query parser.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt
import tantivy

MAX_QUERY_TERMS: Final = 1024
"""Analysed tokens kept per query (ES's historical ``max_clause_count``)."""
TOKENIZER: Final = "default"
MAX_TOKEN_BYTES: Final = 40  # the default tokenizer drops tokens of this many UTF-8 bytes or more
K1: Final = 1.2  # tantivy's (and Lucene's) BM25 parameters
B: Final = 0.75

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def analyzer() -> tantivy.TextAnalyzer:
    """tantivy's ``default`` tokenizer rebuilt in Python, to analyse query text like the index."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
        .filter(tantivy.Filter.lowercase())
        .build()
    )


def position_analyzer() -> tantivy.TextAnalyzer:
    """The ``default`` tokenizer without its length filter: a token's index is its position."""
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.lowercase()).build()


def terms(text: str, an: tantivy.TextAnalyzer) -> list[str]:
    """The analysed tokens of a query, the first :data:`MAX_QUERY_TERMS` of them."""
    return an.analyze(text)[:MAX_QUERY_TERMS]


def auto_fuzziness(term: str) -> int:
    """Elasticsearch ``fuzziness: AUTO`` (low 3, high 6): edits allowed for a term of this length."""
    return 0 if len(term) <= 2 else 1 if len(term) <= 5 else 2


def idf(df: int, n: int) -> float:
    """BM25 idf, Lucene's and tantivy's formula."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("passage_id", stored=True, tokenizer_name="raw")
    builder.add_text_field("article_id", stored=True, tokenizer_name="raw")
    # Not stored: only ranks come back from a search, and sloppy phrases read positions from
    # the token store. Positions (the default index option) serve exact phrase queries.
    builder.add_text_field("text", stored=False, tokenizer_name=TOKENIZER, index_option="position")
    # Row in vectors.npy / ids.parquet: a fast field, so a hit's passage id is one array look-up.
    builder.add_integer_field("row", stored=False, indexed=False, fast=True)
    return builder.build()
