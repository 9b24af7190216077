"""The embedded search backend: tantivy for the lexical retrievers, exact cosine kNN with numpy.

The default on laptops and in CI: no server, one directory per index::

    directory/
      tantivy/          the tantivy index (passage_id, article_id, text, row)
      vectors.npy       float32 [n, dims], unit-normalised, row order of ids.parquet
      ids.parquet       passage_id per row
      tokens.npy, token_starts.npy, lengths.npy, terms.parquet
                        every passage's token ids in position order (sloppy phrases)
      manifest.json     dims, count, format; written last, so a half-written index is detected

Opening memory-maps vectors.npy and tokens.npy; the rest is small.

Modules: ``backend`` (:class:`~tasks.common.search.embedded.backend.EmbeddedBackend`, the
port), ``storage`` (files, create / open / load), ``corpus`` (the searchable state),
``tokens`` (the token store), ``analysis`` (tokenizer, schema), ``lexical`` (BM25, exact
phrases), ``phrase`` and ``sloppy`` (sloppy phrases), ``fuzzy``, ``knn``.

Analysis
--------
``text`` uses tantivy's ``default`` tokenizer (split on every non-alphanumeric character,
drop tokens of 40+ bytes, lowercase), not ``en_stem``. It is the closest tantivy analyser to
Elasticsearch's default ``standard`` analyser (lowercased Unicode words, no stemming, no
stop words), so that both backends of the port match the same terms; and ``fuzziness:
AUTO`` counts edits on analysed terms, which stemming would shorten. (The ``standard``
tokenizer keeps ``3.5`` or ``don't`` as one token where tantivy splits them: a small
difference on numbers and contractions.) Positions are indexed: phrase queries need them.
Queries are analysed in Python by a :class:`tantivy.TextAnalyzer` built from the same
components, and turned into term / phrase / fuzzy queries directly; user text never goes
through tantivy's query parser, so quotes, colons, parentheses, ``AND``, ``-`` and the like
are plain text and can never raise a parse error.

Retrievers (every list ordered by score descending, ties by ``passage_id`` ascending)
-----------------------------------------------------------------------------------
* ``bm25``: a boolean ``should`` of one BM25 term query per analysed token (a repeated
  token counts again, as Lucene's ``match`` does), like ES ``match``, with tantivy's BM25
  scores; scored from a term -> passage matrix of tantivy's weights by numba kernels
  (:mod:`tasks.common.search.bm25_kernels`; not stored: built from the token store by the
  first ``bm25`` call after ``finish`` or ``open``, about 1 s at 200,000 passages).
  ``bm25_tantivy`` runs the query in tantivy: the oracle of the tests and a peer in the
  benchmark.
* ``phrase``: ``match_phrase`` with ``slop``, with Lucene's sloppy semantics (two swapped
  terms need slop 2), which tantivy's own sloppy phrase does not have: checked on the
  token store. One token: a term query.
* ``fuzzy``: ``match`` with ``fuzziness: AUTO``, expanded and scored like Lucene's
  ``FuzzyQuery`` (top 50 expansions, blended document frequency).
* ``knn``: exact cosine over every stored vector.

Lexical searches of a batch run on one tantivy searcher, in ``threads`` threads (tantivy
releases the GIL while it searches; so do the BM25 kernels); kNN is one matrix product per
block of queries.

Queries longer than 1,024 analysed tokens keep their first 1,024 tokens (Elasticsearch's
historical ``indices.query.bool.max_clause_count``; ES rejects such a query instead).
Mining queries are sentences and ~80-word passages, far below it.
"""
