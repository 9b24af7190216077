"""Language profiles: everything the spanish_sr flow knows about a language, in one place.

Issue 17: the language is config (``es`` by default) and nothing language-specific lives
outside this module. A profile names the placeholder texts exports put where an abstract is
missing, the Boolean operator words of hand-typed queries (paper 004 §1: "depresion Y ninos
Y Mexico"), where the stop words come from (spaCy's ``spacy.lang.<code>.stop_words``, which
needs no model download), the Snowball stemmer (PyStemmer's algorithm name) and whether
accents are folded by default. It also holds the ``rule`` question templates of the
``questions`` stage (:class:`QuestionRule`, paper 004 §3.1: titles turned into questions).

Placeholders are recognised in every language known here, whatever the configured one: a
LILACS/BVS export mixes Spanish, Portuguese and English records, and a PubMed record says
"[No abstract available]" whatever language the collection is in.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from irforge.errors import ConfigError


@dataclass(frozen=True)
class QuestionRule:
    """A title shape and its question: the first rule whose ``pattern`` is found in the title
    (case-insensitive) writes ``template``, where ``{title}`` is the title as written and
    ``{phrase}`` the title with its first letter lower-cased (unless the first word is an
    acronym), after the ``replace`` substitutions (regex, replacement)."""

    shape: str
    pattern: str
    template: str
    replace: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LanguageProfile:
    code: str  # ISO 639-1, as py3langid reports it
    name: str
    placeholders: tuple[str, ...]  # abstract placeholders, compared after :func:`placeholder_key`
    boolean_operators: tuple[tuple[str, str], ...]  # query word (upper case) → AND / OR / NOT
    stop_words_module: str  # a module with a ``STOP_WORDS`` set (spaCy's, no model needed)
    stemmer: str  # PyStemmer (Snowball) algorithm name
    fold_accents: bool  # default of the BM25 analysis option
    question_rules: tuple[QuestionRule, ...] = ()  # ``questions`` mode ``rule``, first match wins
    question_fallback: str = "{title}"  # the template of a title no rule matches (shape ``other``)


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

_R = QuestionRule
# Shapes seen in the CT-EBM-SP titles (data/spanish_sr/ct-ebm-sp): a title that already asks;
# one headed by an effect / efficacy / association / prevalence / factors / comparison /
# treatment / evaluation noun; one opposing two arms ("X versus Y"). The article of each
# template agrees with the head nouns of its pattern. "Versus" counts only in the main title
# (before a ": " or ". " subtitle) and after the head-noun rules.
_MAIN = r"^(?:(?!: |\. ).)*?"
_SPANISH_QUESTIONS = (
    _R("question", r"\?", "{title}"),
    _R("effect", r"^(efecto|impacto|papel|rol|valor)\b", "¿Cuál es el {phrase}?"),
    _R("effect", r"^(efectos|beneficios|resultados)\b", "¿Cuáles son los {phrase}?"),
    _R("efficacy", r"^(eficacia|efectividad|seguridad|utilidad|validez|tolerancia|influencia)\b", "¿Cuál es la {phrase}?"),
    _R("association", r"^(asociación|relación|correlación)\b", "¿Existe {phrase}?"),
    _R("prevalence", r"^(prevalencia|incidencia|frecuencia)\b", "¿Cuál es la {phrase}?"),
    _R("factors", r"^factores\b", "¿Cuáles son los {phrase}?"),
    _R("comparison", r"^(comparación|comparativa)\b", "¿Qué muestra la {phrase}?"),
    _R("treatment", r"^(tratamiento|uso|empleo)\b", "¿Es útil el {phrase}?"),
    _R("treatment", r"^(administración|aplicación|terapia|infiltración)\b", "¿Es útil la {phrase}?"),
    _R("evaluation", r"^(evaluación|valoración)\b", "¿Qué muestra la {phrase}?"),
    _R("evaluation", r"^(estudio|análisis|ensayo)\b", "¿Qué muestra el {phrase}?"),
    _R("versus", _MAIN + r"\s(versus|vs\.?|frente a)\s", "¿Qué diferencia hay entre {phrase}?",
       ((r"\s(?:versus|vs\.?|frente a)\s", " y "),)),
)  # fmt: skip
_THE = ((r"^the\s+", ""),)
_ENGLISH_QUESTIONS = (
    _R("question", r"\?", "{title}"),
    _R("effect", r"^(the\s+)?(effect|impact|role|value)\b", "What is the {phrase}?", _THE),
    _R("effect", r"^(the\s+)?(effects|benefits|outcomes)\b", "What are the {phrase}?", _THE),
    _R("efficacy", r"^(the\s+)?(efficacy|effectiveness|safety|accuracy|validity)\b", "What is the {phrase}?", _THE),
    _R("association", r"^(an\s+)?association\b", "Is there an {phrase}?", ((r"^an\s+", ""),)),
    _R("association", r"^(a\s+)?(relationship|correlation)\b", "Is there a {phrase}?", ((r"^a\s+", ""),)),
    _R("prevalence", r"^(the\s+)?(prevalence|incidence|frequency)\b", "What is the {phrase}?", _THE),
    _R("factors", r"^(risk\s+)?factors\b", "What are the {phrase}?"),
    _R("comparison", r"^(a\s+)?comparison\b", "What does the {phrase} show?", ((r"^a\s+", ""),)),
    _R("versus", _MAIN + r"\s(versus|vs\.?|compared with)\s", "What is the difference between {phrase}?",
       ((r"\s(?:versus|vs\.?|compared with)\s", " and "),)),
)  # fmt: skip

PROFILES: dict[str, LanguageProfile] = {
    "es": LanguageProfile(
        code="es",
        name="Spanish",
        placeholders=PLACEHOLDERS["es"],
        boolean_operators=(("Y", "AND"), ("O", "OR"), ("NO", "NOT"), *_ENGLISH_OPERATORS),
        stop_words_module="spacy.lang.es.stop_words",
        stemmer="spanish",
        fold_accents=False,
        question_rules=_SPANISH_QUESTIONS,
        question_fallback="¿Qué se sabe sobre {phrase}?",
    ),
    "en": LanguageProfile(
        code="en",
        name="English",
        placeholders=PLACEHOLDERS["en"],
        boolean_operators=_ENGLISH_OPERATORS,
        stop_words_module="spacy.lang.en.stop_words",
        stemmer="english",
        fold_accents=False,
        question_rules=_ENGLISH_QUESTIONS,
        question_fallback="What is known about {phrase}?",
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
