"""The shared samples the benchmarks are built from (``../shared/samples``): their
paragraphs, passages made of their sentences, and the released EvidenceBench dev set."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

from lxml import etree, html

from bench.common import REPO

SAMPLES = REPO.parent / "shared" / "samples"
EVIDENCEBENCH_DEV = SAMPLES / "evidencebench" / "evidencebench_dev_set.json"
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")


def sample_passages(samples: Path = SAMPLES) -> list[str]:
    """Every non-empty <p> (whitespace collapsed) of the JATS articles/reviews and HTML pages."""
    out: list[str] = []
    for sub in ("articles", "reviews"):
        directory = samples / sub
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            if path.suffix not in (".xml", ".nxml"):
                continue
            parser = etree.XMLParser(recover=True, resolve_entities=False, no_network=True)
            root = etree.parse(str(path), parser).getroot()
            for el in root.iter():
                if isinstance(el.tag, str) and etree.QName(el).localname == "p":
                    text = " ".join("".join(el.itertext()).split())
                    if text:
                        out.append(text)
    html_dir = samples / "html"
    if html_dir.is_dir():
        for path in sorted(html_dir.glob("*.html")):
            root = html.document_fromstring(path.read_bytes(), parser=html.HTMLParser(encoding="utf-8"))
            out.extend(t for p in root.iter("p") if (t := " ".join(p.text_content().split())))
    return out


def build_passages(paragraphs: Sequence[str], n: int, rng: random.Random) -> list[str]:
    """``n`` distinct passages of 50-150 words: runs of sentences from different paragraphs."""
    pools = [s for p in paragraphs if (s := [x for x in SENTENCE.split(p) if len(x.split()) >= 3])]
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        target, words, parts = rng.randint(50, 150), 0, []
        while words < target:
            pool = rng.choice(pools)
            i = rng.randrange(len(pool))
            for sentence in pool[i : i + rng.randint(1, 3)]:
                parts.append(sentence)
                words += len(sentence.split())
        text = " ".join(parts)
        if words <= 170 and text not in seen:
            seen.add(text)
            out.append(text)
    return out
