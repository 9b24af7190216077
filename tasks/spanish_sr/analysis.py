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
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import Stemmer  # type: ignore[import-not-found]

from irforge.errors import ConfigError
from tasks.spanish_sr.language import LanguageProfile, fold_accents, profile

WORD = re.compile(r"[^\W_]+")


def stop_words(lang: LanguageProfile) -> frozenset[str]:
    """The ``STOP_WORDS`` set of ``lang.stop_words_module`` (a one-line ConfigError when absent)."""
    try:
        module = importlib.import_module(lang.stop_words_module)
    except ImportError as err:
        raise ConfigError(f"language {lang.code}: cannot import {lang.stop_words_module} ({err})") from None
    words = getattr(module, "STOP_WORDS", None)
    if not isinstance(words, (set, frozenset)):
        raise ConfigError(f"language {lang.code}: {lang.stop_words_module} has no STOP_WORDS set")
    return frozenset(str(w) for w in words)


@dataclass
class Analyzer:
    """Terms of documents and queries in one language; see the module docstring."""

    language: str = "es"
    fold: bool | None = None  # None: the profile's default
    _profile: LanguageProfile = field(init=False, repr=False)
    _stop: frozenset[str] = field(init=False, repr=False)
    _operators: frozenset[str] = field(init=False, repr=False)
    _stemmer: Stemmer.Stemmer = field(init=False, repr=False)

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

    def documents(self, texts: Sequence[str | None]) -> list[list[str]]:
        return [self.document(t) for t in texts]

    def queries(self, texts: Sequence[str | None]) -> list[list[str]]:
        return [self.query(t) for t in texts]
