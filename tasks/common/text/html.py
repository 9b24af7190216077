"""Read a publisher's article page (HTML) into a :class:`ParsedArticle` with jusText.

CURE parsed its Nature / BioMed Central pages with jusText; this reader keeps jusText's
paragraph classification (default thresholds) and adds what a test collection needs on
top of it:

- **Stoplist by language.** The page's language comes from ``<html lang>`` (or
  ``xml:lang``), ``meta[http-equiv=content-language]``, ``citation_language``,
  ``dc.language``, else ``default_language``; ISO 639-1/-2 codes map to jusText's stoplist
  names. A language jusText has no stoplist for falls back to English: stop-word density
  then marks most of its paragraphs bad and the page is rejected as ``no_text`` rather
  than read with the wrong notion of "prose".
- **Headings make the section path.** jusText's heading paragraphs are not emitted; they
  set the section path of the good paragraphs that follow. The ``<h1>`` that repeats the
  article title is the title level: it resets the path, and whatever comes before it
  (browser warnings, site banners) is page furniture and skipped. ``<h2>``..``<h6>`` nest
  by their relative level (a stack: a heading pops every open heading of the same or a
  deeper level), so a page that jumps from h2 to h4 still nests correctly. Any other
  ``<h1>`` acts as a top-level section. Paragraphs under a section titled "Abstract" get
  kind "abstract".
- **Back matter is dropped as in JATS.** Sections titled like back matter (References,
  Acknowledgements, Competing interests, Author information, ...) are skipped with their
  sub-sections, and a References heading ends the article: what follows on a publisher
  page is peer review, comments and site furniture.
- **Floats and page chrome never reach jusText.** ``figure``/``figcaption``/``table``,
  ``nav``/``aside``/``footer``, ARIA navigation/banner/search/dialog landmarks, cookie and
  consent banners, and containers whose class or id names a figure, table, caption or
  reference list are removed first (jusText rates a long caption as good
  prose); captions that survive ("Table 1. ...") are recognised by their label. Inline
  MathML becomes ``[formula]`` and display MathML is dropped, as in the JATS reader.
- Article-information lines ("Funding: ...", "Competing interests: ...", "Received: ...")
  and the licence statement are metadata, not text: dropped from the blocks.

Consecutive good list items of one ``<ul>``/``<ol>`` become one "list" block.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import justext
import justext.core
import lxml.html
from lxml import etree

from tasks.common.text.document import ArticleMeta, Block, BlockKind, InputRejected, ParsedArticle
from tasks.common.text.identifiers import normalise_doi, normalise_pmcid
from tasks.common.text.jats import FORMULA_TOKEN, LIBXML2_LIMITS, is_back_matter_title
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

_DROP_TAGS = ("figure", "figcaption", "table", "nav", "aside", "footer", "noscript", "svg", "button")
_DROP_CLASS_TOKENS = frozenset(
    {
        "fig", "figs", "figure", "figures", "figure-wrap", "caption", "table", "tables",
        "table-wrap", "ref-list", "reflist", "references", "reference-list", "bibliography",
        "citation-list", "skip-link", "breadcrumbs",
    }
)  # fmt: skip
_DROP_IDS = frozenset({"references", "bibliography"})
# ARIA landmarks of page furniture; "main" and "article" are what we keep.
_DROP_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "search", "complementary", "dialog", "alertdialog"}
)
_CHROME_WORDS = ("cookie", "consent")  # cookie banners: "cookie-warning", "onetrust-consent-sdk", ...
_REFERENCES_TITLES = frozenset(
    {"references", "reference", "bibliography", "literature cited", "references and notes", "works cited"}
)

_HEADING_LEVEL = re.compile(r"\bh([1-6])\b")
_LIST_ITEM = re.compile(r"^(.*/(?:ul|ol)\[\d+\])/li\[\d+\](?:/.*)?$")
_CAPTION = re.compile(r"^(?:Supplementary\s+)?(?:Fig(?:ure)?|Table|Scheme|Video)\.?\s*S?\d+[A-Za-z]?\s*[.:|]")
_ARTICLE_INFO = re.compile(
    r"^(?:Citation|(?:Academic\s+)?Editor|Received|Accepted|Published|Copyright|Data\s+Availability"
    r"|Funding|Competing\s+Interests?|Conflicts?\s+of\s+Interest|Abbreviations|Keywords"
    r"|Author\s+Contributions)\s*:",
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
) -> ParsedArticle:
    """Metadata and good paragraphs of one article page; ``encoding`` comes from :func:`sniff`.

    ``justext_params`` are passed to ``justext.justext`` (``length_low``, ``stopwords_high``,
    ``max_link_density``, ...); jusText's own defaults apply to the rest.
    """
    text, doc = _load(data, encoding)
    meta = _meta(doc)
    stoplist = _STOPLISTS.get(meta.language or _language_code(default_language) or "", _FALLBACK_STOPLIST)
    try:
        paragraphs = justext.justext(
            text, justext.get_stoplist(stoplist), preprocessor=_preprocess, **(justext_params or {})
        )
    except (justext.core.JustextError, etree.LxmlError, ValueError) as err:
        raise InputRejected("malformed_html", str(err) or type(err).__name__) from err
    blocks = _blocks(paragraphs, meta.title)
    if not blocks:
        good = sum(1 for p in paragraphs if p.class_type == "good")
        raise InputRejected(
            "no_text",
            f"no article paragraph kept ({len(paragraphs)} paragraphs, {good} good; stoplist {stoplist})",
        )
    return ParsedArticle(meta=meta, blocks=blocks)


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


def _preprocess(dom: Any) -> Any:
    """Remove floats and page chrome, mark formulas, then jusText's own cleaning."""
    doomed = [el for el in dom.iter(*_DROP_TAGS)]
    for el in dom.iter():
        if not isinstance(el.tag, str):
            continue
        classes = set((el.get("class") or "").lower().split())
        ident = (el.get("id") or "").lower()
        if (
            classes & _DROP_CLASS_TOKENS
            or ident in _DROP_IDS
            or (el.get("role") or "").lower() in _DROP_ROLES
            or any(word in name for name in (*classes, ident) for word in _CHROME_WORDS)
        ):
            doomed.append(el)
    for el in dom.iter("math"):
        if (el.get("display") or "").lower() == "block":
            doomed.append(el)
        else:
            tail = el.tail
            el.clear()
            el.tag, el.text, el.tail = "span", FORMULA_TOKEN, tail
    for el in doomed:
        if el.getparent() is not None:
            el.drop_tree()
    return justext.core.preprocessor(dom)


def _blocks(paragraphs: list[Any], title: str | None) -> list[Block]:
    start = _title_index(paragraphs, title)
    stack: list[tuple[int, str, bool]] = []  # (level, heading, inside back matter)
    blocks: list[Block] = []
    open_list: str | None = None  # xpath of the <ul>/<ol> whose items the last block holds
    skip_value = False
    for paragraph in paragraphs[start or 0 :]:
        text = _norm(paragraph.text)
        if paragraph.is_heading:
            level = _level(paragraph)
            if level == 1 and title and _same_title(text, title):
                stack.clear()
                continue
            if _key(text) in _REFERENCES_TITLES:
                break  # the reference list closes the article; the rest is back matter and chrome
            while stack and stack[-1][0] >= level:
                stack.pop()
            back = is_back_matter_title(text) or bool(stack and stack[-1][2])
            stack.append((level, text, back))
            open_list, skip_value = None, False
            continue
        if paragraph.class_type != "good" or (stack and stack[-1][2]):
            continue
        if skip_value:  # the value of a lone "Keywords:" label paragraph
            skip_value = False
            continue
        label = _ARTICLE_INFO.match(text)
        if label and not text[label.end() :].strip():
            skip_value = True
            continue
        text = text.lstrip(":;,. ")  # MDPI: "<h2>Abstract</h2>: Volatile ..."
        if not _is_article_text(text):
            continue
        path = tuple(heading for _, heading, _ in stack)
        kind: BlockKind = "abstract" if any(_key(h) == "abstract" for h in path) else "paragraph"
        item = _LIST_ITEM.match(paragraph.xpath)
        list_xpath = item.group(1) if item else None
        if list_xpath and list_xpath == open_list and blocks and blocks[-1].section_path == path:
            previous = blocks.pop()
            blocks.append(Block(kind="list", section_path=path, text=f"{previous.text}\n{text}"))
        else:
            blocks.append(Block(kind="list" if list_xpath else kind, section_path=path, text=text))
        open_list = list_xpath
    return blocks


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


def _is_article_text(text: str) -> bool:
    if not text or _CAPTION.match(text) or _ARTICLE_INFO.match(text):
        return False
    return not _LICENCE_STATEMENT.search(text)


def _same_title(heading: str, title: str) -> bool:
    a, b = _alnum(heading), _alnum(title)
    return bool(a and b) and (a == b or (min(len(a), len(b)) >= 20 and (a.startswith(b) or b.startswith(a))))


def _alnum(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _key(text: str) -> str:
    return re.sub(r"^(?:\d+(?:\.\d+)*\.?|[IVX]+\.)\s*", "", text).strip(" :.").casefold()


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
    pmcid = first("citation_pmcid")
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


def _norm(text: str) -> str:
    return " ".join(text.split())
