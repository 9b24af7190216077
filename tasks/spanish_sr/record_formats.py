"""The readers of the text and XML export formats (RIS, JSON, JSON Lines, BioC, MEDLINE XML and
text, brat)
and :func:`read_file`, which picks one for a file; the formats and their fields are
described in ``tasks/spanish_sr/records.py``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bioc  # type: ignore[import-untyped]
import nbib  # type: ignore[import-untyped]
import rispy  # type: ignore[import-untyped]
from bioc import biocxml
from lxml import etree

from irforge.errors import ConfigError
from tasks.common.pubmed.medline import Citation, Deletion, read_medline
from tasks.spanish_sr.records import (
    DEFAULTS,
    FieldMap,
    FileRead,
    Format,
    Record,
    Unreadable,
    _csv_rows,
    _mapped,
    _pick,
    _tabular,
    _xlsx_rows,
    decode,
    normalised,
)


def read_file(
    path: Path,
    data: bytes,
    fmt: Format,
    fields: FieldMap,
    encoding: str | None,
    *,
    display: str,
    delimiter: str | None = None,
) -> FileRead:
    """Every record of one file (``display``: its name in messages). Raises :class:`Unreadable`,
    or ConfigError for a mapped column or key the whole file lacks."""
    shown = Path(display)
    if fmt in ("medline", "brat") and fields.given():
        raise ConfigError(f"{display}: format {fmt} has fixed fields; remove its field_map")
    if fmt == "xlsx":
        return FileRead(fmt, None, _tabular(shown, _xlsx_rows(data), fields))
    if fmt == "medline":
        return FileRead(fmt, None, list(_medline(path)))
    if fmt == "bioc":
        return FileRead(fmt, None, list(_bioc(data, fields)))
    text, used = decode(data, encoding)
    readers: dict[str, Callable[[], list[Record]]] = {
        "csv": lambda: _tabular(shown, _csv_rows(text, delimiter), fields),
        "ris": lambda: list(_ris(text, fields)),
        "json": lambda: _json_list(shown, text, fields),
        "jsonl": lambda: _json_lines(shown, text, fields),
        "nbib": lambda: list(_nbib(text, fields)),
        "brat": lambda: [_brat(shown, text)],
    }
    return FileRead(fmt, used, readers[fmt]())


def _ris(text: str, fields: FieldMap) -> Iterator[Record]:
    number, start, lines = 0, 0, text.splitlines()
    block: list[str] | None = None
    for n, line in enumerate(lines, start=1):
        tag = line[:2]
        if tag == "TY" and line[2:6].strip() in ("-", ""):
            if block is not None:
                yield Record(number, reason="malformed_record", detail=f"lines {start}-{n - 1}: no ER line")
            number, start, block = number + 1, n, [line]
        elif block is None:
            if line.strip():
                number += 1
                yield Record(number, reason="malformed_record", detail=f"line {n}: text outside a record")
        elif tag == "ER":
            block.append(line)
            yield _ris_record(number, start, block, fields)
            block = None
        else:
            block.append(line)
    if block is not None:
        yield Record(number, reason="malformed_record", detail=f"lines {start}-{len(lines)}: no ER line")


def _ris_record(number: int, start: int, block: list[str], fields: FieldMap) -> Record:
    try:
        # Repeated tags as lists: a SciELO record has an English and a Spanish or Portuguese AB.
        parsed = rispy.loads("\n".join(block), enforce_list_tags=False)
    except Exception as err:  # rispy raises bare exceptions on bad tag lines
        return Record(number, reason="malformed_record", detail=f"line {start}: {err}")
    if len(parsed) != 1:
        return Record(number, reason="malformed_record", detail=f"line {start}: {len(parsed)} records parsed")
    return Record(number, _mapped(parsed[0], "ris", fields))


def _json_list(path: Path, text: str, fields: FieldMap) -> list[Record]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise Unreadable(f"not JSON: {err}") from None
    if not isinstance(items, list):
        raise Unreadable(f"expected a list of records, got a JSON {type(items).__name__}")
    return _json_records(path, list(enumerate(items, start=1)), "json", fields)


def _json_lines(path: Path, text: str, fields: FieldMap) -> list[Record]:
    items: list[tuple[int, Any]] = []
    bad: dict[int, str] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                items.append((n, json.loads(line)))
            except json.JSONDecodeError as err:
                bad[n] = f"line {n}: not JSON: {err.msg} (column {err.colno})"
    records = _json_records(path, items, "jsonl", fields)
    records += [Record(n, reason="malformed_record", detail=d) for n, d in bad.items()]
    return sorted(records, key=lambda r: r.number)


def _json_records(path: Path, items: list[tuple[int, Any]], fmt: str, fields: FieldMap) -> list[Record]:
    objects = [obj for _, obj in items if isinstance(obj, dict)]
    for name, key in fields.given().items():
        if objects and all(_pick(o, name, fmt, FieldMap(**{name: key})) is None for o in objects):
            raise ConfigError(f"{path}: field_map.{name} key {key!r} is in no record")
    out = []
    for n, obj in items:
        if isinstance(obj, dict):
            out.append(Record(n, _mapped(obj, fmt, fields)))
        else:
            detail = f"record {n}: a JSON {type(obj).__name__}, not an object"
            out.append(Record(n, reason="malformed_record", detail=detail))
    return out


# --- XML, brat ----------------------------------------------------------------------------


def _bioc(data: bytes, fields: FieldMap) -> Iterator[Record]:
    try:
        collection = biocxml.loads(data.decode("utf-8-sig"))
    except (etree.XMLSyntaxError, UnicodeDecodeError, ValueError) as err:
        raise Unreadable(f"not BioC XML: {err}") from None
    names = {**{f: v[0] for f, v in DEFAULTS["bioc"].items()}, **fields.given()}
    for number, doc in enumerate(collection.documents, start=1):
        if not doc.passages:
            yield Record(number, reason="malformed_record", detail=f"document {doc.id!r} has no passages")
            continue
        yield Record(number, normalised(_bioc_fields(doc, names), fields.descriptor_separator))


_PASSAGE_INFONS = (
    "type",
    "section",
    "section_type",
)  # PubTator/PMC: type; SciELO: section; PMC: section_type
_SAME_KIND = {"title": ("front", "article-title", "título", "titulo"), "abstract": ("resumen", "resumo")}


def _passage_text(passage: bioc.BioCPassage) -> str:
    """A passage's text, or its sentences' when it keeps the text there (SciELO)."""
    if passage.text:
        return str(passage.text)
    return " ".join(s.text for s in passage.sentences if s.text)


def _bioc_fields(doc: bioc.BioCDocument, names: dict[str, str]) -> dict[str, Any]:
    def passages(kind: str) -> str | None:
        wanted = {kind.casefold(), *_SAME_KIND.get(kind.casefold(), ())}
        texts = [
            text
            for p in doc.passages
            if any(str(p.infons.get(k, "")).strip().casefold() in wanted for k in _PASSAGE_INFONS)
            and (text := _passage_text(p))
        ]
        return "\n".join(texts) or None

    infons = {**doc.passages[0].infons, **doc.infons}
    raw: dict[str, Any] = {f: infons.get(names[f]) for f in ("language", "year", "doi", "descriptors")}
    return {
        **raw,
        "id": doc.id or None,
        "title": passages(names["title"]),
        "abstract": passages(names["abstract"]),
    }


def _medline(path: Path) -> Iterator[Record]:
    for item in read_medline(path):
        if isinstance(item, Deletion):
            continue  # not a record: a note that earlier files' PMIDs were withdrawn
        if isinstance(item, Citation):
            r = item.record
            raw = {"id": r.pmid, "title": r.title, "abstract": r.abstract, "year": r.year, "doi": r.doi}
            yield Record(item.number, normalised({**raw, "descriptors": list(r.mesh)}, "\x00"))
        elif item.reason == "damaged_file" and item.number == 1:
            raise Unreadable(item.detail)  # nothing of the file could be read
        else:
            yield Record(item.number, reason="malformed_record", detail=f"{item.reason}: {item.detail}")


_NBIB_TAG = re.compile(r"^[A-Z]{2,4}\s*- ", re.MULTILINE)
_BLANK_LINES = re.compile(r"\n[ \t]*\r?\n")


def _nbib(text: str, fields: FieldMap) -> Iterator[Record]:
    """Records of PubMed's MEDLINE text format (blank lines between records), one
    ``nbib.read`` each (a record it cannot parse is malformed; its neighbours are read)."""
    blocks = [b for b in _BLANK_LINES.split(text.replace("\r\n", "\n")) if _NBIB_TAG.search(b)]
    if not blocks:
        raise Unreadable("no 'TAG - value' line: not PubMed's MEDLINE text format")
    for number, block in enumerate(blocks, start=1):
        try:
            parsed = nbib.read(block.strip("\n") + "\n")
        except Exception as err:
            yield Record(number, reason="malformed_record", detail=f"{type(err).__name__}: {err}")
            continue
        if len(parsed) != 1:
            yield Record(number, reason="malformed_record", detail=f"{len(parsed)} records parsed from one")
            continue
        raw = dict(parsed[0])
        raw["descriptors"] = [
            d["descriptor"] if isinstance(d, dict) else d for d in raw.get("descriptors") or []
        ]
        yield Record(number, _mapped(raw, "nbib", fields))


_PUBLIC_TITLE = re.compile(r"^T[íi]tulo\s+p[úu]blico\s*:\s*(.+)$", re.IGNORECASE)
_REGISTRY_LINE = re.compile(r"^(?:EudraCT|N[º°o]\s*EudraCT)\b[^:]*:", re.IGNORECASE)


def _brat(path: Path, text: str) -> Record:
    """A CT-EBM-SP text: an abstract's first line is its title; a trial announcement
    (``EudraCT Nº: …`` first) has its title on the ``Título público:`` line."""
    lines = [s for line in text.splitlines() if (s := line.strip())]
    stem = path.name.split(".")[0]
    public = next((i for i, line in enumerate(lines) if _PUBLIC_TITLE.match(line)), None)
    if public is not None and lines and _REGISTRY_LINE.match(lines[0]):
        title = _PUBLIC_TITLE.match(lines[public]).group(1).strip()  # type: ignore[union-attr]
        rest = [line for i, line in enumerate(lines) if i not in (0, public)]
        raw = {"id": stem, "title": title, "abstract": "\n".join(rest)}
    else:
        raw = {"id": stem, "title": lines[0] if lines else None, "abstract": "\n".join(lines[1:])}
    return Record(1, normalised(raw, "\x00"))
