"""The embedded search backend: the port's methods on a :class:`Corpus` and a :class:`Loader`."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Self

import pyarrow as pa
import tantivy

from tasks.common.search.embedded import fuzzy, lexical, phrase
from tasks.common.search.embedded.analysis import check_k, terms
from tasks.common.search.embedded.corpus import Corpus
from tasks.common.search.embedded.knn import knn
from tasks.common.search.embedded.storage import Loader, new_index, read_index
from tasks.common.search.embedded.tokens import TokenStore
from tasks.common.search.port import F32, Hit, IndexReport, SearchError


class EmbeddedBackend:
    """A :class:`~tasks.common.search.port.SearchBackend` in one directory, in process.

    :meth:`create` starts an empty index; :meth:`add` may be called several times, then
    :meth:`finish` commits (tantivy segments, vectors, token store, ids, manifest) and makes
    every added passage searchable; more :meth:`add` calls and another :meth:`finish` extend
    it. :meth:`open` reopens a finished index for searching (read-only). Passages added but
    not finished are dropped by :meth:`close`.

    ``threads`` lexical searches run at once (tantivy releases the GIL while it searches);
    default: the number of CPUs.
    """

    name = "embedded"

    def __init__(
        self, directory: Path, dims: int, index: tantivy.Index, *, writable: bool, threads: int
    ) -> None:
        self.directory = directory
        self.dims = dims
        self._closed = False
        self._corpus = Corpus(index, dims, threads)
        self._loader = Loader(directory, index, self._corpus, writable=writable)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(cls, directory: Path, dims: int, *, threads: int | None = None) -> EmbeddedBackend:
        """A new, empty index in ``directory`` (created if missing; it must be empty)."""
        if dims < 1:
            raise ValueError(f"dims must be at least 1, got {dims}")
        directory = Path(directory)
        index = new_index(directory)
        backend = cls(directory, dims, index, writable=True, threads=threads or os.cpu_count() or 1)
        backend._loader.write_files([], None)  # an empty index is a valid, openable index
        backend._corpus.store = TokenStore.load(directory, 0)
        return backend

    @classmethod
    def open(cls, directory: Path, *, threads: int | None = None) -> EmbeddedBackend:
        """Reopen an index written by :meth:`create` + :meth:`finish`, for searching only."""
        directory = Path(directory)
        stored = read_index(directory)
        backend = cls(
            directory, stored.dims, stored.index, writable=False, threads=threads or os.cpu_count() or 1
        )
        backend._corpus.store = stored.store
        backend._corpus.load(stored.ids, stored.vectors)
        return backend

    def close(self) -> None:
        """Release the index; passages added since the last :meth:`finish` are dropped."""
        if self._closed:
            return
        self._loader.rollback()
        self._closed = True
        self._corpus.release()  # unmaps vectors.npy and tokens.npy

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ loading

    def add(self, batches: Iterable[pa.RecordBatch]) -> IndexReport:
        """Queue rows of :data:`~tasks.common.search.port.PASSAGE_SCHEMA`; searchable after :meth:`finish`.

        A row is refused, into ``IndexReport.failed`` with its reason, when its passage id is
        missing or already added, its article id or text is missing, or its vector is missing,
        has the wrong number of dimensions, a NaN / infinite value or a zero norm. Accepted
        vectors are re-normalised (they should be unit vectors already; cosine needs it).
        A batch without the schema's columns raises :class:`SearchError`.
        """
        self._check_open()
        return self._loader.add(batches)

    def finish(self) -> None:
        """Commit: tantivy segments (merged), then vectors, ids and last the manifest."""
        self._check_open()
        self._loader.finish()

    def count(self) -> int:
        self._check_open()
        return len(self._corpus.ids)

    def _check_open(self) -> None:
        if self._closed:
            raise SearchError(f"embedded search: the index at {self.directory} is closed")

    # ------------------------------------------------------------------ retrievers

    def bm25(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        """ES ``match``: any analysed token, tantivy's BM25 scored by numba kernels
        (:func:`tasks.common.search.embedded.lexical.bm25`)."""
        self._check_open()
        return lexical.bm25(self._corpus, texts, k)

    def bm25_tantivy(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        """:meth:`bm25` searched by tantivy itself: its oracle in the tests, its peer in the bench.

        Cost: this tantivy build scores every posting of every query term; its union does not
        skip non-competitive documents (measured: a term in 20 passages OR ``the`` takes as
        long as ``the`` alone), so a query costs about the summed document frequencies of its
        terms, stop words included (~2.5 ms per short query at 200,000 passages).
        """
        self._check_open()
        corpus = self._corpus
        return lexical.run(corpus, texts, k, lexical.query_search(corpus, lexical.bm25_query, k))

    def phrase(self, texts: Sequence[str], slop: int, k: int) -> list[list[Hit]]:
        """ES ``match_phrase`` with ``slop``, with Lucene's sloppy-phrase semantics.

        ``slop`` 0 (or a one-token text) is tantivy's exact phrase (term) query: the same
        matches and BM25 as Lucene's. For ``slop`` > 0 see :mod:`tasks.common.search.embedded.phrase`.
        """
        if slop < 0:
            raise ValueError(f"slop must be >= 0, got {slop}")
        self._check_open()
        corpus = self._corpus
        if slop == 0:
            return lexical.run(corpus, texts, k, lexical.query_search(corpus, lexical.phrase_query, k))

        def search(text: str, an: tantivy.TextAnalyzer, searcher: tantivy.Searcher) -> list[Hit]:
            return phrase.sloppy(corpus, text, an, searcher, slop, k)

        return lexical.run(corpus, texts, k, search)

    def fuzzy(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        """ES ``match`` with ``fuzziness: AUTO``, rewritten the way Lucene's ``FuzzyQuery`` is
        (:mod:`tasks.common.search.embedded.fuzzy`)."""
        self._check_open()
        check_k(k)
        corpus = self._corpus
        an = corpus.analyzers[0]
        fuzzy.expand(corpus, {t for text in texts if text for t in terms(text, an)})
        return lexical.run(corpus, texts, k, lexical.query_search(corpus, fuzzy.fuzzy_query, k))

    def knn(self, vectors: F32, k: int, num_candidates: int) -> list[list[Hit]]:
        """Exact cosine nearest passages (:func:`tasks.common.search.embedded.knn.knn`)."""
        self._check_open()
        return knn(self._corpus, vectors, k, num_candidates)
