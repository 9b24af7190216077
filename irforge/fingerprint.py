"""Content addressing: canonical JSON and digests.

A stage's fingerprint is the digest of its *material*: stage name and version, its
canonical config, its upstream fingerprints and the digests of the external files it
reads. Anything that changes the output must be in the material; anything that only
changes how the work is scheduled (chunk sizes, paths of the artifact root) must not.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

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
