"""Pieces every dataset card shares: the YAML front matter and body as one text, and the
provenance list (the Hub's card layout: https://huggingface.co/docs/hub/datasets-cards)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml


def provenance(fingerprints: Mapping[str, str]) -> list[str]:
    """A ``## Provenance`` section: each stage's fingerprint, by stage name."""
    lines = ["## Provenance", "", "Stage fingerprints of the irforge run that built this release:", ""]
    lines += [f"- `{stage}`: `{fp}`" for stage, fp in sorted(fingerprints.items())]
    return [*lines, ""]


def card_text(front_matter: Mapping[str, Any], body: Sequence[str]) -> str:
    """The card: ``---``-fenced YAML front matter (keys in the order given), then the body lines."""
    front = yaml.safe_dump(dict(front_matter), sort_keys=False, allow_unicode=True).rstrip()
    return "\n".join(["---", front, "---", "", *body]).rstrip("\n") + "\n"
