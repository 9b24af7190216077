"""Which PubMed source a stage uses, and what of it enters the stage's fingerprint.

``engine: local`` (the default) reads MEDLINE / PubMed XML files (:mod:`tasks.common.pubmed.local`);
``engine: eutils`` asks NCBI (:mod:`tasks.common.pubmed.eutils`) with a reply cache in the
stage's cache folder. A stage that uses PubMed has a ``pubmed: PubmedConfig`` field, puts
:func:`describe_pubmed` in its ``inputs`` and opens :func:`pubmed_source` in ``process``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport, digest_file
from tasks.common.pubmed.eutils import EutilsPubmed
from tasks.common.pubmed.local import load_local
from tasks.common.pubmed.port import PubmedSource

MEDLINE_SUFFIXES = (".xml", ".xml.gz")


class EutilsConfig(StrictModel):
    """NCBI E-utilities (https://www.ncbi.nlm.nih.gov/books/NBK25497/) and the PMC ID converter
    (https://pmc.ncbi.nlm.nih.gov/tools/id-converter-api/); the key is read from the environment."""

    base_url: Transport[str] = "https://eutils.ncbi.nlm.nih.gov/entrez/eutils/"
    idconv_url: Transport[str] = "https://pmc.ncbi.nlm.nih.gov/tools/idconv/api/v1/articles/"
    api_key_env: Transport[str] = "NCBI_API_KEY"
    # Who is asking (NCBI's ``tool``/``email`` parameters): not what is answered.
    tool: Transport[str] = "irforge"
    email: Transport[str | None] = None
    requests_per_second: Transport[float | None] = None  # None: 3/s, 10/s with a key
    timeout_s: Transport[float] = 30
    max_attempts: Transport[int] = 5
    batch_size: Transport[int] = 200


class PubmedConfig(StrictModel):
    engine: Literal["local", "eutils"] = "local"
    # local: MEDLINE/PubMed XML(.gz) files or folders (searched recursively), relative to the
    # config file, read in the order listed (a folder's files in path order: baseline first).
    medline: list[str] = Field(default_factory=list)
    eutils: EutilsConfig = EutilsConfig()


def medline_files(config: PubmedConfig, base_dir: Path) -> list[tuple[Path, str]]:
    """The MEDLINE files to read, in order, as ``(path, name relative to base_dir)``; a
    missing path or an empty list is a :class:`ConfigError`."""
    if not config.medline:
        raise ConfigError("pubmed.medline is empty: list MEDLINE/PubMed XML files or folders (engine local)")
    out: list[tuple[Path, str]] = []
    for entry in config.medline:
        path = base_dir / entry
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(MEDLINE_SUFFIXES))
            if not found:
                raise ConfigError(f"pubmed.medline: {path} holds no .xml or .xml.gz file")
            out.extend((p, _shown(p, base_dir)) for p in found)
        elif path.is_file():
            out.append((path, _shown(path, base_dir)))
        else:
            raise ConfigError(f"pubmed.medline: {path} does not exist")
    return out


def _shown(path: Path, base_dir: Path) -> str:
    try:
        return path.relative_to(base_dir).as_posix()
    except ValueError:
        return path.as_posix()


def describe_pubmed(config: PubmedConfig, base_dir: Path) -> dict[str, Any]:
    """For a stage's fingerprint: the engine and, for local files, each file's digest in order."""
    if config.engine == "eutils":
        return {"engine": "eutils"}
    return {
        "engine": "local",
        "files": [[name, digest_file(path)] for path, name in medline_files(config, base_dir)],
    }


def pubmed_source(config: PubmedConfig, base_dir: Path, cache_dir: Path | None) -> PubmedSource:
    """The configured source: local files (read once per process), or E-utilities with the reply
    cache ``<cache_dir>/pubmed_replies.sqlite`` (none while only planning)."""
    if config.engine == "local":
        return load_local(medline_files(config, base_dir))
    return EutilsPubmed(config.eutils, None if cache_dir is None else cache_dir / "pubmed_replies.sqlite")
