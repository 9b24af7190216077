"""Code cites only what a reader of the repository can open (issue 15, item 7).

A docstring or comment may cite a paper section (``paper 001 §2.3``), a file in the
repository or a URL, never the design notes and fact sheets kept outside it
(``DESIGN §5``, ``reference/components.md``, ``environment.md``, ``cure_layout.md``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import REPO as ROOT

FOLDERS = ("irforge", "flows", "tasks", "bench", "scripts", "infra")
SUFFIXES = (".py", ".sh", ".yaml", ".yml")
# ``reference/`` only at the start of a path: ``https://…/docs/reference/…`` is a URL.
OUTSIDE = re.compile(
    r"(?<![\w/.-])reference/|components\.md|environment\.md|cure_layout|DESIGN ?§|DESIGN\.md"
)


def _files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *FOLDERS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [ROOT / name for name in listed if name.endswith(SUFFIXES) and (ROOT / name).is_file()]


def test_the_pattern_tells_a_url_from_an_outside_file() -> None:
    assert OUTSIDE.search("see reference/components.md §1")
    assert OUTSIDE.search("(DESIGN §5)") and OUTSIDE.search("DESIGN§4")
    assert not OUTSIDE.search("https://www.elastic.co/docs/reference/query-languages/querydsl")
    assert not OUTSIDE.search("CURE (paper 001) §2.3, DESIGNS = {}")


def test_no_code_cites_files_outside_the_repository() -> None:
    files = _files()
    assert any(path.suffix == ".py" for path in files)
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "cite a paper section, a repository file or a URL instead:\n" + "\n".join(hits)
