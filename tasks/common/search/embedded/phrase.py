"""The embedded ``match_phrase`` with ``slop`` > 0: Lucene's sloppy phrases on tantivy's candidates.

tantivy's own sloppy matching is not Lucene's (measured: it needs slop 3 for ``b a c``
against ``"a b c"``, where Lucene needs 2, and it accepts some matches Lucene refuses), so
tantivy only finds candidates here; positions come from the token store and the match
rule and frequency from :func:`tasks.common.search.embedded.sloppy.sloppy_frequency`.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import tantivy

from tasks.common.search.embedded.analysis import K1, MAX_QUERY_TERMS, B, idf
from tasks.common.search.embedded.corpus import Corpus
from tasks.common.search.embedded.lexical import phrase_query, top
from tasks.common.search.port import Hit, ranked

REFINE_ABOVE: Final = 512  # AND candidates above which a sloppy phrase narrows them in tantivy
NEAR_TERMS: Final = 8  # other terms a sloppy phrase's candidates must have near its rarest term


def sloppy(
    corpus: Corpus, text: str, an: tantivy.TextAnalyzer, searcher: tantivy.Searcher, slop: int, k: int
) -> list[Hit]:
    """Lucene's sloppy phrase: tantivy finds candidates, Python checks positions and scores.

    A passage matches when some position of every query term, each shifted back by the
    term's offset in the query, falls in one window of ``slop + 1`` (Lucene's
    ``SloppyPhraseMatcher``: two swapped terms are 2 moves apart; repeated query terms
    take distinct positions). Candidates are the passages holding every term (an AND
    query in tantivy, a superset of the matches; narrowed by :func:`near_rarest` when
    there are many); their positions come from the token store
    (:class:`~tasks.common.search.embedded.tokens.TokenStore`), all candidates at once in
    numpy, and the sweep runs per candidate in Python. The phrase frequency is Lucene's,
    each match counting ``1 / (1 + match length)``, and the score tantivy's BM25 formula on
    it (idf summed over the terms, as for tantivy's exact phrases), with the passage's
    exact length where tantivy uses a one-byte length code. Cost grows with the
    candidates: a phrase of very common words (``of the``) checks every passage holding both.
    """
    tokens = an.pre_tokenize(text).tokens[:MAX_QUERY_TERMS]
    if len(tokens) < 2:
        query = phrase_query(corpus, text, an)
        return [] if query is None else top(corpus, searcher, query, k)
    first = tokens[0].position
    terms = [t.text for t in tokens]
    offsets = [t.position - first for t in tokens]
    n = searcher.num_docs
    dfs = [searcher.doc_freq("text", t) for t in terms]
    if not all(dfs):
        return []  # a phrase needs every term
    schema, must = corpus.schema, tantivy.Occur.Must
    candidates = tantivy.Query.const_score_query(
        tantivy.Query.boolean_query(
            [(must, tantivy.Query.term_query(schema, "text", t, index_option="basic")) for t in set(terms)]
        ),
        1.0,
    )
    hits = searcher.search(candidates, REFINE_ABOVE + 1, count=False).hits
    if len(hits) > REFINE_ABOVE:
        # Many passages hold every term: narrow them down in tantivy (a few ms) before
        # checking each one in Python; then take every candidate.
        candidates, limit = near_rarest(schema, terms, offsets, dfs, slop), 1024
        while len(hits := searcher.search(candidates, limit, count=False).hits) == limit:
            limit *= 8
    if not hits:
        return []
    store = corpus.store
    rows = np.asarray(searcher.fast_field_values("row", [address for _, address in hits]), dtype=np.int64)
    freqs = np.asarray(store.frequencies(rows, terms, offsets, slop))
    match = freqs > 0
    rows, freqs = rows[match], freqs[match]
    norms = K1 * (1.0 - B + B * store.lengths[rows] / store.average)
    scores = sum(idf(df, n) for df in dfs) * (K1 + 1.0) * freqs / (freqs + norms)
    ids = corpus.ids
    return ranked([ids[r] for r in rows.tolist()], scores.tolist(), k)


def near_rarest(
    schema: tantivy.Schema, terms: list[str], offsets: list[int], dfs: list[int], slop: int
) -> tantivy.Query:
    """Passages where the other terms sit near the rarest one: a superset of the sloppy matches.

    In a match every term's phrase position is within ``slop`` of the rarest term's
    (``r``), so term ``j`` occurs ``offset_j - offset_r + d`` positions after ``r`` for
    some ``d`` in ``[-slop, slop]``: one exact two-word phrase per ``d`` (tantivy's exact
    phrases with explicit positions are exact), OR'ed, for each of up to
    :data:`NEAR_TERMS` other terms (the rarest: the most selective; any subset keeps
    the superset), AND'ed with each other and with the remaining terms.
    """
    should, must = tantivy.Occur.Should, tantivy.Occur.Must
    r = min(range(len(terms)), key=lambda i: (dfs[i], i))
    others = sorted((i for i in range(len(terms)) if i != r), key=lambda i: (dfs[i], i))[:NEAR_TERMS]
    groups = [
        (must, tantivy.Query.term_query(schema, "text", terms[j], index_option="basic"))
        for j in set(range(len(terms))) - set(others) - {r}
    ]
    for j in others:
        near = []
        for d in range(offsets[j] - offsets[r] - slop, offsets[j] - offsets[r] + slop + 1):
            if d == 0:  # one token per position: j cannot sit on r's
                continue
            words: list[str | tuple[int, str]] = (
                [(0, terms[r]), (d, terms[j])] if d > 0 else [(0, terms[j]), (-d, terms[r])]
            )
            near.append((should, tantivy.Query.phrase_query(schema, "text", words, 0)))
        groups.append((must, tantivy.Query.boolean_query(near)))
    return tantivy.Query.const_score_query(tantivy.Query.boolean_query(groups), 1.0)
