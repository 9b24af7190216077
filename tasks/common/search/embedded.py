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
* :meth:`EmbeddedBackend.bm25`: a boolean ``should`` of one BM25 term query per analysed
  token (a repeated token counts again, as Lucene's ``match`` does), like ES ``match``,
  with tantivy's BM25 scores; scored from a term -> passage matrix of tantivy's weights by
  numba kernels (:mod:`tasks.common.search.bm25_kernels`; not stored: built from the token store
  by the first ``bm25`` call after :meth:`~EmbeddedBackend.finish` or
  :meth:`~EmbeddedBackend.open`, about 1 s at 200,000 passages). :meth:`EmbeddedBackend.bm25_tantivy` runs the query in tantivy: the
  oracle of the tests and a peer in the benchmark.
* :meth:`EmbeddedBackend.phrase`: ``match_phrase`` with ``slop``, with Lucene's sloppy
  semantics (two swapped terms need slop 2), which tantivy's own sloppy phrase does not
  have: checked on the token store. One token: a term query.
* :meth:`EmbeddedBackend.fuzzy`: ``match`` with ``fuzziness: AUTO``, expanded and scored
  like Lucene's ``FuzzyQuery`` (top 50 expansions, blended document frequency).
* :meth:`EmbeddedBackend.knn`: exact cosine over every stored vector.

Lexical searches of a batch run on one tantivy searcher, in ``threads`` threads (tantivy
releases the GIL while it searches; so do the BM25 kernels); kNN is one matrix product per
block of queries.

Queries longer than :data:`MAX_QUERY_TERMS` analysed tokens keep their first 1,024 tokens
(Elasticsearch's historical ``indices.query.bool.max_clause_count``; ES rejects such a query
instead). Mining queries are sentences and ~80-word passages, far below it.

Tantivy returns the top hits with ties at the cut broken by its internal document order;
to apply the port's rule (ties by ``passage_id``) exactly, each search asks for one hit
more than ``k`` and, while the last hit ties with the ``k``-th, asks for more.
"""

from __future__ import annotations

import gc
import heapq
import json
import math
import os
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Final, Self, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import tantivy
from rapidfuzz import process
from rapidfuzz.distance import OSA

from tasks.common.search import bm25_kernels
from tasks.common.search.port import F32, Hit, IndexReport, SearchError, ranked

FORMAT: Final = "irforge-embedded-search/1"
MAX_QUERY_TERMS: Final = 1024
"""Analysed tokens kept per query (ES's historical ``max_clause_count``)."""
MAX_EXPANSIONS: Final = 50
"""Indexed terms one fuzzy token may expand to (ES ``max_expansions`` default)."""

_TOKENIZER: Final = "default"
_MAX_TOKEN_BYTES: Final = 40  # the default tokenizer drops tokens of this many UTF-8 bytes or more
_REFINE_ABOVE: Final = 512  # AND candidates above which a sloppy phrase narrows them in tantivy
_NEAR_TERMS: Final = 8  # other terms a sloppy phrase's candidates must have near its rarest term
_TOO_LONG: Final = (_MAX_TOKEN_BYTES - 1).__lt__  # byte length -> dropped by the default tokenizer
_QUERY_BLOCK: Final = 512  # kNN queries per matrix product
_CORPUS_BLOCK: Final = 16_384  # stored vectors per matrix product: 512 x 16k x 4 B = 32 MB of scores
_F32_EPS: Final = 2.0**-24
_K1: Final = 1.2  # tantivy's (and Lucene's) BM25 parameters
_B: Final = 0.75

_Search = Callable[[str, tantivy.TextAnalyzer, tantivy.Searcher], list[Hit]]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
_T = TypeVar("_T", bound=Hashable)
F64 = npt.NDArray[np.float64]


def analyzer() -> tantivy.TextAnalyzer:
    """tantivy's ``default`` tokenizer rebuilt in Python, to analyse query text like the index."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN_BYTES))
        .filter(tantivy.Filter.lowercase())
        .build()
    )


def auto_fuzziness(term: str) -> int:
    """Elasticsearch ``fuzziness: AUTO`` (low 3, high 6): edits allowed for a term of this length."""
    return 0 if len(term) <= 2 else 1 if len(term) <= 5 else 2


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("passage_id", stored=True, tokenizer_name="raw")
    builder.add_text_field("article_id", stored=True, tokenizer_name="raw")
    # Not stored: only ranks come back from a search, and sloppy phrases read positions from
    # the token store. Positions (the default index option) serve exact phrase queries.
    builder.add_text_field("text", stored=False, tokenizer_name=_TOKENIZER, index_option="position")
    # Row in vectors.npy / ids.parquet: a fast field, so a hit's passage id is one array look-up.
    builder.add_integer_field("row", stored=False, indexed=False, fast=True)
    return builder.build()


class _TokenStore:
    """Every passage's tokens, as term ids in position order: what sloppy phrases check.

    tantivy does not hand positions out, so the embedded index keeps its own copy:
    ``tokens.npy`` (int32 term ids, all passages back to back), ``token_starts.npy``
    (int64, where row ``r`` starts; ``n + 1`` entries), ``lengths.npy`` (int32, BM25's
    field length: tokens without the ones of 40+ bytes the index drops) and
    ``terms.parquet`` (term of each id). Tokens come from tantivy's ``default`` tokenizer
    without its length filter, so a token's index in its passage is its position in the
    index. About 4 bytes a token (100 MB for 200,000 passages of 120 words).
    """

    # Joins a batch's texts into one string, analysed in one call (one Rust call instead
    # of one per passage); a text holding the word itself is analysed alone instead.
    MARK = "irforgepassageboundaryq7x9z"

    def __init__(self, terms: list[str], tokens: I32, starts: I64, lengths: I32) -> None:
        self.terms = terms
        self.ids = {t: i for i, t in enumerate(terms)}
        self.long = {i for i, t in enumerate(terms) if len(t.encode()) >= _MAX_TOKEN_BYTES}
        self.tokens, self.starts, self.lengths = tokens, starts, lengths
        self.average = float(lengths.mean()) if len(lengths) else 1.0
        self._new: list[tuple[I32, I64, I32]] = []  # (tokens, passage lengths in tokens, BM25 lengths)

    @classmethod
    def empty(cls) -> _TokenStore:
        return cls([cls.MARK], np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32))

    @classmethod
    def load(cls, directory: Path, count: int) -> _TokenStore:
        terms = pq.read_table(directory / "terms.parquet").column("term").to_pylist()
        tokens = np.load(directory / "tokens.npy", mmap_mode="r", allow_pickle=False)
        starts = np.load(directory / "token_starts.npy", allow_pickle=False)
        lengths = np.load(directory / "lengths.npy", allow_pickle=False)
        if (
            tokens.dtype != np.int32
            or starts.shape != (count + 1,)
            or lengths.shape != (count,)
            or int(starts[-1]) != len(tokens)
            or (len(tokens) and int(tokens.max()) >= len(terms))
        ):
            raise ValueError("tokens.npy, token_starts.npy, lengths.npy and terms.parquet disagree")
        return cls(terms, tokens, starts, lengths)

    def add(self, texts: list[str], reader: tantivy.TextAnalyzer) -> None:
        if not texts:
            return
        words = reader.analyze(f" {self.MARK} ".join(texts))
        ids = self._ids_of(words)
        marks = np.flatnonzero(ids == 0)  # the marker has id 0
        if len(marks) == len(texts) - 1:
            sizes = np.diff(np.concatenate([[-1], marks, [len(words)]])) - 1
            ids = ids[ids != 0]
        else:  # some text holds the marker word itself: analyse one by one
            each = [reader.analyze(t) for t in texts]
            ids = self._ids_of([w for ws in each for w in ws])
            sizes = np.array([len(ws) for ws in each], dtype=np.int64)
        lengths = sizes.astype(np.int32)
        if self.long:
            dropped = np.concatenate([[0], np.cumsum(np.isin(ids, list(self.long)))])
            bounds = np.concatenate([[0], np.cumsum(sizes)])
            lengths -= (dropped[bounds[1:]] - dropped[bounds[:-1]]).astype(np.int32)
        self._new.append((ids, sizes, lengths))

    def _ids_of(self, words: list[str]) -> I32:
        for word in sorted(set(words).difference(self.ids)):  # sorted: the same ids on every run
            self.ids[word] = len(self.terms)
            self.terms.append(word)
            if len(word.encode()) >= _MAX_TOKEN_BYTES:
                self.long.add(self.ids[word])
        return np.fromiter(map(self.ids.__getitem__, words), dtype=np.int32, count=len(words))

    def write(self, directory: Path) -> None:
        new_tokens = [t for t, _, _ in self._new]
        total = len(self.tokens) + sum(len(t) for t in new_tokens)
        out = np.lib.format.open_memmap(
            directory / "tokens.npy.tmp", mode="w+", dtype=np.int32, shape=(total,)
        )
        out[: len(self.tokens)] = self.tokens
        at = len(self.tokens)
        for block in new_tokens:
            out[at : at + len(block)] = block
            at += len(block)
        out.flush()
        del out
        (directory / "tokens.npy.tmp").replace(directory / "tokens.npy")
        sizes = np.concatenate([np.diff(self.starts), *[s for _, s, _ in self._new]])
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        lengths = np.concatenate([self.lengths, *[n for _, _, n in self._new]]).astype(np.int32)
        for name, array in (("token_starts", starts), ("lengths", lengths)):
            np.save(directory / f"{name}.npy.tmp.npy", array)
            (directory / f"{name}.npy.tmp.npy").replace(directory / f"{name}.npy")
        pq.write_table(pa.table({"term": pa.array(self.terms, pa.string())}), directory / "terms.parquet.tmp")
        (directory / "terms.parquet.tmp").replace(directory / "terms.parquet")
        self._new = []

    def frequencies(self, rows: I64, terms: list[str], offsets: list[int], slop: int) -> list[float]:
        """Lucene's sloppy phrase frequency of the phrase in each row (0: no match)."""
        wanted = [self.ids.get(t) for t in terms]
        if any(w is None for w in wanted):
            return [0.0] * len(rows)
        term_ids = [int(w) for w in wanted if w is not None]
        starts, sizes = self.starts[rows], self.starts[rows + 1] - self.starts[rows]
        # every token of every candidate, then the ones that are phrase terms
        first = np.repeat(np.cumsum(sizes) - sizes, sizes)
        local = np.arange(int(sizes.sum()), dtype=np.int64) - first
        tokens = self.tokens[np.repeat(starts, sizes) + local]
        hit = np.isin(tokens, np.unique(term_ids))
        which = np.repeat(np.arange(len(rows)), sizes)[hit]
        bounds = np.searchsorted(which, np.arange(len(rows) + 1)).tolist()
        found, where = tokens[hit].tolist(), local[hit].tolist()
        out = []
        for c in range(len(rows)):
            at: dict[int, list[int]] = {}
            for j in range(bounds[c], bounds[c + 1]):
                at.setdefault(found[j], []).append(where[j])
            out.append(sloppy_frequency(term_ids, at, offsets, slop))
        return out


class EmbeddedBackend:
    """A :class:`~tasks.common.search.port.SearchBackend` in one directory, in process.

    :meth:`create` starts an empty index; :meth:`add` may be called several times, then
    :meth:`finish` commits (tantivy segments, vectors, token store, ids, manifest) and makes
    every added passage searchable; more :meth:`add` calls and another :meth:`finish` extend it. :meth:`open` reopens a finished index for searching (read-only).
    Passages added but not finished are dropped by :meth:`close`.

    ``threads`` lexical searches run at once (tantivy releases the GIL while it searches);
    default: the number of CPUs.
    """

    name = "embedded"

    def __init__(
        self, directory: Path, dims: int, index: tantivy.Index, *, writable: bool, threads: int
    ) -> None:
        self.directory = directory
        self.dims = dims
        self._index = index
        self._schema = index.schema
        self._writable = writable
        self._threads = max(1, threads)
        self._closed = False
        self._writer: tantivy.IndexWriter | None = None
        self._pending_ids: list[str] = []
        self._pending_vectors: list[F32] = []
        self._ids: list[str] = []
        self._id_rank: I64 = np.zeros(0, dtype=np.int64)
        self._by_rank: I64 = np.zeros(0, dtype=np.int64)  # row of each id rank
        self._bm25: bm25_kernels.Bm25Matrix | None = None  # tantivy's BM25 weights, eagerly
        self._vectors: F32 = np.zeros((0, dims), dtype=np.float32)
        self._known: set[str] = set()
        self._vocabulary: dict[int, dict[str, int]] | None = None  # for fuzzy: length -> term -> df
        self._expanded: dict[str, list[tuple[str, float]]] = {}
        self._store = _TokenStore.empty()
        self._local = threading.local()  # per-thread analysers: tantivy's are not shared
        self._searcher: tantivy.Searcher = index.searcher()
        self._analyzers = [analyzer() for _ in range(self._threads)]  # one per worker thread

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(cls, directory: Path, dims: int, *, threads: int | None = None) -> EmbeddedBackend:
        """A new, empty index in ``directory`` (created if missing; it must be empty)."""
        if dims < 1:
            raise ValueError(f"dims must be at least 1, got {dims}")
        directory = Path(directory)
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise SearchError(
                f"embedded search: {directory} is not an empty directory; "
                "open() an existing index or choose a new directory"
            )
        (directory / "tantivy").mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(_schema(), path=str(directory / "tantivy"), reuse=False)
        backend = cls(directory, dims, index, writable=True, threads=threads or os.cpu_count() or 1)
        backend._write_store([], None)  # an empty index is a valid, openable index
        backend._store = _TokenStore.load(directory, 0)
        return backend

    @classmethod
    def open(cls, directory: Path, *, threads: int | None = None) -> EmbeddedBackend:
        """Reopen an index written by :meth:`create` + :meth:`finish`, for searching only."""
        directory = Path(directory)
        manifest_path = directory / "manifest.json"
        try:
            manifest = json.loads(manifest_path.read_text())
        except FileNotFoundError:
            raise SearchError(
                f"embedded search: no index at {directory} ({manifest_path.name} is missing); "
                "build one with EmbeddedBackend.create() and finish()"
            ) from None
        except (OSError, ValueError) as err:
            raise SearchError(f"embedded search: unreadable {manifest_path}: {err}") from err
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise SearchError(f"embedded search: {manifest_path} is not a {FORMAT} manifest")
        dims, count = manifest.get("dims"), manifest.get("count")
        if not isinstance(dims, int) or not isinstance(count, int):
            raise SearchError(f"embedded search: {manifest_path} lacks integer dims/count")
        try:
            index = tantivy.Index.open(str(directory / "tantivy"))
            vectors = np.load(directory / "vectors.npy", mmap_mode="r", allow_pickle=False)
            ids = pq.read_table(directory / "ids.parquet").column("passage_id").to_pylist()
            store = _TokenStore.load(directory, count)
        except (OSError, ValueError, KeyError, pa.ArrowException) as err:
            raise SearchError(f"embedded search: the index at {directory} is corrupt: {err}") from err
        backend = cls(directory, dims, index, writable=False, threads=threads or os.cpu_count() or 1)
        problems = []
        if vectors.dtype != np.float32 or vectors.shape != (count, dims):
            problems.append(
                f"vectors.npy is {vectors.dtype}{list(vectors.shape)}, expected float32[{count}, {dims}]"
            )
        if len(ids) != count:
            problems.append(f"ids.parquet has {len(ids)} rows, expected {count}")
        if backend._searcher.num_docs != count:
            problems.append(f"tantivy has {backend._searcher.num_docs} documents, expected {count}")
        if problems:
            raise SearchError(f"embedded search: the index at {directory} is corrupt: " + "; ".join(problems))
        backend._store = store
        backend._load(ids, vectors)
        return backend

    def close(self) -> None:
        """Release the index; passages added since the last :meth:`finish` are dropped."""
        if self._closed:
            return
        if self._writer is not None:
            self._writer.rollback()
            self._writer = None
        self._closed = True
        self._vectors = np.zeros((0, self.dims), dtype=np.float32)  # unmaps vectors.npy
        self._store = _TokenStore.empty()  # and tokens.npy
        self._bm25 = None

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
        if not self._writable:
            raise SearchError(f"embedded search: {self.directory} was opened read-only; create() a new index")
        if self._writer is None:
            self._writer = self._index.writer(heap_size=256_000_000)
        report = IndexReport()
        for number, batch in enumerate(batches):
            self._add_batch(number, batch, report)
        return report

    def _add_batch(self, number: int, batch: pa.RecordBatch, report: IndexReport) -> None:
        missing = [c for c in ("passage_id", "article_id", "text", "vector") if c not in batch.schema.names]
        if missing:
            raise SearchError(f"embedded search: batch {number} lacks column(s) {missing} of PASSAGE_SCHEMA")
        ids = batch.column("passage_id").to_pylist()
        articles = batch.column("article_id").to_pylist()
        texts = batch.column("text").to_pylist()
        matrix, vector_problems = _vectors_of(batch.column("vector"), self.dims, number)
        keep = np.zeros(len(ids), dtype=bool)
        assert self._writer is not None
        writer, row = self._writer, len(self._ids) + len(self._pending_ids)
        accepted: list[str] = []
        for i, pid in enumerate(ids):
            if not pid:
                reason = f"batch {number} row {i}: passage_id is missing"
            elif pid in self._known:
                reason = "duplicate passage_id: already added to this index"
            elif articles[i] is None:
                reason = "article_id is missing"
            elif texts[i] is None:
                reason = "text is missing"
            elif (problem := vector_problems[i]) is not None:
                reason = problem
            else:
                writer.add_document(
                    tantivy.Document(passage_id=pid, article_id=articles[i], text=texts[i], row=row)
                )
                self._known.add(pid)
                self._pending_ids.append(pid)
                accepted.append(texts[i])
                keep[i] = True
                row += 1
                continue
            report.failed.append((pid or "", reason))
        report.indexed += int(keep.sum())
        if keep.any():
            self._pending_vectors.append(matrix[keep])
            self._store.add(accepted, self._position_analyzer())

    def finish(self) -> None:
        """Commit: tantivy segments (merged), then vectors, ids and last the manifest."""
        self._check_open()
        if self._writer is None:
            return
        try:
            self._writer.commit()
            self._writer.wait_merging_threads()  # consumes the writer: the next add() opens a new one
        except ValueError as err:
            raise SearchError(f"embedded search: tantivy commit failed in {self.directory}: {err}") from err
        self._writer = None
        ids = self._ids + self._pending_ids
        self._write_store(ids, self._pending_vectors)
        self._pending_ids, self._pending_vectors = [], []
        self._store = _TokenStore.load(self.directory, len(ids))
        self._index.reload()
        self._searcher = self._index.searcher()
        self._load(ids, np.load(self.directory / "vectors.npy", mmap_mode="r", allow_pickle=False))

    def _write_store(self, ids: list[str], new_vectors: list[F32] | None) -> None:
        """vectors.npy (old rows, then new), the token store, ids.parquet, manifest.json (last).

        Each file goes through a temporary one; :meth:`open` checks that they agree."""
        d = self.directory
        tmp = d / "vectors.npy.tmp"
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(ids), self.dims))
        at = len(self._vectors)
        out[:at] = self._vectors
        for block in new_vectors or []:
            out[at : at + len(block)] = block
            at += len(block)
        out.flush()
        del out
        tmp.replace(d / "vectors.npy")
        self._store.write(d)
        pq.write_table(pa.table({"passage_id": pa.array(ids, pa.string())}), d / "ids.parquet.tmp")
        (d / "ids.parquet.tmp").replace(d / "ids.parquet")
        manifest = {
            "format": FORMAT,
            "dims": self.dims,
            "count": len(ids),
            "tokenizer": _TOKENIZER,
            "tantivy": version("tantivy"),
        }
        (d / "manifest.json.tmp").write_text(json.dumps(manifest, indent=2) + "\n")
        (d / "manifest.json.tmp").replace(d / "manifest.json")

    def _load(self, ids: list[str], vectors: F32) -> None:
        self._ids = ids
        self._vocabulary, self._expanded = None, {}  # fuzzy expansions depend on the indexed terms
        self._known = set(ids) if self._writable else set()
        self._vectors = vectors
        # Rank of each row's passage id in ascending order (Arrow sorts strings by UTF-8
        # bytes = code points, like Python's str): breaks kNN score ties without strings.
        order = pc.sort_indices(pa.array(ids, pa.string())).to_numpy()
        rank = np.empty(len(ids), dtype=np.int64)
        rank[order] = np.arange(len(ids), dtype=np.int64)
        self._id_rank, self._by_rank = rank, order.astype(np.int64)
        self._bm25 = None  # built by the first bm25() call: phrase, fuzzy and kNN never need it

    def _bm25_matrix(self) -> bm25_kernels.Bm25Matrix:
        if self._bm25 is None:
            store = self._store
            indexed = np.ones(len(store.terms), dtype=bool)
            indexed[list(store.long)] = False  # tantivy drops tokens of 40+ bytes
            self._bm25 = bm25_kernels.Bm25Matrix.build(store.tokens, store.starts, store.lengths, indexed)
        return self._bm25

    def count(self) -> int:
        self._check_open()
        return len(self._ids)

    def _check_open(self) -> None:
        if self._closed:
            raise SearchError(f"embedded search: the index at {self.directory} is closed")

    # ------------------------------------------------------------------ lexical retrievers

    def bm25(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        """ES ``match``: any analysed token, tantivy's BM25 (2.2x Lucene's; same ranking).

        The scores are the ones tantivy gives the ``should`` query of :meth:`bm25_tantivy`
        (up to float32 rounding: tantivy sums in float32), computed from a term -> passage
        matrix of precomputed weights with numba kernels, pruning the passages that cannot
        reach the top ``k`` (:mod:`tasks.common.search.bm25_kernels`); the matrix is built from the
        token store by the first call after the index is finished or opened. Work per query: the postings of
        its rare terms, then, once the common terms left cannot lift an unseen passage into
        the top ``k``, a look-up per remaining candidate.
        """
        self._check_open()
        _check_k(k)
        if not texts:
            return []
        if not self._ids:
            return [[] for _ in texts]
        matrix = self._bm25_matrix()
        an, get = self._analyzers[0], self._store.ids.get
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
            self._id_rank,
            self._by_rank,
            self._threads,
        )
        ids = self._ids
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

    def bm25_tantivy(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        """:meth:`bm25` searched by tantivy itself: its oracle in the tests, its peer in the bench.

        Cost: this tantivy build scores every posting of every query term; its union does not
        skip non-competitive documents (measured: a term in 20 passages OR ``the`` takes as
        long as ``the`` alone), so a query costs about the summed document frequencies of its
        terms, stop words included (~2.5 ms per short query at 200,000 passages).
        """
        return self._lexical(texts, k, self._query_search(self._bm25_query, k))

    def phrase(self, texts: Sequence[str], slop: int, k: int) -> list[list[Hit]]:
        """ES ``match_phrase`` with ``slop``, with Lucene's sloppy-phrase semantics.

        ``slop`` 0 (or a one-token text) is tantivy's exact phrase (term) query: the same
        matches and BM25 as Lucene's. For ``slop`` > 0 tantivy's own sloppy matching is not
        Lucene's (measured: it needs slop 3 for ``b a c`` against ``"a b c"``, where Lucene
        needs 2, and it accepts some matches Lucene refuses), so :meth:`_sloppy` implements
        Lucene's rule on tantivy's candidates; see there.
        """
        if slop < 0:
            raise ValueError(f"slop must be >= 0, got {slop}")
        if slop == 0:
            return self._lexical(texts, k, self._query_search(self._phrase_query, k))
        return self._lexical(texts, k, lambda text, an, searcher: self._sloppy(text, an, searcher, slop, k))

    def fuzzy(self, texts: Sequence[str], k: int) -> list[list[Hit]]:
        """ES ``match`` with ``fuzziness: AUTO``, rewritten the way Lucene's ``FuzzyQuery`` is.

        Each analysed token ``t`` (code points; edits allowed: 0 for 1-2, 1 for 3-5, 2
        above; a transposition is one edit, no prefix: ES's defaults) becomes, as in ES's
        ``top_terms_blended_freqs_50`` rewrite:

        * its expansions: indexed terms within that many edits (optimal string alignment,
          Lucene's measure), the best :data:`MAX_EXPANSIONS` by boost
          ``1 - edits / min(len(term), len(t))`` (1 for ``t`` itself), ties by term;
        * one BM25 term query per expansion, boosted by that similarity and scored with the
          *blended* document frequency (the largest among the expansions, so a misspelt
          token scores like the word it stands for, not like an ultra-rare term): tantivy
          scores a term with its own frequency, so the boost also carries
          ``idf(max df) / idf(df)``.

        The clauses are summed (``should``), a repeated token counting again. Scores equal
        ES's up to tantivy's 2.2x BM25 scale and float rounding.

        tantivy's own ``FuzzyTermQuery`` is not used: it scores a constant 1.0 and builds a
        Levenshtein automaton on every search (about 1 ms per distance-2 token, 100 ms per
        passage-long query). Here expansions are found once per distinct token (rapidfuzz
        ``cdist`` against the indexed terms of compatible length, batched over every token of
        the call) and cached until the index changes; the query is plain term queries
        (measured on the benchmark: 9 ms instead of 60 ms a passage-long query at 50,000
        passages). Expansion cost grows with the vocabulary (all terms within two letters'
        length are compared): fine for 10^5 terms, slow for 10^7.
        """
        self._check_open()
        _check_k(k)
        an = self._analyzers[0]
        self._expand({t for text in texts if text for t in self._terms(text, an)})
        return self._lexical(texts, k, self._query_search(self._fuzzy_query, k))

    def _lexical(self, texts: Sequence[str], k: int, search: _Search) -> list[list[Hit]]:
        self._check_open()
        _check_k(k)
        if not texts:
            return []
        searcher = self._searcher  # one searcher (one consistent snapshot) for the whole batch

        def run(part: Sequence[str], an: tantivy.TextAnalyzer) -> list[list[Hit]]:
            return [search(text, an, searcher) if text else [] for text in part]

        if self._threads == 1 or len(texts) < 2 * self._threads:
            return run(texts, self._analyzers[0])
        # Contiguous slices, one per thread: Python builds queries under the GIL while the
        # other threads search in tantivy with the GIL released.
        step = math.ceil(len(texts) / self._threads)
        parts = [texts[i : i + step] for i in range(0, len(texts), step)]
        with ThreadPoolExecutor(len(parts)) as pool:
            done = list(pool.map(run, parts, self._analyzers))
        return [hits for part in done for hits in part]

    def _query_search(
        self, build: Callable[[str, tantivy.TextAnalyzer], tantivy.Query | None], k: int
    ) -> _Search:
        """A per-text search that runs the tantivy query ``build`` makes (None: no hits)."""

        def search(text: str, an: tantivy.TextAnalyzer, searcher: tantivy.Searcher) -> list[Hit]:
            query = build(text, an)
            return [] if query is None else self._top(searcher, query, k)

        return search

    def _top(self, searcher: tantivy.Searcher, query: tantivy.Query, k: int) -> list[Hit]:
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
        ids = self._ids
        return ranked([ids[r] for r in rows], [score for score, _ in hits], k)  # type: ignore[index]

    def _terms(self, text: str, an: tantivy.TextAnalyzer) -> list[str]:
        return an.analyze(text)[:MAX_QUERY_TERMS]

    def _bm25_query(self, text: str, an: tantivy.TextAnalyzer) -> tantivy.Query | None:
        terms = self._terms(text, an)
        if not terms:
            return None
        schema, occur = self._schema, tantivy.Occur.Should
        # "freq": BM25 needs term frequencies, not positions (cheaper postings).
        return tantivy.Query.boolean_query(
            [(occur, tantivy.Query.term_query(schema, "text", t, index_option="freq")) for t in terms]
        )

    def _phrase_query(self, text: str, an: tantivy.TextAnalyzer) -> tantivy.Query | None:
        tokens = an.pre_tokenize(text).tokens[:MAX_QUERY_TERMS]
        if not tokens:
            return None
        if len(tokens) == 1:  # as ES: a one-token phrase is a term query
            return tantivy.Query.term_query(self._schema, "text", tokens[0].text, index_option="freq")
        # Token positions, not list order: a dropped (too long) token leaves a gap, as at indexing.
        words: list[str | tuple[int, str]] = [(t.position, t.text) for t in tokens]
        return tantivy.Query.phrase_query(self._schema, "text", words, 0)

    def _sloppy(
        self, text: str, an: tantivy.TextAnalyzer, searcher: tantivy.Searcher, slop: int, k: int
    ) -> list[Hit]:
        """Lucene's sloppy phrase: tantivy finds candidates, Python checks positions and scores.

        A passage matches when some position of every query term, each shifted back by the
        term's offset in the query, falls in one window of ``slop + 1`` (Lucene's
        ``SloppyPhraseMatcher``: two swapped terms are 2 moves apart; repeated query terms
        take distinct positions). Candidates are the passages holding every term (an AND
        query in tantivy, a superset of the matches; narrowed by :meth:`_near_rarest` when
        there are many); their positions come from the token store (:class:`_TokenStore`),
        all candidates at once in numpy, and the sweep runs per candidate in Python. The
        phrase frequency is Lucene's, each match counting ``1 / (1 + match length)``, and the
        score tantivy's BM25 formula on it (idf summed over the terms, as for tantivy's exact
        phrases), with the passage's exact length where tantivy uses a one-byte length code.
        Cost grows with the candidates: a phrase of very common words (``of the``) checks
        every passage holding both.
        """
        tokens = an.pre_tokenize(text).tokens[:MAX_QUERY_TERMS]
        if len(tokens) < 2:
            query = self._phrase_query(text, an)
            return [] if query is None else self._top(searcher, query, k)
        first = tokens[0].position
        terms = [t.text for t in tokens]
        offsets = [t.position - first for t in tokens]
        n = searcher.num_docs
        dfs = [searcher.doc_freq("text", t) for t in terms]
        if not all(dfs):
            return []  # a phrase needs every term
        schema, must = self._schema, tantivy.Occur.Must
        candidates = tantivy.Query.const_score_query(
            tantivy.Query.boolean_query(
                [
                    (must, tantivy.Query.term_query(schema, "text", t, index_option="basic"))
                    for t in set(terms)
                ]
            ),
            1.0,
        )
        hits = searcher.search(candidates, _REFINE_ABOVE + 1, count=False).hits
        if len(hits) > _REFINE_ABOVE:
            # Many passages hold every term: narrow them down in tantivy (a few ms) before
            # checking each one in Python; then take every candidate.
            candidates, limit = self._near_rarest(terms, offsets, dfs, slop), 1024
            while len(hits := searcher.search(candidates, limit, count=False).hits) == limit:
                limit *= 8
        if not hits:
            return []
        store = self._store
        rows = np.asarray(searcher.fast_field_values("row", [address for _, address in hits]), dtype=np.int64)
        freqs = np.asarray(store.frequencies(rows, terms, offsets, slop))
        match = freqs > 0
        rows, freqs = rows[match], freqs[match]
        norms = _K1 * (1.0 - _B + _B * store.lengths[rows] / store.average)
        scores = sum(_idf(df, n) for df in dfs) * (_K1 + 1.0) * freqs / (freqs + norms)
        ids = self._ids
        return ranked([ids[r] for r in rows.tolist()], scores.tolist(), k)

    def _near_rarest(self, terms: list[str], offsets: list[int], dfs: list[int], slop: int) -> tantivy.Query:
        """Passages where the other terms sit near the rarest one: a superset of the sloppy matches.

        In a match every term's phrase position is within ``slop`` of the rarest term's
        (``r``), so term ``j`` occurs ``offset_j - offset_r + d`` positions after ``r`` for
        some ``d`` in ``[-slop, slop]``: one exact two-word phrase per ``d`` (tantivy's exact
        phrases with explicit positions are exact), OR'ed, for each of up to
        :data:`_NEAR_TERMS` other terms (the rarest: the most selective; any subset keeps
        the superset), AND'ed with each other and with the remaining terms.
        """
        schema, should, must = self._schema, tantivy.Occur.Should, tantivy.Occur.Must
        r = min(range(len(terms)), key=lambda i: (dfs[i], i))
        others = sorted((i for i in range(len(terms)) if i != r), key=lambda i: (dfs[i], i))[:_NEAR_TERMS]
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

    def _position_analyzer(self) -> tantivy.TextAnalyzer:
        """This thread's ``default`` tokenizer without the length filter (see :meth:`_sloppy`)."""
        found: tantivy.TextAnalyzer | None = getattr(self._local, "positions", None)
        if found is None:
            found = self._local.positions = (
                tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
                .filter(tantivy.Filter.lowercase())
                .build()
            )
        return found

    def _fuzzy_query(self, text: str, an: tantivy.TextAnalyzer) -> tantivy.Query | None:
        schema, occur, expanded = self._schema, tantivy.Occur.Should, self._expanded
        clauses = [
            (occur, tantivy.Query.boost_query(tantivy.Query.term_query(schema, "text", e, "freq"), w * times))
            for term, times in Counter(self._terms(text, an)).items()
            for e, w in expanded[term]
        ]
        return tantivy.Query.boolean_query(clauses) if clauses else None

    def _expand(self, terms: set[str]) -> None:
        """Fill the expansion cache (term -> [(indexed term, weight)]) for ``terms``."""
        todo = terms - self._expanded.keys()
        if not todo:
            return
        if self._vocabulary is None:
            # Every indexed term with its document frequency, grouped by length.
            self._vocabulary = {}
            for term, df in self._searcher.terms_with_prefix("text", "", limit=None):
                self._vocabulary.setdefault(len(term), {})[term] = df
        vocabulary = self._vocabulary
        n = self._searcher.num_docs
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
                    self._expanded[term] = [(term, 1.0)] if term in exact else []
                continue
            choices = [t for t, _ in window]
            rows = max(1, (32 << 20) // len(choices))  # a uint8 distance matrix of at most 32 MB
            for at in range(0, len(group), rows):
                part = group[at : at + rows]
                distances = process.cdist(
                    part,
                    choices,
                    scorer=OSA.distance,
                    score_cutoff=edits,
                    dtype=np.uint8,
                    workers=self._threads,
                )
                for term, row in zip(part, distances, strict=True):
                    hits = np.flatnonzero(row <= edits).tolist()
                    found = [(choices[j], int(row[j]), window[j][1]) for j in hits]
                    self._expanded[term] = _blend(term, found, n)

    # ------------------------------------------------------------------ vectors

    def knn(self, vectors: F32, k: int, num_candidates: int) -> list[list[Hit]]:
        """Exact cosine nearest passages; ``num_candidates`` is checked (>= k, as ES) but unused.

        Exact search has no candidate list to size: every stored vector is scored. Queries
        are normalised (a zero, NaN or wrong-sized query raises ``ValueError``). Scores are
        the cosine in [-1, 1] (ES reports ``(1 + cos) / 2``; same order).

        Work: one float32 matrix product per block of 512 queries x 16,384 stored vectors
        (bounded memory), keeping per block every passage within the float32 error bound of
        the block's k-th score. The survivors are rescored in float64 with a fixed summation
        order, so a score depends only on the two vectors (not on batch size, block layout or
        BLAS kernel) and identical vectors tie exactly, then ties go by passage id.
        """
        self._check_open()
        _check_k(k)
        if num_candidates < k:
            raise ValueError(
                f"num_candidates ({num_candidates}) must be at least k ({k}), as in Elasticsearch"
            )
        queries = np.asarray(vectors)
        if queries.ndim != 2 or queries.shape[1] != self.dims:
            raise ValueError(f"knn wants a [queries, {self.dims}] array, got shape {list(queries.shape)}")
        queries = queries.astype(np.float64)
        norms = np.sqrt((queries * queries).sum(axis=1))
        bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
        if len(bad):
            raise ValueError(f"knn query vector {int(bad[0])} has a zero norm or NaN / infinite values")
        q32 = (queries / norms[:, None]).astype(np.float32)
        stored, n = self._vectors, len(self._vectors)
        if n == 0:
            return [[] for _ in range(len(q32))]
        # |float32 dot - exact| <= dims * eps * |q| |v| for unit vectors (Higham's bound),
        # doubled for safety; a candidate must be within twice that of the k-th score.
        margin = 4.0 * self.dims * _F32_EPS
        out: list[list[Hit]] = []
        for start in range(0, len(q32), _QUERY_BLOCK):
            block = q32[start : start + _QUERY_BLOCK]
            found_q, found_row, found_score = [], [], []
            for at in range(0, n, _CORPUS_BLOCK):
                scores = block @ stored[at : at + _CORPUS_BLOCK].T
                cut = scores.shape[1] - min(k, scores.shape[1])
                kth = np.partition(scores, cut, axis=1)[:, cut]
                # flatnonzero: ten times faster than a 2-D nonzero here
                flat = np.flatnonzero(scores >= (kth - margin)[:, None])
                qi, ci = np.divmod(flat, scores.shape[1])
                found_q.append(qi)
                found_row.append(ci + at)
                found_score.append(scores.ravel()[flat])
            qs, rows, approx = np.concatenate(found_q), np.concatenate(found_row), np.concatenate(found_score)
            order = np.argsort(qs, kind="stable")
            bounds = np.searchsorted(qs[order], np.arange(len(block) + 1))
            for i in range(len(block)):
                pick = order[bounds[i] : bounds[i + 1]]
                out.append(self._exact_top(block[i], rows[pick], approx[pick], k, margin))
        return out

    def _exact_top(self, query: F32, rows: I64, approx: F32, k: int, margin: float) -> list[Hit]:
        if len(rows) > k:
            kth = np.partition(approx, len(approx) - k)[len(approx) - k]
            rows = rows[approx >= kth - margin]
        # Elementwise products, then numpy's pairwise sum along each row: the same numbers
        # in the same order whatever the rows around them, unlike a BLAS gemv.
        exact: F64 = (self._vectors[rows].astype(np.float64) * query.astype(np.float64)).sum(axis=1)
        top = np.lexsort((self._id_rank[rows], -exact))[:k]
        ids = self._ids
        return [Hit(rank, ids[rows[j]], float(exact[j])) for rank, j in enumerate(top.tolist(), start=1)]


def sloppy_frequency(
    terms: Sequence[_T], positions: Mapping[_T, list[int]], offsets: list[int], slop: int
) -> float:
    """Lucene's sloppy phrase frequency (``SloppyPhraseMatcher.phraseFreq``); 0 when no match.

    ``terms[i]`` sits at ``offsets[i]`` in the query; ``positions[term]`` lists the term's
    positions in the passage, ascending. Lucene sweeps "phrase positions" (a term's
    position minus its offset) from the smallest: the match length is the largest minus
    the smallest; it keeps advancing the smallest while that does not pass the next one
    (shrinking the match), then counts ``1 / (1 + length)`` for a match within ``slop`` and
    goes on, until some term has no positions left. Occurrences of a repeated query term
    start on distinct positions (the k-th one k positions in) and, when two collide, the
    one with the smaller phrase position moves on (Lucene's ``advanceRpts``).
    """
    lists = [positions.get(t, []) for t in terms]
    if not all(lists):
        return 0.0
    count = len(terms)
    index = [0] * count
    repeats = len(set(terms)) < count
    same = (
        [[j for j, u in enumerate(terms) if u == t and j != i] for i, t in enumerate(terms)]
        if repeats
        else [[]] * count
    )

    def raw(i: int) -> int:
        return lists[i][index[i]]

    def phrase_position(i: int) -> int:
        return lists[i][index[i]] - offsets[i]

    if not repeats:
        return _sweep([[p - o for p in lst] for lst, o in zip(lists, offsets, strict=True)], offsets, slop)
    for i in range(count):  # start condition: no two occurrences of a term on one position
        while any(j < i and raw(j) == raw(i) for j in same[i]):
            index[i] += 1
            if index[i] >= len(lists[i]):
                return 0.0
    end = max(phrase_position(i) for i in range(count))

    def advance(i: int) -> bool:  # advancePP
        nonlocal end
        index[i] += 1
        if index[i] >= len(lists[i]):
            return False
        end = max(end, phrase_position(i))
        return True

    def resolve(i: int) -> tuple[bool, bool]:  # advanceRpts: (not exhausted, another one moved)
        moved_other, start = False, i
        while (k := next((j for j in same[i] if raw(j) == raw(i)), None)) is not None:
            i = i if (phrase_position(i), offsets[i]) < (phrase_position(k), offsets[k]) else k
            if not advance(i):
                return False, moved_other
            moved_other = moved_other or i != start
        return True, moved_other

    heap = [(phrase_position(i), offsets[i], i) for i in range(count)]
    heapq.heapify(heap)
    freq = 0.0
    _, _, current = heapq.heappop(heap)
    length = end - phrase_position(current)
    following = heap[0][0]
    while advance(current):
        if repeats:
            alive, moved_other = resolve(current)
            if not alive:
                break
            if moved_other:  # re-queue the occurrences that moved
                heap = [(phrase_position(j), offsets[j], j) for _, _, j in heap]
                heapq.heapify(heap)
        position = phrase_position(current)
        if position > following:  # done minimising this match
            if length <= slop:
                freq += 1.0 / (1.0 + length)
            heapq.heappush(heap, (position, offsets[current], current))
            _, _, current = heapq.heappop(heap)
            following = heap[0][0]
            length = end - phrase_position(current)
        else:
            length = min(length, end - position)
    if length <= slop:
        freq += 1.0 / (1.0 + length)
    return freq


def _sweep(shifted: list[list[int]], offsets: list[int], slop: int) -> float:
    """:func:`sloppy_frequency` for distinct query terms (``shifted``: phrase positions), inlined."""
    count = len(shifted)
    if all(len(p) == 1 for p in shifted):  # one position each: one window
        first = [p[0] for p in shifted]
        length = max(first) - min(first)
        return 1.0 / (1.0 + length) if length <= slop else 0.0
    index = [0] * count
    heap = [(shifted[i][0], offsets[i], i) for i in range(count)]
    heapq.heapify(heap)
    end = max(h[0] for h in heap)
    position, _, current = heapq.heappop(heap)
    length = end - position
    following = heap[0][0]
    freq = 0.0
    while True:
        index[current] += 1
        positions = shifted[current]
        if index[current] >= len(positions):
            break
        position = positions[index[current]]
        end = max(end, position)
        if position > following:  # done minimising this match
            if length <= slop:
                freq += 1.0 / (1.0 + length)
            position, _, current = heapq.heappushpop(heap, (position, offsets[current], current))
            following = heap[0][0]
            length = end - position
        elif end - position < length:
            length = end - position
    if length <= slop:
        freq += 1.0 / (1.0 + length)
    return freq


def _blend(term: str, found: list[tuple[str, int, int]], n: int) -> list[tuple[str, float]]:
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
    blended = _idf(max(df for _, _, df in scored), n)
    return [(e, boost * blended / _idf(df, n)) for boost, e, df in scored]


def _idf(df: int, n: int) -> float:
    """BM25 idf, Lucene's and tantivy's formula."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def _vectors_of(column: pa.Array | pa.ChunkedArray, dims: int, number: int) -> tuple[F32, list[str | None]]:
    """Unit-normalised float32 [n, dims] (rows with a problem are zeros) and each row's problem."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if not (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ) or not (pa.types.is_floating(kind.value_type)):
        raise SearchError(
            f"embedded search: batch {number} column 'vector' is {kind}, expected list<float32>"
        )
    n = len(column)
    lengths = pc.list_value_length(column).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    # flatten() skips null lists and honours slicing; null floats become NaN (refused below).
    flat = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    problems: list[str | None] = [None] * n
    matrix = np.zeros((n, dims), dtype=np.float32)
    sized = lengths == dims
    if sized.all():
        matrix[:] = flat.reshape(n, dims)
    else:
        starts = np.concatenate([[0], np.cumsum(np.maximum(lengths, 0))[:-1]])
        take = np.flatnonzero(sized)
        if len(take):
            matrix[take] = flat[starts[take, None] + np.arange(dims)]
        for i in np.flatnonzero(~sized).tolist():
            length = int(lengths[i])
            problems[i] = (
                "vector is missing" if length < 0 else f"vector has {length} dimensions, expected {dims}"
            )
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.sqrt((matrix.astype(np.float64) ** 2).sum(axis=1))
    finite = np.all(np.isfinite(matrix), axis=1, keepdims=False).reshape(n)
    for i in np.flatnonzero(sized & (~finite | (norms == 0))).tolist():
        problems[i] = "vector has NaN or infinite values" if not finite[i] else "vector has a zero norm"
    ok = sized & finite & (norms > 0)
    matrix[ok] = (matrix[ok] / norms[ok, None]).astype(np.float32)
    return matrix, problems


__all__ = ["FORMAT", "MAX_QUERY_TERMS", "EmbeddedBackend", "analyzer", "auto_fuzziness"]
