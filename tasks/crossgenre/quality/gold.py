"""The labels of a folder of real news pages (``gold.jsonl``; tests/crossgenre/real_pages/README.md).

One JSON object per line: ``file``, ``headline``, ``language``, ``kind``, ``study_links``
(each with ``id_kind`` / ``id_value`` / ``role``), ``expected`` (``claim``,
``excluded:no_study_link`` or ``excluded:not_single_study``) and ``reported`` (the reported
study's ``doi`` / ``pmid``). A line that lacks a field or names a missing file is a one-line
error naming the file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from irforge.errors import IrforgeError
from tasks.common.text.identifiers import normalise_doi

EXPECTED = ("claim", "excluded:no_study_link", "excluded:not_single_study")
_FIELDS = ("file", "headline", "language", "kind", "study_links", "expected", "reported")


@dataclass(frozen=True)
class GoldPage:
    file: str
    headline: str
    language: str
    kind: str
    expected: str
    reported: frozenset[str]  # the reported study's identifiers: "doi:…", "pmid:…", "url:…"
    pmid: str | None
    line: int

    @property
    def claim(self) -> bool:
        return self.expected == "claim"


def identifier_key(kind: str, value: str) -> str:
    """``kind:value`` compared without case (a DOI also without its resolver prefix)."""
    value = value.strip()
    if kind == "doi":
        return f"doi:{normalise_doi(value)}"
    if kind == "url":  # as written or as normalised (percent-escapes, a trailing slash)
        return f"url:{unquote(value).rstrip('/').casefold()}"
    return f"{kind}:{value.casefold()}"


def _page(row: dict[str, Any], folder: Path, where: str, line: int) -> GoldPage:
    missing = [f for f in _FIELDS if f not in row]
    if missing:
        raise IrforgeError(f"{where}: missing field(s) {', '.join(missing)}")
    if row["expected"] not in EXPECTED:
        raise IrforgeError(f"{where}: expected is {row['expected']!r}, not one of {', '.join(EXPECTED)}")
    if not (folder / row["file"]).is_file():
        raise IrforgeError(f"{where}: {row['file']} is not in {folder}")
    reported = row["reported"] or {}
    keys = {identifier_key(k, reported[k]) for k in ("doi", "pmid") if reported.get(k)}
    for link in row["study_links"]:
        if link.get("role") == "reported" and link.get("id_value"):
            keys.add(identifier_key(link["id_kind"], link["id_value"]))
    return GoldPage(
        row["file"], row["headline"], row["language"], row["kind"], row["expected"],
        frozenset(keys), reported.get("pmid"), line,
    )  # fmt: skip


def load_gold(folder: Path) -> list[GoldPage]:
    """The labelled pages of ``folder`` (its ``gold.jsonl``), in file order."""
    path = folder / "gold.jsonl"
    if not path.is_file():
        raise IrforgeError(f"{path}: no gold.jsonl in the labelled folder")
    pages = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(text)
        except json.JSONDecodeError as err:
            raise IrforgeError(f"{where}: not JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise IrforgeError(f"{where}: a JSON object per line, not {type(row).__name__}")
        pages.append(_page(row, folder, where, number))
    return pages
