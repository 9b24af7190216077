"""DeepL glossaries as irforge reads them: CSV files of medical terms per language pair.

Read and digested without a key or a server, so that a stage can fingerprint the glossaries
a DeepL run would use even where no DeepL key is set
(:func:`tasks.common.translate.config.describe`). Term rules are the client's own
(``deepl.util.validate_glossary_term``).
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import deepl.util

from irforge.errors import ConfigError
from irforge.fingerprint import canonical_json
from tasks.common.translate.port import TranslationError, check_pair

Glossaries = Mapping[str, Path | str] | Mapping[tuple[str, str], Path | str]
"""Language pair (``("en", "fr")`` or ``"en-fr"``) → CSV file (``source_term,target_term``)."""


def pair_name(pair: str | tuple[str, str]) -> tuple[str, str]:
    if isinstance(pair, str):
        parts = tuple(pair.replace("_", "-").split("-"))
        if len(parts) != 2:
            raise ConfigError(f"glossary pair {pair!r}: write it as 'source-target', e.g. 'en-fr'")
        pair = (parts[0], parts[1])
    source, target = pair[0].lower(), pair[1].lower()
    try:
        check_pair(source, target)
    except TranslationError as err:
        raise ConfigError(f"glossary pair {source}-{target}: {err}") from None
    return source, target


def read_glossary_csv(path: Path) -> dict[str, str]:
    """Read a glossary CSV with the header ``source_term,target_term`` (UTF-8, BOM allowed).

    Blank rows are skipped, terms stripped; a source term given twice with different
    targets, a missing column or a term DeepL would refuse is a :class:`ConfigError`.
    """
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            columns = [c.strip() for c in reader.fieldnames or []]
            if columns[:2] != ["source_term", "target_term"]:
                raise ConfigError(
                    f"glossary {path}: the first line must be 'source_term,target_term', found {','.join(columns)!r}"
                )
            reader.fieldnames = columns
            entries: dict[str, str] = {}
            for line, row in enumerate(reader, start=2):
                src, tgt = (row.get("source_term") or "").strip(), (row.get("target_term") or "").strip()
                if not src and not tgt:
                    continue
                try:
                    deepl.util.validate_glossary_term(src)
                    deepl.util.validate_glossary_term(tgt)
                except ValueError as err:
                    raise ConfigError(f"glossary {path} line {line}: {err}") from None
                if entries.get(src, tgt) != tgt:
                    raise ConfigError(
                        f"glossary {path} line {line}: {src!r} is mapped to both {entries[src]!r} and {tgt!r}; keep one"
                    )
                entries[src] = tgt
    except OSError as err:
        raise ConfigError(f"glossary {path}: cannot read it ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"glossary {path}: not UTF-8; save it as UTF-8 CSV") from None
    if not entries:
        raise ConfigError(f"glossary {path}: no entries; add rows or drop the file from the config")
    return entries


def read_glossaries(glossaries: Glossaries | None) -> dict[tuple[str, str], dict[str, str]]:
    """Every pair's entries, read and checked (:func:`read_glossary_csv`); a pair given twice
    is a :class:`ConfigError`."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for pair, csv_path in (glossaries or {}).items():
        key = pair_name(pair)
        if key in out:
            raise ConfigError(f"glossary pair {key[0]}-{key[1]} is given twice; keep one file")
        out[key] = read_glossary_csv(Path(csv_path))
    return out


def glossary_digests(entries: Mapping[tuple[str, str], Mapping[str, str]]) -> dict[str, str]:
    """``{"en-fr": sha256 of the sorted entries}``: what a glossary changes, for fingerprints."""
    return {f"{s}-{t}": digest(sorted(e.items())) for (s, t), e in sorted(entries.items())}


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
