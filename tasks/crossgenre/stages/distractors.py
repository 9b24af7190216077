"""Stage ``distractors``: the negative corpus the cited abstracts hide in (contract §7).

Paper 003 §3.1 mixes the cited abstracts with 217,665 other PubMed abstracts. Here they are
every record of the configured PubMed source that has an abstract and is not cited by a
claim (claims' ``corpus`` side table), optionally sampled down to ``max_docs`` with a seed.

- ``engine: local`` (default): every record element of the MEDLINE files is one unit, with
  NLM's update semantics (:mod:`tasks.common.pubmed.local`): an older version or an earlier
  copy of a PMID is excluded ``superseded``, a PMID removed by a later ``DeleteCitation``
  ``deleted``, a Bookshelf record ``book_article``, a record without a PMID or the damage
  that ends a truncated file ``malformed_record`` (detail: file and record number).
- ``engine: eutils``: the PMIDs listed in ``pmids`` and/or ``pmids_file`` (one per line,
  ``#`` comments and blank lines skipped) are the units, fetched through the cached client;
  a line that is no PMID is ``malformed_record``, a repeated PMID ``duplicate_pmid``, a PMID
  PubMed lacks ``not_in_pubmed``.

Units are ``(source, record)``: the file (or ``config:pmids``) and the record's number in it
(line number for a PMID list). Kept rows are corpus rows (:mod:`tasks.crossgenre.corpus`)
plus those two columns, sorted by PMID. Sampling: the eligible PMIDs in numeric order, then
``random.Random(seed).sample``; the others are ``sampled_out``.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import digest_file
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.pubmed.config import PubmedConfig, describe_pubmed, pubmed_source
from tasks.common.pubmed.local import LocalPubmed
from tasks.common.pubmed.port import PubmedRecord
from tasks.crossgenre.corpus import CORPUS_FIELDS, record_row, required

CONFIG_SOURCE = "config:pmids"


class DistractorsConfig(StrictModel):
    pubmed: PubmedConfig = Field(
        PubmedConfig(), description="Where the records come from (local files by default)."
    )
    pmids: list[str] = Field(default_factory=list, description="engine eutils: the PMIDs to fetch.")
    pmids_file: str | None = Field(
        None, description="engine eutils: a file of PMIDs, one per line, relative to the config file."
    )
    max_docs: int | None = Field(None, ge=1, description="Keep at most this many, sampled with seed.")
    seed: int = Field(42, description="Seed of the sample.")


LOCATION_FIELDS = (required("source"), required("record", pa.int32()))
SCHEMA = pa.schema([*CORPUS_FIELDS, *LOCATION_FIELDS])
EXCLUDED_SCHEMA = exclusion_schema(pa.field("doc_id", pa.string()), *LOCATION_FIELDS)
_UNITS = pa.schema([*LOCATION_FIELDS, pa.field("doc_id", pa.string()), required("fate"), required("detail")])
# What became of a unit before any record is looked at → its exclusion reason.
_REASONS = {
    "superseded": "superseded",
    "deleted": "deleted",
    "book_article": "book_article",
    "malformed_record": "malformed_record",
    "damaged_file": "malformed_record",
    "duplicate_pmid": "duplicate_pmid",
}


def _pmids_path(ctx: StageContext[DistractorsConfig]) -> Path | None:
    name = ctx.config.pmids_file
    if name is None:
        return None
    path = ctx.base_dir / name
    if not path.is_file():
        raise ConfigError(f"stages.distractors.pmids_file: {path} does not exist")
    return path


def inputs(ctx: StageContext[DistractorsConfig]) -> dict[str, Any]:
    config = ctx.config
    listed = bool(config.pmids or config.pmids_file)
    if config.pubmed.engine == "eutils" and not listed:
        raise ConfigError("stages.distractors: engine eutils needs pmids or pmids_file (the PMIDs to fetch)")
    if config.pubmed.engine == "local" and listed:
        raise ConfigError(
            "stages.distractors: pmids / pmids_file are for engine eutils; local reads every record"
        )
    path = _pmids_path(ctx)
    return {"pubmed": describe_pubmed(config.pubmed, ctx.base_dir), "pmids_file": path and digest_file(path)}


def source(ctx: StageContext[DistractorsConfig], _material: dict[str, Any]) -> TableSource:
    if ctx.config.pubmed.engine == "local":
        local = pubmed_source(ctx.config.pubmed, ctx.base_dir, None)
        assert isinstance(local, LocalPubmed)
        rows = [
            {"source": e.source, "record": e.number, "doc_id": e.pmid, "fate": e.fate, "detail": e.detail}
            for e in local.entries
        ]
    else:
        rows = _listed_pmids(ctx)
    return TableSource(rows_to_table(rows, _UNITS))


def _listed_pmids(ctx: StageContext[DistractorsConfig]) -> list[dict[str, Any]]:
    """The units of the PMID list(s): each line, marked ``current`` when it is a new PMID."""
    lists: list[tuple[str, list[tuple[int, str]]]] = [
        (CONFIG_SOURCE, list(enumerate(ctx.config.pmids, start=1)))
    ]
    path = _pmids_path(ctx)
    if path is not None:
        lines = path.read_text(encoding="utf-8").splitlines()
        lines_kept = [
            (n, t.strip())
            for n, t in enumerate(lines, start=1)
            if t.strip() and not t.lstrip().startswith("#")
        ]
        lists.append((ctx.config.pmids_file or "", lines_kept))
    seen: dict[str, str] = {}
    rows = []
    for name, numbered in lists:
        for number, text in numbered:
            value = text.strip()
            where = f"{name} line {number}"
            if not value.isdigit():
                fate, detail, pmid = "malformed_record", f"{where}: not a PMID ({value[:40]!r})", None
            elif value in seen:
                fate, detail, pmid = (
                    "duplicate_pmid",
                    f"{where}: PMID {value} is already listed at {seen[value]}",
                    value,
                )
            else:
                seen[value] = where
                fate, detail, pmid = "current", where, value
            rows.append({"source": name, "record": number, "doc_id": pmid, "fate": fate, "detail": detail})
    return rows


def _cited(ctx: StageContext[DistractorsConfig]) -> set[str]:
    corpus = ctx.upstream["claims"].read(columns=["doc_id"], table="corpus")
    return set(corpus.column("doc_id").to_pylist())


def process(chunk: pa.Table, ctx: StageContext[DistractorsConfig]) -> ChunkResult:
    units = chunk.to_pylist()
    cited = _cited(ctx)
    wanted = [u["doc_id"] for u in units if u["fate"] == "current"]
    with contextlib.closing(pubmed_source(ctx.config.pubmed, ctx.base_dir, ctx.cache_dir)) as pubmed:
        records = pubmed.records(wanted)
        cost = {"pubmed_requests": float(getattr(pubmed, "sent", 0))}
    excluded: list[dict[str, Any]] = []
    eligible: list[tuple[dict[str, Any], PubmedRecord]] = []
    for unit in units:
        pmid = unit["doc_id"]
        if unit["fate"] != "current":
            excluded.append(_excluded(unit, _REASONS[unit["fate"]], unit["detail"]))
        elif (record := records.get(pmid)) is None:
            excluded.append(
                _excluded(unit, "not_in_pubmed", f"{unit['detail']}: PubMed has no record {pmid}")
            )
        elif pmid in cited:
            excluded.append(_excluded(unit, "cited", f"PMID {pmid} is a cited abstract (claims corpus)"))
        elif not record.abstract:
            excluded.append(_excluded(unit, "no_abstract", f"{unit['detail']}: PMID {pmid} has no abstract"))
        else:
            eligible.append((unit, record))
    kept, dropped = _sample(eligible, ctx.config.max_docs, ctx.config.seed)
    excluded.extend(dropped)
    rows = [
        {**record_row(record), "source": unit["source"], "record": unit["record"]} for unit, record in kept
    ]
    return ChunkResult(rows_to_table(rows, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA), cost=cost)


def _sample(
    eligible: list[tuple[dict[str, Any], PubmedRecord]], max_docs: int | None, seed: int
) -> tuple[list[tuple[dict[str, Any], PubmedRecord]], list[dict[str, Any]]]:
    """The kept units in PMID order, and the ``sampled_out`` rows (seeded, see module docstring)."""
    ordered = sorted(eligible, key=lambda pair: int(pair[1].pmid))
    if max_docs is None or len(ordered) <= max_docs:
        return ordered, []
    chosen = set(random.Random(seed).sample(range(len(ordered)), max_docs))
    detail = f"a sample of {max_docs} of {len(ordered)} eligible abstracts (seed {seed}) was kept"
    kept = [pair for i, pair in enumerate(ordered) if i in chosen]
    dropped = [
        _excluded(unit, "sampled_out", detail) for i, (unit, _r) in enumerate(ordered) if i not in chosen
    ]
    return kept, dropped


def _excluded(unit: dict[str, Any], reason: str, detail: str) -> dict[str, Any]:
    return {
        "reason": reason,
        "detail": detail,
        "doc_id": unit["doc_id"],
        "source": unit["source"],
        "record": unit["record"],
    }


SPEC: StageSpec[DistractorsConfig] = StageSpec(
    name="distractors",
    version=1,
    config_type=DistractorsConfig,
    upstream=("claims",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("source", "record"),
    source=source,
    process=process,
    inputs=inputs,
    whole_input=True,
    description="Every uncited PubMed abstract of the configured source (local MEDLINE files), optionally sampled.",
)
