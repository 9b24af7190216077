"""Publisher landing pages → the identifier their bibliographic meta tags declare.

Issue 16 (stage 5) asks for "publisher landing pages resolved through their
``citation_doi``/``citation_pmid`` meta". Used by ``tasks/crossgenre/stages/journal_links.py``
for each ``kind: journal`` study link whose URL carries no identifier: the page is fetched
with :class:`tasks.crossgenre.fetch.PoliteFetcher` (per-host pace, robots.txt, retries,
redirects, the response cache ``<cache_dir>/news_http.sqlite`` by URL and fetch day) and its
``<meta>`` tags are read with lxml, in this order of precedence:

1. ``citation_pmid`` (Highwire Press tags, the ones Google Scholar's inclusion guidelines ask
   journals for: https://scholar.google.com/intl/en/scholar/inclusion.html#indexing);
2. DOIs: ``citation_doi``, ``prism.doi`` (PRISM, often ``doi:10.…``), ``bepress_citation_doi``,
   ``dc.identifier.doi``, ``dc.identifier`` / ``DC.Identifier`` (Dublin Core; ``doi:10.…``,
   ``info:doi/10.…``, ``https://doi.org/10.…`` or a bare DOI with ``scheme="doi"``; a value
   that is no DOI, an ISSN say, is passed over), ``doi``;
3. ``citation_pmcid``.

Tag names are matched case-insensitively on ``name`` or ``property``. A DOI is normalised by
:func:`tasks.crossgenre.study_links.clean_doi` (``tasks/common/text/identifiers.py``), a PMID is
digits. One tag giving two different values is ambiguous: the link is left as it was. So is a
link whose page failed (HTTP error, robots.txt refusal, timeout), is not HTML, or declares
nothing; its ``reason`` then says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lxml.html import HtmlElement
from pydantic import Field

from irforge.config import StrictModel
from tasks.common.text.identifiers import normalise_pmcid
from tasks.crossgenre import news
from tasks.crossgenre.fetch import FetchConfig, FetchFailed, PoliteFetcher, Response, ResponseCache, today
from tasks.crossgenre.stages.ingest import CACHE_FILE, decode
from tasks.crossgenre.study_links import StudyLink, clean_doi

_TAGS: tuple[tuple[str, str], ...] = (
    ("citation_pmid", "pmid"),
    ("citation_doi", "doi"),
    ("prism.doi", "doi"),
    ("bepress_citation_doi", "doi"),
    ("dc.identifier.doi", "doi"),
    ("dc.identifier", "doi"),
    ("doi", "doi"),
    ("citation_pmcid", "pmcid"),
)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_PMID = re.compile(r"(?:pmid\s*:?\s*)?0*(\d{1,9})", re.IGNORECASE)


class LandingConfig(StrictModel):
    fetch: FetchConfig = Field(
        FetchConfig(),
        description="How landing pages are fetched: user agent, per-host pace, robots.txt, retries, fetch day.",
    )


@dataclass(frozen=True)
class LandingId:
    """The identifier a landing page declares, and the meta tag that declared it."""

    kind: str  # pmid, doi, pmcid
    value: str
    tag: str


def fetch_day(config: LandingConfig) -> str:
    """The day whose cached answers are used (the configured ``fetch.day``, else UTC today)."""
    return config.fetch.day or today()


def _value(kind: str, content: str) -> str | None:
    if kind == "pmid":
        match = _PMID.fullmatch(content.strip())
        return match.group(1) if match and match.group(1) != "0" else None
    if kind == "pmcid":
        return normalise_pmcid(content)
    return clean_doi(content)


def landing_identifier(doc: HtmlElement) -> LandingId | str:
    """The identifier ``doc``'s meta tags declare (module doc), or why there is none."""
    contents: dict[str, list[str]] = {}
    for el in doc.iter("meta"):
        name = (el.get("name") or el.get("property") or "").strip().lower()
        content = " ".join((el.get("content") or "").split())
        if name and content:
            contents.setdefault(name, []).append(content)
    for tag, kind in _TAGS:
        values = list(dict.fromkeys(v for c in contents.get(tag, []) if (v := _value(kind, c))))
        if len(values) > 1:
            return f"ambiguous: {tag} gives {len(values)} different values ({', '.join(values)})"
        if values:
            return LandingId(kind, values[0], tag)
    return "without identifier meta (citation_pmid, citation_doi, prism.doi, dc.identifier, citation_pmcid)"


def read_landing(response: Response) -> LandingId | str:
    """The identifier of a fetched landing page, or why there is none (not HTML, no meta)."""
    media = response.content_type.split(";", 1)[0].strip().lower()
    if media and media not in _HTML_TYPES:
        return f"not HTML ({media})"
    doc = news.load_document(decode(response.body, response.charset))
    if doc is None:
        return "not HTML (no element in the reply)"
    return landing_identifier(doc)


class LandingPages:
    """Fills journal links' identifiers from their landing pages (module doc); close it after use.

    The fetcher opens on the first link that needs it; each URL is read once per instance.
    """

    def __init__(self, config: LandingConfig, cache_dir: Path | None) -> None:
        self.config, self.cache_dir = config, cache_dir
        self._fetcher: PoliteFetcher | None = None
        self._seen: dict[str, LandingId | str] = {}
        self._closed_requests = 0

    @property
    def requests(self) -> int:
        """Requests sent over the network (cache hits not counted), closed fetchers included."""
        return self._closed_requests + (self._fetcher.requests if self._fetcher is not None else 0)

    def close(self) -> None:
        if self._fetcher is not None:
            self._closed_requests += self._fetcher.requests
            self._fetcher.close()
            if self._fetcher.cache is not None:
                self._fetcher.cache.close()
            self._fetcher = None

    def fill(self, links: list[StudyLink]) -> list[StudyLink]:
        """``links`` with each journal link lacking an identifier looked up (others as they are)."""
        return [self._filled(link) for link in links]

    def _filled(self, link: StudyLink) -> StudyLink:
        if link.kind not in ("journal", "tracker") or link.id_kind is not None:
            return link
        if link.url not in self._seen:
            self._seen[link.url] = self._lookup(link.url)
        found = self._seen[link.url]
        if isinstance(found, LandingId):
            return StudyLink(
                link.url, link.kind, found.kind, found.value, f"{link.reason}; landing page {found.tag}"
            )
        return StudyLink(link.url, link.kind, None, None, f"{link.reason}; landing page {found}")

    def _lookup(self, url: str) -> LandingId | str:
        try:
            response = self._open().get(url)
        except FetchFailed as err:
            return f"not read ({err.reason}: {err.detail})"
        except ValueError as err:  # a malformed redirect target
            return f"not read (fetch_failed: {url}: {err})"
        return read_landing(response)

    def _open(self) -> PoliteFetcher:
        if self._fetcher is None:
            cache = ResponseCache(self.cache_dir / CACHE_FILE) if self.cache_dir is not None else None
            fetch = self.config.fetch.model_copy(update={"day": fetch_day(self.config)})
            self._fetcher = PoliteFetcher(fetch, cache)
        return self._fetcher
