"""What the embedded retrievers read: one finished state of the index, and what derives from it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import tantivy

from tasks.common.search import bm25_kernels
from tasks.common.search.embedded.analysis import I64, analyzer
from tasks.common.search.embedded.tokens import TokenStore
from tasks.common.search.port import F32


class Corpus:
    """The searchable state, shared by the retrievers and replaced in place by a ``finish()``.

    ``ids[row]`` is a row's passage id; ``id_rank[row]`` its rank in ascending id order and
    ``by_rank`` the row of each rank (ties go by passage id without comparing strings);
    ``vectors`` the unit vectors by row. Derived data (the BM25 matrix, the fuzzy
    vocabulary and expansions) is built on first use and dropped by :meth:`load`.
    """

    def __init__(self, index: tantivy.Index, dims: int, threads: int) -> None:
        self.schema = index.schema
        self.searcher: tantivy.Searcher = index.searcher()
        self.dims = dims
        self.threads = max(1, threads)
        self.analyzers = [analyzer() for _ in range(self.threads)]  # one per worker thread
        self.store = TokenStore.empty()
        self.ids: list[str] = []
        self.id_rank: I64 = np.zeros(0, dtype=np.int64)
        self.by_rank: I64 = np.zeros(0, dtype=np.int64)  # row of each id rank
        self.vectors: F32 = np.zeros((0, dims), dtype=np.float32)
        self.vocabulary: dict[int, dict[str, int]] | None = None  # for fuzzy: length -> term -> df
        self.expanded: dict[str, list[tuple[str, float]]] = {}  # fuzzy: term -> [(indexed term, weight)]
        self._bm25: bm25_kernels.Bm25Matrix | None = None  # tantivy's BM25 weights, eagerly

    def load(self, ids: list[str], vectors: F32) -> None:
        """Search ``ids`` and their ``vectors`` (row order) from now on."""
        self.ids = ids
        self.vocabulary, self.expanded = None, {}  # fuzzy expansions depend on the indexed terms
        self.vectors = vectors
        # Rank of each row's passage id in ascending order (Arrow sorts strings by UTF-8
        # bytes = code points, like Python's str): breaks kNN score ties without strings.
        order = pc.sort_indices(pa.array(ids, pa.string())).to_numpy()
        rank = np.empty(len(ids), dtype=np.int64)
        rank[order] = np.arange(len(ids), dtype=np.int64)
        self.id_rank, self.by_rank = rank, order.astype(np.int64)
        self._bm25 = None  # built by the first bm25() call: phrase, fuzzy and kNN never need it

    def release(self) -> None:
        """Unmap vectors.npy and tokens.npy (the index is closed)."""
        self.vectors = np.zeros((0, self.dims), dtype=np.float32)
        self.store = TokenStore.empty()
        self._bm25 = None

    def bm25_matrix(self) -> bm25_kernels.Bm25Matrix:
        if self._bm25 is None:
            store = self.store
            indexed = np.ones(len(store.terms), dtype=bool)
            indexed[list(store.long)] = False  # tantivy drops tokens of 40+ bytes
            self._bm25 = bm25_kernels.Bm25Matrix.build(store.tokens, store.starts, store.lengths, indexed)
        return self._bm25
