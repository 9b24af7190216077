"""A local server speaking NCBI's E-utilities (``efetch``, ``esearch``) and the PMC ID converter,
serving records from real MEDLINE / PubMed XML files, for tests.

Protocols as documented: https://www.ncbi.nlm.nih.gov/books/NBK25499/ (parameters by GET query
or POST form; ``efetch db=pubmed retmode=xml`` answers a ``<PubmedArticleSet>`` holding the
PMIDs it has, in the order asked, and leaves out the others; ``esearch retmode=json`` answers
``{"header", "esearchresult": {"count", "retmax", "retstart", "idlist", ...}}``) and
https://pmc.ncbi.nlm.nih.gov/tools/id-converter-api/ (``ids`` up to 200, ``idtype``,
``format=json``; a record per id, with ``pmid`` as a number, or ``status: error`` and
``errmsg``; only articles in PMC, i.e. with a PMCID, are known).

- The files are read on their own here (not with the code under test): in order, a later
  record of a PMID replaces an earlier one, within a file the highest ``Version`` (then the
  last) wins, ``DeleteCitation`` removes PMIDs. ``esearch`` understands ``"<value>"[aid]`` /
  ``[lid]`` phrases joined by ``OR``: ``[aid]`` = ``PubmedData/ArticleIdList`` values, ``[lid]``
  = ``ELocationID`` values, matched whole and case-insensitively (as PubMed indexes them).
- ``api_key``: a wrong key gets 400 with a body that *echoes the presented key* (as NCBI's
  does), so tests can prove the client never passes a key on; the rate-limit 429 echoes it too.
- Fault injection: ``inject(fault, times, after=k, path=...)``: HTTP 400/429/500/502/503,
  ``"slow"`` (answer after ``slow_s``: a client timeout), ``"drop"`` (close unanswered).
  A 429 carries ``Retry-After: <retry_after>``.
- Every request is recorded (method, path, merged parameters, status, monotonic arrival time).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from lxml import etree

from tests.fakes.loopback import FaultQueue, LoopbackServer, QuietHandler, RecordingService, Reply

Fault = Literal[400, 429, 500, 502, 503, "slow", "drop"]

EUTILS_PATH = "/entrez/eutils/"
IDCONV_PATH = "/tools/idconv/api/v1/articles/"
_PHRASE = re.compile(r'^\s*"([^"]+)"\s*\[(\w+)\]\s*$')
_DOCTYPE = (
    '<?xml version="1.0" ?>\n<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2025//EN" '
    '"https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">\n'
)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    params: dict[str, list[str]]
    status: int | None  # None: dropped without an answer
    at: float  # time.monotonic() on arrival
    late: bool = False  # answered only after ``slow_s`` (recorded on arrival)

    def param(self, name: str) -> str | None:
        values = self.params.get(name)
        return values[-1] if values else None


@dataclass(frozen=True)
class _Article:
    pmid: str
    xml: bytes
    aid: tuple[str, ...]  # ArticleIdList values, lower-case
    lid: tuple[str, ...]  # ELocationID values, lower-case
    pmcid: str | None
    doi: str | None


def _load(files: Sequence[Path]) -> dict[str, _Article]:
    current: dict[str, _Article] = {}
    for path in files:
        data = path.read_bytes()
        root = etree.fromstring(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
        versions: dict[str, int] = {}
        for element in root:
            if element.tag == "DeleteCitation":
                for pmid in element.iterfind("PMID"):
                    current.pop(pmid.text.strip(), None)
                    versions.pop(pmid.text.strip(), None)
                continue
            if element.tag != "PubmedArticle":
                continue
            pmid_el = element.find("MedlineCitation/PMID")
            pmid, version = pmid_el.text.strip(), int(pmid_el.get("Version", "1"))
            if versions.get(pmid, 0) > version:
                continue
            versions[pmid] = version
            article_ids = [
                (i.get("IdType"), (i.text or "").strip())
                for i in element.iterfind("PubmedData/ArticleIdList/ArticleId")
            ]
            ids = {kind: value for kind, value in reversed(article_ids) if value}
            locations = [
                (e.text or "").strip() for e in element.iterfind("MedlineCitation/Article/ELocationID")
            ]
            current[pmid] = _Article(
                pmid=pmid,
                xml=etree.tostring(element),
                aid=tuple(value.lower() for _kind, value in article_ids if value),
                lid=tuple(value.lower() for value in locations if value),
                pmcid=ids.get("pmc"),
                doi=ids.get("doi"),
            )
    return current


class FakeEutils(RecordingService[RecordedRequest]):
    """The server's state and controls; ``base_url`` / ``idconv_url`` go into ``EutilsConfig``."""

    thread_name = "fake-eutils"

    def __init__(
        self,
        medline: Sequence[Path],
        api_key: str | None = None,
        *,
        slow_s: float = 2.0,
        retry_after: str = "1",
        limit_per_second: int | None = None,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.slow_s = slow_s
        self.retry_after = retry_after
        self.limit_per_second = limit_per_second
        self.articles = _load(medline)
        self._pmc = {a.pmcid.upper(): a for a in self.articles.values() if a.pmcid}
        self._pmc_doi = {a.doi.lower(): a for a in self.articles.values() if a.pmcid and a.doi}
        self.clear_faults()
        self._listen(_Server, _Handler)
        self.base_url = f"{self.url}{EUTILS_PATH}"
        self.idconv_url = f"{self.url}{IDCONV_PATH}"

    # -- controls for tests -----------------------------------------------------------

    def inject(self, fault: Fault, times: int = 1, *, after: int = 0, path: str | None = None) -> None:
        """The next ``times`` requests whose path ends with ``path`` (any if None), after ``after``
        served normally, answer with ``fault``. Faults queue in the order injected."""
        self._faults.add(fault, times, after, path)

    def clear_faults(self) -> None:
        """Drop every fault still queued (the outage is over)."""
        self._faults = FaultQueue[Fault](lambda path, wanted: path.endswith(wanted))

    # -- routing (handler threads) ------------------------------------------------------

    def _route(self, path: str, params: dict[str, list[str]], at: float) -> tuple[str, bytes]:
        key = params.get("api_key", [None])[-1]
        if key is not None and key != self.api_key:
            raise Reply(
                400, {"error": "API key invalid", "api-key": key, "type": "invalid", "status": "unknown"}
            )
        self._check_rate(key, at)
        if path == EUTILS_PATH + "efetch.fcgi":
            return "text/xml; charset=UTF-8", self._efetch(params)
        if path == EUTILS_PATH + "esearch.fcgi":
            return "application/json; charset=UTF-8", json.dumps(self._esearch(params)).encode()
        if path in (IDCONV_PATH, IDCONV_PATH.rstrip("/")):
            return "application/json", json.dumps(self._idconv(params)).encode()
        raise Reply(404, {"error": f"no such service: {path}"})

    def _check_rate(self, key: str | None, at: float) -> None:
        if self.limit_per_second is None:
            return
        recent = [r for r in self.requests if r.at > at - 1.0 and r.status is not None]
        if len(recent) >= self.limit_per_second:
            raise Reply(
                429,
                {"error": "API rate limit exceeded", "api-key": key, "count": str(len(recent) + 1)},
                {"Retry-After": self.retry_after},
            )

    def _efetch(self, params: dict[str, list[str]]) -> bytes:
        if _one(params, "db") != "pubmed" or _one(params, "retmode") != "xml":
            raise Reply(400, {"error": "this fake serves db=pubmed retmode=xml only"})
        ids = [i.strip() for i in (_one(params, "id") or "").split(",") if i.strip()]
        if not ids:
            return b"<eFetchResult><ERROR>Empty id list - nothing todo</ERROR></eFetchResult>"
        found = [self.articles[i].xml for i in dict.fromkeys(ids) if i in self.articles]
        return _DOCTYPE.encode() + b"<PubmedArticleSet>" + b"".join(found) + b"</PubmedArticleSet>"

    def _esearch(self, params: dict[str, list[str]]) -> dict[str, Any]:
        term = _one(params, "term") or ""
        retmax = int(_one(params, "retmax") or 20)
        hits: set[str] = set()
        missing = []
        for phrase in term.split(" OR "):
            match = _PHRASE.match(phrase)
            field = match.group(2).lower() if match else ""
            if not match or field not in ("aid", "lid"):
                missing.append(phrase.strip())
                continue
            value = match.group(1).strip().lower()
            found = {a.pmid for a in self.articles.values() if value in (a.aid if field == "aid" else a.lid)}
            if not found:
                missing.append(phrase.strip())
            hits |= found
        ordered = sorted(hits, key=int, reverse=True)
        result: dict[str, Any] = {
            "count": str(len(ordered)),
            "retmax": str(min(retmax, len(ordered))),
            "retstart": "0",
            "idlist": ordered[:retmax],
            "translationset": [],
            "querytranslation": term,
        }
        if missing:
            result["errorlist"] = {"phrasesnotfound": missing, "fieldsnotfound": []}
        return {"header": {"type": "esearch", "version": "0.3"}, "esearchresult": result}

    def _idconv(self, params: dict[str, list[str]]) -> dict[str, Any]:
        if _one(params, "format") != "json":
            raise Reply(400, {"status": "error", "message": "this fake answers format=json only"})
        ids = [i.strip() for i in (_one(params, "ids") or "").split(",") if i.strip()]
        if not ids or len(ids) > 200:
            raise Reply(400, {"status": "error", "message": "give 1 to 200 ids"})
        idtype = _one(params, "idtype")
        records = []
        for asked in ids:
            article = self._pmc_doi.get(asked.lower()) if idtype == "doi" else self._pmc.get(asked.upper())
            if article is None:
                records.append(
                    {"requested-id": asked, "status": "error", "errmsg": "Identifier not found in PMC"}
                )
            else:
                records.append(
                    {
                        "requested-id": asked,
                        "pmcid": article.pmcid,
                        "pmid": int(article.pmid),
                        "doi": article.doi,
                    }
                )
        request = f"ids={','.join(ids)};idtype={idtype};format=json"
        return {"status": "ok", "responseDate": "2025-01-01 00:00:00", "request": request, "records": records}


def _one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[-1] if values else None


class _Server(LoopbackServer):
    service = "fake E-utilities"
    fake: FakeEutils


class _Handler(QuietHandler):
    server: _Server

    def _handle(self) -> None:
        fake = self.server.fake
        at = time.monotonic()
        path, params = self.split_url()
        headers, raw = self.read_raw()
        if raw and headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            for name, values in urllib.parse.parse_qs(raw.decode("utf-8"), keep_blank_values=True).items():
                params.setdefault(name, []).extend(values)

        def record(status: int | None, late: bool = False) -> None:
            fake._record(RecordedRequest(self.command, path, params, status, at, late))

        fault = fake._faults.take(path)
        if fault == "drop":
            record(None)
            self.drop_connection()
            return
        if fault == "slow":
            record(200, late=True)
            fake.stopping.wait(fake.slow_s)
        try:
            if fault not in (None, "slow"):
                extra = {"Retry-After": fake.retry_after} if fault == 429 else {}
                key = params.get("api_key", [None])[-1]
                raise Reply(int(fault), {"error": f"injected fault {fault}", "api-key": key}, extra)
            content_type, body = fake._route(path, params, at)
        except Reply as reply:
            record(reply.status)
            self.send_json(reply.status, reply.payload, reply.headers)
            return
        if fault != "slow":
            record(200)
        with contextlib.suppress(OSError):  # a late answer finds the client gone
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


@pytest.fixture
def eutils_server(request: pytest.FixtureRequest) -> Iterator[FakeEutils]:
    """A running fake over the MEDLINE files of ``request.param`` (default: every demo file)."""
    files = getattr(request, "param", None) or sorted(
        (Path(__file__).resolve().parents[2] / "data" / "crossgenre" / "medline").rglob("*.xml.gz")
    )
    with FakeEutils(files) as server:
        yield server
