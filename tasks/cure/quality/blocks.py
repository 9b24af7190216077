"""Source blocks of an article file: the units a person labels ``prose`` or ``chrome``.

The enumeration knows nothing of the pipeline's rules: a block is every block-level
element that holds text of its own (text outside its nested block elements), in document
order. Inline elements (links, emphasis, super/subscripts, inline buttons, MathML) are
part of their block's text. Scripts, styles and comments are not text.

One exception, applied the same way in both formats: a reference number is left out of
the block text — a JATS ``<xref ref-type="bibr">`` whose text is only a citation number
("1", "2,3", "4–6"), and an HTML ``<sup>`` holding only links with such numbers. Those
numbers are not words of science, and the pipeline drops them by default
(``parse.citation_numbers``), so keeping them would count a correct output as a loss.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import lxml.html
from lxml import etree

# HTML elements whose text is part of the enclosing block (https://html.spec.whatwg.org/#phrasing-content).
_HTML_INLINE = frozenset(
    {
        "a", "abbr", "b", "bdi", "bdo", "br", "button", "cite", "code", "data", "dfn", "em", "font",
        "i", "img", "kbd", "label", "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup",
        "time", "u", "var", "wbr", "tt", "big", "strike", "ins", "del", "math", "mi", "mn", "mo",
        "mrow", "msub", "msup", "msubsup", "mfrac", "msqrt", "mroot", "mtext", "mspace", "mstyle",
        "mover", "munder", "munderover", "mfenced", "mtable", "mtr", "mtd", "semantics",
        "annotation", "nobr",
    }
)  # fmt: skip
_HTML_SKIP = frozenset({"script", "style", "template", "noscript", "head", "svg", "iframe", "object"})

# JATS elements whose text runs inside a sentence (JATS 1.3 "inline" classes).
_JATS_INLINE = frozenset(
    {
        "italic", "bold", "sup", "sub", "sc", "underline", "overline", "monospace", "roman",
        "sans-serif", "strike", "xref", "ext-link", "uri", "email", "inline-formula", "tex-math",
        "named-content", "styled-content", "abbrev", "break", "inline-graphic", "target",
        "fn-ref", "private-char", "glyph-ref", "hr", "milestone-start", "milestone-end", "ruby",
        "rb", "rt", "inline-supplementary-material", "related-article", "related-object", "funding-source",
        "award-id", "chem-struct", "phone", "fax", "institution", "country", "addr-line",
        "given-names", "surname", "prefix", "suffix", "string-name", "name", "year", "month",
        "day", "volume", "issue", "fpage", "lpage", "source", "pub-id", "etal", "person-group",
        "article-title", "collab", "edition", "publisher-name", "publisher-loc", "comment",
        "date-in-citation", "elocation-id", "issn", "isbn", "page-range", "size", "trans-title",
        "trans-source", "season", "chapter-title", "part-title", "conf-name", "conf-date",
        "conf-loc", "gov", "patent", "std", "data-title", "version", "label",
    }
)  # fmt: skip
_CITATION_NUMBER = re.compile(r"^[\s\d,;\-–—\[\]()]+$")


@dataclass(frozen=True)
class SourceBlock:
    """One labelled unit: its position, where it sits (element names outermost first) and text."""

    index: int
    where: str
    text: str


def html_blocks(data: bytes, encoding: str) -> list[SourceBlock]:
    """Blocks of an HTML page (``encoding`` as :func:`tasks.common.text.sniff.sniff` found it)."""
    text = re.sub(r"^\s*<\?xml[^>]*\?>", "", data.decode(encoding, errors="replace").lstrip("\ufeff"))
    doc = lxml.html.document_fromstring(text)
    body = next(iter(doc.iter("body")), doc)
    out: list[SourceBlock] = []
    _collect(body, out, inline=lambda t: t in _HTML_INLINE, skip=_html_skip, html=True)
    return out


def jats_blocks(data: bytes) -> list[SourceBlock]:
    """Blocks of a JATS article (front matter, body and back, in file order)."""
    parser = etree.XMLParser(remove_comments=True, remove_pis=True, load_dtd=False, resolve_entities=False)
    root = etree.fromstring(data, parser)
    out: list[SourceBlock] = []
    _collect(
        root, out, inline=lambda t: t in _JATS_INLINE or t.startswith("mml:"), skip=_jats_skip, html=False
    )
    return out


def _html_skip(el: etree._Element) -> bool:
    name = _html_tag(el)
    if name in _HTML_SKIP:
        return True
    links = [c for c in el if isinstance(c.tag, str)]
    if name != "sup" or not links or any(_html_tag(c) != "a" for c in links):
        return False
    return bool(_CITATION_NUMBER.match("".join(el.itertext())))


def _jats_skip(el: etree._Element) -> bool:
    name = _jats_tag(el)
    if name != "xref" or (el.get("ref-type") or "") != "bibr":
        return False
    return bool(_CITATION_NUMBER.match("".join(el.itertext())))


def _html_tag(el: etree._Element) -> str:
    return el.tag.lower() if isinstance(el.tag, str) else ""


def _jats_tag(el: etree._Element) -> str:
    if not isinstance(el.tag, str):
        return ""
    qname = etree.QName(el)
    return f"mml:{qname.localname}" if qname.namespace and "MathML" in qname.namespace else qname.localname


def _collect(
    root: etree._Element,
    out: list[SourceBlock],
    *,
    inline: Callable[[str], bool],
    skip: Callable[[etree._Element], bool],
    html: bool,
) -> None:
    """Walk ``root``; every non-inline element opens a block holding its inline text."""
    name_of = _html_tag if html else _jats_tag

    def emit(parts: list[str], where: str) -> None:
        text = " ".join("".join(parts).split())
        if text:
            out.append(SourceBlock(index=len(out), where="/".join(where.split("/")[-4:]), text=text))

    def visit(el: etree._Element, parts: list[str], where: str) -> None:
        for child in el:
            name = name_of(child)
            if not name or skip(child):
                parts.append(child.tail or "")
                continue
            if inline(name):
                parts.append(" " if name in ("br", "break") else "")
                parts.append(child.text or "")
                visit(child, parts, where)
            else:
                emit(parts, where)
                parts.clear()
                own = f"{where}/{_label(child, name, html)}"
                inner = [child.text or ""]
                visit(child, inner, own)
                emit(inner, own)
            parts.append(child.tail or "")

    parts = [root.text or ""]
    visit(root, parts, _label(root, name_of(root), html))
    emit(parts, _label(root, name_of(root), html))


def _label(el: etree._Element, name: str, html: bool) -> str:
    """``p.abstract-text#s1``-style name for the ``where`` column (first class, id)."""
    cls = (el.get("class") or "").split()
    ident = el.get("id") or ""
    kind = el.get("sec-type") or el.get("abstract-type") or el.get("ref-type") if not html else None
    out = name + (f".{cls[0]}" if cls else "") + (f"#{ident}" if ident and len(ident) < 30 else "")
    return out + (f"[{kind}]" if kind else "")
