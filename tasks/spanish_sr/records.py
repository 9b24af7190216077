"""Bibliographic records from the files people export them in (issue 17 §1), read one file at a time.

Formats and their default field names (a source's ``field_map`` overrides any of them):

- ``xlsx`` (openpyxl, read-only, first sheet) and ``csv`` (delimiter: the source's
  ``delimiter``, else the one of ``, ; tab |`` that splits the first rows most consistently):
  a header row, then one record per row, numbered as a spreadsheet shows it (header = 1).
  Defaults are the column names of a LILACS/BVS export (https://pesquisa.bvsalud.org/,
  "Export" → CSV): ``ID``, ``Title``, ``Abstract``, ``Language``, ``Publication year``,
  ``DOI``, ``Descriptor(s)`` (DeCS/MeSH, separated by ``descriptor_separator``). We found no
  official specification; these names are what two public projects that read BVS exports
  use, matched case-insensitively;
- ``ris``: records between ``TY`` and ``ER`` lines, numbered in file order and each parsed
  by ``rispy``, whose keys are the field names (``id``, ``title``/``primary_title``,
  ``abstract``/``notes_abstract``, ``language``, ``year``/``publication_year``, ``doi``,
  ``keywords``). rispy itself silently merges a record that lacks its ``ER`` into the next,
  hence the split here;
- ``json`` (a list of objects) and ``jsonl`` (one object per line, numbered by line): keys
  ``id``, ``title``, ``abstract``, ``language``, ``year``, ``doi``, ``descriptors``
  (a dotted name reaches into nested objects);
- ``bioc`` (BioC XML, ``bioc``): one record per document, its id the document id; title and
  abstract are the passages whose ``type``, ``section`` (SciELO) or ``section_type`` (PMC)
  infon is ``title`` and ``abstract`` (any case), their text the passage's ``<text>`` or else
  its ``<sentence>`` texts (SciELO keeps it there); the other
  fields are document (else first passage) infons ``language``, ``year``,
  ``article-id_doi``, ``kwd``;
- ``medline`` (MEDLINE/PubMed XML, :mod:`tasks.common.pubmed.medline`): PMID, title,
  abstract, year, DOI and MeSH descriptors; no field map;
- ``nbib`` (PubMed's MEDLINE text format, "Send to → Citation manager": ``.nbib``, or a
  ``.txt`` that opens with tagged lines up to a ``PMID-`` one;
  https://www.nlm.nih.gov/bsd/mms/medlineelements.html): records split at blank lines and
  parsed by ``nbib``
  (https://github.com/holub008/nbib), whose keys are the field names (``pubmed_id``,
  ``title``, ``abstract``, ``language``, ``publication_date``, ``doi``, ``descriptors``);
- ``brat``: one ``.txt`` file is one record (CT-EBM-SP): the first non-blank line is the
  title, the other non-blank lines the abstract, the file name its id; no field map.

Text files are UTF-8 (a BOM is dropped); otherwise the source's ``encoding``, else
``charset-normalizer`` choosing among cp1252 and latin-1 only (left free it reads
Spanish latin-1 as cp1250, turning "ñ" into "ń"). What each file was read as is returned.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import openpyxl  # type: ignore[import-untyped]
from charset_normalizer import from_bytes
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError
from tasks.common.text.identifiers import normalise_doi

Format = Literal["xlsx", "csv", "ris", "json", "jsonl", "bioc", "medline", "nbib", "brat"]
FIELDS = ("id", "title", "abstract", "language", "year", "doi", "descriptors")
FALLBACK_ENCODINGS = ("cp1252", "latin_1")
SUFFIXES: dict[str, Format | None] = {
    ".xlsx": "xlsx",
    ".csv": "csv",
    ".tsv": "csv",  # tab-separated (ASReview and spreadsheet exports): the delimiter is found by parsing
    ".ris": "ris",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".nbib": "nbib",
    ".txt": "brat",  # or nbib: a .txt that opens with "PMID-" lines is PubMed's MEDLINE text format
    ".xml": None,  # BioC or MEDLINE: told by the root element
    ".xml.gz": "medline",
}
_BVS: dict[str, tuple[str, ...]] = {
    "id": ("ID",),
    "title": ("Title",),
    "abstract": ("Abstract",),
    "language": ("Language",),
    "year": ("Publication year",),
    "doi": ("DOI",),
    "descriptors": ("Descriptor(s)",),
}
_PLAIN: dict[str, tuple[str, ...]] = {f: (f,) for f in FIELDS}
DEFAULTS: dict[str, dict[str, tuple[str, ...]]] = {
    "xlsx": _BVS,
    "csv": _BVS,
    "ris": {
        **_PLAIN,
        "title": ("title", "primary_title"),
        "abstract": ("abstract", "notes_abstract"),
        "year": ("year", "publication_year"),
        "descriptors": ("keywords",),
    },
    "json": _PLAIN,
    "jsonl": _PLAIN,
    "bioc": {**_PLAIN, "doi": ("article-id_doi",), "descriptors": ("kwd",)},
    "nbib": {
        **_PLAIN,
        "id": ("pubmed_id",),
        "year": ("publication_date",),
        "descriptors": ("descriptors", "keywords"),
    },
}
_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
_ROOT = re.compile(rb"<([A-Za-z_][\w.:-]*)")


class FieldMap(StrictModel):
    """Which column / key / infon holds each field; None: the format's default (module doc)."""

    id: str | None = None
    title: str | None = None
    abstract: str | None = None
    language: str | None = None
    year: str | None = None
    doi: str | None = None
    descriptors: str | None = None
    descriptor_separator: str = Field(";", min_length=1, description="Between descriptors in one cell.")

    def given(self) -> dict[str, str]:
        return {f: v for f in FIELDS if (v := getattr(self, f)) is not None}


@dataclass(frozen=True)
class Record:
    """One record read (``fields`` normalised), or why record ``number`` could not be."""

    number: int
    fields: dict[str, Any] | None = None
    reason: str | None = None
    detail: str | None = None


@dataclass
class FileRead:
    format: Format
    encoding: str | None
    records: list[Record] = field(default_factory=list)


class Unreadable(Exception):
    """The file as a whole cannot be read (the message says why)."""


_NBIB_START = re.compile(rb"^\s*(?:[A-Z]{2,4}\s*- [^\n]*\n)*?PMID\s?- ?\d")  # PMC exports open with PMC-


def resolve_format(path: Path, data: bytes) -> Format:
    name = path.name.lower()
    for suffix, fmt in sorted(SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if name.endswith(suffix):
            if fmt == "brat" and _NBIB_START.match(data[:2048].lstrip(b"\xef\xbb\xbf")):
                return "nbib"
            return fmt if fmt is not None else _xml_kind(data)
    raise Unreadable(f"no format for this file name; known: {', '.join(SUFFIXES)}")


def _xml_kind(data: bytes) -> Format:
    head = re.sub(rb"<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>]*>", b"", data[:4096], flags=re.S)
    found = _ROOT.search(head)
    root = found.group(1).decode("ascii", "replace") if found else ""
    if root == "collection":
        return "bioc"
    if root in ("PubmedArticleSet", "MedlineCitationSet"):
        return "medline"
    raise Unreadable(f"neither BioC nor MEDLINE/PubMed XML: root <{root}>")


def decode(data: bytes, encoding: str | None) -> tuple[str, str]:
    """The text and the encoding it was read as (module doc)."""
    if encoding:
        try:
            return data.decode(encoding), encoding
        except (UnicodeDecodeError, LookupError) as err:
            raise Unreadable(f"not {encoding}: {err}") from None
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        pass
    best = from_bytes(data, cp_isolation=list(FALLBACK_ENCODINGS)).best()
    if best is None:
        raise Unreadable(f"neither UTF-8 nor {' / '.join(FALLBACK_ENCODINGS)}")
    return str(best), best.encoding


def normalised(raw: dict[str, Any], separator: str) -> dict[str, Any]:
    """Raw values → the kept fields: stripped strings (blank → None), year as int, DOI
    normalised, descriptors a list. A record with several abstracts (a SciELO RIS record's
    English and Spanish ``AB``) keeps the first as ``abstract`` and the others as
    ``abstract_variants``, for ``clean`` to pick the configured language's."""
    out: dict[str, Any] = {"abstract_variants": []}
    for name in FIELDS:
        value = raw.get(name)
        if name in ("title", "abstract") and isinstance(value, list | tuple):
            texts = [t for v in value if v is not None and (t := str(v).strip())]
            value = texts[0] if texts else None
            if name == "abstract":
                out["abstract_variants"] = texts[1:]
        if name == "descriptors":
            items = value if isinstance(value, list | tuple) else [] if value is None else [value]
            parts = [p for v in items for p in str(v).split(separator) if v is not None]
            out[name] = [s for p in parts if (s := p.strip())]
            continue
        text = None if value is None else str(value).strip() or None
        if name == "year":
            found = _YEAR.search(text) if text else None
            text = int(found.group(1)) if found else None  # type: ignore[assignment]
        elif name == "doi" and text:
            text = normalise_doi(text)
        out[name] = text
    return out


# --- tables -------------------------------------------------------------------------------


# What openpyxl raises on a damaged workbook: a bad zip or damaged deflate stream, a missing or
# malformed XML part (lxml's XMLSyntaxError and ElementTree's ParseError are SyntaxError subclasses).
_XLSX_DAMAGE = (
    zipfile.BadZipFile, zlib.error, EOFError, KeyError, ValueError, TypeError, IndexError, OSError, SyntaxError
)  # fmt: skip


def _xlsx_rows(data: bytes) -> Iterator[tuple[int, list[Any]]]:
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except _XLSX_DAMAGE as err:
        raise Unreadable(f"not a readable XLSX workbook: {type(err).__name__}: {err}") from None
    try:
        sheet = book.worksheets[0]
        for number, row in enumerate(sheet.iter_rows(values_only=True), start=1):
            yield number, list(row)
    except _XLSX_DAMAGE as err:
        raise Unreadable(f"damaged XLSX workbook: {type(err).__name__}: {err}") from None
    finally:
        book.close()


DELIMITERS = (",", ";", "\t", "|")
_SNIFF_ROWS = 50


def sniff_delimiter(text: str) -> str:
    """The delimiter that splits the first rows into the header's number of columns most
    consistently (then: into most columns). ``csv.Sniffer`` falls back to guessing on
    unquoted exports whose abstracts hold commas; here each candidate is tried by parsing."""
    sample = text[:262144]
    best: tuple[float, int, str] = (0.0, 0, ",")
    for delimiter in DELIMITERS:
        reader = csv.reader(io.StringIO(sample, newline=""), csv.excel, delimiter=delimiter)
        rows: list[list[str]] = []
        with contextlib.suppress(csv.Error):
            for row in reader:
                if any(cell.strip() for cell in row):
                    rows.append(row)
                if len(rows) > _SNIFF_ROWS:
                    break
        if not rows or len(rows[0]) < 2:
            continue
        body = rows[1:-1] if len(rows) > 2 else rows[1:]  # the last row may be cut by the sample
        same = sum(len(r) == len(rows[0]) for r in body) / len(body) if body else 1.0
        best = max(best, (same, len(rows[0]), delimiter))
    return best[2]


def _csv_rows(text: str, delimiter: str | None = None) -> Iterator[tuple[int, list[Any]]]:
    """Rows of RFC 4180 CSV (``""`` inside quotes is a quote) split by ``delimiter``, else by
    the one :func:`sniff_delimiter` finds (``csv.Sniffer`` also guesses ``doublequote``, and
    guesses False on real exports, which splits every quoted cell that holds an escaped quote)."""
    delimiter = delimiter or sniff_delimiter(text)
    reader = csv.reader(io.StringIO(text, newline=""), csv.excel, delimiter=delimiter, strict=True)
    number = 0
    try:
        for number, row in enumerate(reader, start=1):
            yield number, list(row)
    except csv.Error as err:
        yield number + 1, [_CsvFailure(f"line {reader.line_num}: {err}")]


@dataclass(frozen=True)
class _CsvFailure:
    detail: str


def _tabular(path: Path, rows: Iterator[tuple[int, list[Any]]], fields: FieldMap) -> list[Record]:
    header: list[str] | None = None
    columns: dict[str, int] = {}
    out: list[Record] = []
    for number, row in rows:
        if row and isinstance(row[0], _CsvFailure):
            out.append(Record(number, reason="malformed_record", detail=f"{row[0].detail}; rest not read"))
            break
        if all(c is None or str(c).strip() == "" for c in row):
            continue  # a blank row is no record
        if header is None:
            header = [str(c).strip() if c is not None else "" for c in row]
            columns = _columns(path, header, fields)
            continue
        if len(row) > len(header) and any(str(c).strip() for c in row[len(header) :] if c is not None):
            detail = f"{len(row)} cells for {len(header)} columns"
            out.append(Record(number, reason="malformed_record", detail=detail))
            continue
        raw = {f: row[i] if i < len(row) else None for f, i in columns.items()}
        out.append(Record(number, normalised(raw, fields.descriptor_separator)))
    if header is None:
        raise Unreadable("no header row")
    return out


def _columns(path: Path, header: list[str], fields: FieldMap) -> dict[str, int]:
    """Field → column index; a configured column the header lacks is a ConfigError."""
    lower = {h.casefold(): i for i, h in reversed(list(enumerate(header)))}
    given = fields.given()
    out: dict[str, int] = {}
    for name in FIELDS:
        if name in given:
            if given[name].casefold() not in lower:
                raise ConfigError(
                    f"{path}: field_map.{name} column {given[name]!r} is not in the header ({', '.join(header)})"
                )
            out[name] = lower[given[name].casefold()]
        else:
            found = [lower[c.casefold()] for c in DEFAULTS["csv"][name] if c.casefold() in lower]
            if found:
                out[name] = found[0]
    if "title" not in out and "abstract" not in out:
        seen = " | ".join(header)[:200]
        raise ConfigError(
            f"{path}: no title or abstract column in the header it read ({len(header)} column(s): {seen}); "
            "set field_map, or delimiter if the columns were split wrongly"
        )
    return out


# --- RIS, JSON ----------------------------------------------------------------------------


def _pick(raw: dict[str, Any], name: str, fmt: str, fields: FieldMap) -> Any:
    given = fields.given().get(name)
    for key in (given,) if given else DEFAULTS[fmt][name]:
        value: Any = raw
        for part in key.split(".") if fmt in ("json", "jsonl") else [key]:
            value = value.get(part) if isinstance(value, dict) else None
        if value not in (None, "", []):
            return value
    return None


def _mapped(raw: dict[str, Any], fmt: str, fields: FieldMap) -> dict[str, Any]:
    return normalised({f: _pick(raw, f, fmt, fields) for f in FIELDS}, fields.descriptor_separator)
