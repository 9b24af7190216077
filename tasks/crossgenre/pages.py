"""Where news pages come from: saved files, JSONL and WARC files, RSS/Atom feeds.

Used by ``tasks/crossgenre/stages/ingest.py``. :func:`list_items` turns the configured
inputs into *items* (one accounting unit each, in a fixed order) without reading pages;
:func:`load_item` reads one item's page. Every item ends as a page or as a refusal with a
reason (:class:`ItemRefused`), never silently:

- a ``.html`` / ``.htm`` file, or one gzipped (``.html.gz`` / ``.htm.gz``, as crawls and
  extraction benchmarks ship pages): one item (its path); a page file whose bytes are gzip
  is read decompressed whatever its name;
- a ``.jsonl`` file: one item per non-blank line ``{"url", "html", "fetched_at"?}``
  (``path:LINE``);
- a ``.warc`` / ``.warc.gz`` file (read with warcio, https://github.com/webrecorder/warcio):
  one item per ``response`` or ``resource`` record (``path@OFFSET``); ``request``,
  ``warcinfo``, ``metadata`` and ``revisit`` records hold no page;
- a feed URL (parsed with feedparser, https://feedparser.readthedocs.io): one item per entry
  (``FEED#INDEX``), its ``link`` fetched by :class:`tasks.crossgenre.fetch.PoliteFetcher`; a
  feed that cannot be fetched or parsed is one refused item (the feed URL).

``fetched_at`` is the HTTP fetch time, the WARC-Date, the JSONL field, else the file's
modification time (a saved page says nothing about when it was saved).
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import io
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import feedparser  # type: ignore[import-untyped]
import pyarrow as pa
from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]
from warcio.bufferedreaders import ChunkedDataException  # type: ignore[import-untyped]
from warcio.exceptions import ArchiveLoadFailed  # type: ignore[import-untyped]
from warcio.statusandheaders import StatusAndHeadersParserException  # type: ignore[import-untyped]

from irforge.fingerprint import digest_file
from tasks.common.text.discovery import read_input, refusal
from tasks.common.text.document import InputRejected
from tasks.common.text.sniff import blank
from tasks.crossgenre.fetch import FetchFailed, PoliteFetcher, charset_of

# What a damaged WARC or gzip member raises while it is read.
_DAMAGED = (
    ArchiveLoadFailed,
    ChunkedDataException,
    StatusAndHeadersParserException,
    EOFError,
    zlib.error,
    ValueError,
)
HTML_SUFFIXES = (".html", ".htm", ".html.gz", ".htm.gz")
_GZIP_MAGIC = b"\x1f\x8b"
JSONL_SUFFIXES = (".jsonl",)
WARC_SUFFIXES = (".warc", ".warc.gz")
PAGE_RECORDS = ("response", "resource")
_TRAILER_BYTES = 64  # blank lines after an archive's last record are no damage
_BLANK_CHECK_BYTES = 65_536  # a container this small is read whole to tell a blank one

ITEM_SCHEMA = pa.schema(
    [
        pa.field("item", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # file | jsonl | warc | feed | refused
        pa.field("source", pa.string(), nullable=False),  # config-relative path, or the feed URL
        pa.field("digest", pa.string()),  # of a file, as discovered
        pa.field("offset", pa.int64()),  # of a JSONL line or a WARC record
        pa.field("url", pa.string()),  # of a feed entry
        pa.field("reason", pa.string()),  # of a refused item
        pa.field("detail", pa.string()),
    ]
)


class ItemRefused(InputRejected):
    """An item that gives no page; ``url`` when the item named one."""

    def __init__(self, reason: str, detail: str, url: str | None = None) -> None:
        super().__init__(reason, detail)
        self.url = url


@dataclass(frozen=True)
class RawPage:
    url: str | None  # None: a saved file, whose page states its URL (or not)
    data: bytes
    charset: str | None  # from the HTTP Content-Type, when there was one
    fetched_at: str


def list_items(
    files: dict[str, str], feeds: list[str], base_dir: Path, fetcher: PoliteFetcher | None
) -> pa.Table:
    """The items of discovered ``files`` (path → digest or refusal) and of ``feeds``, in order."""
    rows: list[dict[str, Any]] = []
    for path, digest in files.items():
        refused = refusal(digest)
        if refused is not None:
            rows.append(_refused(path, path, "unreadable", f"{refused[0]}: {refused[1]}"))
        elif path.lower().endswith(JSONL_SUFFIXES + WARC_SUFFIXES):
            rows.extend(_container_items(path, digest, base_dir))
        else:
            rows.append({"item": path, "kind": "file", "source": path, "digest": digest})
    for feed in dict.fromkeys(feeds):  # a feed named twice is read once
        rows.extend(_feed_items(feed, fetcher))
    return pa.Table.from_pylist([{n: r.get(n) for n in ITEM_SCHEMA.names} for r in rows], schema=ITEM_SCHEMA)


def _refused(item: str, source: str, reason: str, detail: str) -> dict[str, Any]:
    return {"item": item, "kind": "refused", "source": source, "reason": reason, "detail": detail}


def _container_items(path: str, digest: str, base_dir: Path) -> list[dict[str, Any]]:
    """A JSONL or WARC file's items; a file with none is one ``empty_file`` refusal (no silent drop)."""
    full = base_dir / path
    with contextlib.suppress(OSError):  # what cannot be read is told by _items_of
        if full.stat().st_size <= _BLANK_CHECK_BYTES and blank(full.read_bytes()):
            return [_refused(path, path, "empty_file", f"{path}: no content")]
    items = _items_of(path, digest, base_dir)
    return items or [_refused(path, path, "empty_file", f"{path}: no page in it")]


def _items_of(path: str, digest: str, base_dir: Path) -> list[dict[str, Any]]:
    full = base_dir / path
    try:
        if digest_file(full) != digest:
            return [_refused(path, path, "unreadable", "changed since the run was planned: run it again")]
        if path.lower().endswith(JSONL_SUFFIXES):
            return [
                {
                    "item": f"{path}:{line}",
                    "kind": "jsonl",
                    "source": path,
                    "digest": digest,
                    "offset": offset,
                }
                for line, offset in _jsonl_lines(full)
            ]
        return [
            {"item": f"{path}@{offset}", "kind": "warc", "source": path, "digest": digest, "offset": offset}
            if problem is None
            else _refused(f"{path}@{offset}", path, "unreadable", f"{path}@{offset}: {problem}")
            for offset, problem in _warc_records(full)
        ]
    except OSError as err:
        return [_refused(path, path, "unreadable", f"{path}: {err.strerror or err}")]
    except _DAMAGED as err:
        return [_refused(path, path, "unreadable", f"{path}: not a readable WARC file: {_one_line(err)}")]
    except Exception as err:  # warcio's unforeseen error on a damaged archive: that file is excluded
        return [
            _refused(
                path, path, "unreadable", f"{path}: damaged file ({type(err).__name__}: {_one_line(err)})"
            )
        ]


def _one_line(err: BaseException) -> str:
    """An error's message on one line (warcio's span several), at most 300 characters."""
    return " ".join(str(err).split())[:300]


def _jsonl_lines(path: Path) -> Iterator[tuple[int, int]]:
    """(line number, byte offset) of each non-blank line."""
    offset = 0
    with path.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not blank(line):  # a line of white space, or a byte-order mark alone, is no record
                yield number, offset
            offset += len(line)


def _warc_records(path: Path) -> Iterator[tuple[int, str | None]]:
    """(offset, None) of each page record, (offset, problem) where the archive is damaged.

    warcio stops without an error at a truncated gzip member and reads a truncated record
    short, so both are checked here: a record with bytes still owed, and bytes after the
    last complete record that are more than the blank lines ending it.
    """
    end = 0
    with path.open("rb") as fh:
        records = ArchiveIterator(fh)
        for record in records:
            kind = record.rec_type
            record.raw_stream.read()  # the offset below is known once the record is consumed
            offset = int(records.get_record_offset())
            owed = int(getattr(record.raw_stream, "limit", 0) or 0)
            if owed:
                yield offset, f"record truncated: {owed} byte(s) of its content missing"
                return
            if kind in PAGE_RECORDS:
                yield offset, None
            end = offset + int(records.get_record_length())
        size = path.stat().st_size
        fh.seek(end)
        if size - end > _TRAILER_BYTES or fh.read(_TRAILER_BYTES).strip():
            yield (
                end,
                f"{size - end} byte(s) after the last complete record are no WARC record (truncated or damaged)",
            )


def _feed_items(feed: str, fetcher: PoliteFetcher | None) -> list[dict[str, Any]]:
    if fetcher is None:
        return [_refused(feed, feed, "fetch_failed", "no fetcher")]
    try:
        response = fetcher.get(feed)
    except FetchFailed as err:
        return [_refused(feed, feed, err.reason, err.detail)]
    parsed = feedparser.parse(response.body, response_headers={"content-type": response.content_type})
    entries = list(parsed.entries)
    if not entries and parsed.bozo:
        problem = getattr(parsed, "bozo_exception", None) or "no entries"
        return [_refused(feed, feed, "unreadable", f"{feed}: not an RSS/Atom feed: {problem}")]
    limit = fetcher.config.max_items_per_feed
    rows = []
    for index, entry in enumerate(entries[:limit] if limit else entries):
        link = (entry.get("link") or "").strip()
        item = f"{feed}#{index}"
        if link:
            rows.append({"item": item, "kind": "feed", "source": feed, "url": link})
        else:
            rows.append(_refused(item, feed, "unreadable", f"{feed}: entry {index} has no link"))
    return rows


def load_item(row: dict[str, Any], base_dir: Path, max_bytes: int, fetcher: PoliteFetcher | None) -> RawPage:
    """The page of one item (module doc), or :class:`ItemRefused`."""
    kind = row["kind"]
    if kind == "refused":
        raise ItemRefused(row["reason"], row["detail"])
    if kind == "feed":
        if fetcher is None:
            raise ItemRefused("fetch_failed", f"{row['url']}: no fetcher")
        try:
            response = fetcher.get(row["url"])
        except FetchFailed as err:
            raise ItemRefused(err.reason, err.detail, row["url"]) from None
        return RawPage(response.url, response.body, response.charset, response.fetched_at)
    path = base_dir / row["source"]
    try:
        if kind == "file":
            page = gunzipped(read_input(path, row["digest"], max_bytes), row["source"], max_bytes)
            if blank(page):
                raise ItemRefused("empty_file", f"{row['source']}: {len(page)} bytes, no content")
            return RawPage(None, page, None, _mtime(path))
        if kind == "jsonl":
            return _jsonl_page(path, row["source"], row["item"], row["offset"])
        return _warc_page(path, row["item"], row["offset"])
    except ItemRefused:
        raise
    except InputRejected as err:  # what read_input refuses
        raise ItemRefused("unreadable", f"{row['source']}: {err.reason}: {err.detail}") from None
    except OSError as err:
        raise ItemRefused("unreadable", f"{row['item']}: {err.strerror or err}") from None
    except _DAMAGED as err:
        raise ItemRefused("unreadable", f"{row['item']}: damaged record: {_one_line(err)}") from None
    except Exception as err:  # a reader's unforeseen error on a damaged item: that item is excluded
        raise ItemRefused(
            "unreadable", f"{row['item']}: damaged ({type(err).__name__}: {_one_line(err)})"
        ) from None


def gunzipped(data: bytes, source: str, max_bytes: int) -> bytes:
    """A saved page's bytes, decompressed when they are gzip (the name may say so or not)."""
    if not data.startswith(_GZIP_MAGIC):
        return data
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as member:
            page = member.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error) as err:
        raise ItemRefused("unreadable", f"{source}: gzip-compressed but damaged: {err}") from None
    if len(page) > max_bytes:
        raise ItemRefused("unreadable", f"{source}: gzip-compressed page over max_page_bytes {max_bytes}")
    return page


def _mtime(path: Path) -> str:
    return _utc(datetime.fromtimestamp(path.stat().st_mtime, UTC))


def _utc(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_utc(value: str) -> str | None:
    """An ISO 8601 time as UTC ``YYYY-MM-DDTHH:MM:SSZ`` (a time without zone is UTC); None if not one."""
    try:
        return _utc(datetime.fromisoformat(value.strip()))
    except ValueError:
        return None


def _jsonl_page(path: Path, source: str, item: str, offset: int) -> RawPage:
    with path.open("rb") as fh:
        fh.seek(offset)
        line = fh.readline()
    if offset == 0:
        line = line.removeprefix(codecs.BOM_UTF8)  # an export's byte-order mark is no JSON
    try:
        record = json.loads(line)
    except ValueError as err:
        raise ItemRefused("unreadable", f"{item}: not a JSON object: {err}") from None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("url"), str)
        or not isinstance(record.get("html"), str)
    ):
        raise ItemRefused("unreadable", f"{item}: needs string fields 'url' and 'html'")
    fetched = record.get("fetched_at")
    fetched_at = _mtime(path) if fetched is None else iso_utc(fetched) if isinstance(fetched, str) else None
    if fetched_at is None:
        raise ItemRefused("unreadable", f"{item}: fetched_at {fetched!r} is not an ISO 8601 time")
    return RawPage(
        record["url"].strip(), record["html"].encode("utf-8", "surrogatepass"), "utf-8", fetched_at
    )


def _warc_page(path: Path, item: str, offset: int) -> RawPage:
    with path.open("rb") as fh:
        fh.seek(offset)
        record = next(iter(ArchiveIterator(fh)), None)
        if record is None:
            raise ItemRefused("unreadable", f"{item}: no WARC record at this offset")
        url = record.rec_headers.get_header("WARC-Target-URI") or ""
        date = iso_utc(record.rec_headers.get_header("WARC-Date") or "")
        content_type = record.rec_headers.get_header("Content-Type") or ""
        if record.http_headers is not None:
            status = int(record.http_headers.get_statuscode() or 0)
            if not 200 <= status < 300:
                raise ItemRefused(
                    "fetch_failed", f"{item}: HTTP {status} for {url} in the archive", url or None
                )
            content_type = record.http_headers.get_header("Content-Type") or ""
        data = record.content_stream().read()
    if not url or date is None:
        raise ItemRefused("unreadable", f"{item}: WARC record without WARC-Target-URI or a valid WARC-Date")
    return RawPage(url, data, charset_of(content_type), date)
