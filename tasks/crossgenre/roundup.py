"""Round-up wording in a news headline: the ``single_study`` stage's headline rules.

Paper 003 §2 drops news articles that aggregate disparate studies. A headline that names a
round-up, a digest, news "in brief", a count of studies or a numbered listicle announces
such an aggregation (English, German, French and Spanish wording here; a flow adds more
through ``single_study.roundup_patterns``). A headline about one review is not one: review
wording ("meta-analysis finds", "review of 40 studies finds") turns the counting patterns
off, since a review is one publication.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ROUNDUP_PATTERNS: tuple[tuple[str, str], ...] = (
    ("roundup", r"\bround[- ]?ups?\b"),
    ("digest", r"\b(?:weekly|daily|monthly|health|news|research|science)\s+digest\b"),
    ("in_brief", r"\b(?:news\s+)?in\s+brief\b|\bbriefs?\s*:"),
    (
        "week_in_review",
        r"\bweek\s+in\s+(?:review|health|science|medicine)\b|\bthis\s+week'?s\s+(?:health|science)\b",
    ),
    (
        "count_of_studies",
        r"\b(?:[3-9]|\d{2,}|three|four|five|six|seven|eight|nine|ten|a\s+dozen|dozens\s+of|several|"
        r"multiple)\s+(?:new\s+|recent\s+|different\s+|separate\s+)?(?:studies|papers|trials)\b",
    ),
    (
        "listicle",
        r"^\W*\d+\s+(?:\w+\s+){0,2}(?:ways|things|foods|tips|reasons|habits|signs|myths|facts|drinks|"
        r"supplements|studies|discoveries|findings|breakthroughs|takeaways)\b",
    ),
    (
        "roundup_de",
        r"\b(?:wochenrückblick|wochenüberblick|kurzmeldungen|kurz\s+notiert|in\s+kürze|"
        r"studien\s+im\s+überblick|neue\s+studien)\b",
    ),
    (
        "roundup_fr",
        r"\b(?:revue\s+de\s+presse|en\s+bref|l'actu(?:alité)?\s+santé\s+de\s+la\s+semaine|"
        r"études\s+de\s+la\s+semaine|nouvelles\s+études)\b",
    ),
    (
        "roundup_es",
        r"\b(?:resumen\s+semanal|en\s+breve|breves\s+de\s+salud|nuevos\s+estudios|estudios\s+de\s+la\s+semana)\b",
    ),
)
"""Round-up wording of a headline: (pattern id, case-insensitive regex)."""
_COUNTING = frozenset({"count_of_studies", "listicle"})
_REVIEW = re.compile(
    r"meta-?\s?analy[sz][ie]s|metaanaly|méta-analyse|metaanálisis|systematic(?:ally)?\s+review|"
    r"umbrella\s+review|pooled\s+analysis|\breview\s+(?:of|finds|shows|suggests)\b|revisión\s+sistemática|"
    r"übersichtsarbeit|revue\s+systématique",
    re.IGNORECASE,
)


def roundup_wording(headline: str, extra: Sequence[str] = ()) -> str | None:
    """Why ``headline`` reads as a round-up (``pattern id: 'matched text'``), or None."""
    review = _REVIEW.search(headline) is not None
    patterns = [*ROUNDUP_PATTERNS, *((f"config[{i}]", p) for i, p in enumerate(extra))]
    for name, pattern in patterns:
        if review and name in _COUNTING:
            continue
        match = re.search(pattern, headline, re.IGNORECASE)
        if match:
            return f"{name}: {match.group().strip()!r}"
    return None


def two_claims(headline: str) -> bool:
    """A headline of two claims joined by ";" (each part at least three words)."""
    parts = [p for p in headline.split(";") if p.strip()]
    return len(parts) >= 2 and all(len(p.split()) >= 3 for p in parts)
