"""The shared samples the benchmarks are built from (``../shared/samples``): their
paragraphs, passages made of their sentences, the distinct real passages of the samples and
of ``data/`` together (a benchmark's headline input: no passage twice, issue 26 item 5), and
the released EvidenceBench dev set."""

from __future__ import annotations

import csv
import gzip
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


def _xml_paragraphs(paths: Sequence[Path], tags: tuple[str, ...] = ("p",)) -> list[str]:
    """Every non-empty element named in ``tags`` (whitespace collapsed) of these XML files (``.gz`` read as such)."""
    out: list[str] = []
    parser = etree.XMLParser(recover=True, resolve_entities=False, no_network=True, huge_tree=True)
    for path in paths:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        root = etree.fromstring(data, parser)
        if root is None:
            continue
        for el in root.iter():
            named = isinstance(el.tag, str) and etree.QName(el).localname in tags
            if named and (text := " ".join("".join(el.itertext()).split())):
                out.append(text)
    return out


def distinct_passages(samples: Path = SAMPLES, data: Path = REPO / "data") -> list[str]:
    """Every distinct real passage at hand, first seen first: :func:`sample_passages` of the
    shared samples and of ``data/demo``, the ``<p>`` of ``data/evidence_demo`` and of the
    XML in ``data/passage_gold/docs``, the MEDLINE abstracts of ``data/crossgenre/medline``
    and the Cohen 2006 abstracts of ``data/spanish_sr/sr-screening``."""
    found = sample_passages(samples) + sample_passages(data / "demo")
    found += _xml_paragraphs(sorted((data / "evidence_demo").rglob("*.xml")))
    found += _xml_paragraphs(
        sorted(
            p
            for p in (data / "passage_gold" / "docs").glob("*")
            if ".xml" in p.suffixes or ".nxml" in p.suffixes
        )
    )
    found += _xml_paragraphs(sorted((data / "crossgenre" / "medline").rglob("*.xml.gz")), ("AbstractText",))
    cohen = data / "spanish_sr" / "sr-screening" / "Antihistamines.csv"
    if cohen.is_file():
        with cohen.open(encoding="utf-8", newline="") as f:
            found += [text for row in csv.DictReader(f) if (text := " ".join(row["abstract"].split()))]
    return list(dict.fromkeys(found))


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
