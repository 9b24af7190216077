"""Does a page *report* the work it links, or only cite it? The ``single_study`` stage's
evidence (paper 003 §2 kept "articles reporting on one study"; a page that merely cites a
paper is not one — issue 27).

What the page itself says, in the words of English, German, French, Spanish, Italian,
Portuguese and Dutch news:

- **reporting words** around a link (extract's ``context``: the paragraph it sits in, or the
  block of a "Source" / "Journal reference" box): "published in", "a new study",
  "researchers found", "veröffentlicht im Fachjournal", "publiée dans", "publicado en" …;
- **background words** that mark a citation in passing: "previous studies", "has been
  shown", "frühere Studien", "des études antérieures", "estudios previos" …;
- **the headline's subject**: the link's paragraph shares content words with the headline;
- **what the page declares itself**: ``og:type`` / JSON-LD ``@type`` of a product, recipe,
  FAQ or how-to page, and a listicle's numbered section headings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_REPORTING = re.compile(
    r"|".join(
        [
            # English
            r"\bpublish(?:ed|es|ing)?\s+(?:\w+\s+){0,2}?(?:in|online|today|this|last|on|by|recently)\b",
            r"\bto\s+be\s+published\b|\bnewly\s+published\b",
            r"\b(?:appears?|appeared|reported|described|detailed|outlined)\s+in\b",
            r"\bnew\s+(?:study|research|paper|analysis|trial|findings|report|review)\b",
            r"\b(?:recent|latest|this|the)\s+(?:study|research|paper|trial|analysis|review|findings)\b",
            r"\b(?:researchers|scientists|investigators|authors|team|study)\s+(?:found|finds?|report(?:s|ed)?|"
            r"says?|said|shows?|showed|discovered|conclude[ds]?|writes?|wrote)\b",
            r"\baccording\s+to\s+(?:the|a|their)\s+(?:new\s+)?(?:study|paper|research|report|findings)\b",
            r"\b(?:journal|study|source|original)\s+(?:reference|article|paper)\b",
            r"(?:^|[.!?]\s+)(?:source|sources|study|paper|references?|citation|journal\s+reference|"
            r"more\s+information|read\s+the\s+study)\s*:",
            r"\bstudy\s+(?:finds|found|shows|showed|suggests|suggested|reveals|revealed)\b",
            # German
            r"\b(?:veröffentlicht|publiziert|erschienen)\b",
            r"\b(?:im|in\s+der|in\s+dem)\s+(?:Fachjournal|Fachmagazin|Fachzeitschrift|Journal|Magazin)\b",
            r"\b(?:neue|aktuelle|jüngste|vorliegende|diese)n?\s+Studie\b",
            r"\b(?:Forscher(?:innen)?|Wissenschaftler(?:innen)?|Forschende)\s+(?:haben|fanden|berichten|zeigen|"
            r"stellten|entdeckten)\b",
            r"^\s*(?:Quelle|Quellen|Originalpublikation|Originalarbeit|Zur\s+Studie|Studie)\s*:",
            # French
            r"\b(?:publiée?s?|parue?s?)\s+(?:dans|par|le|cette)\b",
            r"\b(?:nouvelle|récente|cette)\s+étude\b",
            r"\b(?:chercheurs|scientifiques)\s+(?:ont|montrent|rapportent)\b",
            r"^\s*(?:Source|Publication\s+originale|Étude)\s*:",
            # Spanish / Portuguese / Italian
            r"\bpublicad[oa]s?\s+(?:en|na|no|pela|por)\b|\bpubblicat[oa]\s+(?:su|in|sulla)\b",
            r"\b(?:nuevo|reciente|este|novo|recente|nuovo)\s+(?:estudio|estudo|studio)\b",
            r"\b(?:investigadores|pesquisadores|ricercatori|científicos)\s+(?:han|descubrieron|encontraron|"
            r"descobriram|hanno)\b",
            r"^\s*(?:Fuente|Fonte|Estudio|Estudo)\s*:",
            # Dutch
            r"\b(?:gepubliceerd|verschenen)\s+in\b|\bnieuwe\s+studie\b",
        ]
    ),
    re.IGNORECASE | re.MULTILINE,
)
# The cited work is no study: a perspective, commentary, editorial, guideline or consensus statement.
_NOT_A_STUDY = re.compile(
    r"\b(?:a|an|new)\s+(?:new\s+)?(?:perspective|commentary|editorial|viewpoint|"
    r"opinion\s+(?:piece|article)|essay|position\s+(?:paper|statement)|consensus\s+statement|"
    r"(?:clinical\s+(?:practice\s+)?)?guidelines?)\b",
    re.IGNORECASE,
)
_BACKGROUND = re.compile(
    r"|".join(
        [
            r"\b(?:previous|prior|earlier|past|older|other|existing|many|several|numerous)\s+"
            r"(?:studies|research|work|papers|trials|findings)\b",
            r"\b(?:has|have)\s+(?:long\s+)?been\s+(?:shown|linked|found|associated|documented)\b",
            r"\bstudies\s+(?:have|has)\s+(?:shown|found|linked|suggested)\b",
            r"\b(?:a|an|one)\s+(?:19|20)\d\d\s+(?:study|paper|review|trial)\b",
            r"\bfrühere[nr]?\s+Studien?\b|\bbisherige[nr]?\s+Studien?\b|\bzahlreiche\s+Studien\b",
            r"\bétudes\s+(?:antérieures|précédentes)\b|\bde\s+nombreuses\s+études\b",
            r"\bestudios\s+(?:previos|anteriores)\b|\bnumerosos\s+estudios\b",
        ]
    ),
    re.IGNORECASE,
)
NOT_REPORT_TYPES = frozenset(
    {"product", "recipe", "faqpage", "howto", "itemlist", "qapage", "profilepage", "course", "event",
     "jobposting", "og:product", "product.item", "books.book", "video.movie", "music.song"}
)  # fmt: skip
_NUMBERED = re.compile(
    r"^\s*(?:#\s*)?\d{1,2}\s*[.):–—-]\s*\S|^\s*(?:no\.|nr\.|n°)\s*\d{1,2}\b", re.IGNORECASE
)
_WORD = re.compile(r"[^\W\d_]{4,}", re.UNICODE)
MIN_LISTICLE_ITEMS = 4
OLD_WORK_YEARS = 5
# The work's own date: "published in 1963", "a 2009 study", or a year in its DOI ("(1963)020").
_DATED = re.compile(
    r"\b(?:published|appeared|released|written)\s+(?:in|on)\s+(?:[A-Z][a-z]+\s+)?(1[89]\d\d|20\d\d)\b"
    r"|\b(?:a|an|the|his|her|their)\s+(1[89]\d\d|20\d\d)\s+(?:study|paper|article|report|review|trial)\b"
    r"|\((1[89]\d\d|20\d\d)\)",
    re.IGNORECASE,
)
MIN_SHARED_WORDS = 2


@dataclass(frozen=True)
class Evidence:
    """What a page says of one cited work: ``score`` ≥ :data:`REPORTED` reads as reported."""

    score: int
    why: tuple[str, ...]

    @property
    def reported(self) -> bool:
        return self.score >= REPORTED

    def text(self) -> str:
        return "; ".join(self.why) or "no reporting or background words near its links"


REPORTED = 2


def _words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def not_a_study(lead: str) -> str | None:
    """What the page's lead calls the work it reports, when that is no study ("a new
    perspective authored by …", "new clinical guidelines"), or None."""
    found = _NOT_A_STUDY.search(lead)
    return found.group().strip() if found else None


def page_kind(page_types: Sequence[str], headings: Sequence[str]) -> str | None:
    """Why the page is not a news report by what it declares or how it is built, or None."""
    declared = [t for t in page_types if t.strip().casefold() in NOT_REPORT_TYPES]
    if declared:
        return f"the page declares itself {declared[0]!r} (og:type / JSON-LD)"
    numbered = [h for h in headings if _NUMBERED.match(h)]
    if len(numbered) >= MIN_LISTICLE_ITEMS:
        return f"a listicle: {len(numbered)} numbered section headings ({numbered[0][:40]!r} …)"
    return None


def work_evidence(refs: Iterable[Mapping[str, Any]], headline: str, page_year: int | None = None) -> Evidence:
    """The evidence that a page reports the work whose references are ``refs`` (a page from
    ``page_year`` that dates the work :data:`OLD_WORK_YEARS` or more earlier cites history)."""
    score = 0
    why: list[str] = []
    headline_words = _words(headline)
    contexts = []
    in_block = False  # a source block or the metadata already says reported
    for ref in refs:
        block, context = ref.get("block") or "main", ref.get("context") or ""
        text = f"{ref.get('anchor') or ''}\n{context}"
        contexts.append(text)
        if block == "metadata":
            score, why = score + REPORTED, [*why, "the page's metadata names it as its source"]
            in_block = True
        elif block == "reference" and _REPORTING.search(context):
            score, why = score + REPORTED, [*why, "in a source / journal-reference block"]
            in_block = True
    joined = "\n".join(contexts)
    if not in_block and (found := _REPORTING.search(joined)):
        score, why = score + REPORTED, [*why, f"reporting words {found.group().strip()!r} near it"]
    if background := _BACKGROUND.search(joined):
        score, why = score - REPORTED, [*why, f"background words {background.group().strip()!r} near it"]
    dated = (
        "\n".join([joined, *(str(ref.get("url") or "") for ref in refs)])
        .replace("%28", "(")
        .replace("%29", ")")
    )
    years = [int(y) for m in _DATED.finditer(dated) for y in m.groups() if y]
    if page_year and years and min(years) <= page_year - OLD_WORK_YEARS:
        score, why = score - REPORTED, [*why, f"dated {min(years)}, the page {page_year}: an old work"]
    shared = headline_words & _words(joined)
    if len(shared) >= MIN_SHARED_WORDS:
        score, why = score + 1, [*why, f"its paragraph shares {len(shared)} words with the headline"]
    return Evidence(score, tuple(why))
