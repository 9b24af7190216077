"""The embedded index on disk: creating, opening and checking its files, and loading rows into it.

One directory per index (the layout is in ``tasks/common/search/embedded/__init__.py``);
every file is written through a temporary one and ``manifest.json`` last, so a
half-written index is detected by :func:`read_index`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import tantivy

from tasks.common.search.embedded.analysis import TOKENIZER, position_analyzer, schema
from tasks.common.search.embedded.corpus import Corpus
from tasks.common.search.embedded.tokens import TokenStore
from tasks.common.search.port import F32, IndexReport, SearchError

FORMAT: Final = "irforge-embedded-search/1"


def new_index(directory: Path) -> tantivy.Index:
    """A new tantivy index in ``directory`` (created if missing; it must be empty)."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise SearchError(
            f"embedded search: {directory} is not an empty directory; "
            "open() an existing index or choose a new directory"
        )
    (directory / "tantivy").mkdir(parents=True, exist_ok=True)
    return tantivy.Index(schema(), path=str(directory / "tantivy"), reuse=False)


@dataclass(frozen=True)
class Stored:
    """A finished index as read back by :func:`read_index`."""

    dims: int
    index: tantivy.Index
    ids: list[str]
    vectors: F32
    store: TokenStore


def _manifest(directory: Path) -> tuple[int, int]:
    """(dims, count) from ``manifest.json``; SearchError when it is missing or not ours."""
    path = directory / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise SearchError(
            f"embedded search: no index at {directory} ({path.name} is missing); "
            "build one with EmbeddedBackend.create() and finish()"
        ) from None
    except (OSError, ValueError) as err:
        raise SearchError(f"embedded search: unreadable {path}: {err}") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SearchError(f"embedded search: {path} is not a {FORMAT} manifest")
    dims, count = manifest.get("dims"), manifest.get("count")
    if not isinstance(dims, int) or not isinstance(count, int):
        raise SearchError(f"embedded search: {path} lacks integer dims/count")
    return dims, count


def read_index(directory: Path) -> Stored:
    """An index written by ``create()`` + ``finish()``; SearchError when its files disagree."""
    dims, count = _manifest(directory)
    try:
        index = tantivy.Index.open(str(directory / "tantivy"))
        vectors = np.load(directory / "vectors.npy", mmap_mode="r", allow_pickle=False)
        ids = pq.read_table(directory / "ids.parquet").column("passage_id").to_pylist()
        store = TokenStore.load(directory, count)
    except (OSError, ValueError, KeyError, pa.ArrowException) as err:
        raise SearchError(f"embedded search: the index at {directory} is corrupt: {err}") from err
    problems = []
    if vectors.dtype != np.float32 or vectors.shape != (count, dims):
        problems.append(
            f"vectors.npy is {vectors.dtype}{list(vectors.shape)}, expected float32[{count}, {dims}]"
        )
    if len(ids) != count:
        problems.append(f"ids.parquet has {len(ids)} rows, expected {count}")
    if (docs := index.searcher().num_docs) != count:
        problems.append(f"tantivy has {docs} documents, expected {count}")
    if problems:
        raise SearchError(f"embedded search: the index at {directory} is corrupt: " + "; ".join(problems))
    return Stored(dims, index, ids, vectors, store)


class Loader:
    """The write side: rows queued by :meth:`add`, committed into the files by :meth:`finish`."""

    def __init__(self, directory: Path, index: tantivy.Index, corpus: Corpus, *, writable: bool) -> None:
        self.directory = directory
        self._index = index
        self._corpus = corpus
        self._writable = writable
        self._writer: tantivy.IndexWriter | None = None
        self._pending_ids: list[str] = []
        self._pending_vectors: list[F32] = []
        self._known: set[str] = set()
        self._local = threading.local()  # per-thread analysers: tantivy's are not shared

    def add(self, batches: Iterable[pa.RecordBatch]) -> IndexReport:
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
        matrix, vector_problems = vectors_of(batch.column("vector"), self._corpus.dims, number)
        keep = np.zeros(len(ids), dtype=bool)
        assert self._writer is not None
        writer, row = self._writer, len(self._corpus.ids) + len(self._pending_ids)
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
            self._corpus.store.add(accepted, self._position_analyzer())

    def _position_analyzer(self) -> tantivy.TextAnalyzer:
        """This thread's position analyser (tantivy's analysers are not shared between threads)."""
        found: tantivy.TextAnalyzer | None = getattr(self._local, "positions", None)
        if found is None:
            found = self._local.positions = position_analyzer()
        return found

    def finish(self) -> None:
        """Commit: tantivy segments (merged), then vectors, ids and last the manifest."""
        if self._writer is None:
            return
        try:
            self._writer.commit()
            self._writer.wait_merging_threads()  # consumes the writer: the next add() opens a new one
        except ValueError as err:
            raise SearchError(f"embedded search: tantivy commit failed in {self.directory}: {err}") from err
        self._writer = None
        corpus = self._corpus
        ids = corpus.ids + self._pending_ids
        self.write_files(ids, self._pending_vectors)
        self._pending_ids, self._pending_vectors = [], []
        corpus.store = TokenStore.load(self.directory, len(ids))
        self._index.reload()
        corpus.searcher = self._index.searcher()
        corpus.load(ids, np.load(self.directory / "vectors.npy", mmap_mode="r", allow_pickle=False))
        self._known = set(ids)

    def rollback(self) -> None:
        """Drop the rows added since the last :meth:`finish`."""
        if self._writer is not None:
            self._writer.rollback()
            self._writer = None

    def write_files(self, ids: list[str], new_vectors: list[F32] | None) -> None:
        """vectors.npy (old rows, then new), the token store, ids.parquet, manifest.json (last).

        Each file goes through a temporary one; :func:`read_index` checks that they agree."""
        d, corpus = self.directory, self._corpus
        tmp = d / "vectors.npy.tmp"
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(ids), corpus.dims))
        at = len(corpus.vectors)
        out[:at] = corpus.vectors
        for block in new_vectors or []:
            out[at : at + len(block)] = block
            at += len(block)
        out.flush()
        del out
        tmp.replace(d / "vectors.npy")
        corpus.store.write(d)
        pq.write_table(pa.table({"passage_id": pa.array(ids, pa.string())}), d / "ids.parquet.tmp")
        (d / "ids.parquet.tmp").replace(d / "ids.parquet")
        manifest = {
            "format": FORMAT,
            "dims": corpus.dims,
            "count": len(ids),
            "tokenizer": TOKENIZER,
            "tantivy": version("tantivy"),
        }
        (d / "manifest.json.tmp").write_text(json.dumps(manifest, indent=2) + "\n")
        (d / "manifest.json.tmp").replace(d / "manifest.json")


def vectors_of(column: pa.Array | pa.ChunkedArray, dims: int, number: int) -> tuple[F32, list[str | None]]:
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
