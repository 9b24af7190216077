"""Pieces every dataset card shares: the YAML front matter and body as one text, the
provenance list and the citation section (the Hub's card layout:
https://huggingface.co/docs/hub/datasets-cards)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

IRFORGE_BIBTEX = """@software{irforge,
  title = {irforge: biomedical retrieval test collections built the way their papers built them},
  note = {Prefect flows with fingerprinted Parquet artifacts: CURE, EvidenceBench, cross-genre claims, Spanish systematic reviews}
}"""


def provenance(fingerprints: Mapping[str, str], models: Sequence[str] = ()) -> list[str]:
    """A ``## Provenance`` section: the models that answered (one line each, as the rows
    name them), then each stage's fingerprint, by stage name."""
    lines = ["## Provenance", ""]
    if models:
        lines += ["Models that answered, as the rows name them:", "", *(f"- {m}" for m in models), ""]
    lines += ["Stage fingerprints of the irforge run that built this release:", ""]
    lines += [f"- `{stage}`: `{fp}`" for stage, fp in sorted(fingerprints.items())]
    return [*lines, ""]


def release_bibtex(name: str, fingerprints: Mapping[str, str]) -> str:
    """A BibTeX entry for one release: its name and a digest of its stages' fingerprints (the
    same build, the same entry; a rebuild with any change, another)."""
    material = "\n".join(f"{stage}={fp}" for stage, fp in sorted(fingerprints.items()))
    digest = hashlib.sha256(material.encode("utf-8")).hexdigest()[:16]
    key = re.sub(r"\W+", "_", name).strip("_").lower() or "release"
    return "\n".join(
        [
            f"@misc{{{key}_{digest[:8]},",
            f"  title = {{{name}}},",
            f"  howpublished = {{{name}}},",
            f"  note = {{Built with irforge; release digest {digest} (its stages' fingerprints)}}",
            "}",
        ]
    )


def citation(paper_bibtex: str, name: str, fingerprints: Mapping[str, str]) -> list[str]:
    """A ``## Citation`` section: the paper whose construction the release follows, the release
    itself (:func:`release_bibtex`) and irforge, each as BibTeX."""
    lines = ["## Citation", "", "The construction follows this paper; please cite it:", "", "```bibtex"]
    lines += [
        paper_bibtex.strip(),
        "```",
        "",
        "This release, and the pipeline that built it:",
        "",
        "```bibtex",
    ]
    lines += [release_bibtex(name, fingerprints), "", IRFORGE_BIBTEX, "```", ""]
    return lines


def card_text(front_matter: Mapping[str, Any], body: Sequence[str]) -> str:
    """The card: ``---``-fenced YAML front matter (keys in the order given), then the body lines."""
    front = yaml.safe_dump(dict(front_matter), sort_keys=False, allow_unicode=True).rstrip()
    return "\n".join(["---", front, "---", "", *body]).rstrip("\n") + "\n"
