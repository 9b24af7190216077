"""What each block of a news page is: page furniture to drop, or a place where studies are cited.

Used by ``tasks/crossgenre/news_links.py``. Decided by what a block *is* — its tag, ARIA
role, class/id words, a heading or label in one of the languages of the crawl (English,
German, French, Spanish) — never by where it sits on the page:

- **Noise** (:func:`prune_noise`, removed before the main-text extractor sees the page):
  ads and sponsored boxes, share bars and social buttons, comments, related / most-read /
  trending lists, navigation, menus, breadcrumbs, pagination, newsletter and paywall boxes,
  cookie banners, sidebars and rails, bylines and author boxes, tag and category lists,
  the site's own header and footer (those outside ``<article>``/``<main>``), forms, AMP ad
  and share components, hidden elements. The article itself (``<article>``, ``<main>``, the
  element holding the headline) is never removed, whatever its classes say (WordPress puts
  ``tag-…`` and ``category-…`` on the post). Links marked ``rel=sponsored`` / ``ugc`` /
  ``tag`` / ``author`` / ``category`` are dropped wherever they are.
- **Reference blocks** (:func:`cited_blocks`): DPUB-ARIA ``doc-endnotes`` /
  ``doc-footnotes`` / ``doc-bibliography`` (https://www.w3.org/TR/dpub-aria-1.1/), elements
  whose class or id says references / sources / footnotes / bibliography / Quellen …, the
  content under a heading such as "References", "Sources", "More information",
  "Originalpublikation", "Quellen", "Références", "Fuentes", and paragraphs that open with such
  a label ("Source: …", "Quelle: …", "Journal reference: …").
- **Metadata blocks**: tables and definition lists with a Journal / DOI / PMID / Article
  title row (newswire releases put the study there).
- **Credit blocks**: figure captions and credit / attribution / courtesy lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

from tasks.crossgenre.news import block_text

HtmlElement = Any  # lxml.html.HtmlElement (lxml ships no type information)
Block = Literal["main", "reference", "metadata", "credit"]

_NOISE_TOKENS = frozenset(
    {
        # ads and promotions
        "ad", "ads", "adslot", "adunit", "advert", "adverts", "advertisement", "advertising",
        "dfp", "sponsor", "sponsored", "sponsors", "promo", "promoted", "promotion", "outbrain",
        "taboola", "commercial",
        # sharing and social buttons
        "share", "shares", "sharing", "sharebar", "sharethis", "addthis", "social", "follow",
        # comments
        "comment", "comments", "respond", "disqus", "replies", "discussion",
        # other stories
        "related", "trending", "popular", "mostread", "most", "recommended", "recommendations",
        "readnext", "pagination", "pager",
        # navigation
        "nav", "navbar", "navigation", "menu", "breadcrumb", "breadcrumbs", "skip",
        # boxes asking for something
        "newsletter", "signup", "subscribe", "subscription", "paywall", "meter", "cookie",
        "cookies", "consent", "gdpr",
        # who wrote it, what it is filed under
        "byline", "author", "authors", "bio", "tags", "tagcloud", "keywords", "categories", "category",
        # the same in the crawl's other languages (German, French, Spanish)
        "werbung", "anzeige", "anzeigen", "publicite", "publicidad", "anuncio", "anuncios",
        "teilen", "partage", "partager", "compartir", "sociaux", "kommentare", "commentaires",
        "comentarios", "verwandte", "empfehlungen", "similaires", "relacionados", "relacionadas",
    }
)  # fmt: skip
_NOISE_TAGS = frozenset(
    {"nav", "form", "button", "select", "dialog", "template", "iframe", "amp-ad", "amp-embed",
     "amp-sticky-ad", "amp-social-share", "amp-analytics"}
)  # fmt: skip
_NOISE_ROLES = frozenset({"navigation", "search", "dialog", "alertdialog", "banner", "contentinfo"})
# The site's own chrome: furniture only outside the article's frame (see _frames).
_SITE_CHROME_TAGS = frozenset({"header", "footer", "aside"})
_CHROME_TOKENS = frozenset({"header", "footer", "masthead", "sidebar", "rail", "widget", "widgets"})
_ARTICLE_TAGS = frozenset({"html", "body", "article", "main"})
_NOISE_RELS = frozenset({"sponsored", "ugc", "tag", "author", "category"})

_REFERENCE_ROLES = frozenset(
    {"doc-endnotes", "doc-endnote", "doc-footnotes", "doc-footnote", "doc-bibliography", "doc-biblioentry"}
)
_REFERENCE_TOKENS = frozenset(
    {"references", "reference", "refs", "reflist", "footnotes", "footnote", "endnotes", "endnote",
     "bibliography", "citations", "citation", "sources", "source", "quellen", "quelle",
     "literatur", "literature", "fuentes", "fuente", "referencias", "bibliographie", "originalpublikation"}
)  # fmt: skip
_CREDIT_TOKENS = frozenset({"credit", "credits", "attribution", "courtesy", "copyright"})

# Labels of reference-like blocks, in the crawl's languages (matched case-insensitively).
_REFERENCE_LABEL = (
    r"(?:references?|sources?|more information|further information|further reading|"
    r"(?:journal|study) references?|original (?:publication|paper|article|study|research)|"
    r"citations?|bibliography|foot ?notes?|end ?notes?|notes?|read the (?:study|paper|research)|"
    r"quellen?(?:angaben?)?|originalpublikation|originalver[öo]ffentlichung|originalarbeit|originalstudie|"
    r"literatur(?:angaben)?|weitere informationen|mehr informationen|fachartikel|zur studie|"
    r"r[ée]f[ée]rences?(?: bibliographiques?)?|(?:pour )?en savoir plus|publication originale|bibliographie|"
    r"referencias?(?: bibliogr[áa]ficas?)?|fuentes?|m[áa]s informaci[óo]n|publicaci[óo]n original|"
    r"bibliograf[íi]a|notas?)"
)
# "Study: …" opens a citation line; a heading "The study" opens a part of the story.
_STUDY_LABEL = (
    r"(?:(?:the )?(?:study|paper)|publication|(?:die )?studie|publikation|(?:l'|l’)?[ée]tude|(?:el )?estudio)"
)
_HEADING_LABEL = re.compile(rf"^\s*(?:\d+(?:\.\d+)*\.?\s*)?{_REFERENCE_LABEL}\s*:?\s*$", re.IGNORECASE)
_LEADING_LABEL = re.compile(rf"^\s*(?:{_REFERENCE_LABEL}|{_STUDY_LABEL})\s*:", re.IGNORECASE)
_LONE_LABEL = re.compile(rf"^\s*(?:{_REFERENCE_LABEL}|{_STUDY_LABEL})\s*:\s*$", re.IGNORECASE)
_CREDIT_LABEL = re.compile(
    r"^\s*(?:(?:image|photo|picture|figure|graphic|illustration|video) ?(?:credit|source)?|credits?|"
    r"courtesy(?: of)?|bild(?:quelle)?|foto|fotos|cr[ée]dits?(?: photo)?|cr[ée]dito|imagen|fuente de la imagen)\s*:",
    re.IGNORECASE,
)
_METADATA_LABEL = re.compile(
    r"^\s*(?:journal|doi|pmid|pubmed(?: id)?|pmcid|article title|title of (?:the )?(?:article|paper|study)|"
    r"publication|published in|citation|reference|source|study|paper|original publication|"
    r"(?:fach)?zeitschrift|originalpublikation|revue|revista|publicaci[óo]n)\s*:?\s*$",
    re.IGNORECASE,
)
_HEADING_TAGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_LABEL_TAGS = frozenset(
    {"p", "div", "li", "dd", "span", "small", "section", "aside", "footer", "em", "strong", "b"}
)
_BLOCK_CHILDREN = ("p", "div", "li", "section", "table", "article", "ul", "ol")
_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")


def tokens(el: HtmlElement) -> set[str]:
    """The words of an element's class and id (``share-bar`` → share, bar)."""
    words = f"{el.get('class') or ''} {el.get('id') or ''}".lower()
    return {t for t in _TOKEN_SPLIT.split(words) if t}


def prune_noise(doc: HtmlElement, keep: HtmlElement | None = None) -> None:
    """Remove page furniture from ``doc`` in place (module doc).

    Never removed: ``keep`` (the headline) and its ancestors, and any element holding more
    than half of the page's paragraph text (an app container whose id happens to read like
    furniture is still the article).
    """
    protected = set() if keep is None else {keep, *keep.iterancestors()}
    prose: dict[HtmlElement, int] = {}
    for paragraph in doc.iter("p"):
        size = len(paragraph.text_content())
        for el in (paragraph, *paragraph.iterancestors()):
            prose[el] = prose.get(el, 0) + size
    half = prose.get(doc, 0) / 2
    frames = _frames(doc)
    doomed = [
        el
        for el in doc.iter()
        if isinstance(el.tag, str)
        and el not in protected
        and prose.get(el, 0) <= half
        and is_noise(el, frames)
    ]
    for el in doomed:
        if el.getparent() is not None:
            el.drop_tree()
    for anchor in list(doc.iter("a")):
        rels = set((anchor.get("rel") or "").lower().split())
        if rels & _NOISE_RELS and anchor.getparent() is not None:
            anchor.drop_tree()


def _frames(doc: HtmlElement) -> set[HtmlElement]:
    """The article's frame: its ``<article>`` elements, else ``<main>`` (or ``role=main``)."""
    articles = {el for el in doc.iter("article")}
    if articles:
        return articles
    return {
        el for el in doc.iter() if isinstance(el.tag, str) and (el.tag == "main" or el.get("role") == "main")
    }


def is_noise(el: HtmlElement, frames: set[HtmlElement]) -> bool:
    """Whether ``el`` is page furniture (module doc); ``frames`` are what :func:`_frames` gives."""
    tag = el.tag.lower()
    if tag in _ARTICLE_TAGS or el.get("role") in ("main", "article"):
        return False
    if tag in _NOISE_TAGS or (el.get("role") or "").lower() in _NOISE_ROLES:
        return True
    if el.get("hidden") is not None or el.get("aria-hidden") == "true":
        return True
    if "display:none" in (el.get("style") or "").replace(" ", "").lower():
        return True
    if _is_cited(el):
        return False
    words = tokens(el)
    if tag in _SITE_CHROME_TAGS or words & _CHROME_TOKENS:
        return not any(a in frames for a in el.iterancestors())
    return bool(words & _NOISE_TOKENS)


def _is_cited(el: HtmlElement) -> bool:
    """A block that cites a study is never furniture, even in a box classed like one."""
    return bool(tokens(el) & (_REFERENCE_TOKENS | _CREDIT_TOKENS)) or el.get("role") in _REFERENCE_ROLES


def cited_blocks(doc: HtmlElement) -> Iterator[tuple[Block, HtmlElement]]:
    """(kind, element) of every reference, metadata and credit block, in document order;
    an element inside a block already given is not given again."""
    seen: set[HtmlElement] = set()
    for el in doc.iter():
        if not isinstance(el.tag, str) or el in seen:
            continue
        for kind, block in _classify(el):
            if block in seen:
                continue
            seen.add(block)
            seen.update(block.iterdescendants())
            yield kind, block


def _classify(el: HtmlElement) -> Iterator[tuple[Block, HtmlElement]]:
    tag = el.tag.lower()
    if next(el.iter("h1"), None) is not None:
        return  # what holds the headline is the article (or a layout table), not a block in it
    words = tokens(el)
    if el.get("role") in _REFERENCE_ROLES or words & _REFERENCE_TOKENS:
        yield "reference", el
    elif tag in ("table", "dl") and any(_METADATA_LABEL.match(_text(label)) for label in _row_labels(el)):
        yield "metadata", el
    elif tag == "figcaption" or words & _CREDIT_TOKENS:
        yield "credit", el
    elif tag in _HEADING_TAGS and _HEADING_LABEL.match(_text(el)):
        yield from (("reference", sibling) for sibling in _section_after(el))
    elif tag in _HEADING_TAGS and _METADATA_LABEL.match(_text(el)):  # a "DOI" / "Journal" box
        yield from (("metadata", sibling) for sibling in _section_after(el))
    elif tag in _LABEL_TAGS and not any(True for _ in el.iterdescendants(*_BLOCK_CHILDREN)):
        text = _text(el)
        if _LEADING_LABEL.match(text) and _starts_block(el):
            yield "reference", el
            if _LONE_LABEL.match(text):  # a label alone: what it labels follows
                following = el.getnext()
                if following is not None:
                    yield "reference", following
        elif _CREDIT_LABEL.match(text) and _starts_block(el):
            yield "credit", el


def _row_labels(table: HtmlElement) -> Iterator[HtmlElement]:
    yield from table.iter("th", "dt")
    for row in table.iter("tr"):
        cells = [c for c in row if isinstance(c.tag, str) and c.tag in ("td", "th")]
        if len(cells) >= 2:
            yield cells[0]


def _section_after(heading: HtmlElement) -> Iterator[HtmlElement]:
    """What a heading heads: its following siblings up to the next heading of its level or
    higher; for a heading wrapped alone in an element, that element's following siblings."""
    level = int(heading.tag[1])
    start = heading
    while (
        start.getnext() is None
        and start.getparent() is not None
        and len(_text(start.getparent())) == len(_text(heading))
    ):
        start = start.getparent()
    for sibling in start.itersiblings():
        if not isinstance(sibling.tag, str):
            continue
        inner = [sibling] if sibling.tag in _HEADING_TAGS else list(sibling.iter(*_HEADING_TAGS))
        if any(int(h.tag[1]) <= level for h in inner):
            return
        yield sibling


def _starts_block(el: HtmlElement) -> bool:
    """An inline label (``<em>Source:</em>``) counts for its enclosing paragraph, not alone."""
    return (
        el.tag not in ("em", "strong", "b", "span")
        or el.getparent() is None
        or not _text(el.getparent()).startswith(_text(el))
    )


def _text(el: HtmlElement) -> str:
    return block_text(el)
