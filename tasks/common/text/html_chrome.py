"""The DOM side of the HTML reader: page furniture removed before jusText, and the
structure (article container, abstract, sections) it reads the paragraphs with.

:func:`clean_page` removes what is never article text, each removal recorded in
``dropped`` with its reason (``removed:figure``, ``removed:class=share``, ``removed:hidden``):

- by tag: floats, landmarks (``nav``, ``aside``, ``footer``), ``video``/``audio`` with
  their fallback text, ``svg``, ``noscript``...; and hidden elements (``hidden``,
  ``display: none``, ``aria-hidden``);
- by name: class parts (``c-article-section__figure`` → c, article, section, figure;
  camelCase too) naming a float (``fig``, ``caption``, ``table``, ``references``) or a
  widget (``share``, ``toolbar``, ``popup``, ``download``, ``related``...); ids only when
  all their parts do ("metrics", not "related-work"); ARIA roles of furniture. An inline
  element inside prose is never removed by name (``<a class="fig-link">`` keeps its
  text), nor is the article's container (the largest ``article``/``main``, its ancestors,
  whatever holds half the page's paragraph text: also no layout table or hidden tab);
- a reference section removed by name leaves its "References" heading: it ends the article;
- buttons outside text (toolbars); a ``<button>`` inside prose is a citation and stays;
- superscript reference numbers (``cells<sup><a>5</a>,<a>6</a></sup>``): dropped or
  bracketed (" [5,6]") as in JATS. Inline MathML becomes ``[formula]``.

:class:`Page` tells the reader a paragraph's element, whether it is article text by its place
and where an abstract ends; :func:`furniture_line` knows lines that carry no markup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from typing import Any

from lxml import etree

from tasks.common.text.back_matter import section_key
from tasks.common.text.document import Dropped
from tasks.common.text.jats import FORMULA_TOKEN
from tasks.common.text.jats_citations import CitationNumbers

# Phrasing content (https://html.spec.whatwg.org/#phrasing-content): part of its block's text.
INLINE_TAGS = frozenset(
    {"a", "abbr", "b", "bdi", "bdo", "big", "br", "button", "cite", "code", "data", "del", "dfn", "em", "font",
     "i", "img", "ins", "kbd", "label", "mark", "nobr", "q", "s", "samp", "small", "span", "strike", "strong",
     "sub", "sup", "time", "tt", "u", "var", "wbr"}
)  # fmt: skip
_DROP_TAGS = frozenset(
    {"figure", "figcaption", "table", "nav", "aside", "footer", "noscript", "svg", "video", "audio", "template",
     "dialog", "iframe", "canvas"}
)  # fmt: skip
_FLOAT_PARTS = frozenset(
    {"fig", "figs", "figure", "figures", "caption", "captions", "table", "tables", "reflist", "references",
     "reference", "bibliography", "citationlist", "supplementary", "video", "videos", "asset"}
)  # fmt: skip
_WIDGET_PARTS = frozenset(
    {"share", "sharing", "toolbar", "widget", "widgets", "modal", "popup", "tooltip", "download", "downloads",
     "social", "follow", "flag", "promo", "banner", "advert", "advertisement", "ad", "ads", "metrics",
     "altmetric", "related", "recommend", "recommended", "recommendations", "sidebar", "alert", "alerts",
     "permissions", "cite", "skiplink", "breadcrumb", "breadcrumbs", "newsletter", "subscribe", "login",
     "cookie", "cookies", "consent"}
)  # fmt: skip
_CHROME_WORDS = ("cookie", "consent")  # "onetrust-consent-sdk", "cookie-warning" ids
_REFERENCE_PARTS = frozenset({"references", "reference", "bibliography", "reflist", "citationlist"})
# Parts of ids that say nothing by themselves ("share-box", "ref-list-1", "article-metrics").
_GENERIC_PARTS = frozenset(
    {"ref", "list", "sec", "section", "box", "container", "wrapper", "wrap", "panel", "area", "bar", "block",
     "links", "link", "btn", "button", "buttons", "tools", "tab", "tabs", "inner", "outer", "content",
     "holder", "region", "pane", "group", "items", "item", "page", "article", "js", "c", "u", "s"}
)  # fmt: skip
# An abstract's heading in the languages of the stoplists the corpora use.
ABSTRACT_TITLES = frozenset(
    {"abstract", "résumé", "resume", "resumen", "resumo", "zusammenfassung", "riassunto"}
)
REFERENCES_TITLES = frozenset({"references", "reference", "bibliography", "literature cited", "references and notes", "works cited"})  # fmt: skip
_DROP_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "search", "complementary", "dialog", "alertdialog", "button", "menu",
     "menubar", "toolbar", "tooltip", "tablist"}
)  # fmt: skip
# Parts that name the article's metadata (author lists, affiliations, notes, ...): text
# inside them is never promoted over jusText's verdict.
_META_PARTS = frozenset(
    {"author", "authors", "affiliation", "affiliations", "affil", "aff", "contrib", "contribs", "contributor",
     "contributors", "address", "meta", "metadata", "keyword", "keywords", "kwd", "citation", "citations",
     "ref", "refs", "bib", "footnote", "footnotes", "fn", "copyright", "license", "licence", "rights", "ack",
     "acknowledgements", "acknowledgments", "funding", "doi", "date", "dates", "history", "orcid", "email",
     "correspondence", "corresp", "editor", "editors", "subject", "subjects", "header", "info",
     "information", "notes", "teaser", "card", "comment", "comments", "review", "reviews", "decision",
     "graphical", "topmatter", "front", "frontmatter"} | _FLOAT_PARTS | _WIDGET_PARTS
)  # fmt: skip
_CONTENT_WHOSE = frozenset({"article", "art", "main", "html", "paper", "full", "section"})
_CONTENT_WHAT = frozenset({"body", "text", "content", "fulltext"})
_CITATION_NUMBERS = re.compile(r"^[\[(]?\d+[a-z]?(?:[,;–—-]\d+[a-z]?)*[\])]?$")
_TEXT_TAGS = frozenset({"p", "li", "blockquote"})
# A reference entry or "cite this article" line: "2023;150:e12", "doi:10.", "doi.org/10.".
_REFERENCE_ENTRY = re.compile(
    r"\b(?:19|20)\d\d\s*;\s*\d+\s*[(:]|\bdoi(?::\s*|\.org/)10\.\d{4,}", re.IGNORECASE
)
_CAPTION = re.compile(
    r"^(?:Supplementary\s+)?(?:Fig(?:ure)?|Table|Scheme|Video)\.?\s*S?\d+[A-Za-z]?\s*(?:[.:|]|$)",
    re.IGNORECASE,
)
_COPYRIGHT = re.compile(r"^(?:©|\(c\)\s*\d{4}|copyright\s*(?:©|\(c\)|\d{4}))", re.IGNORECASE)
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
# Lines of widgets (last resort: most widgets go by their markup), alone or in a row.
_WIDGET_LINE = re.compile(
    r"(?:(?:flag an issue|follow this (?:publication|journal|author)(?: for updates)?|download "
    r"(?:figure|pdf|powerpoint(?: slide)?|(?:as a )?powerpoint slide|high-res image|full-size image|slide)"
    r"|open in (?:a )?new tab|view (?:larger|full[- ]size) image|copy link|(?:share|cite) this article)"
    r"[\s|·•/,.]*)+|(?:your browser does not support|this video cannot be played)\b.{0,300}",
    re.IGNORECASE,
)


def clean_page(dom: Any, dropped: list[Dropped], citation_numbers: CitationNumbers) -> None:
    """Remove page furniture from ``dom`` in place (see the module docstring)."""
    guard = _Guard(dom)
    doomed: list[tuple[Any, str]] = []
    stack = [dom]
    while stack:
        el = stack.pop()
        if not isinstance(el.tag, str):
            continue
        why = _reason(el, guard)
        if why:
            doomed.append((el, why))
        elif el.tag == "math":
            _math(el, doomed)
        elif el.tag == "sup" and _citation_sup(el):
            text = re.sub(r"[\s\[\]()]", "", el.text_content())
            dropped.append(Dropped("citation_number", text))
            el.tail = ("" if citation_numbers == "drop" else f" [{text}]") + (el.tail or "")
            el.drop_tree()  # keeps the tail
        else:
            if el.tag == "button":  # a citation inside a sentence: keep its text
                el.tag = "span"
            stack.extend(reversed(el))
    for el, why in doomed:
        text = norm(el.text_content())
        if text:
            dropped.append(Dropped(why, text))
        heading = _references_heading(el) if why.split("=")[-1] in _REFERENCE_PARTS else None
        if heading is not None:  # keep the heading: a References heading ends the article
            el.addprevious(etree.Element(heading.tag))
            el.getprevious().text = norm(heading.text_content())
        el.drop_tree()


@dataclass(frozen=True)
class Page:
    """The cleaned DOM jusText read (its paragraphs' xpaths point into it) and the stoplist."""

    root: Any
    stopwords: frozenset[str]

    @cached_property
    def has_container(self) -> bool:
        """The page names its article's container (else a section heading after the title says it)."""
        root = self.root if self.root is not None else etree.Element("html")
        return any(isinstance(el.tag, str) and _is_container(el) for el in root.iter())

    def element(self, paragraph: Any) -> Any:
        found = self.root.xpath(paragraph.xpath) if self.root is not None else []
        return found[0] if found else None

    def article_text(self, paragraph: Any, text: str, el: Any) -> bool:
        """:func:`is_article_text` for a jusText paragraph; links within the page (citations
        "#B4", "#fig1") are part of the prose."""
        anchors = el.iter("a") if el is not None else ()
        out = (a for a in anchors if not (a.get("href") or "").startswith("#"))
        links = sum(len(norm(a.text_content())) for a in out) / max(1, len(text))
        return is_article_text(el, text, links, paragraph.stopwords_count(self.stopwords))

    def abstract_container(self, heading: Any, following: list[Any]) -> Any:
        """:func:`abstract_container` of a heading paragraph, for the paragraphs ``following`` it."""
        first = next((self.element(p) for p in following if not p.is_heading), None)
        el = self.element(heading)
        return abstract_container(el, first) if el is not None and first is not None else None


class Sections:
    """Open headings by level: (level, title, in back matter, element its text lies in or None)."""

    def __init__(self) -> None:
        self.stack: list[tuple[int, str, bool, Any]] = []

    def open(self, level: int, text: str, back: bool, container: Any) -> None:
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, text, back or self.back, container))

    def leave(self, el: Any) -> None:
        """Close the sections whose container ``el`` lies outside of (text after the abstract)."""
        for at, (_, _, _, container) in enumerate(self.stack):
            if container is not None and el is not None and not inside(el, container):
                del self.stack[at:]
                return

    @property
    def back(self) -> bool:
        return bool(self.stack and self.stack[-1][2])

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(heading for _, heading, _, _ in self.stack)


def is_article_text(el: Any, text: str, link_density: float, stopwords: int) -> bool:
    """Text jusText rated bad or short (number-dense Results, a structured abstract's
    "Methods: ...") that is article text by its place: a ``<p>``/``<li>`` of ≥ 8 words or
    40 characters, ≥ 2 stop words, ≤ 25 % link text, no reference entry, inside nothing
    that names metadata or furniture up to the article's container or ``body``."""
    if el is None or not _is_paragraph(el, _TEXT_TAGS) or (len(text.split()) < 8 and len(text) < 40):
        return False
    if link_density > 0.25 or stopwords < 2 or _REFERENCE_ENTRY.search(text):
        return False
    for ancestor in (el, *el.iterancestors()):
        if _is_container(ancestor) or ancestor.tag == "body":
            return ancestor is not el or not is_metadata(el)
        if is_metadata(ancestor):
            return False
    return True


def in_content(el: Any) -> bool:
    """``el`` lies in the article's text container: its ``article``/``main``, an abstract, a body."""
    return el is not None and any(_is_container(a) for a in (el, *el.iterancestors()))


def abstract_container(heading: Any, first: Any) -> Any:
    """Where an "Abstract" ``heading``'s text lies: the nearest ancestor named abstract, the
    section/div after it or its ``<section>``, the first holding ``first`` (the next paragraph)."""
    named = [a for a in heading.iterancestors() if "abstract" in name_parts(a) and a.tag != "body"]
    sibling = heading.getnext()
    after = [sibling] if sibling is not None and sibling.tag in ("section", "div") else []
    sections = list(heading.iterancestors("section"))[:1]
    return next((c for c in (*named, *after, *sections) if inside(first, c)), None)


def inside(el: Any, container: Any) -> bool:
    return el is container or any(a is container for a in el.iterancestors())


def furniture_line(text: str) -> str | None:
    """What a paragraph is by its text alone: a figure label ("Figure 6", "Table 1. ..."),
    a widget's line ("Download figure Open in new tab", a video fallback), a copyright line."""
    if _CAPTION.match(text):
        return "caption"
    if _WIDGET_LINE.fullmatch(text):
        return "widget"
    return "licence" if _COPYRIGHT.match(text) else None


def is_content(el: Any) -> bool:
    """``el`` is a container of article text by its name: an abstract, an article body."""
    parts = name_parts(el)
    return bool({"abstract", "fulltext"} & parts or (parts & _CONTENT_WHOSE and parts & _CONTENT_WHAT))


def is_metadata(el: Any) -> bool:
    """``el`` holds article metadata or furniture by its tag or name (authors, notes, captions)."""
    return el.tag in ("header", "footer", "address", "caption", "form") or bool(name_parts(el) & _META_PARTS)


def name_parts(el: Any) -> set[str]:
    """The parts of ``el``'s class names and id: ``fig-caption figureWrap`` → fig, caption, figure, wrap."""
    return _parts([*(el.get("class") or "").split(), el.get("id") or ""])


def _parts(names: list[str], pairs: bool = True) -> set[str]:
    parts: set[str] = set()
    for name in names:
        pieces = [p.lower() for p in re.split(r"[-_\s]+|(?<=[a-z])(?=[A-Z])", name) if p]
        parts.update(pieces)
        parts.update(a + b for a, b in pairwise(pieces) if pairs)  # "ref-list" → reflist
    return parts


def norm(text: str) -> str:
    return " ".join(text.split())


class _Guard:
    """What no name removes: the article's container and its ancestors, anything holding half
    the page's paragraph text; and which inline elements sit inside prose."""

    def __init__(self, dom: Any) -> None:
        roots = [el for el in dom.iter() if isinstance(el.tag, str) and _is_main(el)]
        self.kept: set[Any] = {el for el in dom.iter("html", "body")}
        if roots:
            root = max(roots, key=_paragraph_words)
            self.kept |= {root, *root.iterancestors()}
        words = _paragraph_words(dom)
        self.half = words / 2 if words >= 200 else 0  # too little text in paragraphs to judge by
        self._prose: dict[Any, int] = {}

    def protects(self, el: Any) -> bool:
        return el in self.kept or (self.half > 0 and _paragraph_words(el) >= self.half)

    def in_prose(self, el: Any) -> bool:
        """``el`` is inline and its block has ≥ 4 words of its own outside links and buttons."""
        if el.tag not in INLINE_TAGS:
            return False
        block = next((a for a in el.iterancestors() if a.tag not in INLINE_TAGS), None)
        if block is None:
            return False
        if block not in self._prose:
            self._prose[block] = len(_free_text(block).split())
        own = 0 if el.tag in ("a", "button") else len(el.text_content().split())
        return self._prose[block] - own >= 4


def _is_container(el: Any) -> bool:
    return _is_main(el) or (el.tag not in INLINE_TAGS and is_content(el))


def _is_main(el: Any) -> bool:
    return el.tag in ("article", "main") or (el.get("role") or "").lower() == "main"


def _reason(el: Any, guard: _Guard) -> str | None:
    """Why ``el`` is furniture (None: it is not, or it is guarded)."""
    if el.tag in _DROP_TAGS and not (el.tag == "table" and guard.protects(el)):  # a layout table
        return f"removed:{el.tag}"
    hidden = el.get("hidden") is not None or _HIDDEN_STYLE.search(el.get("style") or "")
    if hidden and not guard.protects(el):  # a closed tab holding the article stays
        return "removed:hidden"
    if guard.in_prose(el):
        return None
    if el.tag == "button":
        return "removed:button"
    why = _name_reason(el)
    return why if why and not guard.protects(el) else None


def _name_reason(el: Any) -> str | None:
    """Furniture by ARIA, class parts or id (see the module docstring)."""
    role = (el.get("role") or "").lower()
    classes = (el.get("class") or "").split()
    ident = el.get("id") or ""
    if (el.get("aria-hidden") or "").lower() == "true":
        return "removed:aria-hidden"
    if role in _DROP_ROLES:
        return f"removed:role={role}"
    if any(word in name.lower() for name in (*classes, ident) for word in _CHROME_WORDS):
        return "removed:cookie_banner"
    hit = _parts(classes) & (_FLOAT_PARTS | _WIDGET_PARTS)
    if hit:
        return f"removed:class={min(hit)}"
    # Only ids all of whose parts say furniture: section ids are often titles ("related-work").
    pieces = _parts([ident], pairs=False)
    hit = _parts([ident]) & (_FLOAT_PARTS | _WIDGET_PARTS)
    if hit and all(p in _FLOAT_PARTS | _WIDGET_PARTS | _GENERIC_PARTS or p.isdigit() for p in pieces):
        return f"removed:id={min(hit)}"
    return None


def _references_heading(el: Any) -> Any:
    headings = el.iter("h1", "h2", "h3", "h4", "h5", "h6")
    return next((h for h in headings if section_key(h.text_content()) in REFERENCES_TITLES), None)


def _math(el: Any, doomed: list[tuple[Any, str]]) -> None:
    if (el.get("display") or "").lower() == "block":
        doomed.append((el, "removed:display_math"))
        return
    tail = el.tail
    el.clear()
    el.tag, el.text, el.tail = "span", FORMULA_TOKEN, tail


def _citation_sup(el: Any) -> bool:
    """A superscript of reference numbers that links to the references."""
    text = re.sub(r"\s", "", el.text_content())
    return bool(_CITATION_NUMBERS.match(text)) and next(el.iter("a", "button"), None) is not None


def _free_text(block: Any) -> str:
    """Text of ``block`` itself: outside nested blocks, links and buttons."""
    out = [block.text or ""]
    for child in block:
        link = child.tag in ("a", "button") or (child.get("role") or "").lower() == "button"
        if isinstance(child.tag, str) and child.tag in INLINE_TAGS and not link:
            out.append(_free_text(child))
        out.append(child.tail or "")
    return " ".join(out)


def _is_paragraph(el: Any, tags: frozenset[str] = frozenset({"p"})) -> bool:
    """A ``<p>`` (or one of ``tags``), or an element named a paragraph (Springer's ``div.Para``)."""
    return el.tag in tags or bool(name_parts(el) & {"para", "paragraph"})


def _paragraph_words(el: Any) -> int:
    """Words in the paragraphs under ``el`` (outside lists: not reference entries)."""
    paragraphs = (p for p in el.iter() if isinstance(p.tag, str) and _is_paragraph(p))
    return sum(len(p.text_content().split()) for p in paragraphs if next(p.iterancestors("li"), None) is None)
