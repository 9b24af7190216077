"""A news page's link or written identifier → the research publication it cites, if any.

Used by ``tasks/crossgenre/stages/journal_links.py``. Evidence decides, never a link's
position (issue 16): a link is a study reference when

- it is a literature index record: doi.org / dx.doi.org (``kind: doi``), PubMed
  (``pubmed.ncbi.nlm.nih.gov/<pmid>``, ``ncbi.nlm.nih.gov/pubmed/<pmid>``), PMC
  (``/pmc/articles/PMC…``, ``pmc.ncbi.nlm.nih.gov/articles/PMC…``), Europe PMC
  (``/article/MED/<pmid>``, ``/abstract/MED/…``, ``/article/PMC/PMC…``);
- or its host is a journal/publisher domain (:mod:`tasks.crossgenre.domains`) and its path
  is an article's: an identifier in the URL (a DOI in ``/doi/full/10.1056/…``, an Elsevier
  PII in ScienceDirect ``/pii/S…`` or Lancet/Cell ``PIIS…``, a JAMA Network
  ``fullarticle/<id>`` — MEDLINE stores that id as the pii; a DOI in a JAMA path wins —, a nature.com article id, whose
  DOI is ``10.1038/<id>``, though not a ``d…`` id of Nature's news and comment pieces) or a
  path segment with a digit (article numbers, volumes, years);
  a journal's homepage or a section/listing page (no such segment, or ``/toc/``, ``/issue/``
  …) is not an article and is skipped with that reason;
- or a DOI sits in the URL of a host not in the lists (``kind: journal``: DOIs name
  publications);
- or it wraps such a link in a query parameter (a redirect/tracking wrapper extract missed).

Trial registries (ClinicalTrials.gov, ISRCTN, WHO ICTRP, EU CTR …) are registrations, not
publications: skipped. Identifiers written in the page (extract's ``identifiers``) are
``kind: text``. DOIs: https://www.doi.org/the-identifier/resources/handbook (prefix
``10.<digits>/``); PII: https://www.sciencedirect.com/science/article/pii/ URL form.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from tasks.common.text.identifiers import normalise_doi, normalise_pmcid
from tasks.crossgenre.domains import DomainList

_DOI = re.compile(r"10\.\d{4,9}/[^\s?#\"<>]+")
_PII = re.compile(r"(?:PII)?(S\d{4}-?\d{3}[\dX](?:\(\d{2}\)|\d{2})\d{5}-?[\dX])", re.IGNORECASE)
_VIEW_SEGMENTS = frozenset(
    [
        "full",
        "abstract",
        "abs",
        "pdf",
        "epdf",
        "pdfdirect",
        "fulltext",
        "html",
        "xml",
        "meta",
        "references",
        "citedby",
        "suppinfo",
        "supplemental",
        "figures",
        "tables",
        "info",
        "metrics",
        "reader",
        "summary",
        "text",
    ]
)
_VIEW_ENDINGS = (".full.pdf", ".pdf", ".full", ".abstract", ".html", ".htm", ".xml")
_LISTING_SEGMENTS = frozenset(
    [
        "toc",
        "loi",
        "issue",
        "issues",
        "current",
        "archive",
        "archives",
        "search",
        "dosearch",
        "subscribe",
        "about",
        "collections",
        "topics",
        "authors",
        "author",
        "home",
        "for-authors",
        "editorial-board",
    ]
)
_PUBMED_SECTION = re.compile(r"^(?:/m)?/pubmed(?:/|$)")
_PUBMED_PATH = re.compile(r"^(?:/m)?(?:/pubmed)?/(\d{1,9})/?$")
_PUBMED_TERM = re.compile(r"^\s*(\d{1,9})\s*(?:\[(?:uid|pmid)\])?\s*$", re.IGNORECASE)
_PMC_PATH = re.compile(r"(?:^|/)articles/(?:(PMC\d+)|pmid/(\d{1,9}))(?:/|$)", re.IGNORECASE)
_EPMC_PATH = re.compile(
    r"^/(?:(?:article|abstract)/(MED|PMC)/(?:PMC)?(\d+)|articles?/PMC(\d+))(?:/|$)", re.IGNORECASE
)
_JAMA_PATH = re.compile(
    r"/journals/[^/]+/(?:fullarticle|article-abstract|articlepdf)/(\d+)(?:/|$)", re.IGNORECASE
)
# Article URLs that carry no article number in the path: ScienceDirect's old
# /science?_ob=ArticleURL&_udi=… form, and ?articleid= / ?article_id= query forms.
_ARTICLE_QUERY_KEYS = frozenset({"_udi", "articleid", "article_id", "artid"})
# A journal site's news and blog sections (news.sciencemag.org, science.org/content/article/…).
_NEWS_SEGMENTS = frozenset({"news", "sciencenow", "blog", "blogs", "podcast", "podcasts", "careers"})
_NATURE_NEWS = re.compile(r"^/articles/d\d{5}-", re.IGNORECASE)  # d41586-…: Nature's news section
_NATURE_PATH = re.compile(r"^/articles/([a-z][a-z0-9.\-]*\d[a-z0-9.\-]*)/?$", re.IGNORECASE)


@dataclass(frozen=True)
class StudyLink:
    """One cited publication reference (a ``study_links`` entry of contract §3)."""

    url: str
    kind: str  # doi, pubmed, pmc, europepmc, journal, text
    id_kind: str | None  # doi, pmid, pmcid, pii
    id_value: str | None
    reason: str

    def row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Skipped:
    """A link that looked like research but is not a publication reference, and why."""

    url: str
    reason: str


Found = tuple[str, str, str]  # id kind, id value, how it was found


def clean_doi(candidate: str) -> str | None:
    """A DOI found in a URL or text, without view suffixes (``/full``, ``.pdf``) or trailing
    punctuation, normalised (lower case); None when nothing DOI-shaped is left."""
    match = _DOI.search(candidate)
    if match is None:
        return None
    prefix, _, rest = match.group().partition("/")
    segments = [s for s in rest.split("/") if s]
    while len(segments) > 1 and segments[-1].lower() in _VIEW_SEGMENTS:
        segments.pop()
    suffix = "/".join(segments)
    for ending in _VIEW_ENDINGS:
        if suffix.lower().endswith(ending):
            suffix = suffix[: -len(ending)]
            break
    suffix = suffix.rstrip(".,;:'")
    while suffix.endswith((")", "]")) and suffix.count(suffix[-1]) > suffix.count(
        "(" if suffix[-1] == ")" else "["
    ):
        suffix = suffix[:-1].rstrip(".,;:'")
    if prefix == "10.1101":  # bioRxiv / medRxiv URLs add a version (v1, v2) the DOI lacks
        suffix = re.sub(r"v\d+$", "", suffix)
    return normalise_doi(f"{prefix}/{suffix}") if suffix else None


def _pii(segment: str) -> str | None:
    stem = re.sub(r"\.(?:pdf|html?)$", "", segment, flags=re.IGNORECASE)
    match = _PII.fullmatch(stem)
    return match.group(1).upper() if match else None


def url_identifier(host: str, path: str, query: list[tuple[str, str]]) -> Found | None:
    """The publication identifier a journal URL carries, with how it was found (None: none)."""
    jama = _JAMA_PATH.search(path) if host.endswith("jamanetwork.com") and not _DOI.search(path) else None
    if jama:
        return "pii", jama.group(1), f"JAMA Network article id {jama.group(1)} (MEDLINE pii)"
    segments = [s for s in path.split("/") if s]
    for value in [*segments, *(v for _, v in query)]:
        pii = _pii(value)
        if pii:
            return "pii", pii, f"Elsevier PII {pii} in the URL"
    doi = clean_doi(path) or next((d for _, v in query if (d := clean_doi(v))), None)
    if doi:
        return "doi", doi, f"DOI {doi} in the URL"
    nature = _NATURE_PATH.match(path) if host.endswith("nature.com") else None
    if nature:
        doi = normalise_doi(f"10.1038/{nature.group(1)}")
        return "doi", doi, f"nature.com article id (DOI {doi})"
    return None


def _index_identifier(kind: str, host: str, path: str, query: list[tuple[str, str]]) -> Found | None:
    """The record id of a literature-index URL of ``kind`` (doi, pubmed, pmc, europepmc)."""
    if kind == "doi":
        doi = clean_doi(path)
        return ("doi", doi, "doi.org link") if doi else None
    if kind == "pubmed":
        if not (host.startswith("pubmed.") or _PUBMED_SECTION.match(path)):
            return None
        match = _PUBMED_PATH.match(path)
        if match:
            return "pmid", match.group(1), "PubMed record link"
        term = next((m for k, v in query if k == "term" and (m := _PUBMED_TERM.match(v))), None)
        return ("pmid", term.group(1), "PubMed link naming one PMID") if term else None
    if kind == "pmc":
        match = _PMC_PATH.search(path)
        if match and (host.startswith("pmc.") or path.lower().startswith("/pmc/")):
            if match.group(1):
                return "pmcid", match.group(1).upper(), "PMC article link"
            return "pmid", match.group(2), "PMC article link by PMID"
        return None
    match = _EPMC_PATH.match(path)
    if match is None:
        return None
    if match.group(1) and match.group(1).upper() == "MED":
        return "pmid", match.group(2), "Europe PMC record link (MED)"
    return "pmcid", f"PMC{match.group(2) or match.group(3)}", "Europe PMC record link (PMC)"


def _article_path(path: str) -> bool:
    segments = [s.lower() for s in path.split("/") if s]
    return any(c.isdigit() for s in segments for c in s) and not _LISTING_SEGMENTS & set(segments)


def _split(url: str) -> tuple[str, str, list[tuple[str, str]]] | None:
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not host:
        return None
    return host.lower(), unquote(parts.path), parse_qsl(parts.query)


def classify_url(url: str, domains: DomainList, *, depth: int = 0) -> StudyLink | Skipped | None:
    """What ``url`` cites: a :class:`StudyLink`, a :class:`Skipped` research-like link, or None."""
    split = _split(url)
    if split is None:
        return None
    host, path, query = split
    if domains.excluded(host):
        return None
    registry = domains.registry(host, path)
    if registry:
        return Skipped(url, f"trial registry {registry} ({host}): a registration, not a publication")
    kinds = domains.index_kinds(host)
    for kind in kinds:
        found = _index_identifier(kind, host, path, query)
        if found:
            return StudyLink(url, kind, *found)
    if kinds:
        return Skipped(
            url, f"{'/'.join(kinds)} page of {host} without a record identifier (a search or list)"
        )
    journal = domains.journal(host)
    found = url_identifier(host, path, query)
    if journal is not None:
        where = f"journal domain {journal.domain} ({journal.source})"
        if _NATURE_NEWS.match(path) and host.endswith("nature.com"):
            return Skipped(url, f"{where}: a Nature news or comment piece (article id d…), not research")
        news = path.lower().startswith("/content/article/") and host.endswith(
            ("science.org", "sciencemag.org")
        )
        if news or host.startswith("news.") or _NEWS_SEGMENTS & {p.lower() for p in path.split("/")}:
            return Skipped(url, f"{where}: the journal's news section, not research")
        if found:
            return StudyLink(url, "journal", found[0], found[1], f"{where}: {found[2]}")
        if _article_path(path):
            return StudyLink(url, "journal", None, None, f"{where}: article path, no identifier in the URL")
        named = next((k for k, v in query if k.lower() in _ARTICLE_QUERY_KEYS and v.strip()), None)
        if named or any(k == "_ob" and v == "ArticleURL" for k, v in query):
            why = f"article URL (query {named or '_ob=ArticleURL'}), no identifier in the URL"
            return StudyLink(url, "journal", None, None, f"{where}: {why}")
        shape = "homepage" if not path.strip("/") else "section or listing page"
        return Skipped(url, f"{where}: {shape}, not an article (no article number in the path)")
    if found and found[0] == "doi":
        return StudyLink(
            url, "journal", "doi", found[1], f"{found[2]} of {host} (host not in the journal list)"
        )
    return _wrapped(url, host, query, domains) if depth == 0 else None


def _wrapped(url: str, host: str, query: list[tuple[str, str]], domains: DomainList) -> StudyLink | None:
    """A study link inside a query parameter of a redirect/tracking link (``?u=https%3A…``)."""
    for _, value in query:
        if value.lower().startswith(("http://", "https://")):
            inner = classify_url(value, domains, depth=1)
            if isinstance(inner, StudyLink):
                return StudyLink(
                    inner.url,
                    inner.kind,
                    inner.id_kind,
                    inner.id_value,
                    f"{inner.reason} (unwrapped from a {host} link)",
                )
    return None


def identifier_link(kind: str, value: str, where: str) -> StudyLink | None:
    """A study reference for an identifier written in the page (``kind`` doi/pmid/pmcid)."""
    if kind == "doi":
        doi = clean_doi(value)
        if doi:
            return StudyLink(
                f"https://doi.org/{doi}", "text", "doi", doi, f"DOI written in the page ({where})"
            )
    elif kind == "pmid" and value.strip().isdigit():
        pmid = value.strip().lstrip("0")
        url = f"https://pubmed.ncbi.nlm.nih.gov/{pmid}/"
        return StudyLink(url, "text", "pmid", pmid, f"PMID written in the page ({where})")
    elif kind == "pmcid":
        pmcid = normalise_pmcid(value)
        if pmcid:
            url = f"https://pmc.ncbi.nlm.nih.gov/articles/{pmcid}/"
            return StudyLink(url, "text", "pmcid", pmcid, f"PMCID written in the page ({where})")
    return None


# Press-wire services hide every link of a release behind an opaque tracking redirect.
_TRACKERS = (("globenewswire.com", "/tracker"), ("rt.prnewswire.com", "/"), ("cts.businesswire.com", "/"))
_QUOTED_TITLE = re.compile(r"^\s*[\"“”«„'‘]\s*\S+(?:\s+\S+){4,}\s*[\"“”»'’]\s*$")


def tracked_title(url: str, anchor: str) -> StudyLink | None:
    """A press-wire tracking link whose anchor is a quoted title of five words or more: a
    publication whose address only following the redirect tells (``landing_pages``)."""
    split = _split(url)
    if split is None or not _QUOTED_TITLE.match(anchor):
        return None
    host, path, _query = split
    for tracker, prefix in _TRACKERS:
        if (host == tracker or host.endswith(f".{tracker}")) and path.lower().startswith(prefix):
            why = f"press-wire tracking link ({host}) on a quoted title: the target is known by following it"
            return StudyLink(url, "tracker", None, None, why)
    return None
