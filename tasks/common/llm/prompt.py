"""The one loader of prompt templates: a file of ``prompts/`` (or a caller's) as a :class:`string.Template`.

A prompt file is UTF-8 text with ``$name`` placeholders (``$$`` for a dollar sign); a
leading ``<!-- ... -->`` comment documents it and is not sent (see ``prompts/README.md``).
The digest is the sha256 of the file's bytes, header included: it belongs in the
fingerprint of every stage that sends the prompt, so editing the file reruns the stage (whose
output, for a comment-only edit, is unchanged: early cut-off, ``irforge/contents.py``).
Which placeholders a prompt must use is the caller's rule (``tasks/evidencebench/llm_steps.py``,
``tasks/common/translate/llm.py``, ``tasks/cure/judgement.py``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from irforge.errors import ConfigError

PROMPTS_DIR = Path(__file__).resolve().parents[3] / "prompts"
"""The checkout's ``prompts/`` folder: ``common/`` and one folder per flow."""

_HEADER = re.compile(r"\A\s*<!--.*?-->\s*", re.DOTALL)


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt file read: its path, the sha256 of its bytes and the template (header removed)."""

    path: Path
    sha256: str
    template: Template


def load_template(path: Path, what: str) -> PromptTemplate:
    """The template in ``path``; ``what`` names it in errors (``"label prompt"``).

    :class:`~irforge.errors.ConfigError` when the file cannot be read, is not UTF-8 or has a
    ``$`` that starts no placeholder.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: not UTF-8; save it as UTF-8") from None
    template = Template(_HEADER.sub("", text, count=1))
    if not template.is_valid():
        raise ConfigError(f"{what} {path}: a '$' that starts no placeholder; write $$ for a dollar sign")
    return PromptTemplate(path=path, sha256=hashlib.sha256(raw).hexdigest(), template=template)


def find_prompt(base_dir: Path, name: str, what: str, placeholders: frozenset[str]) -> PromptTemplate:
    """The template ``name``: a file next to the flow config (``base_dir``) or in :data:`PROMPTS_DIR`
    (``crossgenre/single_study.md``), which must use exactly ``placeholders``; a
    :class:`~irforge.errors.ConfigError` naming ``what`` otherwise."""
    path = next((p for p in (base_dir / name, PROMPTS_DIR / name) if p.is_file()), None)
    if path is None:
        raise ConfigError(f"{what}: no prompt file {name!r} next to the config or in {PROMPTS_DIR}")
    loaded = load_template(path, what)
    used = set(loaded.template.get_identifiers())
    if used != placeholders:
        raise ConfigError(
            f"{what} {loaded.path}: placeholders must be exactly {sorted(placeholders)}, got {sorted(used)}"
        )
    return loaded
