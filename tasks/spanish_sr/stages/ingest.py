"""Stage ``ingest``: bibliographic records from exported files (issue 17 §1, paper 004 §3.1).

Each entry of ``sources`` is a file or a folder (searched recursively for the suffixes of
:data:`tasks.spanish_sr.records.SUFFIXES`), relative to the config file, given as a plain
path or as ``{path, format, field_map, encoding, delimiter, own_ids, year_from_id}``; ``format: auto`` goes by the
file name (and, for ``.xml``, the root element). Formats, default fields and decoding:
:mod:`tasks.spanish_sr.records`.

The unit is ``(source, record)``: the file (relative to the config) and the record's number
in it (spreadsheet row with header = 1, RIS/BioC/MEDLINE/JSON record, JSONL line; 1 for a
brat ``.txt``; 0 for a whole file that cannot be read). Kept: ``record_id`` (the record's
own id, else ``<file stem>:<record>``; ``own_ids: false`` for exports whose ids are local
serial numbers), the fields read, ``descriptors`` a list; ``year_from_id`` takes a missing
year from the id (a SciELO PID holds it: https://wiki.scielo.org/ "PID" — S + ISSN + year). Side table ``files``: one row per
file with its format, the encoding it was read as and its record count.

Excluded: ``empty_file`` (no bytes, or only a byte-order mark and white space, gzipped or
not), ``unreadable`` (a file: detail why; a parser's unforeseen error on a damaged file too,
by its type and message: one bad file never stops a run), ``malformed_record`` (detail: line or record),
``missing_field`` (neither title nor abstract), ``duplicate_id`` (a record id already taken
by an earlier record in input order: sources in config order, files sorted; detail names
it). A mapped column or key that a whole file lacks is a one-line ConfigError.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, field_validator

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.text.discovery import discover, read_input
from tasks.common.text.document import InputRejected
from tasks.common.text.sniff import blank
from tasks.spanish_sr.record_formats import read_file
from tasks.spanish_sr.records import SUFFIXES, FieldMap, FileRead, Format, Unreadable, resolve_format


class SourceConfig(StrictModel):
    path: str = Field(description="A file or folder, relative to the config file.")
    format: Literal["auto"] | Format = "auto"
    field_map: FieldMap = FieldMap()
    encoding: str | None = Field(None, description="Of text files; default: UTF-8, else cp1252/latin-1.")
    delimiter: Literal[",", ";", "\t", "|"] | None = Field(
        None, description="Of a CSV file; default: the one that splits its first rows most consistently."
    )
    own_ids: bool = Field(True, description="Use the records' own ids (false: <file stem>:<record>).")
    year_from_id: str | None = Field(
        None,
        description="A regular expression whose first group is the year inside the record id, used when "
        "the record has no year (SciELO PIDs: '^S\\d{4}-\\d{3}[\\dX]((?:19|20)\\d{2})\\d{9}$').",
    )

    @field_validator("year_from_id")
    @classmethod
    def _one_group(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                groups = re.compile(pattern).groups
            except re.error as err:
                raise ValueError(f"not a regular expression: {err}") from None
            if groups < 1:
                raise ValueError("needs a group around the year, e.g. '(\\d{4})'")
        return pattern


class IngestConfig(StrictModel):
    sources: list[str | SourceConfig] = Field(min_length=1, description="Exported files or folders.")
    max_file_bytes: int = Field(2_000_000_000, ge=1, description="Larger files are unreadable.")

    def entries(self) -> list[SourceConfig]:
        return [SourceConfig(path=s) if isinstance(s, str) else s for s in self.sources]


_S = pa.string()
LOCATION = (pa.field("source", _S, nullable=False), pa.field("record", pa.int32(), nullable=False))
RECORD_FIELDS = (
    pa.field("title", _S),
    pa.field("abstract", pa.large_string()),
    pa.field("language", _S),
    pa.field("year", pa.int32()),
    pa.field("doi", _S),
    pa.field("descriptors", pa.list_(_S), nullable=False),
    pa.field("abstract_variants", pa.list_(pa.large_string()), nullable=False),  # other-language abstracts
)
SCHEMA = pa.schema([pa.field("record_id", _S, nullable=False), *LOCATION, *RECORD_FIELDS])
EXCLUDED_SCHEMA = exclusion_schema(pa.field("record_id", _S), *LOCATION)
FILES_SCHEMA = pa.schema(
    [
        pa.field("source", _S, nullable=False),
        pa.field("format", _S),
        pa.field("encoding", _S),
        pa.field("records", pa.int32(), nullable=False),
    ]
)
_UNITS = pa.schema(
    [
        *SCHEMA,
        pa.field("fate", _S, nullable=False),
        pa.field("detail", _S),
        pa.field("format", _S),
        pa.field("encoding", _S),
    ]
)
_FILE_SUFFIXES = tuple(SUFFIXES)


def inputs(ctx: StageContext[IngestConfig]) -> dict[str, Any]:
    files: list[list[Any]] = []
    for index, entry in enumerate(ctx.config.entries()):
        try:
            found = discover((entry.path,), _FILE_SUFFIXES, ctx.base_dir, "stages.ingest.sources")
        except ConfigError as err:
            raise ConfigError(str(err).replace("sources[0]", f"sources[{index}]", 1)) from None
        files.extend([path, digest, index] for path, digest in found.items())
    return {"files": files}


def source(ctx: StageContext[IngestConfig], material: dict[str, Any]) -> TableSource:
    entries = ctx.config.entries()
    units: list[dict[str, Any]] = []
    for display, digest, index in material["files"]:
        units.extend(_file_units(ctx, display, digest, entries[index]))
    return TableSource(rows_to_table(units, _UNITS))


def _file_units(
    ctx: StageContext[IngestConfig], display: str, digest: str, entry: SourceConfig
) -> list[dict[str, Any]]:
    path = ctx.base_dir / display
    base: dict[str, Any] = {
        "source": display, "format": None, "encoding": None, "descriptors": [], "abstract_variants": []
    }  # fmt: skip
    try:
        data = read_input(path, digest, ctx.config.max_file_bytes)
        if blank(data):
            raise InputRejected("empty_file", f"{len(data)} bytes, no content")
        fmt = resolve_format(path, data) if entry.format == "auto" else entry.format
        base["format"] = fmt
        read = read_file(
            path, data, fmt, entry.field_map, entry.encoding, display=display, delimiter=entry.delimiter
        )
    except ConfigError:
        raise  # a field_map the whole file cannot satisfy: the config's to fix
    except InputRejected as err:
        fate = "empty_file" if err.reason == "empty_file" else "unreadable"
        detail = err.detail if fate == "empty_file" else f"{err.reason}: {err.detail}"
        return [{**base, "record": 0, "record_id": "", "fate": fate, "detail": detail}]
    except Unreadable as err:
        return [{**base, "record": 0, "record_id": "", "fate": "unreadable", "detail": str(err)}]
    except Exception as err:  # a parser's unforeseen error on a damaged file: that file is excluded
        detail = f"damaged file ({type(err).__name__}: {str(err)[:300]})"
        return [{**base, "record": 0, "record_id": "", "fate": "unreadable", "detail": detail}]
    if not read.records:
        return [{**base, "record": 0, "record_id": "", "fate": "unreadable", "detail": "no records"}]
    return _record_units(display, read, entry)


def _record_units(display: str, read: FileRead, entry: SourceConfig) -> list[dict[str, Any]]:
    stem = Path(display).name.split(".")[0]
    out = []
    for rec in read.records:
        fields = rec.fields or {"descriptors": [], "abstract_variants": []}
        own = fields.get("id") if entry.own_ids else None
        fate, detail = rec.reason or "ok", rec.detail
        if rec.reason is None and not (fields.get("title") or fields.get("abstract")):
            fate, detail = "missing_field", "neither title nor abstract"
        row = {k: v for k, v in fields.items() if k != "id"}
        if entry.year_from_id and own and row.get("year") is None:
            found = re.search(entry.year_from_id, own)
            row["year"] = int(found.group(1)) if found and found.group(1).isdigit() else None
        out.append(
            {
                **row,
                "record_id": own or f"{stem}:{rec.number}",
                "source": display,
                "record": rec.number,
                "fate": fate,
                "detail": detail,
                "format": read.format,
                "encoding": read.encoding,
            }
        )
    return out


def process(chunk: pa.Table, _ctx: StageContext[IngestConfig]) -> ChunkResult:
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    taken: dict[str, str] = {}
    files: dict[str, dict[str, Any]] = {}
    for row in chunk.to_pylist():
        entry = files.setdefault(
            row["source"],
            {"source": row["source"], "format": row["format"], "encoding": row["encoding"], "records": 0},
        )
        entry["records"] += int(row["record"] > 0)
        reason, detail = row["fate"], row["detail"]
        if reason == "ok" and row["record_id"] in taken:
            reason, detail = (
                "duplicate_id",
                f"id {row['record_id']!r} already read at {taken[row['record_id']]}",
            )
        if reason != "ok":
            record_id = row["record_id"] or None
            excluded.append({"reason": reason, "detail": _where(row, detail), "record_id": record_id,
                             "source": row["source"], "record": row["record"]})  # fmt: skip
            continue
        taken[row["record_id"]] = f"{row['source']}#{row['record']}"
        kept.append({name: row[name] for name in SCHEMA.names})
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        {"files": rows_to_table(list(files.values()), FILES_SCHEMA)},
    )


def _where(row: dict[str, Any], detail: str | None) -> str:
    """The detail, naming the file and (for a record) its number."""
    place = row["source"] if row["record"] == 0 else f"{row['source']}#{row['record']}"
    return f"{place}: {detail}" if detail else place


SPEC: StageSpec[IngestConfig] = StageSpec(
    name="ingest",
    version=5,  # 3: CSV delimiter by parsing; 4: abstract_variants (issue 28); 5: empty_file (issue 30)
    config_type=IngestConfig,
    upstream=(),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("source", "record"),
    inputs=inputs,
    source=source,
    process=process,
    tables={"files": FILES_SCHEMA},
    whole_input=True,
    description="Bibliographic records from XLSX/CSV (LILACS/BVS), RIS, JSON(L), BioC, MEDLINE XML, brat .txt.",
)
