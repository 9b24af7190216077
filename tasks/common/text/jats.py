"""Read a JATS (PMC / publisher) XML article into a :class:`ParsedArticle`.

What becomes text, in document order:

- the abstract(s) from ``front/article-meta``: the main abstract under
  ``("Abstract", <sub-section title>...)``; author / editors' / patient summaries under
  their own title (``("Author Summary",)``); table-of-contents teasers, graphical
  abstracts and translated abstracts (``trans-abstract``) are left out: teasers repeat
  the abstract in one line and translations would mix languages in one article;
- the body: every ``<p>`` with the titles of its enclosing ``<sec>``s as section path,
  each ``<list>`` / ``<def-list>`` as one "list" block (one line per item, nested items on
  their own lines), boxed-text with its caption title appended to the path.

Left out entirely: figures, tables, display formulas, supplementary material, footnotes,
and the whole ``<back>`` (references, acknowledgements, appendices, notes, glossary),
plus sub-articles (decision letters, author responses). Body sections that are back
matter in disguise (old BMC files keep "Competing interests", "Authors' contributions",
"Appendix A" as ordinary ``<sec>``s) are recognised by title and dropped the same way.

Inline formulas (``inline-formula``, bare ``mml:math`` / ``tex-math``) are replaced by the
token ``[formula]``: dropping them leaves sentences like "where  is the rate", and their
MathML / LaTeX source is noise for retrieval, while a visible token keeps the sentence
readable and tells a judge something was there. Display formulas sitting inside a
paragraph are dropped with a space (they are set apart from the sentence anyway).

Parsing is strict and offline: no DTD loading, no entity resolution, no network, so a
truncated or malformed file is rejected (``malformed_xml``) instead of half-read.
Entities the DTD would define (``&nbsp;``) stay unresolved without the DTD; the HTML
named entities are mapped by hand.
"""

from __future__ import annotations

from html.entities import name2codepoint

from lxml import etree

from tasks.common.text.back_matter import (
    BACK_MATTER_SEC_TYPES,
    ETHICS_TITLES,
    NOT_ABSTRACT_TEXT,
    SUMMARY_POINTER,
    is_back_matter_title,
    section_key,
)
from tasks.common.text.document import ArticleMeta, Block, BlockKind, Dropped, InputRejected, ParsedArticle
from tasks.common.text.identifiers import normalise_doi, normalise_pmcid
from tasks.common.text.jats_citations import CitationNumbers, citation_superscripts
from tasks.common.text.licences import normalise_licence, shorten_statement

FORMULA_TOKEN = "[formula]"

# Never text: floats, formulas, back matter, sub-articles, structural labels.
NOT_TEXT = frozenset(
    {
        "fig", "fig-group", "table-wrap", "table-wrap-group", "table", "disp-formula",
        "disp-formula-group", "supplementary-material", "graphic", "inline-graphic", "media",
        "fn", "fn-group", "ref-list", "ack", "app", "app-group", "glossary", "notes", "back",
        "sub-article", "response", "floats-group", "object-id", "chem-struct-wrap",
        "permissions", "preformat", "code", "alt-text", "long-desc", "attrib",
    }
)  # fmt: skip
FORMULAS = frozenset({"inline-formula", "math", "tex-math"})
# Block-level elements that may sit inside a <p>: they end the paragraph's current run.
BLOCKS_IN_P = frozenset({"list", "def-list", "disp-quote", "boxed-text", "statement", "p", "sec"})
# Inline renderings of these need a space around them ("item one" "item two").
_SPACED = frozenset({"p", "list-item", "list", "def-list", "def-item", "term", "def", "title", "break"})

_SKIP_ABSTRACT_TYPES = frozenset({"toc", "teaser", "graphical", "precis", "video"})
_MAIN_ABSTRACT_TYPES = frozenset({"", "abstract", "structured", "full", "normal"})
_SUMMARY_NAMES = {
    "summary": "Author Summary",
    "author-summary": "Author Summary",
    "editors-summary": "Editors' Summary",
    "editor-summary": "Editors' Summary",
    "patient": "Patient Summary",
    "plain-language-summary": "Plain Language Summary",
}
_PMC_ID_TYPES = ("pmcid", "pmc", "pmcaid", "pmc-uid")

# Without XML_PARSE_HUGE (lxml's huge_tree, kept off against memory bombs), libxml2's
# parserInternals.h: XML_MAX_TEXT_LENGTH, XML_MAX_NAME_LENGTH, xmlParserMaxDepth.
LIBXML2_LIMITS = "10,000,000 bytes per text node, 50,000 per name, 256 levels of nesting"
# Strict and offline: no DTD, no entity resolution, no network, libxml2's limits on.
_STRICT = {"load_dtd": False, "resolve_entities": False, "no_network": True, "huge_tree": False}


def parse_jats(data: bytes, *, citation_numbers: CitationNumbers = "drop") -> ParsedArticle:
    """Metadata and text blocks of one JATS article; :class:`InputRejected` if it is not one.

    ``citation_numbers``: what becomes of reference numbers set as superscripts
    ("cells<sup>5,6</sup>"): ``drop`` them, or ``bracket`` them ("cells [5,6]"). Bracketed
    citations in the text ("[5]") stay as they are either way.
    """
    parser = etree.XMLParser(remove_comments=True, remove_pis=True, **_STRICT)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as err:
        if err.code == etree.ErrorTypes.ERR_RESOURCE_LIMIT:
            raise InputRejected("too_large", f"{err.msg} (libxml2's limits: {LIBXML2_LIMITS})") from err
        raise InputRejected("malformed_xml", str(err)) from err
    article = _article(root)
    citation_superscripts(article, citation_numbers)
    front = _child(article, "front")
    meta_el = _child(front, "article-meta") if front is not None else None
    if meta_el is None:
        raise InputRejected("not_jats", "<article> has no <front>/<article-meta>")
    blocks = _Sink()
    for abstract in _children(meta_el, "abstract"):
        _abstract(abstract, blocks)
    body = _child(article, "body")
    if body is not None:
        _walk(body, (), "paragraph", blocks)
    return ParsedArticle(meta=_meta(article, front, meta_el), blocks=list(blocks), dropped=blocks.dropped)


class _Sink(list[Block]):
    """The blocks read so far, and what was left out with its reason."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped: list[Dropped] = []

    def drop(self, reason: str, el: etree._Element) -> None:
        text = _norm("".join(str(t) for t in el.itertext()))
        if text:
            self.dropped.append(Dropped(reason, text))


# --- document structure -------------------------------------------------------------


def _article(root: etree._Element) -> etree._Element:
    name = _local(root)
    if name == "pmc-articleset":  # what PMC's efetch returns around one article
        inner = _child(root, "article")
        if inner is not None:
            return inner
    if name != "article":
        raise InputRejected("not_jats", f"root element is <{etree.QName(root).text}>, not <article>")
    namespace = etree.QName(root).namespace
    if namespace and not any(word in namespace.lower() for word in ("jats", "nlm")):
        raise InputRejected("not_jats", f"<article> in namespace {namespace}, not JATS")
    return root


def _abstract(abstract: etree._Element, out: _Sink) -> None:
    kind = (abstract.get("abstract-type") or "").strip().lower()
    if kind in _SKIP_ABSTRACT_TYPES:
        out.drop(f"abstract_type:{kind}", abstract)
        return
    if kind in _MAIN_ABSTRACT_TYPES:
        base: tuple[str, ...] = ("Abstract",)
    else:
        own = _title(abstract)
        base = own or (_SUMMARY_NAMES.get(kind, kind.replace("-", " ").capitalize()),)
    _walk(abstract, base, "abstract", out)


def _walk(el: etree._Element, path: tuple[str, ...], kind: BlockKind, out: _Sink) -> None:
    for child in el:
        if isinstance(child.tag, str):
            _dispatch(child, path, kind, out)


def _dispatch(el: etree._Element, path: tuple[str, ...], kind: BlockKind, out: _Sink) -> None:
    name = _local(el)
    if name in NOT_TEXT:
        out.drop(f"jats:{name}", el)
        return
    if name in ("title", "label", "caption", "subtitle"):
        return
    if name == "sec":
        title = _title(el)
        sec_type = (el.get("sec-type") or "").lower()
        back_matter = sec_type in BACK_MATTER_SEC_TYPES or (title and is_back_matter_title(title[0]))
        key = section_key(title[0]) if title else ""
        if kind == "abstract":  # an abstract's sub-sections count ("Funding"), except:
            back_matter = bool(NOT_ABSTRACT_TEXT.search(key))
        elif path and key in ETHICS_TITLES:
            back_matter = False
        if back_matter:
            out.drop("back_matter_section", el)
            return
        _walk(el, path + title, kind, out)
    elif name == "p":
        if kind == "abstract" and SUMMARY_POINTER.match(_norm(_inline(el))):
            out.drop("summary_pointer", el)
            return
        _paragraph(el, path, kind, out)
    elif name == "def-list":  # abbreviation lists and glossaries: terms, not prose
        out.drop("jats:def-list", el)
    elif name == "list":
        lines = _list_lines(el)
        if lines:
            out.append(Block(kind="list", section_path=path, text="\n".join(lines)))
    elif name == "boxed-text":
        _walk(el, path + _box_title(el), kind, out)
    else:  # disp-quote, statement, and wrappers we do not know: their paragraphs count
        _walk(el, path, kind, out)


def _paragraph(p: etree._Element, path: tuple[str, ...], kind: BlockKind, out: _Sink) -> None:
    """One block per run of inline text; a list or quote inside the <p> splits it."""
    run = [p.text or ""]
    for child in p:
        if isinstance(child.tag, str) and _local(child) in BLOCKS_IN_P:
            _add(out, kind, path, "".join(run))
            run = []
            _dispatch(child, path, kind, out)
        else:
            run.append(_inline(child))
        run.append(child.tail or "")
    _add(out, kind, path, "".join(run))


def _list_lines(lst: etree._Element) -> list[str]:
    """One line per item, nested items on their own lines after their parent item."""
    lines: list[str] = []
    for item in lst:
        if not isinstance(item.tag, str):
            continue
        name = _local(item)
        if name == "list-item":
            own, nested = _item_parts(item)
            line = _norm(own)
            lines.extend(([line] if line else []) + nested)
        elif name == "def-item":
            term = _norm(" ".join(_inline(c) for c in _children(item, "term")))
            definition = _norm(" ".join(_inline(c) for c in _children(item, "def")))
            line = f"{term}: {definition}" if term and definition else term or definition
            if line:
                lines.append(line)
    return lines


def _item_parts(el: etree._Element) -> tuple[str, list[str]]:
    """(the item's own text, lines of the lists nested in it, even inside its <p>s)."""
    own = [el.text or ""]
    nested: list[str] = []
    for child in el:
        name = _local(child) if isinstance(child.tag, str) else ""
        if name in ("list", "def-list"):
            nested.extend(_list_lines(child))
        elif name == "p":
            text, inner = _item_parts(child)
            own.append(f" {text} ")
            nested.extend(inner)
        elif name not in ("label", "title"):
            own.append(_inline(child))
        own.append(child.tail or "")
    return "".join(own), nested


def _inline(el: etree._Element) -> str:
    """Text of ``el`` without its tail, as a reader sees it inside a sentence."""
    if el.tag is etree.Entity:
        return _entity(el)
    if not isinstance(el.tag, str):
        return ""
    name = _local(el)
    if name in FORMULAS:
        return FORMULA_TOKEN
    if name in NOT_TEXT:
        return " "
    parts = [el.text or ""]
    for child in el:
        parts.append(_inline(child))
        parts.append(child.tail or "")
    text = "".join(parts)
    if name in ("ext-link", "uri") and not text.strip():  # <ext-link xlink:href="..."/>: show the URL
        text = el.get("{http://www.w3.org/1999/xlink}href") or ""
    return f" {text} " if name in _SPACED else text


def _entity(el: etree._Element) -> str:
    name = (el.text or "").strip("&;")
    code = name2codepoint.get(name)
    return chr(code) if code is not None else ""


def _title(el: etree._Element) -> tuple[str, ...]:
    title = _child(el, "title")
    text = _norm(_inline(title)) if title is not None else ""
    return (text,) if text else ()


def _box_title(box: etree._Element) -> tuple[str, ...]:
    caption = _child(box, "caption")
    for holder in (caption, box):
        if holder is not None:
            found = _title(holder)
            if found:
                return found
    label = _child(box, "label")
    text = _norm(_inline(label)) if label is not None else ""
    return (text,) if text else ()


def _add(out: _Sink, kind: BlockKind, path: tuple[str, ...], text: str) -> None:
    text = _norm(text)
    if text:
        out.append(Block(kind=kind, section_path=path, text=text))


# --- metadata --------------------------------------------------------------------------


def _meta(article: etree._Element, front: etree._Element | None, meta_el: etree._Element) -> ArticleMeta:
    ids: dict[str, str] = {}
    for article_id in _children(meta_el, "article-id"):
        id_type = (article_id.get("pub-id-type") or "").lower()
        value = _norm(_inline(article_id))
        if value and id_type not in ids:
            ids[id_type] = value
    pmc = next((ids[t] for t in _PMC_ID_TYPES if t in ids), None)
    doi = ids.get("doi")
    url, text, licence_type = _licence(meta_el)
    journal_meta = _child(front, "journal-meta") if front is not None else None
    lang = (article.get("{http://www.w3.org/XML/1998/namespace}lang") or "").split("-")[0].strip().lower()
    return ArticleMeta(
        title=_text_at(meta_el, "title-group", "article-title"),
        journal=_journal(journal_meta),
        pmid=ids.get("pmid"),
        pmcid=normalise_pmcid(pmc) if pmc else None,
        doi=normalise_doi(doi) if doi else None,
        license=normalise_licence(url, text, licence_type),
        license_url=url,
        license_text=shorten_statement(text) if text else None,
        language=lang or None,
        article_type=article.get("article-type"),
    )


def _licence(meta_el: etree._Element) -> tuple[str | None, str | None, str | None]:
    """(URL, statement, license-type) from <permissions>, else from a copyright statement."""
    permissions = _child(meta_el, "permissions")
    licence = _child(permissions, "license") if permissions is not None else None
    if licence is None:
        statement = _text_at(permissions, "copyright-statement") if permissions is not None else None
        return None, statement or _text_at(meta_el, "copyright-statement"), None
    url = None
    for ref in licence.iter("{http://www.niso.org/schemas/ali/1.0/}license_ref", "license_ref"):
        url = _norm(_inline(ref)) or None
        break
    url = url or licence.get("{http://www.w3.org/1999/xlink}href")
    if not url:  # the statement's own link, e.g. (<ext-link xlink:href="...by/2.0"/>)
        for link in licence.iter("ext-link", "uri"):
            url = link.get("{http://www.w3.org/1999/xlink}href") or _norm(_inline(link)) or None
            if url:
                break
    paragraphs = [c for c in licence if isinstance(c.tag, str) and _local(c) in ("license-p", "p")]
    text = _norm(" ".join(_inline(p) for p in paragraphs)) or None
    return url, text, licence.get("license-type")


def _journal(journal_meta: etree._Element | None) -> str | None:
    if journal_meta is None:
        return None
    return _text_at(journal_meta, "journal-title-group", "journal-title") or _text_at(
        journal_meta, "journal-title"
    )


# --- small helpers ---------------------------------------------------------------------


def _local(el: etree._Element) -> str:
    return str(etree.QName(el).localname)


def _children(el: etree._Element, name: str) -> list[etree._Element]:
    return [c for c in el if isinstance(c.tag, str) and _local(c) == name]


def _child(el: etree._Element, name: str) -> etree._Element | None:
    found = _children(el, name)
    return found[0] if found else None


def _text_at(el: etree._Element | None, *path: str) -> str | None:
    for name in path:
        if el is None:
            return None
        el = _child(el, name)
    if el is None:
        return None
    return _norm(_inline(el)) or None


def _norm(text: str) -> str:
    return " ".join(text.split())
