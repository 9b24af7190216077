"""Write tests/crossgenre/real_pages/SOURCES.md from its gold.jsonl: one row per page with
where it was copied from (repository, commit or package, path), how (byte-exact or stripped),
its licence and the sha256 of the page (decompressed). Run after editing gold.jsonl:

    .venv/bin/python scripts/real_pages_sources.py
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "tests" / "crossgenre" / "real_pages"
HEAD = """# Sources of the labelled real news pages

Each page below is a copy of a test fixture or saved page that a public repository already
redistributes; none was written for irforge. `copy: exact` pages are the fixture's bytes
(gzipped here with `gzip -n -9`); `copy: stripped` pages were copied through a code-search
index that shows text only, keeping the markup, text and every link and meta element as
shown, with the contents of scripts (other than JSON-LD), styles, inline SVG and comments left
empty (see README.md). sha256 is of the decompressed page. These pages are third-party
material used as test fixtures only: they never enter a dataset release.

"""


def main() -> None:
    rows = [json.loads(line) for line in (FOLDER / "gold.jsonl").read_text(encoding="utf-8").splitlines()]
    kinds = Counter(r["expected"] for r in rows)
    langs = Counter(r["language"] for r in rows)
    lines = [HEAD]
    lines.append(
        f"{len(rows)} pages, {len({r['outlet'].removeprefix('www.') for r in rows})} outlets; "
        f"expected: {', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}; "
        f"languages: {', '.join(f'{k} {n}' for k, n in sorted(langs.items()))}.\n\n"
    )
    lines.append(
        "| file | outlet | lang | repository | commit / package | path | copy | licence | sha256 |\n"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        s = r["source"]
        where = s.get("commit") or s.get("via", "")
        lines.append(
            f"| `{r['file']}` | {r['outlet']} | {r['language']} | {s.get('repo') or '-'} | {where} | "
            f"`{s.get('path') or '-'}` | {s.get('copy', 'exact')} | {s.get('licence') or '-'} | `{r['sha256']}` |\n"
        )
    (FOLDER / "SOURCES.md").write_text("".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
