"""The embedded lexical retrievers: BM25 (numba kernels or tantivy) and exact phrases.

A batch of texts runs on one tantivy searcher in ``threads`` threads (tantivy releases the
GIL while it searches). tantivy returns the top hits with ties at the cut broken by its
internal document order; to apply the port's rule (ties by ``passage_id``) exactly,
:func:`top` asks for one hit more than ``k`` and, while the last hit ties with the
``k``-th, asks for more. Sloppy phrases are in :mod:`tasks.common.search.embedded.phrase`,
fuzzy matches in :mod:`tasks.common.search.embedded.fuzzy`.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tantivy

from tasks.common.search import bm25_kernels
from tasks.common.search.embedded.analysis import MAX_QUERY_TERMS, check_k, terms
from tasks.common.search.embedded.corpus import Corpus
from tasks.common.search.port import Hit, ranked

Search = Callable[[str, tantivy.TextAnalyzer, tantivy.Searcher], list[Hit]]
Build = Callable[[Corpus, str, tantivy.TextAnalyzer], tantivy.Query | None]


def bm25(corpus: Corpus, texts: Sequence[str], k: int) -> list[list[Hit]]:
    """ES ``match``: any analysed token, tantivy's BM25 (2.2x Lucene's; same ranking).

    The scores are the ones tantivy gives the ``should`` query of :func:`bm25_query`
    (up to float32 rounding: tantivy sums in float32), computed from a term -> passage
    matrix of precomputed weights with numba kernels, pruning the passages that cannot
    reach the top ``k`` (:mod:`tasks.common.search.bm25_kernels`); the matrix is built from the
    token store by the first call after the index is finished or opened. Work per query: the
    postings of its rare terms, then, once the common terms left cannot lift an unseen
    passage into the top ``k``, a look-up per remaining candidate.
    """
    check_k(k)
    if not texts:
        return []
    if not corpus.ids:
        return [[] for _ in texts]
    matrix = corpus.bm25_matrix()
    an, get = corpus.analyzers[0], corpus.store.ids.get
    flat: list[int] = []
    starts = [0]
    for text in texts:
        if text:
            flat += [get(w, -1) for w in an.analyze(text)[:MAX_QUERY_TERMS]]
        starts.append(len(flat))
    rows, scores, counts = bm25_kernels.search(
        matrix,
        np.array(flat, dtype=np.int32),
        np.array(starts, dtype=np.int64),
        k,
        corpus.id_rank,
        corpus.by_rank,
        corpus.threads,
    )
    ids = corpus.ids
    # 100,000 hits for 2,000 queries: the cyclic GC would scan the heap every 700 of
    # them, and none of them can be in a cycle (measured: 30 % of this loop's time)
    paused = gc.isenabled()
    gc.disable()
    try:
        return [
            [Hit(rank, ids[r], s) for rank, r, s in zip(range(1, c + 1), rs, ss, strict=False)]
            for c, rs, ss in zip(counts.tolist(), rows.tolist(), scores.tolist(), strict=True)
        ]
    finally:
        if paused:
            gc.enable()


def run(corpus: Corpus, texts: Sequence[str], k: int, search: Search) -> list[list[Hit]]:
    """``search`` of every text (an empty one has no hits), in ``corpus.threads`` threads."""
    check_k(k)
    if not texts:
        return []
    searcher = corpus.searcher  # one searcher (one consistent snapshot) for the whole batch
    threads, analyzers = corpus.threads, corpus.analyzers

    def part_of(part: Sequence[str], an: tantivy.TextAnalyzer) -> list[list[Hit]]:
        return [search(text, an, searcher) if text else [] for text in part]

    if threads == 1 or len(texts) < 2 * threads:
        return part_of(texts, analyzers[0])
    # Contiguous slices, one per thread: Python builds queries under the GIL while the
    # other threads search in tantivy with the GIL released.
    step = math.ceil(len(texts) / threads)
    parts = [texts[i : i + step] for i in range(0, len(texts), step)]
    with ThreadPoolExecutor(len(parts)) as pool:
        done = list(pool.map(part_of, parts, analyzers))
    return [hits for part in done for hits in part]


def query_search(corpus: Corpus, build: Build, k: int) -> Search:
    """A per-text search that runs the tantivy query ``build`` makes (None: no hits)."""

    def search(text: str, an: tantivy.TextAnalyzer, searcher: tantivy.Searcher) -> list[Hit]:
        query = build(corpus, text, an)
        return [] if query is None else top(corpus, searcher, query, k)

    return search


def top(corpus: Corpus, searcher: tantivy.Searcher, query: tantivy.Query, k: int) -> list[Hit]:
    """The top ``k`` of ``query``, ties by passage id: more hits are asked while the cut ties."""
    limit = k + 1
    while True:
        hits = searcher.search(query, limit, count=False).hits
        # Fewer hits than asked: that is everything. Otherwise every passage tying with
        # the k-th must be among the hits, which holds once the last one scores lower.
        if len(hits) < limit or hits[-1][0] < hits[k - 1][0]:
            break
        limit *= 4
    if not hits:
        return []
    rows = searcher.fast_field_values("row", [address for _, address in hits])
    ids = corpus.ids
    return ranked([ids[r] for r in rows], [score for score, _ in hits], k)  # type: ignore[index]


def bm25_query(corpus: Corpus, text: str, an: tantivy.TextAnalyzer) -> tantivy.Query | None:
    """A ``should`` of one BM25 term query per analysed token (a repeat counts again)."""
    words = terms(text, an)
    if not words:
        return None
    schema, occur = corpus.schema, tantivy.Occur.Should
    # "freq": BM25 needs term frequencies, not positions (cheaper postings).
    return tantivy.Query.boolean_query(
        [(occur, tantivy.Query.term_query(schema, "text", t, index_option="freq")) for t in words]
    )


def phrase_query(corpus: Corpus, text: str, an: tantivy.TextAnalyzer) -> tantivy.Query | None:
    """tantivy's exact phrase (``slop`` 0); one token: a term query, as in ES."""
    tokens = an.pre_tokenize(text).tokens[:MAX_QUERY_TERMS]
    if not tokens:
        return None
    if len(tokens) == 1:  # as ES: a one-token phrase is a term query
        return tantivy.Query.term_query(corpus.schema, "text", tokens[0].text, index_option="freq")
    # Token positions, not list order: a dropped (too long) token leaves a gap, as at indexing.
    words: list[str | tuple[int, str]] = [(t.position, t.text) for t in tokens]
    return tantivy.Query.phrase_query(corpus.schema, "text", words, 0)
