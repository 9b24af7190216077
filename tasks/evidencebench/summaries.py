"""Harvest evidence summaries from a JATS review article (EvidenceBench §3, App. H.1).

An evidence summary is a text unit of a review that cites exactly one research paper.
Following the paper, the unit is a sentence of a body paragraph (sentence boundaries by
pysbd, as in the CURE ``segment`` stage), and the rules are:

- a sentence citing no reference is not a summary (``no_citation``);
- a sentence citing several references is excluded (``multiple_citations``); a range
  written as two citations joined by a dash ("[3]–[5]") cites every reference between
  them in reference-list order, and so does one citation whose text is a range ("3–5");
- the cited reference must be in the review's reference list with a PMID, PMCID, DOI or
  title to find the paper by (``unresolved_reference``);
- a reference cited in more than one sentence of the same section is excluded wherever
  it is cited there (``cited_twice_in_section``): its summary is spread over the section
  and one sentence would be incomplete. "Section" is the innermost ``<sec>`` by default
  (``scope="innermost"``) or the top-level one (``scope="top"``).

Each sentence becomes exactly one row: an :class:`EvidenceSummary` or an
:class:`ExcludedUnit` with its reason, so nothing is dropped silently. Paragraphs come from
the body only, in document order; figures, tables, formulas, back matter (references,
acknowledgements, ... also when disguised as body sections) are not text units, as in
:mod:`tasks.common.text.jats`. A paragraph holding a list is split around it, the list's own
paragraphs being paragraphs of their own.

Citations are ``<xref ref-type="bibr" rid="...">`` (``rid`` may hold several ids). The
paragraph text is whitespace-normalised; xrefs keep their visible text ("[3]", "(Doe et
al., 2020)") and are tracked by character offsets, so a summary's citation spans point
into its paragraph text. A numbered citation that pysbd leaves at the very start of a
sentence ("... was seen. [4] Next ...") belongs to the sentence before it, which is
extended over it ("... was seen. [4]"); an author-year
one there ("(Doe, 2020) showed ...") stays, being the sentence's subject.

The review's metadata and licence come from :func:`tasks.common.text.jats.parse_jats`; the
licence is recorded on every row (the paper keeps only Creative Commons or public-domain
material; whether to filter is the caller's choice).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from html.entities import name2codepoint
from typing import Literal

import pysbd
from lxml import etree

from tasks.common.text.document import ArticleMeta, InputRejected
from tasks.common.text.jats import (
    FORMULA_TOKEN,
    is_back_matter_title,
    normalise_doi,
    normalise_pmcid,
    parse_jats,
)

ExclusionReason = Literal[
    "no_citation", "multiple_citations", "unresolved_reference", "cited_twice_in_section"
]
SectionScope = Literal["innermost", "top"]

# Never text units (as in tasks.common.text.jats): floats, formulas, back matter, sub-articles.
_SKIP = frozenset(
    {
        "fig", "fig-group", "table-wrap", "table-wrap-group", "table", "disp-formula",
        "disp-formula-group", "supplementary-material", "graphic", "inline-graphic", "media",
        "fn", "fn-group", "ref-list", "ack", "app", "app-group", "glossary", "notes", "back",
        "sub-article", "response", "floats-group", "object-id", "chem-struct-wrap",
        "permissions", "preformat", "code", "alt-text", "long-desc", "attrib",
    }
)  # fmt: skip
_NOT_PROSE = frozenset({"title", "label", "caption", "subtitle"})
_FORMULAS = frozenset({"inline-formula", "math", "tex-math"})
_BLOCKS_IN_P = frozenset({"list", "def-list", "disp-quote", "boxed-text", "statement", "p", "sec"})
_BACK_MATTER_SEC_TYPES = frozenset(
    {"supplementary-material", "coi-statement", "ack", "author-contributions", "funding-information",
     "data-availability", "display-objects"}
)  # fmt: skip
_PMC_ID_TYPES = ("pmcid", "pmc", "pmcaid")
_DASHES = frozenset({"-", "\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2212"})
_BRACKETS = " []()"  # around a range's dash in "[3]–[5]", "(3)–(5)"
_RANGE_TEXT = re.compile(r"^\W*(\d+)\s*[-\u2010-\u2014\u2212]\s*(\d+)\W*$")
# What may precede a citation at the start of a sentence and still leave it "leading".
_LEADING_NOISE = re.compile(r"^[\s\[\](),;.:]*$")
# What closes a citation that moves back to the sentence before: "[4]", "(4).", "4,"
_CLOSING = re.compile(r"[\])]*[.,;:]?")
# Numbered citations ("[4]", "4", "4, 5"); author-year ones can open a sentence as its subject.
_NUMBERED = re.compile(r"^[\W\d]*$")


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
class EvidenceSummary:
    """A kept unit: one sentence citing exactly one resolvable reference.

    ``unit_id`` = ``<review_id>:<paragraph_index>:<sentence_index>``. ``sentence_start`` /
    ``sentence_end`` and ``citation_spans`` are character offsets into ``paragraph``.
    ``context_before`` / ``context_after``: neighbouring paragraphs of the same section.
    """

    unit_id: str
    review_id: str
    section_path: tuple[str, ...]
    paragraph_index: int
    sentence_index: int
    sentence: str
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
class ExcludedUnit:
    """A sentence that is not an evidence summary, with the reason and the refs it cites."""

    unit_id: str
    review_id: str
    section_path: tuple[str, ...]
    paragraph_index: int
    sentence_index: int
    sentence: str
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


# --- internal shapes ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Citation:
    """One bibr xref: its span in the paragraph text, its rids and visible text."""

    start: int
    end: int
    rids: tuple[str, ...]
    text: str


@dataclass
class _Paragraph:
    section_path: tuple[str, ...]
    section_key: tuple[int, ...]  # indexes of the enclosing <sec>s, outermost first
    text: str
    citations: list[_Citation]


@dataclass
class _Sentence:
    index: int
    start: int
    end: int
    citations: list[_Citation] = field(default_factory=list)
    refs: tuple[str, ...] = ()


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

    Raises :class:`InputRejected` when ``data`` is not a well-formed JATS article.
    ``context_paragraphs``: how many paragraphs before and after the unit's own (within
    its section) are kept as context.
    """
    if context_paragraphs < 0:
        raise ValueError(f"context_paragraphs must be >= 0, got {context_paragraphs}")
    meta = parse_jats(data).meta  # validates the file; metadata and licence
    article = _article(_parse(data))
    references = read_references(article)
    body = _child(article, "body")
    paragraphs: list[_Paragraph] = []
    if body is not None:
        _walk(body, (), (), [0], paragraphs)
    order = {ref_id: i for i, ref_id in enumerate(references)}
    ref_ids = list(references)
    split = [_sentences(p, order, ref_ids, language) for p in paragraphs]
    counts = _section_counts(paragraphs, split, scope)
    review = _review_info(review_id, meta)
    harvest = Harvest(review=review, references=references)
    for p_index, (paragraph, sentences) in enumerate(zip(paragraphs, split, strict=True)):
        for sentence in sentences:
            key = _scope_key(paragraph.section_key, scope)
            reason, detail = _judge(sentence, references, counts[key])
            unit_id = f"{review_id}:{p_index}:{sentence.index}"
            text = paragraph.text[sentence.start : sentence.end]
            if reason is not None:
                harvest.excluded.append(
                    ExcludedUnit(
                        unit_id=unit_id,
                        review_id=review_id,
                        section_path=paragraph.section_path,
                        paragraph_index=p_index,
                        sentence_index=sentence.index,
                        sentence=text,
                        cited_ref_ids=sentence.refs,
                        reason=reason,
                        detail=detail,
                    )
                )
                continue
            ref = references[sentence.refs[0]]
            before, after = _context(paragraphs, p_index, context_paragraphs)
            harvest.kept.append(
                EvidenceSummary(
                    unit_id=unit_id,
                    review_id=review_id,
                    section_path=paragraph.section_path,
                    paragraph_index=p_index,
                    sentence_index=sentence.index,
                    sentence=text,
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
                    context_before=before,
                    context_after=after,
                    review_pmid=review.pmid,
                    review_pmcid=review.pmcid,
                    review_doi=review.doi,
                    review_license=review.license,
                )
            )
    return harvest


def read_references(article: etree._Element) -> dict[str, Reference]:
    """The ``<ref>``s of the back matter's reference list(s), by id, in list order."""
    references: dict[str, Reference] = {}
    back = _child(article, "back")
    if back is None:
        return references
    for ref in back.iter("{*}ref"):
        ref_id = ref.get("id")
        if ref_id and ref_id not in references:
            references[ref_id] = _reference(ref_id, ref)
    return references


# --- decisions -----------------------------------------------------------------------------


def _judge(
    sentence: _Sentence, references: dict[str, Reference], section_counts: Counter[str]
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
    paragraphs: list[_Paragraph], split: list[list[_Sentence]], scope: SectionScope
) -> dict[tuple[int, ...], Counter[str]]:
    """Per section: in how many sentences each reference is cited (ranges included)."""
    counts: dict[tuple[int, ...], Counter[str]] = {}
    for paragraph, sentences in zip(paragraphs, split, strict=True):
        counter = counts.setdefault(_scope_key(paragraph.section_key, scope), Counter())
        for sentence in sentences:
            counter.update(sentence.refs)
    return counts


def _context(paragraphs: list[_Paragraph], index: int, n: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    key = paragraphs[index].section_key
    before = tuple(p.text for p in paragraphs[max(0, index - n) : index] if p.section_key == key)
    after = tuple(p.text for p in paragraphs[index + 1 : index + 1 + n] if p.section_key == key)
    return before, after


# --- sentences and citations ---------------------------------------------------------------


@lru_cache(maxsize=8)
def _segmenter(language: str) -> pysbd.Segmenter:
    return pysbd.Segmenter(language=language, clean=False, char_span=True)


def _sentences(
    paragraph: _Paragraph, order: dict[str, int], ref_ids: list[str], language: str
) -> list[_Sentence]:
    text = paragraph.text
    sentences: list[_Sentence] = []
    for span in _segmenter(language).segment(text):
        raw = text[span.start : span.end]
        start = span.start + len(raw) - len(raw.lstrip())
        end = span.start + len(raw.rstrip())
        if end > start:
            sentences.append(_Sentence(index=len(sentences), start=start, end=end))
    for citation in paragraph.citations:
        owner = _owner(sentences, citation, text)
        owner.citations.append(citation)
        following = sentences[owner.index + 1] if owner.index + 1 < len(sentences) else None
        if following is not None and citation.start >= following.start:  # moved back: re-cut
            closing = _CLOSING.match(text, citation.end)
            owner.end = closing.end() if closing else citation.end
            following.start = owner.end + len(text[owner.end :]) - len(text[owner.end :].lstrip())
    kept = [s for s in sentences if s.end > s.start]  # "[4]." alone is no sentence once re-cut
    for index, sentence in enumerate(kept):
        sentence.index = index
        sentence.refs = _cited_refs(sentence.citations, text, order, ref_ids)
    return kept


def _owner(sentences: list[_Sentence], citation: _Citation, text: str) -> _Sentence:
    """The sentence a citation belongs to; a citation leading a sentence closes the one before."""
    for i, sentence in enumerate(sentences):
        if sentence.start <= citation.start < sentence.end or i == len(sentences) - 1:
            leading = (
                i > 0
                and _NUMBERED.match(citation.text) is not None
                and _LEADING_NOISE.match(_without_citations(text, sentence, citation.start)) is not None
            )
            return sentences[i - 1] if leading else sentence
    raise ValueError("a paragraph with citations has no sentences")  # pragma: no cover


def _without_citations(text: str, sentence: _Sentence, upto: int) -> str:
    """The sentence's text before ``upto`` with earlier citations blanked out."""
    chars = list(text[sentence.start : upto])
    for citation in sentence.citations:
        for i in range(max(citation.start, sentence.start), min(citation.end, upto)):
            chars[i - sentence.start] = " "
    return "".join(chars)


def _cited_refs(
    citations: list[_Citation], text: str, order: dict[str, int], ref_ids: list[str]
) -> tuple[str, ...]:
    """Distinct rids cited, in order, with dash ranges expanded over the reference list."""
    cited: list[str] = []
    for i, citation in enumerate(citations):
        cited.extend(citation.rids)
        cited.extend(_text_range(citation, order, ref_ids))
        if i + 1 < len(citations):
            following = citations[i + 1]
            if text[citation.end : following.start].strip(_BRACKETS) in _DASHES:
                cited.extend(_between(citation.rids[-1], following.rids[0], order, ref_ids))
    return tuple(dict.fromkeys(cited))


def _between(first: str, last: str, order: dict[str, int], ref_ids: list[str]) -> list[str]:
    """The references strictly between two range ends (none if either is unknown)."""
    if first not in order or last not in order:
        return []
    low, high = sorted((order[first], order[last]))
    return ref_ids[low + 1 : high]


def _text_range(citation: _Citation, order: dict[str, int], ref_ids: list[str]) -> list[str]:
    """One xref written "3–5" with one rid: the rid and the references that follow it."""
    match = _RANGE_TEXT.match(citation.text)
    if match is None or len(citation.rids) != 1 or citation.rids[0] not in order:
        return []
    width = int(match.group(2)) - int(match.group(1))
    start = order[citation.rids[0]]
    return ref_ids[start + 1 : start + 1 + width] if width > 0 else []


# --- XML walking -----------------------------------------------------------------------


def _parse(data: bytes) -> etree._Element:
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, remove_comments=True, remove_pis=True
    )
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as err:  # parse_jats has already rejected this; kept for clarity
        raise InputRejected("malformed_xml", str(err)) from err


def _article(root: etree._Element) -> etree._Element:
    if _local(root) == "pmc-articleset":
        inner = _child(root, "article")
        if inner is not None:
            return inner
    return root


def _walk(
    el: etree._Element,
    path: tuple[str, ...],
    key: tuple[int, ...],
    sec_counter: list[int],
    out: list[_Paragraph],
) -> None:
    for child in _elements(el):
        name = _local(child)
        if name in _SKIP or name in _NOT_PROSE:
            continue
        if name == "sec":
            title = _title(child)
            sec_type = (child.get("sec-type") or "").lower()
            if sec_type in _BACK_MATTER_SEC_TYPES or (title and is_back_matter_title(title[0])):
                continue
            sec_counter[0] += 1
            _walk(child, path + title, (*key, sec_counter[0]), sec_counter, out)
        elif name == "p":
            _paragraph(child, path, key, sec_counter, out)
        else:  # list, list-item, boxed-text, disp-quote, ...: their paragraphs count
            _walk(child, path, key, sec_counter, out)


def _paragraph(
    p: etree._Element,
    path: tuple[str, ...],
    key: tuple[int, ...],
    sec_counter: list[int],
    out: list[_Paragraph],
) -> None:
    """One paragraph per run of inline text; a list or quote inside the <p> splits it."""
    run = _Run()
    run.add(p.text)
    for child in p:
        if isinstance(child.tag, str) and _local(child) in _BLOCKS_IN_P:
            run.flush(path, key, out)
            run = _Run()
            _walk_one(child, path, key, sec_counter, out)
        else:
            run.inline(child)
        run.add(child.tail)
    run.flush(path, key, out)


def _walk_one(
    el: etree._Element,
    path: tuple[str, ...],
    key: tuple[int, ...],
    sec_counter: list[int],
    out: list[_Paragraph],
) -> None:
    if _local(el) == "p":
        _paragraph(el, path, key, sec_counter, out)
    else:
        _walk(el, path, key, sec_counter, out)


class _Run:
    """Inline text of a paragraph being read, with the raw offsets of its citations."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.citations: list[_Citation] = []

    def add(self, text: str | None) -> None:
        if text:
            self.parts.append(text)
            self.length += len(text)

    def inline(self, el: etree._Element) -> None:
        if el.tag is etree.Entity:
            self.add(_entity(el))
            return
        if not isinstance(el.tag, str):
            return
        name = _local(el)
        if name in _FORMULAS:
            self.add(FORMULA_TOKEN)
        elif name in _SKIP:
            self.add(" ")
        elif name == "xref" and el.get("ref-type") == "bibr":
            start = self.length
            shown = _plain(el)
            self.add(shown)
            rids = tuple((el.get("rid") or "").split())
            if rids:
                self.citations.append(_Citation(start, self.length, rids, " ".join(shown.split())))
        else:
            self.add(el.text)
            for child in el:
                self.inline(child)
                self.add(child.tail)

    def flush(self, path: tuple[str, ...], key: tuple[int, ...], out: list[_Paragraph]) -> None:
        text, citations = _normalise("".join(self.parts), self.citations)
        if text:
            out.append(_Paragraph(section_path=path, section_key=key, text=text, citations=citations))


def _normalise(raw: str, citations: list[_Citation]) -> tuple[str, list[_Citation]]:
    """Collapse whitespace runs to one space and strip, moving citation offsets along."""
    out: list[str] = []
    before = [0] * (len(raw) + 1)  # output length reached before raw[i]
    pending = False
    for i, char in enumerate(raw):
        if char.isspace():
            before[i] = len(out)
            pending = bool(out)
            continue
        if pending:
            out.append(" ")
            pending = False
        before[i] = len(out)
        out.append(char)
    before[len(raw)] = len(out)
    moved = []
    for c in citations:
        inner = raw[c.start : c.end]
        lead = len(inner) - len(inner.lstrip())
        trail = len(inner) - len(inner.rstrip())
        if inner.strip():
            start = before[c.start + lead]
            end = before[c.end - trail - 1] + 1
        else:  # an empty <xref/>: a zero-width mark where it stood
            start = end = before[c.start]
        moved.append(_Citation(start, end, c.rids, c.text))
    return "".join(out), moved


# --- references --------------------------------------------------------------------------


def _reference(ref_id: str, ref: etree._Element) -> Reference:
    ids: dict[str, str] = {}
    for pub_id in ref.iter("{*}pub-id", "{*}object-id"):
        kind = (pub_id.get("pub-id-type") or "").lower()
        value = " ".join(_plain(pub_id).split())
        if value and kind not in ids:
            ids[kind] = value
    pmc = next((ids[t] for t in _PMC_ID_TYPES if t in ids), None)
    doi = ids.get("doi")
    citation = next(
        (c for c in ref.iter("{*}element-citation", "{*}mixed-citation", "{*}citation", "{*}nlm-citation")),
        None,
    )
    label_el = _child(ref, "label")
    return Reference(
        ref_id=ref_id,
        label=_clean(_plain(label_el)) if label_el is not None else None,
        pmid=ids.get("pmid") if (ids.get("pmid") or "").isdigit() else None,
        pmcid=normalise_pmcid(pmc) if pmc else None,
        doi=(normalise_doi(doi) or None) if doi else None,
        title=_first_text(ref, "article-title", "chapter-title"),
        publication_type=citation.get("publication-type") if citation is not None else None,
    )


def _first_text(el: etree._Element, *names: str) -> str | None:
    for name in names:
        for found in el.iter(f"{{*}}{name}"):
            text = _clean(_plain(found))
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


# --- small helpers -------------------------------------------------------------------------


def _plain(el: etree._Element) -> str:
    """All text inside ``el`` (entities mapped, formulas as the formula token), no tail."""
    run = _Run()
    run.add(el.text)
    for child in el:
        run.inline(child)
        run.add(child.tail)
    return "".join(run.parts)


def _clean(text: str) -> str:
    return " ".join(text.split()).rstrip(".").strip()


def _entity(el: etree._Element) -> str:
    code = name2codepoint.get((el.text or "").strip("&;"))
    return chr(code) if code is not None else ""


def _title(el: etree._Element) -> tuple[str, ...]:
    title = _child(el, "title")
    text = " ".join(_plain(title).split()) if title is not None else ""
    return (text,) if text else ()


def _local(el: etree._Element) -> str:
    return str(etree.QName(el).localname)


def _elements(el: etree._Element) -> Iterator[etree._Element]:
    return (c for c in el if isinstance(c.tag, str))


def _child(el: etree._Element, name: str) -> etree._Element | None:
    return next((c for c in _elements(el) if _local(c) == name), None)
