"""Decide what an input file is (JATS or HTML) and how its bytes decode, before parsing.

Every problem found here becomes an :class:`InputRejected` with a stable reason code, so
the ingest stage can put the file in ``excluded.parquet`` instead of crashing:

- ``empty_file``: no bytes, or only whitespace;
- ``binary_content``: NUL bytes, a known binary signature (PNG, PDF, ...) or many
  control bytes: an image or archive renamed ``.xml``;
- ``undecodable``: bytes invalid in the encoding the file declares (BOM, XML
  declaration, HTML meta charset) or in UTF-8 when it declares none;
- ``unsupported_format``: text that is neither a JATS article nor an HTML page.

Content decides the format; the file extension only breaks ties (an HTML fragment with
no ``<html>`` tag).
"""

from __future__ import annotations

import codecs
import gzip
import io
import re
import zlib
from dataclasses import dataclass
from pathlib import PurePath

from tasks.common.text.document import ArticleFormat, InputRejected


@dataclass(frozen=True)
class Sniffed:
    format: ArticleFormat
    encoding: str  # a Python codec name that decodes the whole file strictly


_BOMS: tuple[tuple[bytes, str], ...] = (
    # UTF-32 first: its little-endian BOM starts with UTF-16's.
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"%PDF-", "PDF document"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"PK\x03\x04", "ZIP archive (or DOCX/EPUB)"),
    (b"\x1f\x8b", "gzip archive"),
    (b"BZh", "bzip2 archive"),
    (b"\xd0\xcf\x11\xe0", "MS Office document"),
)
# C0 controls other than tab, LF, FF, CR; XML forbids them and text never has many.
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F])
_MAX_CONTROL_RATIO = 0.02
_SAMPLE = 65536

_XML_DECL = re.compile(rb"""^\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)["']""")
_META_CHARSET = re.compile(
    rb"""<meta\b[^>]*?\bcharset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE | re.DOTALL
)
# WHATWG: browsers read these labels as windows-1252, and so do publishers' pages.
_HTML_LATIN1_LABELS = {"iso-8859-1", "iso8859-1", "latin-1", "latin1", "l1", "us-ascii", "ascii", "cp819"}

_PROLOG = re.compile(
    r"^(?:\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE(?:[^\[>]|\[.*?\])*>)*", re.DOTALL | re.IGNORECASE
)
_DOCTYPE = re.compile(r"<!DOCTYPE\s+([^\s>\[]+)([^>\[]*)", re.IGNORECASE)
_ROOT = re.compile(r"<([A-Za-z_][\w.:-]*)")
_JATS_PUBLIC_ID = re.compile(
    r"JATS|NLM//DTD|Journal (?:Archiving|Publishing)|Article Authoring", re.IGNORECASE
)
_JATS_ROOTS = {"article", "pmc-articleset"}
_HTML_EXTENSIONS = {".html", ".htm", ".xhtml", ".shtml"}
_HTML_FRAGMENT_TAGS = {"meta", "title", "div", "p", "section", "main", "header", "span", "h1", "h2", "table"}


_GZIP_MAGIC = b"\x1f\x8b"
_BLANK_GZIP_READ = 65_536


def blank(data: bytes) -> bool:
    """No content: no bytes, or only a byte-order mark and white space (UTF-8, -16 or -32),
    also inside a gzip stream (its first 64 KiB read; a damaged stream is not blank: its
    reader says what is wrong)."""
    if data.startswith(_GZIP_MAGIC):
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
                data = stream.read(_BLANK_GZIP_READ + 1)
        except (OSError, EOFError, zlib.error):
            return False
        if len(data) > _BLANK_GZIP_READ:
            return False
    for bom, _codec in _BOMS:
        if data.startswith(bom):
            data = data[len(bom) :]
            break
    return not data.strip(b" \t\r\n\f\v\x00")


def sniff(path: str, data: bytes) -> Sniffed:
    """Format and encoding of ``data`` (read from ``path``), or :class:`InputRejected`."""
    if not data.strip():
        raise InputRejected("empty_file", f"{len(data)} bytes, no content" if data else "0 bytes")
    encoding, source = _declared_encoding(data)
    if not encoding.startswith(("utf-16", "utf-32")):  # their NUL bytes are legitimate
        _reject_binary(data)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as err:
        bad = err.object[err.start : err.start + 1].hex()
        raise InputRejected(
            "undecodable",
            f"not valid {encoding} ({source}): byte 0x{bad} at offset {err.start}: {err.reason}",
        ) from err
    text = text.lstrip("\ufeff")
    if not text.strip():
        raise InputRejected("empty_file", f"only whitespace after decoding as {encoding}")
    if "\x00" in text:
        raise InputRejected("binary_content", f"NUL characters after decoding as {encoding}")
    return Sniffed(format=_format(path, text), encoding=encoding)


def _declared_encoding(data: bytes) -> tuple[str, str]:
    """(codec, where it came from); a BOM overrides any declaration, as in XML and HTML."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return codec, "BOM"
    # XML 1.0 appendix F: '<?' in UTF-16 without a BOM.
    if data.startswith(b"<\x00?\x00"):
        return "utf-16-le", "UTF-16 without BOM"
    if data.startswith(b"\x00<\x00?"):
        return "utf-16-be", "UTF-16 without BOM"
    head = data[:_SAMPLE]
    xml = _XML_DECL.match(head)
    if xml:
        return _codec(xml.group(1), "XML declaration", html=False), "declared in the XML declaration"
    meta = _META_CHARSET.search(head)
    if meta:
        return _codec(meta.group(1), "HTML meta charset", html=True), "declared in an HTML meta charset"
    return "utf-8", "no encoding declared, read as UTF-8"


def _codec(label_bytes: bytes, where: str, *, html: bool) -> str:
    label = label_bytes.decode("ascii").lower()
    if html and label in _HTML_LATIN1_LABELS:
        return "cp1252"
    try:
        name = codecs.lookup(label).name
    except LookupError as err:
        raise InputRejected("undecodable", f"unknown encoding {label!r} in the {where}") from err
    # A declaration readable as ASCII cannot be UTF-16/32: the label is wrong (WHATWG does the same).
    if name.startswith(("utf-16", "utf-32")):
        return "utf-8"
    return name


def _reject_binary(data: bytes) -> None:
    for signature, what in _SIGNATURES:
        if data.startswith(signature):
            raise InputRejected("binary_content", f"starts with the {what} signature {signature[:8]!r}")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputRejected("binary_content", f"NUL byte at offset {nul}")
    sample = data[:_SAMPLE]
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    if controls / len(sample) > _MAX_CONTROL_RATIO:
        raise InputRejected(
            "binary_content",
            f"{controls} control bytes in the first {len(sample)} bytes ({controls / len(sample):.1%})",
        )


def _format(path: str, text: str) -> ArticleFormat:
    head = text[:_SAMPLE]
    prolog = _PROLOG.match(head)
    rest = head[prolog.end() if prolog else 0 :]
    root_match = _ROOT.match(rest)
    root = root_match.group(1).lower() if root_match else None
    local_root = root.rsplit(":", 1)[-1] if root else None
    doctype = _DOCTYPE.search(head[: prolog.end()] if prolog else "")
    doctype_name = doctype.group(1).lower() if doctype else None
    if local_root in ("html", "head", "body") or doctype_name == "html":
        return "html"
    if local_root in _JATS_ROOTS or (doctype and _JATS_PUBLIC_ID.search(doctype.group(2))):
        return "jats"
    extension = PurePath(path).suffix.lower()
    if local_root in _HTML_FRAGMENT_TAGS and extension in _HTML_EXTENSIONS:
        return "html"
    raise InputRejected("unsupported_format", _describe(root, rest, extension))


def _describe(root: str | None, rest: str, extension: str) -> str:
    # Never the file's text: it lands in excluded.parquet, and the file may not be an article.
    if root:
        return f"XML/markup whose root element is <{root[:64]}>, neither a JATS <article> nor an HTML page"
    start = rest.lstrip()[:1]
    if start in ("{", "["):
        kind = "JSON-like text"
    elif start == "<":
        kind = "markup with no recognisable root element"
    else:
        kind = "plain text, not markup"
    return f"{kind} (extension {extension or 'none'!r})"
