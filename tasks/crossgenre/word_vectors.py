"""Word vectors learnt from the corpus itself, for the offline augmentation engine.

Paper 003 §3.2 oversamples positives by inserting or substituting words that are likely
"based on distributional similarity". Without a pre-trained model (no download at run
time), the vectors come from the abstracts the stage already has: positive PMI of word
co-occurrences in a symmetric window, with context-distribution smoothing (α = 0.75),
reduced by a truncated SVD (``scipy.sparse.linalg.svds``, seeded start vector), the word
vector being ``U·√Σ`` — the count-based recipe of Levy, Goldberg & Dagan (TACL 2015,
https://aclanthology.org/Q15-1016/). Rows are unit vectors, so a dot product is a cosine.

Stored in word2vec's text format (a ``<words> <dims>`` header line, then one word and its
values per line, https://code.google.com/archive/p/word2vec/), so any word2vec reader
(gensim's ``KeyedVectors.load_word2vec_format``) can open the file a run leaves behind.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from irforge.errors import IrforgeError
from tasks.crossgenre.preprocess import stop_words

F32 = npt.NDArray[np.float32]
WORD = re.compile(r"[a-z][a-z0-9]*(?:[-'][a-z0-9]+)*")
"""A vocabulary word: lower-case letters and digits, inner hyphens or apostrophes (``covid-19``);
scikit-learn's English stop words (``stop_words()``) are never one (never substituted or inserted)."""
SMOOTHING = 0.75  # context-distribution smoothing of the PMI (Levy et al. 2015, §3.1)


@dataclass(frozen=True, eq=False)
class WordVectors:
    """Unit word vectors; ``words`` sorted by corpus frequency (desc), then alphabetically."""

    words: tuple[str, ...]
    vectors: F32
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        if self.vectors.shape[0] != len(self.words):
            raise ValueError(f"{len(self.words)} words but {self.vectors.shape[0]} vectors")
        object.__setattr__(self, "index", {w: i for i, w in enumerate(self.words)})

    @property
    def dims(self) -> int:
        return int(self.vectors.shape[1])

    def neighbours(self, word: str, k: int) -> list[str]:
        """The ``k`` most similar other words (cosine desc, then frequency rank); [] if unknown."""
        i = self.index.get(word)
        if i is None or k < 1:
            return []
        scores = self.vectors @ self.vectors[i]
        scores[i] = -np.inf
        # The k best without sorting the whole vocabulary: every word scoring at least the k-th
        # best (ties included), then score desc, frequency rank (index) asc.
        best = np.arange(len(scores))
        if k < len(scores):
            best = np.flatnonzero(scores >= np.partition(scores, len(scores) - k)[len(scores) - k])
        order = best[np.lexsort((best, -scores[best]))][:k]
        return [self.words[j] for j in order.tolist() if np.isfinite(scores[j])]


def tokens(text: str) -> list[str]:
    return WORD.findall(text.lower())


def build_vectors(
    texts: Iterable[str], *, dims: int, window: int, min_count: int, max_words: int, seed: int
) -> WordVectors | None:
    """PPMI + truncated SVD vectors of the ``max_words`` most frequent non-stop words seen
    ``min_count`` times; None when fewer than three such words exist (no SVD possible)."""
    from scipy.sparse.linalg import svds  # type: ignore[import-untyped]  # noqa: PLC0415 -- when vectors are built

    stop = stop_words()
    docs = [[t for t in tokens(text) if t not in stop] for text in texts]
    counts = Counter(t for doc in docs for t in doc)
    ranked = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
    words = tuple(ranked[:max_words])
    if len(words) < 3:
        return None
    cooc = _cooccurrences(docs, {w: i for i, w in enumerate(words)}, window)
    ppmi = _ppmi(cooc)
    k = min(dims, len(words) - 1)
    start = np.random.default_rng(seed).standard_normal(len(words))
    u, s, _vt = svds(ppmi, k=k, v0=start, random_state=seed)
    order = np.argsort(-s, kind="stable")
    vectors = (u[:, order] * np.sqrt(s[order])).astype(np.float32)
    return WordVectors(words, _unit(vectors))


def _cooccurrences(docs: list[list[str]], index: dict[str, int], window: int) -> Any:
    """Symmetric counts of two vocabulary words at most ``window`` tokens apart in one text
    (stop words and rare words removed first, as in word2vec's subsampling of frequent words)."""
    from scipy.sparse import coo_matrix, csr_matrix  # type: ignore[import-untyped]  # noqa: PLC0415

    gap = np.full(window, -1, dtype=np.int64)
    pieces: list[npt.NDArray[np.int64]] = []
    for doc in docs:
        pieces += [np.fromiter((index.get(t, -1) for t in doc), dtype=np.int64, count=len(doc)), gap]
    ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    size = len(index)
    out = csr_matrix((size, size), dtype=np.float64)
    # One distance at a time, summed as sparse matrices: the pairs of all distances at once
    # took ~4 GB at the paper's size (bench/bench_crossgenre_flow.py).
    for distance in range(1, window + 1):
        a, b = ids[:-distance], ids[distance:]
        keep = (a >= 0) & (b >= 0)
        counts = coo_matrix((np.ones(int(keep.sum())), (a[keep], b[keep])), shape=(size, size)).tocsr()
        out = out + counts + counts.T  # duplicates summed
    return out.tocsr()


def _ppmi(cooc: Any) -> Any:
    """Positive PMI of a ``scipy.sparse`` co-occurrence matrix, context counts smoothed."""
    from scipy.sparse import coo_matrix  # noqa: PLC0415

    total = float(cooc.sum())
    if total == 0:
        return cooc
    row_sums = np.asarray(cooc.sum(axis=1)).ravel()
    context = np.asarray(cooc.sum(axis=0)).ravel() ** SMOOTHING
    context /= context.sum()
    m = cooc.tocoo()
    pmi = np.log(m.data * total) - np.log(row_sums[m.row]) - np.log(context[m.col] * total)
    keep = pmi > 0
    return coo_matrix((pmi[keep], (m.row[keep], m.col[keep])), shape=cooc.shape).tocsr()


def _unit(vectors: F32) -> F32:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out: F32 = (vectors / np.where(norms > 0, norms, 1)).astype(np.float32)
    return out


def write_word2vec(path: Path, vectors: WordVectors) -> None:
    """word2vec text format, six decimals, written to a temporary name and renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as out:
        out.write(f"{len(vectors.words)} {vectors.dims}\n")
        for word, row in zip(vectors.words, vectors.vectors, strict=True):
            out.write(word + " " + " ".join(f"{x:.6f}" for x in row.tolist()) + "\n")
    tmp.replace(path)


def read_word2vec(path: Path) -> WordVectors:
    """A word2vec text file (rows made unit length); :class:`IrforgeError` naming the file and line."""
    words: list[str] = []
    rows: list[list[float]] = []
    with path.open(encoding="utf-8") as lines:
        header = lines.readline().split()
        try:
            size, dims = int(header[0]), int(header[1])
            for number, line in enumerate(lines, start=2):
                word, *values = line.rstrip("\n").split(" ")
                if len(values) != dims:
                    raise IrforgeError(f"{path}:{number}: {len(values)} values, the header says {dims}")
                words.append(word)
                rows.append([float(v) for v in values])
        except (IndexError, ValueError) as err:
            raise IrforgeError(f"{path}: not a word2vec text file ({err})") from None
    if len(words) != size:
        raise IrforgeError(f"{path}: {len(words)} words, the header says {size}")
    return WordVectors(tuple(words), _unit(np.asarray(rows, dtype=np.float32).reshape(len(words), dims)))
