"""Stage ``clean``: the cleaning of paper 004 §3.1 (mojibake, null abstracts, duplicates), done checkably.

Per record, in this order (issue 17 §2):

1. **Mojibake** in ``title`` and ``abstract``: ``ftfy.fix_text`` with the explicit
   :data:`FTFY` settings (encoding repairs only: no quote uncurling, width or ligature
   changes, no Unicode normalisation, so a clean text is returned as it is), then, if the
   text still looks broken, the cp1252 (else latin-1) round trip ``text.encode(c).decode("utf-8")``
   where it decodes. Each changed field is listed in ``fixed``. A text that still has a
   replacement character, a C1 control or a UTF-8-read-as-cp1252 pair ("Ã³", "Â¿") is
   ``undecodable``: one repair, never a second;
2. empty or placeholder abstract (:func:`tasks.spanish_sr.language.is_placeholder`, any
   language) → ``no_abstract``; but when the title field holds an abstract-length text
   (two of an abstract's section labels, or ≥ 60 words in three sentences) the reason is ``title_is_abstract``. A title equal to
   its abstract is kept (the ``questions`` stage excludes it as ``title_equals_abstract``);
   A title that is only an identifier (a EudraCT, NCT or ISRCTN number, a PMID, a DOI) is
   ``title_is_identifier``;
3. fewer than ``min_abstract_words`` whitespace-separated words → ``short_abstract``;
4. py3langid (probabilities normalised) on the abstract: another language than
   ``language`` → ``wrong_language``, unless one of the record's ``abstract_variants`` is in
   ``language`` (a SciELO record's Spanish abstract after its English one): it becomes the
   abstract (``fixed`` names ``abstract``); ``detected_language`` and ``language_confidence``
   are kept either way;
5. exact duplicates (same normalised title + abstract) and near duplicates (normalised
   Levenshtein similarity ≥ ``duplicate_threshold``, :mod:`tasks.common.text.variants`,
   linked transitively) → ``duplicate_of``. Kept per cluster: the most complete record
   (most of title, abstract, language, year, DOI, descriptors filled), then the longer
   abstract, then the earliest in input order; the detail names it and the similarity.

Steps 1-4 run per chunk (on the flow's workers); step 5 runs once over every record that
passed them (the stage's ``finalize``), so a duplicate is found across chunks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import ftfy
import pyarrow as pa
from pydantic import Field, field_validator
from rapidfuzz.distance import Levenshtein

from irforge.config import StrictModel
from irforge.stage import (
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
    upstream_source,
)
from tasks.common.text.language_id import detect
from tasks.common.text.variants import clusters, normalise, similar_pairs
from tasks.spanish_sr.language import PROFILES, is_placeholder
from tasks.spanish_sr.stages.ingest import LOCATION
from tasks.spanish_sr.stages.ingest import SCHEMA as INGEST_SCHEMA

FTFY = ftfy.TextFixerConfig(
    unescape_html=False,
    remove_terminal_escapes=False,
    fix_encoding=True,
    restore_byte_a0=True,
    replace_lossy_sequences=True,
    decode_inconsistent_utf8=True,
    fix_c1_controls=True,
    fix_latin_ligatures=False,
    fix_character_width=False,
    uncurl_quotes=False,
    fix_line_breaks=False,
    fix_surrogates=True,
    remove_control_chars=False,
    normalization=None,
    explain=False,
)
# What is left of a broken text: U+FFFD, C1 controls, a UTF-8 lead byte read as cp1252/latin-1
# ("Ã", "Â") followed by a continuation byte read the same way.
BROKEN = re.compile("[\ufffd\x80-\x9f]|[ÂÃ][\xa0-\xbf€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ]")
TEXT_FIELDS = ("title", "abstract")
_SENTENCE_BREAK = re.compile(r"[.!?]\s+(\S)")
_SECTION_LABEL = re.compile(
    r"\b(objetivos?|introducción|antecedentes|métodos?|material(?:es)? y métodos|resultados|conclusi(?:ón|ones)|"
    r"objectives?|background|methods?|results|conclusions?|resumo|métodos|objetivo)\s*:",
    re.IGNORECASE,
)
# A title that is only a registry or literature identifier ("EudraCT Nº: 2015-000290-12",
# "NCT01234567", "PMID: 31839957", "doi:10.1/x"): no question can be made of it.
_IDENTIFIER_TITLE = re.compile(
    r"(?:(?:EudraCT|NCT|ISRCTN|PMID|PMCID|DOI|ID|N[º°o]\.?|n[úu]mero)\s*(?:N[º°o]\.?)?\s*[:#]?\s*)*"
    r"(?:\d{4}-\d{6}-\d{2}|NCT\d{8}|ISRCTN\d{8}|PMC\d+|\d{5,9}|10\.\d{4,9}/\S+)",
    re.IGNORECASE,
)
ABSTRACT_IN_TITLE_WORDS = 60  # titles are shorter: MEDLINE's longest run to about 50 words


class CleanConfig(StrictModel):
    language: str = Field(
        "es", description="The collection's language (a profile of tasks/spanish_sr/language.py)."
    )
    min_abstract_words: int = Field(20, ge=1, description="Shorter abstracts are short_abstract.")
    duplicate_threshold: float = Field(
        0.9, gt=0, le=1, description="Normalised Levenshtein similarity of title + abstract for duplicate_of."
    )

    @field_validator("language")
    @classmethod
    def _known(cls, code: str) -> str:
        if code not in PROFILES:
            raise ValueError(f"no language profile {code!r}; known: {', '.join(sorted(PROFILES))}")
        return code


SCHEMA = pa.schema(
    [
        *INGEST_SCHEMA,
        pa.field("fixed", pa.list_(pa.string()), nullable=False),
        pa.field("detected_language", pa.string(), nullable=False),
        pa.field("language_confidence", pa.float32(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("record_id", pa.string(), nullable=False), *LOCATION, pa.field("duplicate_of", pa.string())
)


def repair(text: str) -> tuple[str, bool]:
    """``(repaired text, still broken)``: ftfy, then the cp1252 / latin-1 round trip if needed."""
    fixed = ftfy.fix_text(text, FTFY)
    if BROKEN.search(fixed):
        for codec in ("cp1252", "latin-1"):
            try:
                fixed = fixed.encode(codec).decode("utf-8")
                break
            except (UnicodeEncodeError, UnicodeDecodeError):
                continue
    return fixed, bool(BROKEN.search(fixed))


def _check(row: dict[str, Any], config: CleanConfig) -> tuple[str, str] | None:
    """Steps 1-4 on one record (fixing it in place); the exclusion, or None when it stays."""
    row["fixed"] = []
    for name in TEXT_FIELDS:
        text = row[name]
        if text is None:
            continue
        fixed, broken = repair(text)
        if broken:
            at = BROKEN.search(fixed)
            assert at is not None
            return "undecodable", f"{name}: {fixed[max(0, at.start() - 20) : at.end() + 20]!r}"
        if fixed != text:
            row[name] = fixed
            row["fixed"].append(name)
    title, abstract = row["title"] or "", row["abstract"] or ""
    if title.strip() and _IDENTIFIER_TITLE.fullmatch(title.strip()):
        return "title_is_identifier", f"the title is an identifier: {title.strip()[:60]!r}"
    if not abstract.strip() or is_placeholder(abstract):
        if _looks_like_abstract(title, config):
            return "title_is_abstract", f"no abstract; the title has {len(title.split())} words"
        return "no_abstract", repr(abstract[:60])
    words = len(abstract.split())
    if words < config.min_abstract_words:
        return "short_abstract", f"{words} words < {config.min_abstract_words}"
    row["detected_language"], row["language_confidence"] = detect(abstract)
    if row["detected_language"] != config.language and _in_language(row, config.language):
        row["fixed"].append("abstract")  # the record's abstract in the configured language
    if row["detected_language"] != config.language:
        return (
            "wrong_language",
            f"{row['detected_language']} ({row['language_confidence']:.3f}), not {config.language}",
        )
    return None


def _in_language(row: dict[str, Any], language: str) -> bool:
    """Swap in the first of the record's other abstracts written in ``language`` (a SciELO
    record's Spanish one after its English one); True when one was."""
    variants = row.get("abstract_variants") or []
    for i, variant in enumerate(variants):
        found, confidence = detect(variant)
        if found == language:
            row["abstract_variants"] = [row["abstract"], *variants[:i], *variants[i + 1 :]]
            row["abstract"], row["detected_language"], row["language_confidence"] = variant, found, confidence
            return True
    return False


def _looks_like_abstract(title: str, config: CleanConfig) -> bool:
    """An abstract exported in the title field: two or more of an abstract's section labels
    ("Objetivo:", "Métodos:", "Results:" …), or at least ``ABSTRACT_IN_TITLE_WORDS`` words in
    three sentences or more. Real titles stop well short of that even when they run to
    several sentences ("Enfermedad de Castleman. Reporte de 14 casos y revisión …")."""
    if len(set(m.group(1).casefold() for m in _SECTION_LABEL.finditer(title))) >= 2:
        return True
    breaks = sum(m.group(1).isupper() for m in _SENTENCE_BREAK.finditer(title))
    words = len(title.split())
    return words >= max(config.min_abstract_words, ABSTRACT_IN_TITLE_WORDS) and breaks >= 2


def _completeness(row: dict[str, Any]) -> int:
    filled = [row[k] for k in ("title", "abstract", "language", "year", "doi")]
    return int(sum(v is not None and v != "" for v in filled)) + int(bool(row["descriptors"]))


def _text(row: dict[str, Any]) -> str:
    return f"{row['title'] or ''}\n{row['abstract'] or ''}"


def duplicate_groups(rows: list[dict[str, Any]], threshold: float) -> list[list[int]]:
    """Clusters of row indexes (module doc step 5), each with the kept record first."""
    pairs = similar_pairs([_text(r) for r in rows], threshold)
    members: dict[int, list[int]] = defaultdict(list)
    for i, label in enumerate(clusters(len(rows), pairs)):
        members[label].append(i)

    def rank(i: int) -> tuple[int, int, int]:
        return -_completeness(rows[i]), -len(rows[i]["abstract"] or ""), i

    return [sorted(group, key=rank) for _, group in sorted(members.items())]


def process(chunk: pa.Table, ctx: StageContext[CleanConfig]) -> ChunkResult:
    """Steps 1-4, record by record (chunks run anywhere, in any order)."""
    excluded: list[dict[str, Any]] = []
    survivors: list[dict[str, Any]] = []
    for row in chunk.to_pylist():
        verdict = _check(row, ctx.config)
        if verdict is None:
            survivors.append(row)
        else:
            excluded.append(_excluded(row, *verdict))
    return ChunkResult(rows_to_table(survivors, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA))


def deduplicate(kept: pa.Table, ctx: StageContext[CleanConfig]) -> ChunkResult:
    """Step 5 over every record that passed steps 1-4, in input order."""
    survivors = kept.to_pylist()
    chosen: list[int] = []
    excluded: list[dict[str, Any]] = []
    for group in duplicate_groups(survivors, ctx.config.duplicate_threshold):
        first = survivors[group[0]]
        chosen.append(group[0])
        for i in group[1:]:
            other = survivors[i]
            similarity = Levenshtein.normalized_similarity(normalise(_text(other)), normalise(_text(first)))
            detail = f"kept {first['record_id']}, similarity {similarity:.3f}"
            excluded.append({**_excluded(other, "duplicate_of", detail), "duplicate_of": first["record_id"]})
    # take() of an empty list infers a null-typed index pyarrow cannot use: when no record
    # survived steps 1-4 the artifact is empty, and every exclusion row is still written.
    indices = pa.array(sorted(chosen), type=pa.int64())
    return ChunkResult(kept.take(indices), rows_to_table(excluded, EXCLUDED_SCHEMA))


def _excluded(row: dict[str, Any], reason: str, detail: str) -> dict[str, Any]:
    place = f"{row['source']}#{row['record']} ({row['record_id']})"
    return {
        "reason": reason,
        "detail": f"{place}: {detail}",
        "record_id": row["record_id"],
        "source": row["source"],
        "record": row["record"],
        "duplicate_of": None,
    }


SPEC: StageSpec[CleanConfig] = StageSpec(
    name="clean",
    version=3,  # 2: title_is_identifier, title_is_abstract's shape; 3: abstract variants (issue 28)
    config_type=CleanConfig,
    upstream=("ingest",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("source", "record"),
    source=upstream_source("ingest"),
    process=process,
    finalize=deduplicate,
    description="Mojibake repaired, placeholder/short/wrong-language abstracts and duplicates excluded.",
)
