"""The language a text is written in: py3langid (https://github.com/adbar/py3langid), its
bundled model (97 languages, probabilities normalised), loaded once per process."""

from __future__ import annotations

from functools import cache

from py3langid.langid import MODEL_FILE, LanguageIdentifier  # type: ignore[import-untyped]


@cache
def _identifier() -> LanguageIdentifier:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect(text: str) -> tuple[str, float]:
    """py3langid's ISO 639-1 code for ``text`` and its probability."""
    lang, prob = _identifier().classify(text)
    return str(lang), float(prob)
