"""Questions from titles by rules (issue 17 §3, mode ``rule`` of
``tasks/spanish_sr/stages/questions.py``).

The first :class:`~tasks.spanish_sr.language.QuestionRule` of the language
profile whose pattern the title matches writes the question, else the profile's fallback
(shape ``other``). Spanish shapes (``tasks/spanish_sr/language.py``): ``question`` (the
title already asks: kept as written), ``effect`` ("Efecto de …" → "¿Cuál es el efecto de
…?"), ``efficacy`` ("Eficacia / Efectividad / Seguridad …" → "¿Cuál es la …?"),
``association`` ("Asociación / Relación / Correlación …" → "¿Existe …?"), ``prevalence``,
``factors``, ``comparison`` ("Comparación de …" → "¿Qué muestra la comparación de …?"),
``versus`` ("X versus Y en Z" → "¿Qué diferencia hay entre X y Y en Z?"), ``treatment``
("Uso de …" → "¿Es útil el uso de …?"), ``evaluation``; ``other``: "¿Qué se sabe sobre …?";
"""

from __future__ import annotations

import re
from functools import cache

from tasks.common.text.variants import normalise
from tasks.spanish_sr.language import LanguageProfile, QuestionRule


@cache
def _compiled(rule: QuestionRule) -> tuple[re.Pattern[str], tuple[tuple[re.Pattern[str], str], ...]]:
    subs = tuple((re.compile(p, re.IGNORECASE), r) for p, r in rule.replace)
    return re.compile(rule.pattern, re.IGNORECASE), subs


def _lower_first(text: str) -> str:
    """The first letter lower-cased, unless the first word has another capital (an acronym)."""
    first = text.split(" ", 1)[0]
    return text if any(c.isupper() for c in first[1:]) else text[:1].lower() + text[1:]


def clean_title(title: str) -> str:
    """Whitespace collapsed, a final full stop, colon or semicolon dropped."""
    return " ".join(title.split()).rstrip(" .;:")


def rule_question(title: str, lang: LanguageProfile) -> tuple[str, str]:
    """``(question, shape)`` for ``title`` by the profile's rules (module docstring)."""
    text = clean_title(title)
    if text.startswith("[") and text.endswith("]"):  # MEDLINE's bracketed translated title
        text = clean_title(text[1:-1])
    for rule in lang.question_rules:
        pattern, subs = _compiled(rule)
        if pattern.search(text):
            phrase = text
            for sub, replacement in subs:
                phrase = sub.sub(replacement, phrase)
            return rule.template.format(title=text, phrase=_lower_first(phrase)), rule.shape
    return lang.question_fallback.format(title=text, phrase=_lower_first(text)), "other"


def title_problem(title: str, abstract: str) -> tuple[str, str] | None:
    """Why a record gives no pair (``no_title``, ``title_equals_abstract``) with a detail, or None."""
    if not any(c.isalnum() for c in title):
        return "no_title", f"title {title!r}"
    if normalise(title).rstrip(" .") == normalise(abstract).rstrip(" ."):
        return "title_equals_abstract", f"title and abstract read {clean_title(title)[:60]!r}"
    return None
