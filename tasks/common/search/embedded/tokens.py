"""The embedded index's token store: every passage's tokens, as term ids in position order.

tantivy does not hand positions out, so the embedded index keeps its own copy, which
sloppy phrases check (:mod:`tasks.common.search.embedded.sloppy`) and the BM25 matrix is
built from (:mod:`tasks.common.search.bm25_kernels`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tantivy

from tasks.common.search.embedded.analysis import I32, I64, MAX_TOKEN_BYTES
from tasks.common.search.embedded.sloppy import sloppy_frequency


class TokenStore:
    """Every passage's tokens, as term ids in position order: what sloppy phrases check.

    Files: ``tokens.npy`` (int32 term ids, all passages back to back), ``token_starts.npy``
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
        self.long = {i for i, t in enumerate(terms) if len(t.encode()) >= MAX_TOKEN_BYTES}
        self.tokens, self.starts, self.lengths = tokens, starts, lengths
        self.average = float(lengths.mean()) if len(lengths) else 1.0
        self._new: list[tuple[I32, I64, I32]] = []  # (tokens, passage lengths in tokens, BM25 lengths)

    @classmethod
    def empty(cls) -> TokenStore:
        return cls([cls.MARK], np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32))

    @classmethod
    def load(cls, directory: Path, count: int) -> TokenStore:
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
            if len(word.encode()) >= MAX_TOKEN_BYTES:
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
