"""The BM25 text analysis of the spanish_sr flow (issue 17 §4, paper 004 §3.1), per language profile.

A text becomes terms in this order:

1. Unicode NFC, then runs of letters and digits (``[^\\W_]+``): punctuation, "¿", "¡",
   hyphens and brackets separate words;
2. in a *query* only, the profile's Boolean operator words written in upper case ("Y", "O",
   "NO", "AND", ...) are dropped: "depresion Y ninos Y Mexico" → depresion, ninos, mexico.
   A ranked retrieval cannot exclude, so the word after ``NOT`` stays an ordinary term;
3. case folding, then, with ``fold_accents``, combining marks removed
   (:func:`tasks.spanish_sr.language.fold_accents`: "niños" → "ninos");
4. stop words dropped: the ``STOP_WORDS`` of the profile's ``stop_words_module`` (spaCy's
   lists, no model needed), compared in the same folded form as the tokens;
5. Snowball stemming with PyStemmer (the profile's algorithm).

Snowball's Spanish stemmer already removes acute accents from vowels in its last step
(https://snowballstem.org/algorithms/spanish/stemmer.html), so "depresión" and "depresion"
stem alike either way; folding still matters for "ñ" and "ü" ("niños" → "niñ", "ninos" →
"nin"), at a cost: "años" (years) and "anos" become one term. spaCy's Spanish list already
holds stop words both with and without their accent ("más", "mas").

:meth:`Analyzer.document` and :meth:`Analyzer.query` run these steps word by word on one text;
:meth:`Analyzer.documents` and :meth:`Analyzer.queries`, what the flow's stages call on whole
corpora, give the same terms but analyse each *distinct* whitespace-separated piece of text
once (a piece → terms cache on the analyzer, PyStemmer's ``stemWords`` on a batch's new words
in one call), the text itself only NFC-normalised and split: a corpus's pieces repeat, and
the per-word steps were most of the ``bm25`` stage (issue 26 item 4).
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import Stemmer  # type: ignore[import-not-found]

from irforge.errors import ConfigError
from tasks.spanish_sr.language import LanguageProfile, fold_accents, profile

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
WORD = re.compile(r"[^\W_]+")
CACHE_PIECES = 1_000_000  # distinct pieces an Analyzer's cache keeps (~200 MB) before it starts afresh


def stop_words(lang: LanguageProfile) -> frozenset[str]:
    """The ``STOP_WORDS`` set of ``lang.stop_words_module`` (a one-line ConfigError when absent)."""
    try:
        module = _module_alone(lang.stop_words_module)
    except ImportError as err:
        raise ConfigError(f"language {lang.code}: cannot import {lang.stop_words_module} ({err})") from None
    words = getattr(module, "STOP_WORDS", None)
    if not isinstance(words, (set, frozenset)):
        raise ConfigError(f"language {lang.code}: {lang.stop_words_module} has no STOP_WORDS set")
    return frozenset(str(w) for w in words)


def _module_alone(name: str) -> ModuleType:
    """Module ``name`` run from its own file, without its packages' ``__init__``: importing
    ``spacy.lang.es.stop_words`` the usual way imports spaCy, thinc and torch (seconds, at
    every ``irforge status``) for a list of words. A module that needs its package (a relative
    import) is imported the usual way."""
    top, _, rest = name.partition(".")
    spec = importlib.util.find_spec(top)  # a top-level name is found without importing it
    roots = list(spec.submodule_search_locations or []) if spec is not None and rest else []
    for root in roots:
        path = Path(root, *rest.split(".")).with_suffix(".py")
        alone = importlib.util.spec_from_file_location(f"_irforge_alone.{name}", path)
        if path.is_file() and alone is not None and alone.loader is not None:
            module = importlib.util.module_from_spec(alone)
            try:
                alone.loader.exec_module(module)
            except ImportError:
                break
            return module
    return importlib.import_module(name)


@dataclass
class Analyzer:
    """Terms of documents and queries in one language; see the module docstring."""

    language: str = "es"
    fold: bool | None = None  # None: the profile's default
    _profile: LanguageProfile = field(init=False, repr=False)
    _stop: frozenset[str] = field(init=False, repr=False)
    _operators: frozenset[str] = field(init=False, repr=False)
    _stemmer: Stemmer.Stemmer = field(init=False, repr=False)
    _cache: dict[str, tuple[str, ...]] = field(init=False, repr=False, default_factory=dict)
    _query_cache: dict[str, tuple[str, ...]] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._profile = profile(self.language)
        if self.fold is None:
            self.fold = self._profile.fold_accents
        self._stop = frozenset(self._normal(w) for w in stop_words(self._profile))
        self._operators = frozenset(word for word, _op in self._profile.boolean_operators)
        try:
            self._stemmer = Stemmer.Stemmer(self._profile.stemmer)
        except KeyError:
            raise ConfigError(
                f"language {self.language}: PyStemmer has no algorithm {self._profile.stemmer!r}"
            ) from None

    def _normal(self, word: str) -> str:
        folded = word.casefold()
        return fold_accents(folded) if self.fold else folded

    def _terms(self, words: Iterable[str]) -> list[str]:
        kept = [w for w in map(self._normal, words) if w not in self._stop]
        return list(self._stemmer.stemWords(kept))

    def document(self, text: str | None) -> list[str]:
        """The terms of a document (title, abstract)."""
        return self._terms(WORD.findall(unicodedata.normalize("NFC", text or "")))

    def query(self, text: str | None) -> list[str]:
        """The terms of a query: as :meth:`document`, Boolean operator words dropped first."""
        words = WORD.findall(unicodedata.normalize("NFC", text or ""))
        return self._terms(w for w in words if w not in self._operators)

    def _pieces(self, texts: Sequence[str | None], query: bool) -> tuple[list[list[str]], list[str]]:
        """Each NFC text's whitespace-separated pieces and the batch's distinct pieces, every one
        then in the cache. No word of ``WORD`` holds whitespace (none of ``str.split``'s
        separators is a letter or digit), so a text's words are its pieces' words in order, and
        a piece's terms can be looked up."""
        batch = [unicodedata.normalize("NFC", t or "").split() for t in texts]
        every = list(set(itertools.chain.from_iterable(batch)))
        self._fill(every, query)
        return batch, every

    def _fill(self, every: list[str], query: bool) -> None:
        """Put each of the distinct pieces ``every`` in the cache (its terms; see :meth:`_pieces`)."""
        cache = self._query_cache if query else self._cache
        new = [p for p in every if p not in cache]
        if len(cache) + len(new) > CACHE_PIECES:
            cache.clear()
            new = every
        words = [WORD.findall(p) for p in new]
        if query:
            words = [[w for w in ws if w not in self._operators] for ws in words]
        distinct = list(set(itertools.chain.from_iterable(words)))
        normal = [self._normal(w) for w in distinct]
        kept = [(w, n) for w, n in zip(distinct, normal, strict=True) if n not in self._stop]
        term = dict(zip([w for w, _ in kept], self._stemmer.stemWords([n for _, n in kept]), strict=True))
        cache.update((p, tuple(term[w] for w in ws if w in term)) for p, ws in zip(new, words, strict=True))

    def documents(self, texts: Sequence[str | None]) -> list[list[str]]:
        """:meth:`document` of each text, each distinct piece analysed once."""
        get = self._cache.__getitem__
        return [list(itertools.chain.from_iterable(map(get, p))) for p in self._pieces(texts, False)[0]]

    def queries(self, texts: Sequence[str | None]) -> list[list[str]]:
        """:meth:`query` of each text, each distinct piece analysed once."""
        get = self._query_cache.__getitem__
        return [list(itertools.chain.from_iterable(map(get, p))) for p in self._pieces(texts, True)[0]]

    def encode_documents(self, texts: Sequence[str | None]) -> tuple[dict[str, int], I32, I64]:
        """:func:`tasks.common.search.bm25_rank.encode_documents` of :meth:`documents`: (term →
        id in first-seen order, token ids back to back, starts), without a term list per text:
        each token is the number of its piece, the pieces' terms spread by numpy."""
        # Arrow's kernels (C++) split and number the pieces: no Python work per token. Its
        # whitespace and Python's differ only in characters that are neither letters nor digits,
        # which WORD never keeps, so the terms are the same. NFC stays Python's: ~10x Arrow's
        # utf8_normalize on text already in NFC (its quick check), as abstracts mostly are.
        text = pa.array([unicodedata.normalize("NFC", t or "") for t in texts], pa.large_string())
        split = pc.utf8_split_whitespace(text)
        pieces = pc.dictionary_encode(split.flatten())
        every = pieces.dictionary.to_pylist()
        self._fill(every, False)
        flat = pieces.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        per_piece = list(map(self._cache.__getitem__, every))
        # Arrow numbers the pieces in the order they first occur, so the terms numbered piece by
        # piece in that order are numbered in the order they first occur in the corpus.
        vocabulary: dict[str, int] = {}
        spread = np.fromiter(
            (vocabulary.setdefault(t, len(vocabulary)) for t in itertools.chain.from_iterable(per_piece)),
            np.int32,
        )
        counts = np.fromiter(map(len, per_piece), np.int64, len(every))
        offsets = np.concatenate([[0], np.cumsum(counts)])
        sizes = counts[flat]
        ends = np.cumsum(sizes)
        at = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - sizes - offsets[flat], sizes)
        bounds = np.asarray(split.offsets, dtype=np.int64)
        starts = np.concatenate([[0], ends])[bounds].astype(np.int64)
        return vocabulary, spread[at], starts
