"""The journal / publisher domain list of the ``journal_links`` stage (paper 003 §2: links to
journal domains decide which news articles cite research).

Two kinds of data file, both in the repository:

- metapub's publisher files (``data/crossgenre/journal-domains/*.yaml``, Apache-2.0, see its
  ``NOTICE.md``): every host in a URL template (``https://www.nejm.org/doi/pdf/{doi}``) and
  every ``host:`` value; a placeholder label is dropped (``{host}.ahajournals.org`` gives
  ``ahajournals.org``). ``schema.yaml`` documents the format and is skipped.
- irforge's curated file (``data/crossgenre/journal_domains.yaml``, CC0-1.0): literature
  indexes (doi.org, PubMed, PMC, Europe PMC), journals metapub lacks, trial registries
  (never a publication) and hosts to exclude.

A domain matches itself and its subdomains; a leading ``www.`` of a listed host is dropped.
The config's ``exclude_domains`` and the curated ``exclude`` win over every list.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from irforge.config import StrictModel, format_validation_error
from irforge.errors import ConfigError

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "crossgenre"
METAPUB_DIR = DATA_DIR / "journal-domains"
CURATED_FILE = DATA_DIR / "journal_domains.yaml"

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader when built with it
_URL_HOST = re.compile(r"https?://([^/\s'\"]+)")
_HOST = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)+$")
_PLACEHOLDER_LABEL = re.compile(r"^(?:\{[^}]*\}|\[[^\]]*\])\.")


class _Journal(StrictModel):
    domain: str
    note: str = ""


class _Registry(StrictModel):
    domain: str
    name: str
    path: str = ""  # a part of the path, for a registry under a general host (apps.who.int/trialsearch)


class _Curated(StrictModel):
    source: str
    licence: str
    indexes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    journals: tuple[_Journal, ...] = ()
    trial_registries: tuple[_Registry, ...] = ()
    exclude: tuple[_Journal, ...] = ()


@dataclass(frozen=True)
class DomainMatch:
    """A listed domain that a host belongs to, and the list it came from (``metapub nejm.yaml``)."""

    domain: str
    source: str


def clean_domain(value: str) -> str | None:
    """``value`` as a matchable domain: lower-case, no port, no leading ``www.``; None if not a host."""
    host = _PLACEHOLDER_LABEL.sub("", value.strip().lower()).split(":", 1)[0].rstrip(".")
    host = host.removeprefix("www.")
    return host if _HOST.match(host) else None


def _parents(host: str) -> Iterator[str]:
    """``host`` then each parent domain with at least two labels (a.b.c.d: a.b.c.d, b.c.d, c.d)."""
    labels = host.lower().rstrip(".").split(".")
    for start in range(max(len(labels) - 1, 1)):
        yield ".".join(labels[start:])


class DomainList:
    """Which listed journal, index or registry a host belongs to (longest listed suffix)."""

    def __init__(
        self,
        journals: dict[str, str],
        indexes: dict[str, tuple[str, ...]],
        registries: Sequence[tuple[str, str, str]],
        exclude: Sequence[str],
    ) -> None:
        self._journals = journals
        self._indexes = indexes
        self._registries = list(registries)
        self._exclude = frozenset(exclude)

    def excluded(self, host: str) -> bool:
        """``host`` is under an excluded domain: its links are never study links."""
        return not self._exclude.isdisjoint(_parents(host))

    def journal(self, host: str) -> DomainMatch | None:
        """The journal/publisher domain of ``host`` (None: not listed, or excluded)."""
        if self.excluded(host):
            return None
        for parent in _parents(host):
            if parent in self._journals:
                return DomainMatch(parent, self._journals[parent])
        return None

    def index_kinds(self, host: str) -> tuple[str, ...]:
        """The index kinds (doi, pubmed, pmc, europepmc) whose hosts include ``host``, in list order."""
        parents = set(_parents(host))
        return tuple(kind for kind, hosts in self._indexes.items() if parents & set(hosts))

    def registry(self, host: str, path: str) -> str | None:
        """The trial registry a URL of ``host`` and ``path`` belongs to, by name (None: none)."""
        parents = set(_parents(host))
        for domain, part, name in self._registries:
            if domain in parents and part in path.lower():
                return name
        return None

    def __len__(self) -> int:
        return len(self._journals)


def _yaml(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the domain list: {err.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not a valid YAML domain list: {err}".replace("\n", " ")) from None


def _strings(value: Any, key: str | None = None) -> Iterator[tuple[str | None, str]]:
    """Every string in a YAML value with the mapping key it sits under."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, str(k))
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, key)
    elif isinstance(value, str):
        yield key, value


def metapub_hosts(path: Path) -> list[str]:
    """The hosts of one metapub publisher file: URL-template hosts and ``host:`` values."""
    hosts: list[str] = []
    for key, text in _strings(_yaml(path)):
        found = [m.group(1) for m in _URL_HOST.finditer(text)]
        if key == "host":
            found.append(text)
        hosts.extend(h for h in map(clean_domain, found) if h is not None)
    return list(dict.fromkeys(hosts))


def metapub_files(folder: Path) -> list[Path]:
    """The publisher files of a metapub ``journals`` folder, sorted (``schema.yaml`` skipped)."""
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder of metapub domain files")
    return sorted(p for p in folder.glob("*.yaml") if p.name != "schema.yaml")


def _curated(path: Path) -> _Curated:
    try:
        return _Curated.model_validate(_yaml(path))
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, str(path)).replace("\n", "; ")) from None


def _clean_all(values: Sequence[str], where: str) -> list[str]:
    cleaned = []
    for value in values:
        domain = clean_domain(value)
        if domain is None:
            raise ConfigError(f"{where}: {value!r} is not a domain name")
        cleaned.append(domain)
    return cleaned


def load_domains(
    metapub: Path = METAPUB_DIR,
    curated: Path = CURATED_FILE,
    extra: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> DomainList:
    """The domain list from metapub's folder, the curated file and the config's additions.

    A domain in several lists keeps the first source: curated, then metapub's files in name
    order, then ``extra`` (the config's ``extra_domains``)."""
    listed = _curated(curated)
    journals: dict[str, str] = {}
    for entry in listed.journals:
        for domain in _clean_all([entry.domain], str(curated)):
            journals.setdefault(domain, f"curated {curated.name}")
    for path in metapub_files(metapub):
        for domain in metapub_hosts(path):
            journals.setdefault(domain, f"metapub {path.name}")
    for domain in _clean_all(extra, "extra_domains"):
        journals.setdefault(domain, "config extra_domains")
    indexes = {kind: tuple(_clean_all(hosts, str(curated))) for kind, hosts in listed.indexes.items()}
    registries = [
        (domain, r.path.lower(), r.name)
        for r in listed.trial_registries
        for domain in _clean_all([r.domain], str(curated))
    ]
    excluded = _clean_all([e.domain for e in listed.exclude], str(curated)) + _clean_all(
        exclude, "exclude_domains"
    )
    return DomainList(journals, indexes, registries, excluded)


def describe_domains(metapub: Path = METAPUB_DIR, curated: Path = CURATED_FILE) -> dict[str, str]:
    """Fingerprint material: the sha256 of every domain file (name → digest)."""
    files = [curated, *metapub_files(metapub)]
    out = {}
    for path in files:
        try:
            out[f"{path.parent.name}/{path.name}"] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as err:
            raise ConfigError(f"{path}: cannot read the domain list: {err.strerror}") from None
    return out
