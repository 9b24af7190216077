"""The PubMed port on NCBI's services, with every answer cached (a rerun sends nothing).

- Records: ``efetch.fcgi`` with ``db=pubmed&retmode=xml`` and up to ``batch_size`` PMIDs per
  request (https://www.ncbi.nlm.nih.gov/books/NBK25499/#chapter4.EFetch), read with the same
  reader as local files (:mod:`tasks.common.pubmed.medline`). A PMID PubMed does not have is
  absent from the reply, so it is absent from :meth:`EutilsPubmed.records` (and cached so).
- DOI / PMCID → PMID: the PMC ID converter (``ids``, ``idtype``, ``format=json``; up to 200 ids;
  https://pmc.ncbi.nlm.nih.gov/tools/id-converter-api/). It only knows articles in PMC, so a DOI
  it does not map, and every PII, is searched with ``esearch.fcgi``: ``"<id>"[aid] OR
  "<id>"[lid]`` (PubMed's Article Identifier and Location ID fields hold DOIs and PIIs; there
  is no PII field), ORed over up to 50 identifiers per request. The hits are fetched and kept
  only when the record carries that DOI or PII: PubMed's search is not an exact lookup.
  An Elsevier PII given without punctuation is also searched in its written form.
  Ties follow :mod:`tasks.common.pubmed.local` (lowest PMID for a DOI, none for a shared PII).
- Transport, rate limit, retries and key handling: :mod:`tasks.common.pubmed.ncbi`.
- Workers (processes, threads) sharing one reply cache file send each missing request once:
  the keys go through the cache's claims (:meth:`irforge.sqlite_cache.SqliteCache.fill`); a
  key another worker is asking is waited for, one whose request failed is asked again.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tasks.common.pubmed.cache import Answers, MemoryAnswers, ReplyCache
from tasks.common.pubmed.local import lowest_pmid, pii_forms, pii_keys
from tasks.common.pubmed.medline import Citation, Unreadable, read_medline_bytes
from tasks.common.pubmed.ncbi import NcbiHttp, shared_limiter
from tasks.common.pubmed.port import ArticleId, PubmedError, PubmedRecord
from tasks.common.text.identifiers import normalise_doi, normalise_pmcid
from tasks.common.urls import public_url

if TYPE_CHECKING:
    from tasks.common.pubmed.config import EutilsConfig

T = TypeVar("T")

IDCONV_MAX = 200
SEARCH_BATCH = 50
SEARCH_MAX_HITS = 1000


class EutilsPubmed:
    """:class:`~tasks.common.pubmed.port.PubmedSource` on E-utilities (module docstring)."""

    def __init__(
        self,
        config: EutilsConfig,
        cache_path: Path | None,
        *,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        key = os.environ.get(config.api_key_env, "").strip() or None
        self.requests_per_second = config.requests_per_second or (10.0 if key else 3.0)
        self._base = config.base_url.rstrip("/") + "/"
        self._idconv = config.idconv_url
        self._batch = max(1, config.batch_size)
        self._shown_base = public_url(self._base) + "/"
        extra = {} if sleep is None else {"sleep": sleep}
        self._http = NcbiHttp(
            api_key=key,
            tool=config.tool,
            email=config.email,
            limiter=shared_limiter(self._base, self.requests_per_second),
            timeout_s=config.timeout_s,
            max_attempts=config.max_attempts,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            **extra,
        )
        self._answers: Answers = MemoryAnswers() if cache_path is None else ReplyCache(cache_path)

    @property
    def sent(self) -> int:
        """Requests this source sent (each attempt counts)."""
        return self._http.sent

    def close(self) -> None:
        self._http.close()
        self._answers.close()

    # -- records ------------------------------------------------------------------

    def records(self, pmids: Sequence[str]) -> dict[str, PubmedRecord]:
        wanted = list(dict.fromkeys(p.strip() for p in pmids if p.strip().isdigit()))
        keys = {p: self._fetch_key(p) for p in wanted}
        known = self._answered({keys[p]: p for p in wanted}, self._batch, lambda b: self._fetch(b, keys))
        out = {}
        for pmid in wanted:
            xml = known.get(keys[pmid])
            if xml is not None:
                out[pmid] = _record_of_xml(xml, pmid)
        return out

    def _answered(
        self, items: dict[str, T], size: int, ask: Callable[[list[T]], dict[str, str | None]]
    ) -> dict[str, str | None]:
        """Answers by key of ``items`` (key -> what to ask): the stored ones, then the missing ones
        asked by ``ask`` (which stores its answers) in batches of ``size``, each asked once across
        the workers sharing the cache (the others' answers are waited for)."""
        known = self._answers.get_many(list(items))
        missing = [key for key in items if key not in known]

        def send(claimed: list[str]) -> None:
            for batch in _batches([items[key] for key in claimed], size):
                known.update(ask(batch))

        if missing:
            known.update(self._answers.fill(missing, send))
        return known

    def _fetch_key(self, pmid: str) -> str:
        return f"{self._shown_base}efetch.fcgi?db=pubmed&id={pmid}&retmode=xml"

    def _fetch(self, batch: list[str], keys: dict[str, str]) -> dict[str, str | None]:
        url = self._base + "efetch.fcgi"
        body = self._http.post(url, {"db": "pubmed", "id": ",".join(batch), "retmode": "xml"})
        found: dict[str, tuple[int, str]] = {}
        for item in read_medline_bytes(body.encode("utf-8"), keep_xml=True):
            if isinstance(item, Unreadable) and item.reason == "damaged_file":
                raise PubmedError(f"{public_url(url)} answered XML that cannot be read ({item.detail})")
            if isinstance(item, Citation) and item.xml is not None:
                pmid = item.record.pmid
                if pmid not in found or found[pmid][0] <= item.version:
                    found[pmid] = (item.version, item.xml)
        answers = {keys[p]: (found[p][1] if p in found else None) for p in batch}
        self._answers.put_many(answers)
        return answers

    # -- identifiers ----------------------------------------------------------------

    def pmids_for(self, ids: Sequence[ArticleId]) -> dict[ArticleId, str | None]:
        out: dict[ArticleId, str | None] = {}
        pmids = [i for i in ids if i.kind == "pmid"]
        present = self.records([i.value.strip() for i in pmids])
        out.update({i: (i.value.strip() if i.value.strip() in present else None) for i in pmids})
        by_pmc = self._convert([i for i in ids if i.kind in ("doi", "pmcid")])
        out.update(by_pmc)
        searched = [i for i in ids if i.kind == "pii" or (i.kind == "doi" and by_pmc.get(i) is None)]
        out.update(self._search(searched))
        return {i: out.get(i) for i in ids}

    def _convert(self, ids: list[ArticleId]) -> dict[ArticleId, str | None]:
        """PMIDs from the PMC ID converter (cached per identifier)."""
        out: dict[ArticleId, str | None] = {}
        for kind in ("doi", "pmcid"):
            values: dict[str, list[ArticleId]] = {}
            for article_id in ids:
                value = _normalised(article_id)
                if article_id.kind == kind and value and "," not in value:
                    values.setdefault(value, []).append(article_id)
                elif article_id.kind == kind:
                    out[article_id] = None
            keys = {v: f"{public_url(self._idconv)}?format=json&idtype={kind}&ids={v}" for v in values}
            known = self._answered(
                {keys[v]: v for v in values},
                min(self._batch, IDCONV_MAX),
                functools.partial(self._idconv_batch, kind, keys=keys),
            )
            for value, article_ids in values.items():
                out.update(dict.fromkeys(article_ids, known.get(keys[value])))
        return out

    def _idconv_batch(self, kind: str, batch: list[str], keys: dict[str, str]) -> dict[str, str | None]:
        params = {"ids": ",".join(batch), "idtype": kind, "format": "json", "versions": "no"}
        body = self._http.get(self._idconv, params)
        records = _json(body, self._idconv).get("records")
        if not isinstance(records, list):
            raise PubmedError(f"{public_url(self._idconv)} answered without a 'records' list")
        by_value = {v.lower(): v for v in batch}
        answers: dict[str, str | None] = {keys[v]: None for v in batch}
        for record in records:
            asked = by_value.get(str(record.get("requested-id", "")).strip().lower())
            pmid = str(record.get("pmid") or "").strip()
            if asked is not None and pmid.isdigit():
                answers[keys[asked]] = pmid
        self._answers.put_many(answers)
        return answers

    def _search(self, ids: list[ArticleId]) -> dict[ArticleId, str | None]:
        """PMIDs of DOIs / PIIs found by ``esearch`` and checked on the records (cached per identifier)."""
        out: dict[ArticleId, str | None] = {}
        keys: dict[ArticleId, str] = {}
        for article_id in ids:
            terms = _terms(article_id)
            if terms:
                keys[article_id] = f"{self._shown_base}esearch.fcgi?db=pubmed&term={' OR '.join(terms)}"
            else:
                out[article_id] = None
        asked: dict[str, ArticleId] = {}
        for article_id, key in keys.items():
            asked.setdefault(key, article_id)  # one search per key: ids differing in case share it
        known = self._answered(asked, SEARCH_BATCH, lambda b: self._search_batch(b, keys))
        out.update({i: known.get(k) for i, k in keys.items()})
        return out

    def _search_batch(self, batch: list[ArticleId], keys: dict[ArticleId, str]) -> dict[str, str | None]:
        url = self._base + "esearch.fcgi"
        term = " OR ".join(t for article_id in batch for t in _terms(article_id))
        search_key = f"esearch.fcgi?db=pubmed&term={term}"
        stored = self._answers.get_many([search_key]).get(search_key)
        if stored is None:
            params = {"db": "pubmed", "term": term, "retmode": "json", "retmax": str(SEARCH_MAX_HITS)}
            result = _json(self._http.post(url, params), url).get("esearchresult")
            if not isinstance(result, dict) or "ERROR" in result:
                problem = result.get("ERROR") if isinstance(result, dict) else "no esearchresult"
                raise PubmedError(f"{public_url(url)} could not search {len(batch)} identifiers: {problem}")
            stored = " ".join(str(i) for i in result.get("idlist", []) if str(i).isdigit())
            # the hit list is kept before the records are fetched: a failed fetch never re-sends the search
            self._answers.put_many({search_key: stored})
        hits = stored.split()
        records = self.records(hits)
        answers = {keys[i]: _match(i, records.values()) for i in batch}
        self._answers.put_many(answers)
        return answers


def _normalised(article_id: ArticleId) -> str | None:
    if article_id.kind == "doi":
        return normalise_doi(article_id.value) or None
    if article_id.kind == "pmcid":
        return normalise_pmcid(article_id.value)
    return article_id.value.strip() or None


def _terms(article_id: ArticleId) -> list[str]:
    """The esearch terms of a DOI or PII (none for a value a quoted phrase cannot hold)."""
    forms = (
        [normalise_doi(article_id.value)] if article_id.kind == "doi" else list(pii_forms(article_id.value))
    )
    forms = [f for f in forms if f and '"' not in f]
    return [f'"{form}"[{field}]' for form in forms for field in ("aid", "lid")]


def _match(article_id: ArticleId, records: Iterable[PubmedRecord]) -> str | None:
    """The PMID of the found record that carries ``article_id`` (same rules as the local adapter)."""
    if article_id.kind == "doi":
        doi = normalise_doi(article_id.value)
        return lowest_pmid(r.pmid for r in records if r.doi and normalise_doi(r.doi) == doi)
    wanted = set(pii_keys(article_id.value))
    shared = {r.pmid for r in records if wanted & {k for p in r.pii for k in pii_keys(p)}}
    return next(iter(shared)) if len(shared) == 1 else None


def _record_of_xml(xml: str, pmid: str) -> PubmedRecord:
    document = f"<PubmedArticleSet>{xml}</PubmedArticleSet>".encode()
    for item in read_medline_bytes(document):
        if isinstance(item, Citation):
            return item.record
    raise PubmedError(
        f"the PubMed reply cache holds an unreadable record for PMID {pmid}: delete the cache file"
    )


def _json(body: str, url: str) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except ValueError:
        raise PubmedError(f"{public_url(url)} answered something that is not JSON") from None
    if not isinstance(payload, dict):
        raise PubmedError(f"{public_url(url)} answered JSON that is not an object")
    return payload


def _batches(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
