"""Harvest evidence summaries from a JATS review article (EvidenceBench §3, App. H.1).

An evidence summary is a text unit of a review that cites exactly one research paper.
Following the paper, the unit is a sentence of a body paragraph
(:mod:`tasks.evidencebench.paragraphs`, :mod:`tasks.evidencebench.citations`), and the rules are:

- a sentence citing no reference is not a summary (``no_citation``);
- a sentence citing several references is excluded (``multiple_citations``); a citation
  range ("[3]–[5]", "3–5") cites every reference it spans;
- the cited reference must be in the review's reference list with a PMID, PMCID, DOI or
  title to find the paper by (``unresolved_reference``);
- a reference cited in more than one sentence of the same section is excluded wherever
  it is cited there (``cited_twice_in_section``): its summary is spread over the section
  and one sentence would be incomplete. "Section" is the innermost ``<sec>`` by default
  (``scope="innermost"``) or the top-level one (``scope="top"``).

Each sentence becomes exactly one row: an :class:`EvidenceSummary` or an
:class:`ExcludedUnit` with its reason, so nothing is dropped silently. A summary's
citation spans point into its paragraph text.

The review's metadata and licence come from :func:`tasks.common.text.jats.parse_jats`; the
licence is recorded on every row (the paper keeps only Creative Commons or public-domain
material; whether to filter is the caller's choice).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from lxml import etree

from tasks.common.text.document import ArticleMeta
from tasks.common.text.identifiers import normalise_doi, normalise_pmcid
from tasks.common.text.jats import parse_jats
from tasks.evidencebench.citations import Sentence, split_sentences
from tasks.evidencebench.paragraphs import Paragraph, body_paragraphs, child, clean, parse_article, plain

ExclusionReason = Literal[
    "no_citation", "multiple_citations", "unresolved_reference", "cited_twice_in_section"
]
SectionScope = Literal["innermost", "top"]
_PMC_ID_TYPES = ("pmcid", "pmc", "pmcaid")


@dataclass(frozen=True)
class Reference:
    """One ``<ref>`` of the review's reference list; identifiers normalised as in the readers."""

    ref_id: str
    label: str | None
    pmid: str | None
    pmcid: str | None  # with the "PMC" prefix
    doi: str | None  # lower-cased, no resolver prefix
    title: str | None
    publication_type: str | None  # "journal", "book", ... as the review states it

    @property
    def resolvable(self) -> bool:
        """Whether anything identifies the cited paper."""
        return any((self.pmid, self.pmcid, self.doi, self.title))


@dataclass(frozen=True)
class Unit:
    """A body sentence of the review: ``unit_id`` = ``<review_id>:<paragraph_index>:<sentence_index>``."""

    unit_id: str
    review_id: str
    section_path: tuple[str, ...]
    paragraph_index: int
    sentence_index: int
    sentence: str


@dataclass(frozen=True)
class EvidenceSummary(Unit):
    """A kept unit: one sentence citing exactly one resolvable reference.

    ``sentence_start`` / ``sentence_end`` and ``citation_spans`` are character offsets into
    ``paragraph``. ``context_before`` / ``context_after``: neighbouring paragraphs of the
    same section.
    """

    sentence_start: int
    sentence_end: int
    citation_spans: tuple[tuple[int, int], ...]
    cited_ref_id: str
    cited_label: str | None
    cited_pmid: str | None
    cited_pmcid: str | None
    cited_doi: str | None
    cited_title: str | None
    paragraph: str
    context_before: tuple[str, ...]
    context_after: tuple[str, ...]
    review_pmid: str | None
    review_pmcid: str | None
    review_doi: str | None
    review_license: str | None


@dataclass(frozen=True)
class ExcludedUnit(Unit):
    """A sentence that is not an evidence summary, with the reason and the refs it cites."""

    cited_ref_ids: tuple[str, ...]
    reason: ExclusionReason
    detail: str


@dataclass(frozen=True)
class ReviewInfo:
    """What the review says about itself."""

    review_id: str
    title: str | None
    pmid: str | None
    pmcid: str | None
    doi: str | None
    license: str | None
    license_url: str | None


@dataclass(frozen=True)
class Harvest:
    """Everything harvested from one review; every body sentence is in ``kept`` or ``excluded``."""

    review: ReviewInfo
    references: dict[str, Reference]
    kept: list[EvidenceSummary] = field(default_factory=list)
    excluded: list[ExcludedUnit] = field(default_factory=list)


# --- public entry point ------------------------------------------------------------------


def harvest_review(
    data: bytes,
    review_id: str,
    *,
    context_paragraphs: int = 1,
    scope: SectionScope = "innermost",
    language: str = "en",
) -> Harvest:
    """Evidence summaries and excluded sentences of one JATS review.

    Raises :class:`~tasks.common.text.document.InputRejected` when ``data`` is not a
    well-formed JATS article. ``context_paragraphs``: how many paragraphs before and after
    the unit's own (within its section) are kept as context.
    """
    if context_paragraphs < 0:
        raise ValueError(f"context_paragraphs must be >= 0, got {context_paragraphs}")
    meta = parse_jats(data).meta  # validates the file; metadata and licence
    article = parse_article(data)
    references = read_references(article)
    paragraphs = body_paragraphs(article)
    order = {ref_id: i for i, ref_id in enumerate(references)}
    ref_ids = list(references)
    split = [split_sentences(p, order, ref_ids, language) for p in paragraphs]
    counts = _section_counts(paragraphs, split, scope)
    harvest = Harvest(review=_review_info(review_id, meta), references=references)
    for p_index, (paragraph, sentences) in enumerate(zip(paragraphs, split, strict=True)):
        for sentence in sentences:
            reason, detail = _judge(sentence, references, counts[_scope_key(paragraph.section_key, scope)])
            unit = _unit(review_id, p_index, paragraph, sentence)
            if reason is not None:
                harvest.excluded.append(
                    ExcludedUnit(**unit, cited_ref_ids=sentence.refs, reason=reason, detail=detail)
                )
            else:
                context = _context(paragraphs, p_index, context_paragraphs)
                harvest.kept.append(
                    _summary(unit, sentence, references[sentence.refs[0]], paragraph, context, harvest.review)
                )
    return harvest


def _unit(review_id: str, p_index: int, paragraph: Paragraph, sentence: Sentence) -> dict[str, Any]:
    """The :class:`Unit` fields of a sentence."""
    return {
        "unit_id": f"{review_id}:{p_index}:{sentence.index}",
        "review_id": review_id,
        "section_path": paragraph.section_path,
        "paragraph_index": p_index,
        "sentence_index": sentence.index,
        "sentence": paragraph.text[sentence.start : sentence.end],
    }


def _summary(
    unit: dict[str, Any],
    sentence: Sentence,
    ref: Reference,
    paragraph: Paragraph,
    context: tuple[tuple[str, ...], tuple[str, ...]],
    review: ReviewInfo,
) -> EvidenceSummary:
    return EvidenceSummary(
        **unit,
        sentence_start=sentence.start,
        sentence_end=sentence.end,
        citation_spans=tuple((c.start, c.end) for c in sentence.citations),
        cited_ref_id=ref.ref_id,
        cited_label=ref.label,
        cited_pmid=ref.pmid,
        cited_pmcid=ref.pmcid,
        cited_doi=ref.doi,
        cited_title=ref.title,
        paragraph=paragraph.text,
        context_before=context[0],
        context_after=context[1],
        review_pmid=review.pmid,
        review_pmcid=review.pmcid,
        review_doi=review.doi,
        review_license=review.license,
    )


def read_references(article: etree._Element) -> dict[str, Reference]:
    """The ``<ref>``s of the back matter's reference list(s), by id, in list order."""
    references: dict[str, Reference] = {}
    back = child(article, "back")
    if back is None:
        return references
    for ref in back.iter("{*}ref"):
        ref_id = ref.get("id")
        if ref_id and ref_id not in references:
            references[ref_id] = _reference(ref_id, ref)
    return references


# --- decisions -----------------------------------------------------------------------------


def _judge(
    sentence: Sentence, references: dict[str, Reference], section_counts: Counter[str]
) -> tuple[ExclusionReason | None, str]:
    refs = sentence.refs
    if not refs:
        return "no_citation", "the sentence cites no reference"
    if len(refs) > 1:
        return "multiple_citations", f"the sentence cites {len(refs)} references: {', '.join(refs)}"
    ref_id = refs[0]
    ref = references.get(ref_id)
    if ref is None:
        return "unresolved_reference", f"rid {ref_id!r} is not in the reference list"
    if not ref.resolvable:
        return "unresolved_reference", f"reference {ref_id!r} has no PMID, PMCID, DOI or article title"
    if section_counts[ref_id] > 1:
        n = section_counts[ref_id]
        return "cited_twice_in_section", f"reference {ref_id!r} is cited in {n} sentences of this section"
    return None, ""


def _scope_key(section_key: tuple[int, ...], scope: SectionScope) -> tuple[int, ...]:
    return section_key[:1] if scope == "top" else section_key


def _section_counts(
    paragraphs: list[Paragraph], split: list[list[Sentence]], scope: SectionScope
) -> dict[tuple[int, ...], Counter[str]]:
    """Per section: in how many sentences each reference is cited (ranges included)."""
    counts: dict[tuple[int, ...], Counter[str]] = {}
    for paragraph, sentences in zip(paragraphs, split, strict=True):
        counter = counts.setdefault(_scope_key(paragraph.section_key, scope), Counter())
        for sentence in sentences:
            counter.update(sentence.refs)
    return counts


def _context(paragraphs: list[Paragraph], index: int, n: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    key = paragraphs[index].section_key
    before = tuple(p.text for p in paragraphs[max(0, index - n) : index] if p.section_key == key)
    after = tuple(p.text for p in paragraphs[index + 1 : index + 1 + n] if p.section_key == key)
    return before, after


# --- references --------------------------------------------------------------------------


def _reference(ref_id: str, ref: etree._Element) -> Reference:
    ids: dict[str, str] = {}
    for pub_id in ref.iter("{*}pub-id", "{*}object-id"):
        kind = (pub_id.get("pub-id-type") or "").lower()
        value = " ".join(plain(pub_id).split())
        if value and kind not in ids:
            ids[kind] = value
    pmc = next((ids[t] for t in _PMC_ID_TYPES if t in ids), None)
    doi = ids.get("doi")
    citation = next(
        (c for c in ref.iter("{*}element-citation", "{*}mixed-citation", "{*}citation", "{*}nlm-citation")),
        None,
    )
    label_el = child(ref, "label")
    return Reference(
        ref_id=ref_id,
        label=clean(plain(label_el)) if label_el is not None else None,
        pmid=ids.get("pmid") if (ids.get("pmid") or "").isdigit() else None,
        pmcid=normalise_pmcid(pmc) if pmc else None,
        doi=(normalise_doi(doi) or None) if doi else None,
        title=_first_text(ref, "article-title", "chapter-title"),
        publication_type=citation.get("publication-type") if citation is not None else None,
    )


def _first_text(el: etree._Element, *names: str) -> str | None:
    for name in names:
        for found in el.iter(f"{{*}}{name}"):
            text = clean(plain(found))
            if text:
                return text
    return None


def _review_info(review_id: str, meta: ArticleMeta) -> ReviewInfo:
    return ReviewInfo(
        review_id=review_id,
        title=meta.title,
        pmid=meta.pmid,
        pmcid=meta.pmcid,
        doi=meta.doi,
        license=meta.license,
        license_url=meta.license_url,
    )
