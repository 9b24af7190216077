"""A prompt edit that no stage will see (issue 29 §2): each run records the digests of the
prompt files of its flow (``prompts/<flow>/`` and ``prompts/common/``) in
``<artifacts>/<flow>/prompts.json``; ``irforge status`` names each file changed since then
whose digest no configured stage's fingerprint holds (a stage's prompt digest, the sha256 of
the file's bytes, is in its plan's inputs: ``tasks/common/llm/prompt.py``), so an edit to a prompt that
the config does not use (an LLM step switched off) is not mistaken for one that took effect.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from irforge.artifacts import ArtifactStore, write_json_atomic
from irforge.engine import StagePlan
from tasks.common.llm.prompt import PROMPTS_DIR

RECORD = "prompts.json"


def prompt_digests(flow: str) -> dict[str, str]:
    """``prompts/<flow>/…`` and ``prompts/common/…`` (relative to ``prompts/``) → sha256 of the bytes."""
    found = {}
    for folder in (PROMPTS_DIR / flow, PROMPTS_DIR / "common"):
        for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
            if path.is_file():
                found[path.relative_to(PROMPTS_DIR).as_posix()] = hashlib.sha256(
                    path.read_bytes()
                ).hexdigest()
    return found


def record(store: ArtifactStore, flow: str) -> None:
    """Keep this run's prompt digests for the next :func:`unused_edits`."""
    path = store.root / flow / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, prompt_digests(flow))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def unused_edits(store: ArtifactStore, flow: str, plans: Mapping[str, StagePlan]) -> list[str]:
    """Prompt files changed since the last recorded run that no stage of ``plans`` reads."""
    try:
        before = json.loads((store.root / flow / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    read = {s for plan in plans.values() for s in _strings(plan.inputs)}
    return [
        f"prompts/{name} changed since the last run, but no stage of this config reads it: the edit has no effect here"
        for name, digest in prompt_digests(flow).items()
        if before.get(name) not in (None, digest) and digest not in read
    ]
