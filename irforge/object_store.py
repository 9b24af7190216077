"""An artifact root on an object store (``s3://``, ``gs://``, ``memory://``) through fsspec (issue 19).

Layout under the URL, beside :mod:`irforge.artifacts`' own::

    <url>/<flow>/<stage>/<fingerprint>/v-<uuid>/...       one uploaded version (parts, files/...)
    <url>/<flow>/<stage>/<fingerprint>/manifest.json      the commit marker, written LAST
    <url>/<flow>/runs/<run_id>.json, <url>/<flow>/latest.json   run records (irforge/runs.py)

The marker is the stage manifest plus ``"data": "v-<uuid>"``, the version it publishes; a
reader trusts only it, so an upload killed halfway leaves an unreferenced version, never a
visible artifact. One PUT replaces it (atomic on S3: https://docs.aws.amazon.com/AmazonS3/latest/userguide/Welcome.html#ConsistencyModel).
A replaced version is deleted ``grace_s`` after the rerun that replaced it, by that process;
versions nobody references (a killed upload, a process gone before its grace ended, two hosts
publishing the same fingerprint at once) go with :meth:`ObjectArtifactStore.gc`.

Artifacts are read from a local mirror (``root``): ``find`` downloads the version the marker
names into it, renamed into place whole. Locks, ``.work-*`` chunks, ``.tmp-*`` assembly and
the request caches stay there too: two hosts computing one fingerprint both compute it and
the last marker wins (stages are deterministic). Credentials come from the environment the
way botocore reads it (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...:
https://docs.aws.amazon.com/sdkref/latest/guide/settings-reference.html) plus
``IRFORGE_STORAGE_OPTIONS`` (a JSON object of fsspec storage options); the store keeps none
of them, and pickles as its URL.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import threading
import time
import urllib.parse
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import fsspec  # type: ignore[import-untyped, unused-ignore]

from irforge.artifacts import MANIFEST, Artifact, ArtifactStore
from irforge.errors import ArtifactError

log = logging.getLogger("irforge")

OPTIONS_ENV = "IRFORGE_STORAGE_OPTIONS"
CACHE_ENV = "IRFORGE_CACHE"
DEFAULT_GRACE_S = 300.0
_LEFTOVER_DOWNLOAD_S = 3600.0
_DOWNLOAD_TRIES = 3
# The package each protocol needs, and how to install it (pyproject.toml: s3fs is a
# dependency, gcsfs the extra "gcs").
_PACKAGES = {
    "s3": ("s3fs", "pip install s3fs"),
    "s3a": ("s3fs", "pip install s3fs"),
    "gs": ("gcsfs", "pip install irforge[gcs]"),
    "gcs": ("gcsfs", "pip install irforge[gcs]"),
    "az": ("adlfs", "pip install adlfs"),
    "abfs": ("adlfs", "pip install adlfs"),
    "abfss": ("adlfs", "pip install adlfs"),
}


def storage_options() -> dict[str, Any]:
    """``$IRFORGE_STORAGE_OPTIONS`` as a dict (errors never quote it: it may hold secrets)."""
    raw = os.environ.get(OPTIONS_ENV, "").strip()
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except ValueError:
        options = None
    if not isinstance(options, dict):
        raise ArtifactError(f"{OPTIONS_ENV} must be a JSON object of fsspec storage options")
    return options


def filesystem(protocol: str) -> Any:
    """The fsspec filesystem for ``protocol`` (fsspec caches instances, anew after a fork)."""
    try:
        return fsspec.filesystem(protocol, **storage_options())
    except ImportError:
        package, how = _PACKAGES.get(protocol, (f"fsspec's backend for {protocol}://", "see fsspec's docs"))
        raise ArtifactError(f"an artifact root on {protocol}:// needs the package {package}: {how}") from None
    except ValueError as err:
        if "protocol" in str(err).lower():
            raise ArtifactError(f"fsspec knows no protocol {protocol}:// for an artifact root") from None
        raise


def default_mirror(url: str) -> Path:
    """``$IRFORGE_CACHE/artifacts/<hash of url>`` (default cache: ``~/.cache/irforge``)."""
    base = Path(os.environ.get(CACHE_ENV) or "~/.cache/irforge").expanduser()
    return base / "artifacts" / hashlib.sha256(url.encode()).hexdigest()[:16]


def manifest_bytes(data: dict[str, Any]) -> bytes:
    """JSON as :func:`irforge.artifacts.write_json_atomic` writes it (same bytes everywhere)."""
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _local_version(path: Path) -> str | None:
    try:
        data = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    version = data.get("data") if isinstance(data, dict) else None
    return version if isinstance(version, str) else None


def _mtime(info: dict[str, Any]) -> float | None:
    for key in ("LastModified", "mtime", "created", "updated"):
        value = info.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, int | float):
            return float(value)
    return None


class ObjectArtifactStore(ArtifactStore):
    """Artifacts under an fsspec URL, read and written through the local mirror ``root``."""

    def __init__(self, url: str, mirror: Path | None = None, *, grace_s: float = DEFAULT_GRACE_S) -> None:
        parts = urllib.parse.urlsplit(url)
        if "@" in parts.netloc:
            raise ArtifactError(
                f"an artifact URL carries no credentials ({parts.scheme}://...@{parts.hostname}): "
                f"set them in the environment or {OPTIONS_ENV}"
            )
        self.protocol = parts.scheme.lower()
        fs = filesystem(self.protocol)  # fails now, with the package to install, when it is missing
        self._path = str(fs._strip_protocol(url)).rstrip("/")
        self._url = f"{self.protocol}://{url.split('://', 1)[1].strip('/')}"
        self._mirror = mirror
        self.grace_s = grace_s
        super().__init__(mirror if mirror is not None else default_mirror(self._url))

    @property
    def url(self) -> str:
        return self._url

    @property
    def fs(self) -> Any:
        return filesystem(self.protocol)

    def __repr__(self) -> str:
        return f"ObjectArtifactStore({self._url!r}, mirror={str(self.root)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # The URL only: the unpickling host reads its own credentials and default mirror.
        return (_reopen, (self._url, self._mirror, self.grace_s))

    def location(self, flow: str, stage: str, fingerprint: str) -> str:
        return f"{self._url}/{flow}/{stage}/{fingerprint}"

    def _remote(self, *parts: str) -> str:
        return "/".join([self._path, *parts])

    def _read(self, path: str) -> bytes | None:
        try:
            data: bytes = self.fs.cat_file(path)
        except FileNotFoundError:
            return None
        return data

    def find(self, flow: str, stage: str, fingerprint: str) -> Artifact | None:
        for _ in range(_DOWNLOAD_TRIES):
            raw = self._read(self._remote(flow, stage, fingerprint, MANIFEST))
            if raw is None:
                return None
            version = json.loads(raw).get("data")
            if not isinstance(version, str):
                raise ArtifactError(
                    f"{self._url}/{flow}/{stage}/{fingerprint}/{MANIFEST} names no uploaded version "
                    '("data"): publish through irforge, not by copying an artifact folder'
                )
            local = self.stage_dir(flow, stage) / fingerprint
            if _local_version(local) == version:
                return Artifact(local, (self._url, version))
            found = self.download(flow, stage, fingerprint, version, raw)
            if found is not None:
                return found
            # That version was replaced and deleted while we read it: read the marker again.
        raise ArtifactError(f"{self._url}/{flow}/{stage}/{fingerprint} keeps changing while it is read")

    def manifest(self, flow: str, stage: str, fingerprint: str) -> dict[str, Any] | None:
        raw = self._read(self._remote(flow, stage, fingerprint, MANIFEST))
        return json.loads(raw) if raw is not None else None

    def download(
        self, flow: str, stage: str, fingerprint: str, version: str, raw: bytes | None = None
    ) -> Artifact | None:
        """Copy ``version`` into the mirror (replacing the copy there); None when it is gone.

        ``raw``: the commit marker's bytes (default: rebuilt from the version's own manifest).
        """
        prefix = self._remote(flow, stage, fingerprint, version)
        self.fs.invalidate_cache(prefix)
        keys = sorted(str(self.fs._strip_protocol(k)) for k in self.fs.find(prefix))
        keys = [k for k in keys if k.startswith(prefix + "/")]
        if not keys:
            return None
        directory = self.stage_dir(flow, stage)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".dl-{fingerprint}-{uuid.uuid4().hex[:8]}"
        locals_ = [tmp / k[len(prefix) + 1 :] for k in keys]
        try:
            for path in {p.parent for p in locals_} | {tmp}:
                path.mkdir(parents=True, exist_ok=True)
            self.fs.get(keys, [str(p) for p in locals_])
            if raw is None:
                inner = json.loads((tmp / MANIFEST).read_text(encoding="utf-8"))
                raw = manifest_bytes({**inner, "data": version})
            (tmp / MANIFEST).write_bytes(raw)
        except FileNotFoundError:
            _rmtree(tmp)
            return None
        except BaseException:
            _rmtree(tmp)
            raise
        log.info("downloaded %s/%s/%s/%s %s", self._url, flow, stage, fingerprint, version)
        return self._install(tmp, flow, stage, fingerprint, version)

    def _install(self, tmp: Path, flow: str, stage: str, fingerprint: str, version: str) -> Artifact:
        """Rename ``tmp`` into the mirror (exchanged with an older copy, as a local rerun is)."""
        try:
            final = ArtifactStore.publish(self, tmp, flow, stage, fingerprint).path
        except OSError as err:  # another process installed a copy in between: exchange with it
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            final = ArtifactStore.publish(self, tmp, flow, stage, fingerprint).path
        return Artifact(final, (self._url, version))

    def publish(self, tmp: Path, flow: str, stage: str, fingerprint: str) -> Artifact:
        """Upload ``tmp`` as a new version, then write the marker naming it (the commit point)."""
        version = f"v-{uuid.uuid4().hex}"
        prefix = self._remote(flow, stage, fingerprint, version)
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        self.fs.put([str(p) for p in files], [f"{prefix}/{p.relative_to(tmp).as_posix()}" for p in files])
        inner = json.loads((tmp / MANIFEST).read_text(encoding="utf-8"))
        raw = manifest_bytes({**inner, "data": version})
        marker = self._remote(flow, stage, fingerprint, MANIFEST)
        previous = self._read(marker)
        self._commit(marker, raw)
        log.info("published %s/%s/%s/%s %s", self._url, flow, stage, fingerprint, version)
        if previous is not None:
            old = json.loads(previous).get("data")
            if isinstance(old, str) and old != version:
                self._delete_later(self._remote(flow, stage, fingerprint, old))
        (tmp / MANIFEST).write_bytes(raw)
        return self._install(tmp, flow, stage, fingerprint, version)

    def _commit(self, marker: str, raw: bytes) -> None:
        self.fs.pipe_file(marker, raw)

    def _delete_later(self, prefix: str) -> None:
        timer = threading.Timer(self.grace_s, self._delete_now, (prefix,))
        timer.daemon = True  # a process gone before the grace ends leaves it to gc()
        timer.start()

    def _delete_now(self, prefix: str) -> None:
        try:
            self.fs.rm(prefix, recursive=True)
        except FileNotFoundError:
            pass
        except Exception as err:  # a daemon thread: say it, gc() will retry
            log.warning("could not delete the replaced version %s: %s", prefix, type(err).__name__)

    def remove_leftovers(self, flow: str, stage: str, fingerprint: str) -> None:
        """Also the mirror's downloads a killed process left (an hour old: none still running)."""
        super().remove_leftovers(flow, stage, fingerprint)
        cutoff = time.time() - _LEFTOVER_DOWNLOAD_S
        for path in self.stage_dir(flow, stage).glob(f".dl-{fingerprint}-*"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < cutoff:
                    _rmtree(path)

    def fingerprints(self, flow: str, stage: str) -> list[str]:
        base = self._remote(flow, stage)
        self.fs.invalidate_cache(base)
        found = (str(self.fs._strip_protocol(p)) for p in self.fs.glob(f"{base}/*/{MANIFEST}"))
        return sorted(p.rsplit("/", 2)[-2] for p in found)

    def write_record(self, relative: str, data: Any) -> Path:
        """Written in the mirror, then uploaded (a failed upload is logged: records are not artifacts)."""
        path = super().write_record(relative, data)
        try:
            self.fs.pipe_file(self._remote(relative), path.read_bytes())
        except Exception as err:  # the run goes on; the local record stays
            log.warning("could not upload %s to %s: %s", relative, self._url, type(err).__name__)
        return path

    def read_record(self, relative: str) -> Any:
        raw = self._read(self._remote(relative))
        if raw is None:
            return super().read_record(relative)
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def gc(self, grace_s: float | None = None, *, dry_run: bool = False) -> list[str]:
        """Delete the versions no marker names, untouched for ``grace_s`` (default: the store's);
        return their prefixes (``dry_run``: delete nothing). Safe beside running publishers: a
        live upload is younger."""
        grace = self.grace_s if grace_s is None else grace_s
        self.fs.invalidate_cache(self._path)
        newest: dict[str, float] = {}
        markers: list[str] = []
        for path, info in self.fs.find(self._path, detail=True).items():
            parts = str(self.fs._strip_protocol(path))[len(self._path) + 1 :].split("/")
            if len(parts) == 4 and parts[3] == MANIFEST:
                markers.append(self._remote(*parts))
            elif len(parts) >= 5 and parts[3].startswith("v-"):
                prefix = self._remote(*parts[:4])
                stamp = _mtime(info)
                newest[prefix] = max(newest.get(prefix, 0.0), time.time() if stamp is None else stamp)
        for marker in markers:
            raw = self._read(marker)
            if raw is not None:
                newest.pop(f"{marker.rsplit('/', 1)[0]}/{json.loads(raw).get('data')}", None)
        removed = sorted(p for p, stamp in newest.items() if time.time() - stamp >= grace)
        for prefix in [] if dry_run else removed:
            self._delete_now(prefix)
        return removed


def materialise(path: Path, url: str, version: str | None) -> Artifact:
    """The artifact mirrored at ``path`` on the host that pickled it, on this host: its local
    copy when it holds ``version``, else downloaded from ``url`` into this host's mirror
    (that version while it exists, else the one the marker names now)."""
    if (path / MANIFEST).is_file() and _local_version(path) == version:
        return Artifact(path, (url, version))
    mirror = path.parents[2]  # that host's mirror, when this host has the folder too (a shared one)
    store = ObjectArtifactStore(url, mirror if mirror.is_dir() else None)
    flow, stage, fingerprint = path.parent.parent.name, path.parent.name, path.name
    local = store.stage_dir(flow, stage) / fingerprint
    if version is not None and _local_version(local) == version:
        return Artifact(local, (store.url, version))
    found = store.download(flow, stage, fingerprint, version) if version is not None else None
    found = found or store.find(flow, stage, fingerprint)
    if found is None:
        raise ArtifactError(f"no artifact {flow}/{stage}/{fingerprint} under {store.url}")
    return found


def _reopen(url: str, mirror: Path | None, grace_s: float) -> ObjectArtifactStore:
    return ObjectArtifactStore(url, mirror, grace_s=grace_s)


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
