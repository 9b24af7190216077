"""Stage ``ingest``: news pages in, from saved files, JSONL/WARC files and RSS/Atom feeds.

Paper 003 §2 collected health-news articles from the RSS feeds of news sites over 18 months.
Inputs (``tasks/crossgenre/pages.py``): ``pages`` — folders of saved ``.html`` /
``.htm`` files, plain or gzipped (searched recursively; a folder gives nothing else), and ``.jsonl`` files of
``{url, html, fetched_at?}`` and ``.warc`` / ``.warc.gz`` files named or globbed, relative
to the config file — and ``feeds``, RSS/Atom URLs
whose entries are fetched politely (``tasks/crossgenre/fetch.py``: per-host pace,
robots.txt, retries, a response cache in ``<cache_dir>/news_http.sqlite``; a rerun on the
same fetch day sends nothing).

Kept, one row per page: ``page_id`` (first 16 hex digits of the sha256 of ``url``), ``url``,
``site`` (the URL's host, lower-case), ``fetched_at`` (ISO 8601 UTC), ``sha256`` (of the
page's bytes), ``html`` (the decoded text), ``source`` (file path relative to the config,
or the feed URL) and ``item`` (the accounting unit: ``path``, ``path:LINE``,
``path@OFFSET`` or ``FEED#INDEX``; the stage's key, because two items may hold one page).

A saved page's URL is the one it states (:func:`tasks.crossgenre.news.stated_url`), else
``file:`` + its path, its site then being the host of its own navigation. Decoding: the
HTTP charset, else the BOM / XML declaration / ``<meta charset>``
(``tasks/common/text/sniff.py``), else UTF-8 with replacement characters; whether the text
is HTML at all is ``extract``'s question (``not_html``).

Excluded: ``unreadable`` (a file that cannot be read, a bad JSONL line or WARC record, a
feed that does not parse), ``empty_file`` (a JSONL or WARC file without a page; a saved page of no bytes, or only a byte-order mark and white space), ``fetch_failed`` (HTTP error, timeout, too large, a malformed
URL; the detail names the URL), ``robots_disallowed``, ``blocked_address`` (an internal
address, redirects included: :mod:`tasks.common.address_guard`), ``duplicate_page`` (same sha256 or same URL as a page
kept before it in input order — paths sorted, then feeds in config order; the detail
names that page).
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
from typing import Any

import pyarrow as pa
from pydantic import Field, model_validator

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.parallel import CPU, Resources
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.text.discovery import discover
from tasks.common.text.document import InputRejected
from tasks.common.text.sniff import sniff
from tasks.crossgenre import news
from tasks.crossgenre.fetch import FetchConfig, PoliteFetcher, ResponseCache, today
from tasks.crossgenre.pages import (
    HTML_SUFFIXES,
    JSONL_SUFFIXES,
    WARC_SUFFIXES,
    ItemRefused,
    RawPage,
    list_items,
    load_item,
)

CACHE_FILE = "news_http.sqlite"


class IngestConfig(StrictModel):
    pages: list[str] = Field(
        [],
        description="Folders of saved .html/.htm(.gz) pages, .jsonl and .warc(.gz) files, relative to the config.",
    )
    feeds: list[str] = Field([], description="RSS/Atom feed URLs; their entries' links are fetched.")
    fetch: FetchConfig = FetchConfig()
    max_page_bytes: int = Field(
        20_000_000, ge=1, description="Larger saved pages are excluded as unreadable."
    )

    @model_validator(mode="after")
    def _some_input(self) -> IngestConfig:
        if not self.pages and not self.feeds:
            raise ValueError("give pages (folders, .jsonl or .warc files) or feeds (RSS/Atom URLs)")
        return self


_S = pa.string()
SCHEMA = pa.schema(
    [
        pa.field("page_id", _S, nullable=False),
        pa.field("url", _S, nullable=False),
        pa.field("site", _S, nullable=False),
        pa.field("fetched_at", _S, nullable=False),
        pa.field("sha256", _S, nullable=False),
        pa.field("html", pa.large_string(), nullable=False),
        pa.field("source", _S, nullable=False),
        pa.field("item", _S, nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("page_id", _S),
    pa.field("url", _S),
    pa.field("source", _S, nullable=False),
    pa.field("item", _S, nullable=False),
)


def page_id(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


def inputs(ctx: StageContext[IngestConfig]) -> dict[str, Any]:
    config = ctx.config
    files: dict[str, str] = {}
    # A folder gives its saved pages; a JSONL or WARC file is taken when named (or globbed).
    for index, entry in enumerate(config.pages):
        folder = (ctx.base_dir / entry).is_dir()
        suffixes = HTML_SUFFIXES if folder else HTML_SUFFIXES + JSONL_SUFFIXES + WARC_SUFFIXES
        try:
            files.update(discover((entry,), suffixes, ctx.base_dir, "stages.ingest.pages"))
        except ConfigError as err:  # it names the entry as [0]: the only one it was given
            raise ConfigError(str(err).replace("pages[0]", f"pages[{index}]", 1)) from None
    # A feed says something new every day: the fetch day makes yesterday's artifact stale.
    day = (config.fetch.day or today()) if config.feeds else None
    return {"files": dict(sorted(files.items())), "fetch_day": day}


def _fetcher(ctx: StageContext[IngestConfig]) -> PoliteFetcher | None:
    if not ctx.config.feeds:
        return None
    cache = ResponseCache(ctx.cache_dir / CACHE_FILE) if ctx.cache_dir is not None else None
    fetch = ctx.config.fetch
    day = fetch.day or today()
    return PoliteFetcher(fetch.model_copy(update={"day": day}), cache)


def _close(fetcher: PoliteFetcher | None) -> None:
    if fetcher is not None:
        fetcher.close()
        if fetcher.cache is not None:
            fetcher.cache.close()


def source(ctx: StageContext[IngestConfig], material: dict[str, Any]) -> TableSource:
    fetcher = _fetcher(ctx)
    try:
        return TableSource(list_items(material["files"], list(ctx.config.feeds), ctx.base_dir, fetcher))
    finally:
        _close(fetcher)


def decode(data: bytes, charset: str | None) -> str:
    """The page's text (module doc: HTTP charset, then what the bytes declare, then UTF-8)."""
    if charset:
        with contextlib.suppress(LookupError, UnicodeDecodeError):
            codec = codecs.lookup(charset).name
            # WHATWG Encoding: browsers read latin-1 and ASCII labels as windows-1252.
            return data.decode("cp1252" if codec in ("iso8859-1", "ascii") else codec).lstrip("\ufeff")
    try:
        return data.decode(sniff("page.html", data).encoding).lstrip("\ufeff")
    except (InputRejected, UnicodeDecodeError, LookupError):
        return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def page_row(raw: RawPage, row: dict[str, Any]) -> dict[str, Any]:
    html = decode(raw.data, raw.charset)
    url, site = raw.url, news.host_of(raw.url) if raw.url else ""
    if url is None:
        doc = news.load_document(html)
        url = news.stated_url(doc, html) if doc is not None else None
        if url is None:
            url = f"file:{row['source']}"
            site = (news.own_host(doc) if doc is not None else None) or ""
        else:
            site = news.host_of(url)
    return {
        "page_id": page_id(url),
        "url": url,
        "site": site,
        "fetched_at": raw.fetched_at,
        "sha256": hashlib.sha256(raw.data).hexdigest(),
        "html": html,
        "source": row["source"],
        "item": row["item"],
    }


def process(chunk: pa.Table, ctx: StageContext[IngestConfig]) -> ChunkResult:
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    rows = chunk.to_pylist()
    fetcher = _fetcher(ctx) if any(r["kind"] == "feed" for r in rows) else None
    try:
        for row in rows:
            try:
                raw = load_item(row, ctx.base_dir, ctx.config.max_page_bytes, fetcher)
            except ItemRefused as err:
                url = err.url or row["url"] or (row["source"] if "://" in row["source"] else None)
                excluded.append(_excluded(err.reason, err.detail, row, url, page_id(url) if url else None))
                continue
            kept.append(page_row(raw, row))
    finally:
        _close(fetcher)
    requests = float(fetcher.requests) if fetcher is not None else 0.0
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        cost={"http_requests": requests},
    )


def finalize(kept: pa.Table, _ctx: StageContext[IngestConfig]) -> ChunkResult:
    """One row per page: a later item with the bytes or the URL of a kept one is ``duplicate_page``."""
    by_sha: dict[str, str] = {}
    by_url: dict[str, str] = {}
    keep: list[dict[str, Any]] = []
    drop: list[dict[str, Any]] = []
    for row in kept.to_pylist():
        first = by_sha.get(row["sha256"]) or by_url.get(row["url"])
        if first is not None:
            same = "bytes" if row["sha256"] in by_sha else "URL"
            detail = f"same {same} as page {first}"
            drop.append(_excluded("duplicate_page", detail, row, row["url"], row["page_id"]))
            continue
        label = f"{row['page_id']} ({row['item']})"
        by_sha[row["sha256"]], by_url[row["url"]] = label, label
        keep.append(row)
    return ChunkResult(rows_to_table(keep, SCHEMA), rows_to_table(drop, EXCLUDED_SCHEMA))


def resources(config: IngestConfig) -> Resources:
    """Feed entries are fetched at a per-host pace kept per process (tasks/crossgenre/fetch.py):
    a pool of workers would each keep it, so with feeds the chunks stay in one process."""
    return Resources(parallel=False) if config.feeds else CPU


def _excluded(
    reason: str, detail: str, row: dict[str, Any], url: str | None, pid: str | None
) -> dict[str, Any]:
    return {
        "reason": reason,
        "detail": detail,
        "page_id": pid,
        "url": url,
        "source": row["source"],
        "item": row["item"],
    }


SPEC: StageSpec[IngestConfig] = StageSpec(
    name="ingest",
    version=4,  # 2: gzipped saved pages (issue 27); 3: empty_file, blocked_address; 4: blank saved pages (issue 30)
    config_type=IngestConfig,
    upstream=(),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("item",),
    inputs=inputs,
    source=source,
    process=process,
    finalize=finalize,
    resources=resources,
    description="News pages from saved files, JSONL/WARC files and RSS/Atom feeds (polite, cached).",
)
