"""Read a publisher's article page (HTML) into a :class:`ParsedArticle` with jusText.

CURE parsed its Nature / BioMed Central pages with jusText; this reader keeps jusText's verdicts
(default thresholds) where the page says nothing better, and adds what a test collection needs.
What it leaves out goes to ``ParsedArticle.dropped`` with its reason.

- **Stoplist by language**: from ``<html lang>``, ``content-language``, ``citation_language``,
  ``dc.language``, else ``default_language`` (ISO 639-1/-2 → jusText's names). A language
  without a stoplist falls back to English, whose stop-word density then rejects the page
  as ``no_text`` rather than read it with the wrong notion of prose.
- **Page furniture never reaches jusText** (:mod:`tasks.common.text.html_chrome`): floats,
  landmarks, hidden elements, video fallbacks and widgets, by tag, class parts, id and ARIA
  role; in-text citations set as ``<button>``/``<a>`` keep their text; superscript
  reference numbers are dropped or bracketed (``citation_numbers``); MathML as in JATS.
- **Inside the article the page's structure beats stop-word density**: a ``<p>``/``<li>``
  jusText rated bad or short (number-dense Results, structured-abstract sections) is kept
  when it lies in the article's container (``article``/``main``, an abstract or body by
  name; on a page without one, under a section heading after the title), is long enough,
  not link-dense and not inside metadata (authors, affiliations, notes) or furniture.
- **Headings make the section path** (they are not emitted); ``<h2>``..``<h6>`` nest by
  relative level. A heading repeating the title (any level) resets the path; what precedes
  the title is furniture. Under "Abstract" ("Résumé", ...) paragraphs are kind "abstract" in
  its container (an element named abstract, the section after the heading, or its
  ``<section>``): an unheaded introduction after it is a "paragraph" with no section.
- **Back matter is dropped as in JATS**: back-matter sections with their sub-sections, and
  all from a References heading on; so are article-information lines ("Funding: ..."),
  licence and copyright lines, figure labels and widget lines ("Download figure").

Good items of one list make one "list" block; a PMC page's PMCID may come from its canonical URL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import justext
import justext.core
import lxml.html
from lxml import etree

from tasks.common.text import html_chrome as chrome
from tasks.common.text.back_matter import is_back_matter_title, section_key
from tasks.common.text.document import ArticleMeta, Block, BlockKind, Dropped, InputRejected, ParsedArticle
from tasks.common.text.identifiers import normalise_doi, normalise_pmcid
from tasks.common.text.jats import LIBXML2_LIMITS
from tasks.common.text.jats_citations import CitationNumbers
from tasks.common.text.licences import normalise_licence, shorten_statement

# ISO 639-1 (and common 639-2) codes -> jusText stoplist names (justext.get_stoplists()).
_STOPLISTS = {
    "af": "Afrikaans", "ar": "Arabic", "az": "Azerbaijani", "be": "Belarusian", "bg": "Bulgarian",
    "bn": "Bengali", "bs": "Bosnian", "ca": "Catalan", "cs": "Czech", "cy": "Welsh", "da": "Danish",
    "de": "German", "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French",
    "ga": "Irish", "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian",
    "hu": "Hungarian", "hy": "Armenian", "id": "Indonesian", "is": "Icelandic", "it": "Italian",
    "ka": "Georgian", "kk": "Kazakh", "ko": "Korean", "la": "Latin", "lt": "Lithuanian",
    "lv": "Latvian", "mk": "Macedonian", "mr": "Marathi", "ms": "Malay", "mt": "Maltese",
    "nb": "Norwegian_Bokmal", "ne": "Nepali", "nl": "Dutch", "nn": "Norwegian_Nynorsk",
    "no": "Norwegian_Bokmal", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian",
    "sv": "Swedish", "sw": "Swahili", "ta": "Tamil", "te": "Telugu", "tl": "Tagalog",
    "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek", "vi": "Vietnamese",
}  # fmt: skip
_ISO639_2 = {
    "eng": "en", "fra": "fr", "fre": "fr", "spa": "es", "deu": "de", "ger": "de", "por": "pt",
    "ita": "it", "nld": "nl", "dut": "nl", "rus": "ru", "pol": "pl", "tur": "tr",
}  # fmt: skip
_FALLBACK_STOPLIST = "English"
_norm = chrome.norm

# Back-matter titles of publisher pages that the JATS list lacks (BMC: "Authors’ information").
_HEADING_LEVEL = re.compile(r"\bh([1-6])\b")
_LIST_ITEM = re.compile(r"^(.*/(?:ul|ol)\[\d+\])/li\[\d+\](?:/.*)?$")
_ARTICLE_INFO = re.compile(
    r"^(?:Citation|(?:Academic\s+)?Editor|Received|Accepted|Published|Copyright|Data\s+Availability"
    r"|Funding|Competing\s+Interests?|Conflicts?\s+of\s+Interest|Abbreviations|Keywords"
    r"|Author\s+Contributions)\s*:",
    re.IGNORECASE,
)
_PMC_URL = re.compile(
    r"^(?:https?:)?//(?:www\.)?(?:ncbi\.nlm\.nih\.gov/pmc|pmc\.ncbi\.nlm\.nih\.gov)/articles/(PMC\d+)\b",
    re.IGNORECASE,
)
_LICENCE_STATEMENT = re.compile(
    r"(?:distributed|licensed|available|published)\s+under\s+(?:the\s+terms\s+of\s+)?(?:a|the)\s+"
    r"(?:Creative\s+Commons|CC)|Creative\s+Commons\s+(?:Attribution|CC0|Zero|Public\s+Domain)",
    re.IGNORECASE,
)


def parse_html(
    data: bytes,
    *,
    encoding: str,
    default_language: str = "en",
    justext_params: Mapping[str, Any] | None = None,
    citation_numbers: CitationNumbers = "drop",
) -> ParsedArticle:
    """Metadata and good paragraphs of one article page; ``encoding`` comes from :func:`sniff`.

    ``justext_params`` are passed to ``justext.justext`` (``length_low``, ``stopwords_high``,
    ``max_link_density``, ...); jusText's own defaults apply to the rest.
    """
    text, doc = _load(data, encoding)
    meta = _meta(doc)
    stoplist = _STOPLISTS.get(meta.language or _language_code(default_language) or "", _FALLBACK_STOPLIST)
    dropped: list[Dropped] = []
    page: list[Any] = []  # the DOM jusText read
    try:
        paragraphs = justext.justext(
            text,
            justext.get_stoplist(stoplist),
            preprocessor=lambda dom: _preprocess(dom, dropped, citation_numbers, page),
            **(justext_params or {}),
        )
    except (justext.core.JustextError, etree.LxmlError, ValueError) as err:
        raise InputRejected("malformed_html", str(err) or type(err).__name__) from err
    stopwords = justext.core.define_stoplist(justext.get_stoplist(stoplist))
    blocks = _blocks(paragraphs, meta.title, chrome.Page(page[0] if page else None, stopwords), dropped)
    if not blocks:
        good = sum(1 for p in paragraphs if p.class_type == "good")
        raise InputRejected(
            "no_text",
            f"no article paragraph kept ({len(paragraphs)} paragraphs, {good} good; stoplist {stoplist})",
        )
    return ParsedArticle(meta=meta, blocks=blocks, dropped=dropped)


def read_html_metadata(data: bytes, *, encoding: str) -> ArticleMeta:
    """Only the page's metadata (no jusText pass): what ingest needs to route a file."""
    return _meta(_load(data, encoding)[1])


def _load(data: bytes, encoding: str) -> tuple[str, Any]:
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as err:
        raise InputRejected("undecodable", f"not valid {encoding}: {err}") from err
    # lxml refuses str input that carries an XML encoding declaration (XHTML pages).
    text = re.sub(r"^\s*<\?xml[^>]*\?>", "", text.lstrip("\ufeff"))
    parser = lxml.html.HTMLParser()
    try:
        doc = lxml.html.document_fromstring(text, parser=parser)
    except (etree.LxmlError, ValueError) as err:
        raise InputRejected("malformed_html", str(err) or type(err).__name__) from err
    # libxml2's HTML parser drops what is over its limits without raising.
    limit = next((e for e in parser.error_log if e.type == etree.ErrorTypes.ERR_RESOURCE_LIMIT), None)
    if limit is not None:
        raise InputRejected("too_large", f"{limit.message.strip()} (libxml2's limits: {LIBXML2_LIMITS})")
    return text, doc


# --- text -----------------------------------------------------------------------------


def _preprocess(dom: Any, dropped: list[Dropped], citation_numbers: CitationNumbers, page: list[Any]) -> Any:
    """Remove page furniture (:mod:`html_chrome`), then jusText's own cleaning; the cleaned
    DOM goes to ``page``: the paragraphs' xpaths point into it."""
    chrome.clean_page(dom, dropped, citation_numbers)
    cleaned = justext.core.preprocessor(dom)
    page.append(cleaned)
    return cleaned


def _blocks(
    paragraphs: list[Any], title: str | None, page: chrome.Page, dropped: list[Dropped]
) -> list[Block]:
    start = _title_index(paragraphs, title)
    dropped.extend(Dropped("before_title", _norm(p.text)) for p in paragraphs[: start or 0])
    sections = chrome.Sections()
    blocks: list[Block] = []
    open_list: str | None = None  # xpath of the <ul>/<ol> whose items the last block holds
    skip_value = False
    paragraphs = paragraphs[start or 0 :]
    for at, paragraph in enumerate(paragraphs):
        text = _norm(paragraph.text)
        if paragraph.is_heading:
            why = _heading(paragraphs, at, text, title, page, sections)
            if why == "references":  # the reference list closes the article: the rest is chrome
                dropped.extend(Dropped("after_references", _norm(p.text)) for p in paragraphs[at:])
                break
            if why:
                dropped.append(Dropped(why, text))
            open_list, skip_value = None, False
            continue
        el = page.element(paragraph)
        sections.leave(el)
        if len(text.split()) <= 4 and is_back_matter_title(text):  # "Grant information": it, then its value
            dropped.append(Dropped("article_info_label", text))
            skip_value = True
            continue
        titled = start is not None and bool(sections.stack) and not page.has_container
        rescue = titled or chrome.in_content(el)
        if paragraph.class_type != "good" and not (rescue and page.article_text(paragraph, text, el)):
            dropped.append(Dropped(f"justext:{paragraph.class_type}", text))
            skip_value = skip_value and paragraph.class_type == "bad"
            continue
        why = _skip_reason(text, sections.back, skip_value)
        # A lone "Keywords:" label skips the next article paragraph (its value).
        skip_value = why == "article_info_label" or (skip_value and why in ("back_matter", "justext:bad"))
        if why:
            dropped.append(Dropped(why, text))
            continue
        text = text.lstrip(":;,. ")  # MDPI: "<h2>Abstract</h2>: Volatile ..."
        path = sections.path
        abstract = any(section_key(h) in chrome.ABSTRACT_TITLES for h in path)
        kind: BlockKind = "abstract" if abstract else "paragraph"
        item = _LIST_ITEM.match(paragraph.xpath)
        list_xpath = item.group(1) if item else None
        if list_xpath and list_xpath == open_list and blocks and blocks[-1].section_path == path:
            previous = blocks.pop()
            blocks.append(Block(kind="list", section_path=path, text=f"{previous.text}\n{text}"))
        else:
            blocks.append(Block(kind="list" if list_xpath else kind, section_path=path, text=text))
        open_list = list_xpath
    return blocks


def _heading(
    paragraphs: list[Any], at: int, text: str, title: str | None, page: chrome.Page, sections: chrome.Sections
) -> str | None:
    """Open the section of heading ``paragraphs[at]``; why it opens none ("references": the end)."""
    key = section_key(text)
    if title and _same_title(text, title):  # the title (again, at any level) resets the path
        sections.stack.clear()
        return None
    if chrome.furniture_line(text) == "caption":  # "Table 2." over a table (PMC): no section
        return "caption"
    if key in chrome.REFERENCES_TITLES:
        return "references"
    opens_abstract = key in chrome.ABSTRACT_TITLES
    container = page.abstract_container(paragraphs[at], paragraphs[at + 1 :]) if opens_abstract else None
    sections.open(_level(paragraphs[at]), text, is_back_matter_title(text), container)
    return None


def _skip_reason(text: str, in_back_matter: bool, after_label: bool) -> str | None:
    """Why a good paragraph is not article text (None: it is)."""
    if in_back_matter:
        return "back_matter"
    if after_label:  # the value of a lone "Keywords:" label paragraph
        return "article_info_value"
    label = _ARTICLE_INFO.match(text)
    if label and not text[label.end() :].strip():
        return "article_info_label"
    stripped = text.lstrip(":;,. ")
    if not stripped:
        return "empty"
    if _ARTICLE_INFO.match(stripped):
        return "article_info"
    return chrome.furniture_line(stripped) or ("licence" if _LICENCE_STATEMENT.search(stripped) else None)


def _title_index(paragraphs: list[Any], title: str | None) -> int | None:
    """Where the article starts: its title as an <h1>, else a paragraph that is exactly the
    title (MDPI sets it in a div); a citation line that merely starts with it does not count."""
    if not title:
        return None
    for index, paragraph in enumerate(paragraphs):
        if paragraph.is_heading and _level(paragraph) == 1 and _same_title(_norm(paragraph.text), title):
            return index
    key = _alnum(title)
    return next((i for i, p in enumerate(paragraphs) if key and _alnum(p.text) == key), None)


def _level(paragraph: Any) -> int:
    return int(_HEADING_LEVEL.findall(paragraph.dom_path)[-1])


def _same_title(heading: str, title: str) -> bool:
    a, b = _alnum(heading), _alnum(title)
    return bool(a and b) and (a == b or (min(len(a), len(b)) >= 20 and (a.startswith(b) or b.startswith(a))))


def _alnum(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


# --- metadata -------------------------------------------------------------------------


def _meta(doc: Any) -> ArticleMeta:
    metas: dict[str, list[str]] = {}
    for el in doc.iter("meta"):
        name = (el.get("name") or el.get("property") or el.get("http-equiv") or "").strip().lower()
        content = _norm(re.sub(r"<[^>]+>", "", el.get("content") or ""))  # F1000 puts <i> in titles
        if name and content:
            metas.setdefault(name, []).append(content)

    def first(*names: str) -> str | None:
        return next((metas[n][0] for n in names if n in metas), None)

    identifiers = metas.get("dc.identifier", [])
    doi = first("citation_doi", "prism.doi") or next(
        (i for i in identifiers if re.match(r"^(?:doi:|info:doi/|https?://(?:dx\.)?doi\.org/)?10\.", i)), None
    )
    pmid = first("citation_pmid") or next(
        (i.split("/", 1)[1] for i in identifiers if i.lower().startswith("info:pmid/")), None
    )
    pmcid = first("citation_pmcid") or _pmc_url_id(doc, first("og:url"))
    title_el = next(iter(doc.iter("title")), None)
    page_title = _norm(title_el.text_content()) if title_el is not None else ""
    url, statement = _licence(doc, metas)
    return ArticleMeta(
        title=first("citation_title", "dc.title", "og:title") or page_title or None,
        journal=first("citation_journal_title", "prism.publicationname"),
        pmid=pmid if pmid and pmid.isdigit() else None,
        pmcid=normalise_pmcid(pmcid) if pmcid else None,
        doi=normalise_doi(doi.removeprefix("info:doi/")) if doi else None,
        license=normalise_licence(url, statement, None),
        license_url=url,
        license_text=shorten_statement(statement) if statement else None,
        language=_page_language(doc, metas),
        article_type=first("citation_article_type", "dc.type"),
    )


def _pmc_url_id(doc: Any, og_url: str | None) -> str | None:
    """The PMCID in a PMC page's canonical URL or ``og:url``."""
    urls = [str(href) for href in doc.xpath("//link[@rel='canonical']/@href")] + [og_url or ""]
    match = next((m for m in (_PMC_URL.match(url.strip()) for url in urls) if m), None)
    return match.group(1) if match else None


def _page_language(doc: Any, metas: dict[str, list[str]]) -> str | None:
    candidates = [doc.get("lang"), doc.get("{http://www.w3.org/XML/1998/namespace}lang"), doc.get("xml:lang")]
    for name in ("content-language", "citation_language", "dc.language"):
        candidates.extend(metas.get(name, []))
    for candidate in candidates:
        code = _language_code(candidate)
        if code:
            return code
    return None


def _language_code(value: str | None) -> str | None:
    """ "en-GB" / "EN" / "eng" -> "en"; None for anything that is not a language tag."""
    if not value:
        return None
    primary = re.split(r"[-_,;\s]", value.strip().lower(), maxsplit=1)[0]
    if len(primary) == 3:
        return _ISO639_2.get(primary)
    return primary if len(primary) == 2 and primary.isalpha() else None


def _licence(doc: Any, metas: dict[str, list[str]]) -> tuple[str | None, str | None]:
    """(licence URL, licence statement): the article's own statement first.

    Site-wide metadata comes last because it can be stale: BMC pages say CC BY 2.0 in
    ``dc.rights`` while the article's statement says 4.0, MDPI says 3.0 against 4.0.
    """
    body = next(iter(doc.iter("body")), doc)
    for anchor in body.iter("a"):
        href = anchor.get("href") or ""
        if "creativecommons.org/" not in href:
            continue
        block = _norm(_enclosing_block(anchor).text_content())
        # "The CC0 waiver applies to the data ...": a data licence, not the article's.
        if "publicdomain/zero" in href and "waiver" in block.lower():
            continue
        statement = _statement_sentence(block)
        if statement or (anchor.get("rel") or "").lower() == "license":
            return href, statement
    for tags in (("p", "li", "dd", "td", "small"), ("div", "span")):  # smallest blocks first
        for el in body.iter(*tags):
            statement = _statement_sentence(_norm(el.text_content()))
            if statement:
                return _cc_url(statement), statement
    for link in doc.iter("link"):
        if (link.get("rel") or "").lower() == "license" and link.get("href"):
            return str(link.get("href")), None
    rights = next((metas[n][0] for n in ("dc.rights", "dcterms.rights") if n in metas), None)
    if rights and rights.startswith(("http://", "https://")):
        return rights, None
    return None, rights


def _statement_sentence(text: str) -> str | None:
    """The sentence of ``text`` that grants the licence ("This is an open access article ...")."""
    if len(text) > 5000 or not _LICENCE_STATEMENT.search(text):
        return None
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text):
        if _LICENCE_STATEMENT.search(sentence):
            return sentence.strip()
    return None


def _cc_url(text: str) -> str | None:
    match = re.search(r"https?://creativecommons\.org/[\w./-]*\w/?", text)
    return match.group(0) if match else None


def _enclosing_block(el: Any) -> Any:
    for ancestor in el.iterancestors("p", "li", "div", "section", "small", "footer", "td"):
        return ancestor
    return el
