"""The labelled passage set: documents, their source blocks and a label per block.

Layout of a gold folder (``data/passage_gold/``, described in its README):

- ``SOURCES.json``: one entry per document — ``file``, ``format`` (``jats``/``html``),
  ``publisher``, licence and origin;
- ``docs/<file>.gz``: the document's bytes, gzipped;
- ``labels/<file>.labels``: ``prose`` lines listing block indexes and ranges
  (``prose 40 42 44-50  # abstract``); every other block is chrome. The first line says
  how many blocks the labeller saw (``# <file>: 612 blocks``): a document whose blocks
  (:mod:`tasks.cure.quality.blocks`) no longer number that many is refused, since its
  labels would point at the wrong text.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from irforge.errors import IrforgeError
from tasks.common.text.sniff import sniff
from tasks.cure.quality.blocks import SourceBlock, html_blocks, jats_blocks

LABELS = ("prose", "chrome")
_COUNT = re.compile(r"^#.*?(\d+)\s+blocks")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class GoldDoc:
    name: str
    file: str
    fmt: str
    publisher: str
    folder: Path

    @cached_property
    def data(self) -> bytes:
        return gzip.decompress((self.folder / "docs" / f"{self.file}.gz").read_bytes())

    @cached_property
    def blocks(self) -> list[SourceBlock]:
        data = self.data
        if self.fmt == "jats":
            return jats_blocks(data)
        return html_blocks(data, sniff(self.file, data).encoding)

    @cached_property
    def labels(self) -> list[str]:
        return read_labels(self.folder / "labels" / f"{self.file}.labels", len(self.blocks))


def load_gold(folder: Path) -> list[GoldDoc]:
    """The documents of a gold folder, in SOURCES.json order."""
    sources = folder / "SOURCES.json"
    try:
        entries = json.loads(sources.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise IrforgeError(f"{sources}: cannot read the gold set's sources: {err}") from None
    docs = []
    for number, entry in enumerate(entries, 1):
        missing = [k for k in ("file", "format", "publisher") if not entry.get(k)]
        if missing or entry["format"] not in ("jats", "html"):
            raise IrforgeError(f"{sources} entry {number}: needs file, format (jats|html) and publisher")
        name = re.sub(r"\.(?:nxml|xml|html?)$", "", entry["file"])
        docs.append(GoldDoc(name, entry["file"], entry["format"], entry["publisher"], folder))
    return docs


def read_labels(path: Path, n_blocks: int) -> list[str]:
    """One label per block from a ``.labels`` file (see the module docstring)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise IrforgeError(f"{path}: cannot read labels: {err.strerror}") from None
    declared = _COUNT.match(lines[0]) if lines else None
    if declared is None:
        raise IrforgeError(
            f"{path}:1: the first line must say how many blocks were labelled ('# f: N blocks')"
        )
    if int(declared.group(1)) != n_blocks:
        raise IrforgeError(
            f"{path}:1: labelled {declared.group(1)} blocks but the document has {n_blocks}: relabel it"
        )
    labels = ["chrome"] * n_blocks
    for number, line in enumerate(lines, 1):
        content = line.split("#", 1)[0].split()
        if not content:
            continue
        if content[0] != "prose":
            raise IrforgeError(f"{path}:{number}: a line starts with 'prose' (other blocks are chrome)")
        for item in content[1:]:
            match = _RANGE.match(item)
            first = int(match.group(1)) if match else -1
            last = int(match.group(2) or first) if match else -1
            if not match or not 0 <= first <= last < n_blocks:
                raise IrforgeError(
                    f"{path}:{number}: {item!r} is not a block or range within 0-{n_blocks - 1}"
                )
            labels[first : last + 1] = ["prose"] * (last - first + 1)
    return labels
