"""The language of a news page: what it declares, checked against its text (used by
``tasks/crossgenre/stages/extract.py``; py3langid through :mod:`tasks.common.text.language_id`)."""

from __future__ import annotations

import re
from typing import Any

from tasks.common.text.language_id import detect
from tasks.crossgenre.news import HtmlElement, is_article, ld_strings

_MIN_TEXT = 200  # characters of main text that identify a language
_MAX_TEXT = 5000
_SURE, _LIKELY = 0.99, 0.9


def declared_languages(
    doc: HtmlElement, metas: dict[str, list[str]], objects: list[dict[str, Any]]
) -> list[str]:
    """ISO 639-1 codes the page declares: ``<html lang>``, ``content-language``, ``og:locale``,
    ``dc.language``, JSON-LD ``inLanguage`` (in that order, each once)."""
    candidates = [doc.get("lang"), doc.get("{http://www.w3.org/XML/1998/namespace}lang")]
    for name in ("content-language", "og:locale", "dc.language"):
        candidates += metas.get(name, [])
    candidates += [s for obj in objects if is_article(obj) for s in ld_strings(obj.get("inLanguage"))]
    codes = [
        m.group(1).lower() for v in candidates if (m := re.match(r"\s*([A-Za-z]{2})(?:[-_]|\s*$)", v or ""))
    ]
    return list(dict.fromkeys(codes))


def language(declared: list[str], text: str) -> str | None:
    """The page's language: what it declares, checked against its main text (py3langid).

    A page may declare nothing, or a template's default (``<html lang="en">`` on a French
    article): the text's language wins when it is confidently identified (probability ≥
    :data:`_SURE`, at least :data:`_MIN_TEXT` characters) and not the first declared one;
    without enough text the first declared language stands."""
    first = declared[0] if declared else None
    if len(text) < _MIN_TEXT:
        return first
    found, probability = detect(text[:_MAX_TEXT])
    if first is None:
        return found if probability >= _LIKELY else None
    return found if found != first and probability >= _SURE else first
