"""The BM25 text preprocessing of paper 003 §3.1 (BM25+†), from maintained parts.

The authors' ``Phase1/ir_bm25.py`` (github.com/chzuo/emnlp2020-cross-genre-IR) runs NLTK's
word tokeniser, drops English stop words (case-insensitive), Porter-stems, maps
abbreviations through a dictionary, lower-cases, spells digits out (num2words) and drops
punctuation tokens. Ours, in that spirit:

* **Words**: NFKC, then maximal runs of Unicode letters and digits (RE2
  ``[^\\p{L}\\p{N}]+`` splits; pyarrow, in threads), so punctuation never becomes a token
  and ``COVID-19`` is ``COVID``, ``19``. No NLTK (its tokeniser needs a data download).
* **Terms**: lower-case (Arrow's ``utf8_lower``); variant ``pre`` also drops scikit-learn's
  ``ENGLISH_STOP_WORDS`` (NLTK's list needs a download) and stems with Snowball's Porter
  stemmer (PyStemmer ``Stemmer.Stemmer("porter")``). Variant ``plain`` keeps every
  lower-cased word (rank_bm25 on plain tokens). Digits stay digits: num2words is not
  installed, so the authors' digit-to-word step is skipped.
* **Abbreviations** (queries only, paper §3.1: "more than twice in our dataset"): a
  dictionary abbreviation (case-sensitive, ``data/crossgenre/abbreviations/``) written at
  least ``min_count`` times across all headlines, after stop words are dropped, is replaced
  by its long form in every headline. Entries that look like ordinary words are not
  abbreviations here (all lower-case such as ``met``, or capitalised words of three letters
  or more such as ``Post``): :func:`is_abbreviation`. An ambiguous abbreviation takes the
  long form written as a phrase in the most corpus documents (``chooser``,
  :func:`phrase_documents`: ``PCR`` → polymerase chain reaction, not patient care report),
  the first in dictionary order on a tie.

Corpus texts are analysed column-wise: words are dictionary-encoded, and lower-casing, stop
words and stemming run once per distinct word.
"""

from __future__ import annotations

import csv
import functools
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import Stemmer  # type: ignore[import-not-found]

from irforge.errors import ConfigError

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

Analysis = Literal["plain", "pre"]
T = TypeVar("T")


@functools.cache
def stop_words() -> frozenset[str]:
    """scikit-learn's ``ENGLISH_STOP_WORDS``, imported on first use (scikit-learn takes seconds
    to import; planning a run needs none of it)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # type: ignore[import-untyped]  # noqa: PLC0415

    return frozenset(ENGLISH_STOP_WORDS)


_SPLIT = r"[^\p{L}\p{N}]+"  # RE2: everything but letters and digits separates words
_WORD = re.compile(r"[^\W_]+")
_CHUNK = 20_000  # texts a thread splits at once


@dataclass(frozen=True)
class Tokenised:
    """Documents as term ids: document ``r`` is ``tokens[starts[r]:starts[r + 1]]``; ``terms[id]``."""

    terms: list[str]
    tokens: I32
    starts: I64

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """Term → id, built once (every variant of a chunk encodes its queries with it)."""
        return {t: i for i, t in enumerate(self.terms)}


def _array(texts: Sequence[str] | pa.Array) -> pa.Array:
    return texts if isinstance(texts, pa.Array) else pa.array(list(texts), pa.large_string())


def _split(array: pa.Array) -> tuple[pa.Array, I32]:
    """The words of ``array``'s texts (case kept), back to back, and the text each belongs to."""
    part = pc.split_pattern_regex(pc.utf8_normalize(array, "NFKC"), _SPLIT)
    flat = pc.list_flatten(part)
    keep = pc.not_equal(pc.utf8_length(flat), 0)
    parent = pc.list_parent_indices(part).to_numpy(zero_copy_only=False).astype(np.int32)
    return flat.filter(keep), parent[keep.to_numpy(zero_copy_only=False)]


def _in_chunks(array: pa.Array, threads: int | None, work: Callable[[pa.Array], T]) -> list[T]:
    """``work`` on slices of :data:`_CHUNK` texts, in threads (Arrow's kernels release the GIL)."""
    cuts = list(range(0, len(array), _CHUNK)) or [0]
    with ThreadPoolExecutor(max(1, min(threads or os.cpu_count() or 1, len(cuts)))) as pool:
        return list(pool.map(lambda at: work(array.slice(at, _CHUNK)), cuts))


def words(texts: Sequence[str] | pa.Array, threads: int | None = None) -> tuple[pa.Array, I64]:
    """Every text's words (case kept), back to back, and the text each belongs to."""
    parts = _in_chunks(_array(texts), threads, _split)
    parents = [p.astype(np.int64) + i * _CHUNK for i, (_, p) in enumerate(parts)]
    flat = pa.concat_arrays([w.cast(pa.large_string()) for w, _ in parts])
    return flat, np.concatenate(parents)


def normalise(words_: pa.Array, analysis: Analysis) -> pa.Array:
    """Each word's term: lower-cased (``pre``: stemmed, null for a stop word). Lower-casing can
    add a combining mark (``İ`` → ``i̇``): anything but letters and digits is removed again."""
    low = pc.replace_substring_regex(pc.utf8_lower(words_), _SPLIT, "")
    low = pc.if_else(pc.equal(pc.utf8_length(low), 0), pa.scalar(None, low.type), low)
    if analysis == "plain":
        return low
    stop = pc.is_in(low, value_set=pa.array(sorted(stop_words()), low.type))
    plain = low.to_pylist()
    stemmed = Stemmer.Stemmer("porter").stemWords([w or "" for w in plain])
    stems = pa.array([s or w for s, w in zip(stemmed, plain, strict=True)], low.type)  # "s" stems to ""
    return pc.if_else(stop, pa.scalar(None, low.type), stems)


def analyse_corpus(
    texts: Sequence[str] | pa.Array, analysis: Analysis, threads: int | None = None
) -> Tokenised:
    """Corpus texts as term ids (ids in first-seen order; normalised once per distinct word).

    Each slice of texts is split and dictionary-encoded on its own (no column of every word
    is ever held), then the slices' dictionaries are merged and normalised once."""
    array = _array(texts)

    def encode(part: pa.Array) -> tuple[pa.Array, I32, I32, int]:
        flat, parent = _split(part)
        encoded = pc.dictionary_encode(flat.cast(pa.large_string()))
        return encoded.dictionary, encoded.indices.to_numpy(zero_copy_only=False), parent, len(part)

    parts = _in_chunks(array, threads, encode)
    merged = pc.dictionary_encode(pa.concat_arrays([d for d, _, _, _ in parts]))
    terms = pc.dictionary_encode(normalise(merged.dictionary, analysis))
    by_word = pc.fill_null(terms.indices, -1).to_numpy(zero_copy_only=False).astype(np.int32)
    word_of = by_word[merged.indices.to_numpy(zero_copy_only=False)]  # chunk words → term, or -1
    tokens, sizes, offset = [], [], 0
    for dictionary, indices, parent, count in parts:
        ids = word_of[offset : offset + len(dictionary)][indices]
        offset += len(dictionary)
        keep = ids >= 0
        tokens.append(ids[keep])
        sizes.append(np.bincount(parent[keep], minlength=count))
    starts = np.concatenate([[0], np.cumsum(np.concatenate(sizes))]).astype(np.int64)
    return Tokenised(terms.dictionary.to_pylist(), np.concatenate(tokens).astype(np.int32), starts)


def analyse_queries(
    texts: Sequence[str], analysis: Analysis, expansions: Mapping[str, Sequence[str]] | None = None
) -> list[list[str]]:
    """Each query's terms; ``pre`` drops stop words, then replaces each abbreviation of
    ``expansions`` (word → long-form words) before stemming."""
    per_text = _grouped(texts)
    if analysis == "pre":
        per_text = [_expand(ws, expansions or {}) for ws in per_text]
    flat = [w for ws in per_text for w in ws]
    terms = normalise(pa.array(flat, pa.large_string()), analysis).to_pylist()
    out: list[list[str]] = []
    at = 0
    for ws in per_text:
        out.append([t for t in terms[at : at + len(ws)] if t is not None])
        at += len(ws)
    return out


def _grouped(texts: Sequence[str]) -> list[list[str]]:
    flat, parent = words(texts, threads=1)
    out: list[list[str]] = [[] for _ in texts]
    for word, row in zip(flat.to_pylist(), parent.tolist(), strict=True):
        out[row].append(word)
    return out


def _expand(ws: list[str], expansions: Mapping[str, Sequence[str]]) -> list[str]:
    stop = stop_words()
    kept = [w for w in ws if w.lower() not in stop]
    return [x for w in kept for x in expansions.get(w, (w,))]


# ----------------------------------------------------------------------------- abbreviations


@dataclass(frozen=True)
class Expansion:
    """One abbreviation expanded in the queries, and why."""

    abbreviation: str
    count: int  # times written across the headlines
    long_form: str
    long_forms: tuple[str, ...]  # every long form of the dictionary, in its order
    documents: int  # corpus documents holding ``long_form`` (its terms, as a phrase)


def load_abbreviations(path: Path) -> dict[str, tuple[str, ...]]:
    """A CSV of ``abr,long_form`` pairs: abbreviation → distinct long forms, in file order."""
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ConfigError(f"{path}: cannot read the abbreviation dictionary ({err})") from None
    if rows and not {"abr", "long_form"} <= set(rows[0]):
        raise ConfigError(f"{path}: the abbreviation dictionary needs columns abr,long_form")
    out: dict[str, list[str]] = {}
    for row in rows:
        abr, long_form = (row.get("abr") or "").strip(), (row.get("long_form") or "").strip()
        if abr and long_form and long_form not in out.setdefault(abr, []):
            out[abr].append(long_form)
    return {a: tuple(forms) for a, forms in out.items()}


def is_abbreviation(entry: str) -> bool:
    """A dictionary entry treated as an abbreviation: one word (letters and digits) with a digit,
    a capital after its first character (``BP``, ``HbA1c``), or two characters starting with
    a capital (``Tx``). Not ``met`` or ``Post``: they would rewrite ordinary words."""
    if not _WORD.fullmatch(entry) or len(entry) < 2:
        return False
    return (
        any(c.isdigit() for c in entry)
        or any(c.isupper() for c in entry[1:])
        or (len(entry) == 2 and entry[0].isupper())
    )


def plan_expansions(
    headlines: Sequence[str],
    dictionary: Mapping[str, Sequence[str]],
    min_count: int,
    chooser: Callable[[list[list[str]]], list[int]],
    min_documents: int = 0,
) -> list[Expansion]:
    """The abbreviations to expand: written ``min_count`` times or more across ``headlines``
    (stop words dropped first), each with the long form that ``chooser`` (``pre`` terms of
    each long form → corpus documents holding them, e.g. :func:`phrase_documents`) ranks
    first, if at least ``min_documents`` documents hold it (a long form no abstract writes
    only takes the abbreviation's own match away); sorted by abbreviation."""
    stop = stop_words()
    counts = Counter(w for ws in _grouped(headlines) for w in ws if w.lower() not in stop)
    chosen = sorted(a for a, c in counts.items() if c >= min_count and a in dictionary and is_abbreviation(a))
    forms = [tuple(dictionary[a]) for a in chosen]
    flat = [f for fs in forms for f in fs]
    held = iter(chooser(analyse_queries(flat, "pre")) if flat else [])
    plan: list[Expansion] = []
    for abr, fs in zip(chosen, forms, strict=True):
        docs = [next(held) for _ in fs]
        best = max(range(len(fs)), key=lambda i: (docs[i], -i))
        if docs[best] >= min_documents:
            plan.append(Expansion(abr, counts[abr], fs[best], fs, docs[best]))
    return plan


def phrase_documents(corpus: Tokenised, phrases: Sequence[Sequence[str]]) -> list[int]:
    """For each phrase (a list of terms), how many documents of ``corpus`` hold its terms one
    after the other, in order (``blood pressur``); 0 for an empty phrase or an unknown term."""
    index = corpus.index
    wanted = np.array(sorted({index[t] for ts in phrases for t in ts if t in index}), dtype=np.int32)
    at = np.flatnonzero(np.isin(corpus.tokens, wanted))  # every position of a wanted term
    doc_of = np.searchsorted(corpus.starts, at, side="right") - 1
    out = []
    for phrase in phrases:
        if not phrase or any(t not in index for t in phrase):
            out.append(0)
            continue
        first = at[corpus.tokens[at] == index[phrase[0]]]
        docs = doc_of[np.searchsorted(at, first)]
        fits = first + len(phrase) <= corpus.starts[docs + 1]  # the phrase ends inside the document
        first, docs = first[fits], docs[fits]
        for offset, term in enumerate(phrase[1:], start=1):
            follows = corpus.tokens[first + offset] == index[term]
            first, docs = first[follows], docs[follows]
        out.append(len(np.unique(docs)))
    return out


def expansion_words(plan: Sequence[Expansion]) -> dict[str, list[str]]:
    """``plan`` as :func:`analyse_queries` takes it: abbreviation → the words of its long form."""
    return {e.abbreviation: _grouped([e.long_form])[0] for e in plan}
