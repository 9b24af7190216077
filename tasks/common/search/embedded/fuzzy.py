"""The embedded ``match`` with ``fuzziness: AUTO``, rewritten the way Lucene's ``FuzzyQuery`` is.

Each analysed token ``t`` (code points; edits allowed: 0 for 1-2, 1 for 3-5, 2 above; a
transposition is one edit, no prefix: ES's defaults) becomes, as in ES's
``top_terms_blended_freqs_50`` rewrite:

* its expansions: indexed terms within that many edits (optimal string alignment,
  Lucene's measure), the best :data:`MAX_EXPANSIONS` by boost
  ``1 - edits / min(len(term), len(t))`` (1 for ``t`` itself), ties by term;
* one BM25 term query per expansion, boosted by that similarity and scored with the
  *blended* document frequency (the largest among the expansions, so a misspelt token
  scores like the word it stands for, not like an ultra-rare term): tantivy scores a term
  with its own frequency, so the boost also carries ``idf(max df) / idf(df)``.

The clauses are summed (``should``), a repeated token counting again. Scores equal ES's up
to tantivy's 2.2x BM25 scale and float rounding.

tantivy's own ``FuzzyTermQuery`` is not used: it scores a constant 1.0 and builds a
Levenshtein automaton on every search (about 1 ms per distance-2 token, 100 ms per
passage-long query). Here expansions are found once per distinct token (rapidfuzz ``cdist``
against the indexed terms of compatible length, batched over every token of the call) and
cached until the index changes; the query is plain term queries (measured on the benchmark:
9 ms instead of 60 ms a passage-long query at 50,000 passages). Expansion cost grows with
the vocabulary (all terms within two letters' length are compared): fine for 10^5 terms,
slow for 10^7.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

import numpy as np
import tantivy
from rapidfuzz import process
from rapidfuzz.distance import OSA

from tasks.common.search.embedded.analysis import auto_fuzziness, idf, terms
from tasks.common.search.embedded.corpus import Corpus

MAX_EXPANSIONS: Final = 50
"""Indexed terms one fuzzy token may expand to (ES ``max_expansions`` default)."""
_DISTANCE_BYTES: Final = 32 << 20  # the largest uint8 distance matrix of one cdist call


def fuzzy_query(corpus: Corpus, text: str, an: tantivy.TextAnalyzer) -> tantivy.Query | None:
    """The ``should`` of the boosted term queries of every token's expansions (see :func:`expand`)."""
    schema, occur, expanded = corpus.schema, tantivy.Occur.Should, corpus.expanded
    clauses = [
        (occur, tantivy.Query.boost_query(tantivy.Query.term_query(schema, "text", e, "freq"), w * times))
        for term, times in Counter(terms(text, an)).items()
        for e, w in expanded[term]
    ]
    return tantivy.Query.boolean_query(clauses) if clauses else None


def _vocabulary(corpus: Corpus) -> dict[int, dict[str, int]]:
    """Every indexed term with its document frequency, grouped by length (built once)."""
    if corpus.vocabulary is None:
        corpus.vocabulary = {}
        for term, df in corpus.searcher.terms_with_prefix("text", "", limit=None):
            corpus.vocabulary.setdefault(len(term), {})[term] = df
    return corpus.vocabulary


def expand(corpus: Corpus, wanted: set[str]) -> None:
    """Fill the expansion cache (term -> [(indexed term, weight)]) for ``wanted``."""
    todo = wanted - corpus.expanded.keys()
    if not todo:
        return
    vocabulary = _vocabulary(corpus)
    n = corpus.searcher.num_docs
    groups: dict[tuple[int, int], list[str]] = {}
    for term in todo:
        groups.setdefault((len(term), auto_fuzziness(term)), []).append(term)
    for (length, edits), group in groups.items():
        window = [
            (t, df)
            for size in range(length - edits, length + edits + 1)
            for t, df in vocabulary.get(size, {}).items()
        ]
        if edits == 0 or not window:
            exact = vocabulary.get(length, {})
            for term in group:
                corpus.expanded[term] = [(term, 1.0)] if term in exact else []
            continue
        choices = [t for t, _ in window]
        rows = max(1, _DISTANCE_BYTES // len(choices))
        for part in (group[at : at + rows] for at in range(0, len(group), rows)):
            distances = process.cdist(
                part, choices, scorer=OSA.distance, score_cutoff=edits, dtype=np.uint8, workers=corpus.threads
            )
            for term, row in zip(part, distances, strict=True):
                hits = np.flatnonzero(row <= edits).tolist()
                found = [(choices[j], int(row[j]), window[j][1]) for j in hits]
                corpus.expanded[term] = blend(term, found, n)


def blend(term: str, found: list[tuple[str, int, int]], n: int) -> list[tuple[str, float]]:
    """Lucene's fuzzy rewrite for one token: top expansions by boost, blended document frequency.

    ``found``: (indexed term, edits, document frequency). Returns (term, weight) where the
    weight turns tantivy's BM25 of the term (its own idf) into ES's: boost x idf(max df).
    """
    scored = sorted(
        ((1.0 if ed == 0 else max(0.0, 1.0 - ed / min(len(e), len(term))), e, df) for e, ed, df in found),
        key=lambda x: (-x[0], x[1]),
    )[:MAX_EXPANSIONS]
    if not scored:
        return []
    blended = idf(max(df for _, _, df in scored), n)
    return [(e, boost * blended / idf(df, n)) for boost, e, df in scored]
