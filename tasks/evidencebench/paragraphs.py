"""The body paragraphs of a JATS review with the offsets of their citations (EvidenceBench §3).

Paragraphs come from the body only, in document order; figures, tables, formulas, back
matter (references, acknowledgements, ... also when disguised as body sections) are not
text, as in :mod:`tasks.common.text.jats`. A paragraph holding a list is split around it,
the list's own paragraphs being paragraphs of their own.

Citations are ``<xref ref-type="bibr" rid="...">`` (``rid`` may hold several ids). The
paragraph text is whitespace-normalised; xrefs keep their visible text ("[3]", "(Doe et
al., 2020)") and are tracked by character offsets into it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.entities import name2codepoint

from lxml import etree

from tasks.common.text.back_matter import BACK_MATTER_SEC_TYPES, is_back_matter_title
from tasks.common.text.document import InputRejected
from tasks.common.text.jats import BLOCKS_IN_P, FORMULA_TOKEN, FORMULAS, NOT_TEXT

_NOT_PROSE = frozenset({"title", "label", "caption", "subtitle"})


@dataclass(frozen=True)
class Citation:
    """One bibr xref: its span in the paragraph text, its rids and visible text."""

    start: int
    end: int
    rids: tuple[str, ...]
    text: str


@dataclass
class Paragraph:
    section_path: tuple[str, ...]
    section_key: tuple[int, ...]  # indexes of the enclosing <sec>s, outermost first
    text: str
    citations: list[Citation]


def parse_article(data: bytes) -> etree._Element:
    """The ``<article>`` of a JATS file (inside a ``pmc-articleset`` too)."""
    root = _parse(data)
    if _local(root) == "pmc-articleset":
        inner = child(root, "article")
        if inner is not None:
            return inner
    return root


def body_paragraphs(article: etree._Element) -> list[Paragraph]:
    """The paragraphs of the article's body, in document order."""
    walker = _Walker()
    body = child(article, "body")
    if body is not None:
        walker.walk(body, (), ())
    return walker.out


def _parse(data: bytes) -> etree._Element:
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, remove_comments=True, remove_pis=True
    )
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as err:  # parse_jats has already rejected this; kept for clarity
        raise InputRejected("malformed_xml", str(err)) from err


@dataclass
class _Walker:
    """Collects the paragraphs under an element; every ``<sec>`` gets the next section number."""

    out: list[Paragraph] = field(default_factory=list)
    sections: int = 0

    def walk(self, el: etree._Element, path: tuple[str, ...], key: tuple[int, ...]) -> None:
        for node in _elements(el):
            name = _local(node)
            if name in NOT_TEXT or name in _NOT_PROSE:
                continue
            if name == "sec":
                title = _title(node)
                sec_type = (node.get("sec-type") or "").lower()
                if sec_type in BACK_MATTER_SEC_TYPES or (title and is_back_matter_title(title[0])):
                    continue
                self.sections += 1
                self.walk(node, path + title, (*key, self.sections))
            elif name == "p":
                self.paragraph(node, path, key)
            else:  # list, list-item, boxed-text, disp-quote, ...: their paragraphs count
                self.walk(node, path, key)

    def paragraph(self, p: etree._Element, path: tuple[str, ...], key: tuple[int, ...]) -> None:
        """One paragraph per run of inline text; a list or quote inside the <p> splits it."""
        run = _Run()
        run.add(p.text)
        for node in p:
            if isinstance(node.tag, str) and _local(node) in BLOCKS_IN_P:
                run.flush(path, key, self.out)
                run = _Run()
                (self.paragraph if _local(node) == "p" else self.walk)(node, path, key)
            else:
                run.inline(node)
            run.add(node.tail)
        run.flush(path, key, self.out)


class _Run:
    """Inline text of a paragraph being read, with the raw offsets of its citations."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.citations: list[Citation] = []

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
        if name in FORMULAS:
            self.add(FORMULA_TOKEN)
        elif name in NOT_TEXT:
            self.add(" ")
        elif name == "xref" and el.get("ref-type") == "bibr":
            start = self.length
            shown = plain(el)
            self.add(shown)
            rids = tuple((el.get("rid") or "").split())
            if rids:
                self.citations.append(Citation(start, self.length, rids, " ".join(shown.split())))
        else:
            self.add(el.text)
            for child in el:
                self.inline(child)
                self.add(child.tail)

    def flush(self, path: tuple[str, ...], key: tuple[int, ...], out: list[Paragraph]) -> None:
        text, citations = _normalise("".join(self.parts), self.citations)
        if text:
            out.append(Paragraph(section_path=path, section_key=key, text=text, citations=citations))


def _normalise(raw: str, citations: list[Citation]) -> tuple[str, list[Citation]]:
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
        moved.append(Citation(start, end, c.rids, c.text))
    return "".join(out), moved


def plain(el: etree._Element) -> str:
    """All text inside ``el`` (entities mapped, formulas as the formula token), no tail."""
    run = _Run()
    run.add(el.text)
    for child in el:
        run.inline(child)
        run.add(child.tail)
    return "".join(run.parts)


def clean(text: str) -> str:
    return " ".join(text.split()).rstrip(".").strip()


def _entity(el: etree._Element) -> str:
    code = name2codepoint.get((el.text or "").strip("&;"))
    return chr(code) if code is not None else ""


def _title(el: etree._Element) -> tuple[str, ...]:
    title = child(el, "title")
    text = " ".join(plain(title).split()) if title is not None else ""
    return (text,) if text else ()


def _local(el: etree._Element) -> str:
    return str(etree.QName(el).localname)


def _elements(el: etree._Element) -> Iterator[etree._Element]:
    return (c for c in el if isinstance(c.tag, str))


def child(el: etree._Element, name: str) -> etree._Element | None:
    return next((c for c in _elements(el) if _local(c) == name), None)
