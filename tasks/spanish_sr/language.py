"""Language profiles: everything the spanish_sr flow knows about a language, in one place.

Issue 17: the language is config (``es`` by default) and nothing language-specific lives
outside this module. A profile names the placeholder texts exports put where an abstract is
missing, the Boolean operator words of hand-typed queries (paper 004 §1: "depresion Y ninos
Y Mexico"), where the stop words come from (spaCy's ``spacy.lang.<code>.stop_words``, which
needs no model download), the Snowball stemmer (PyStemmer's algorithm name) and whether
accents are folded by default.

Placeholders are recognised in every language known here, whatever the configured one: a
LILACS/BVS export mixes Spanish, Portuguese and English records, and a PubMed record says
"[No abstract available]" whatever language the collection is in.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from irforge.errors import ConfigError


@dataclass(frozen=True)
class LanguageProfile:
    code: str  # ISO 639-1, as py3langid reports it
    name: str
    placeholders: tuple[str, ...]  # abstract placeholders, compared after :func:`placeholder_key`
    boolean_operators: tuple[tuple[str, str], ...]  # query word (upper case) → AND / OR / NOT
    stop_words_module: str  # a module with a ``STOP_WORDS`` set (spaCy's, no model needed)
    stemmer: str  # PyStemmer (Snowball) algorithm name
    fold_accents: bool  # default of the BM25 analysis option


_ENGLISH_OPERATORS = (("AND", "AND"), ("OR", "OR"), ("NOT", "NOT"))

# Placeholders per language, including ones whose language has no full profile (yet).
PLACEHOLDERS: dict[str, tuple[str, ...]] = {
    "es": (
        "sin resumen",
        "no disponible",
        "resumen no disponible",
        "sin resumen disponible",
        "no hay resumen",
    ),
    "pt": ("sem resumo", "resumo não disponível", "não disponível"),
    "en": ("no abstract available", "no abstract", "abstract not available", "not available", "n/a"),
    "fr": ("pas de résumé", "résumé non disponible"),
}

PROFILES: dict[str, LanguageProfile] = {
    "es": LanguageProfile(
        code="es",
        name="Spanish",
        placeholders=PLACEHOLDERS["es"],
        boolean_operators=(("Y", "AND"), ("O", "OR"), ("NO", "NOT"), *_ENGLISH_OPERATORS),
        stop_words_module="spacy.lang.es.stop_words",
        stemmer="spanish",
        fold_accents=False,
    ),
    "en": LanguageProfile(
        code="en",
        name="English",
        placeholders=PLACEHOLDERS["en"],
        boolean_operators=_ENGLISH_OPERATORS,
        stop_words_module="spacy.lang.en.stop_words",
        stemmer="english",
        fold_accents=False,
    ),
}


def profile(code: str) -> LanguageProfile:
    """The profile of ``code``; a one-line ConfigError naming the known ones otherwise."""
    try:
        return PROFILES[code]
    except KeyError:
        raise ConfigError(f"language {code!r} has no profile; known: {', '.join(sorted(PROFILES))}") from None


def placeholder_key(text: str) -> str:
    """The form placeholders are compared in: case-folded, brackets and punctuation around
    words dropped, whitespace collapsed ("[No abstract available.]" → "no abstract available")."""
    kept = "".join(c if c.isalnum() or c in " /" else " " for c in unicodedata.normalize("NFC", text))
    return " ".join(kept.casefold().split())


_ALL_PLACEHOLDERS = frozenset(placeholder_key(p) for ps in PLACEHOLDERS.values() for p in ps)


def is_placeholder(text: str) -> bool:
    """Whether ``text`` is only a placeholder (in any language of :data:`PLACEHOLDERS`)."""
    return placeholder_key(text) in _ALL_PLACEHOLDERS


def fold_accents(text: str) -> str:
    """Combining marks removed after canonical decomposition ("depresión niños" → "depresion ninos")."""
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))
