"""The shared sample paragraphs the benchmarks are built from (``../shared/samples``)."""

from __future__ import annotations

from pathlib import Path

from lxml import etree, html

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"


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
