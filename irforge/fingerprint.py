"""Content addressing: canonical JSON and digests.

A stage's fingerprint is the digest of its *material*: stage name and version, its
config's :func:`fingerprint_view`, its upstream fingerprints and the digests of the
external files it reads. Anything that changes the output must be in the material;
anything that only says how the work is reached or scheduled (a server's URL, the name of
a key's variable, timeouts, retries, concurrency, rate limits, batch sizes, chunk sizes,
paths of the artifact root) must not: such config fields are declared ``Transport[...]``
and left out, so moving a server or raising a timeout keeps every artifact fresh.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel
from pydantic.fields import FieldInfo

FINGERPRINT_CHARS = 16  # 64 bits of blake2b: collisions are not a practical concern here
_READ_BLOCK = 1 << 20


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no insignificant whitespace, so equal values hash equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest_bytes(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def digest_file(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with path.open("rb") as fh:
        while block := fh.read(_READ_BLOCK):
            h.update(block)
    return h.hexdigest()


def fingerprint(material: dict[str, Any]) -> str:
    return digest_bytes(canonical_json(material).encode())[:FINGERPRINT_CHARS]


@dataclass(frozen=True)
class TransportMarker:
    """Field metadata: the field says how a result is reached, not what it is (see module doc)."""


TRANSPORT = TransportMarker()
T = TypeVar("T")
Transport = Annotated[T, TRANSPORT]
"""``timeout_s: Transport[float] = Field(...)``: a config field left out of fingerprints."""


def is_transport(field: FieldInfo) -> bool:
    return any(isinstance(item, TransportMarker) for item in field.metadata)


def fingerprint_view(config: BaseModel) -> dict[str, Any]:
    """``config`` as JSON without its :data:`Transport` fields, at any depth (nested models,
    and models inside lists, tuples and dicts)."""
    exclude = _transport_fields(config)
    view: dict[str, Any] = config.model_dump(mode="json", exclude=exclude or None)
    return view


def _transport_fields(value: Any) -> Any:
    """Pydantic's ``exclude`` spec of the transport fields under ``value`` ({} when none)."""
    if isinstance(value, BaseModel):
        spec: dict[Any, Any] = {}
        for name, field in type(value).model_fields.items():
            inner = True if is_transport(field) else _transport_fields(getattr(value, name))
            if inner:
                spec[name] = inner
        return spec
    if isinstance(value, list | tuple):
        return {i: inner for i, item in enumerate(value) if (inner := _transport_fields(item))}
    if isinstance(value, Mapping):
        return {key: inner for key, item in value.items() if (inner := _transport_fields(item))}
    return {}
