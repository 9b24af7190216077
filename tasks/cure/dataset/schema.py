"""Names and rules of the release layout shared by the writer, the card and the statistics
(https://huggingface.co/datasets/clinia/CUREv1): configs, their features, split names, scores."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from irforge.errors import IrforgeError
from tasks.cure.vocab import CURE_DOMAINS

ALL_SPLIT: Final = "all"
"""The union of every domain's rows. ``datasets`` reserves the split name: ``split="all"``
loads the concatenation of a config's splits (which is how MTEB's CUREv1 task gets its
``all`` split), and a ``data_files`` split named ``all`` makes the whole config fail to load.
So ``all`` has no files of its own; the card's statistics still have an ``all`` row."""
LANGUAGES: Final = ("en", "es", "fr")
"""Query languages, in the order of their configs; the corpus is English."""
CORPUS: Final = "corpus"
QRELS: Final = "qrels"
CONFIGS: Final = (CORPUS, *(f"queries-{lang}" for lang in LANGUAGES), QRELS)
"""Config names MTEB's CUREv1 task loads, in the order the card lists them."""
CUREV1_DOMAINS: Final = CURE_DOMAINS
"""CUREv1's domain splits (see its card); a release may have fewer (or others)."""
SCORES: Final = (0, 1, 2)
"""Graded relevance: 0 not relevant, 1 partially relevant, 2 relevant (CURE §2.3)."""
SPLIT_NAME: Final = re.compile(r"^\w+(\.\w+)*$")
"""The Hub's rule for split names (``datasets`` refuses others): no hyphens, no spaces."""

_QUERY_FEATURES: Final = (("_id", "string"), ("text", "string"))
FEATURES: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    CORPUS: (("_id", "string"), ("title", "string"), ("text", "string")),
    **{f"queries-{lang}": _QUERY_FEATURES for lang in LANGUAGES},
    QRELS: (("query-id", "string"), ("corpus-id", "string"), ("score", "int64")),
}
"""Columns of each config's JSON Lines files, with their ``datasets`` dtypes (declared in the
card so that loading never has to guess them)."""


class ReleaseError(IrforgeError):
    """A release cannot be written as asked; the message names the row, split or field and why."""


def data_path(config: str, split: str) -> str:
    """Where a config's rows for a split live, relative to the release folder."""
    return f"{split}/{config}.jsonl"


@dataclass(frozen=True, order=True)
class Omission:
    """A query that has no text in ``language``: it has no row in that language's file."""

    domain: str
    query_id: str
    language: str


def release_splits(*domain_columns: Iterable[Any]) -> list[str]:
    """The release's split names: every domain that occurs, sorted (``all`` is not one of them).

    Raises :class:`ReleaseError` for a domain that is not a valid split name (the Hub and
    ``datasets`` accept only ``^\\w+(\\.\\w+)*$``) or is the reserved name ``all``.
    """
    domains = sorted({d for column in domain_columns for d in column})
    for domain in domains:
        if not isinstance(domain, str) or not SPLIT_NAME.fullmatch(domain):
            raise ReleaseError(
                f"domain {domain!r} cannot be a split name: the Hub accepts letters, digits and "
                "underscores, with single dots between parts (e.g. 'plastic_surgery')"
            )
        if domain == ALL_SPLIT:
            raise ReleaseError(
                f"domain {ALL_SPLIT!r} is reserved: datasets loads split='all' as the union of every domain"
            )
    if not domains:
        raise ReleaseError("nothing to release: the tables name no domain")
    return domains


def release_configs(languages: Sequence[str] = LANGUAGES) -> list[str]:
    """The configs of a release with these query languages, in :data:`CONFIGS` order."""
    return [c for c in CONFIGS if not c.startswith("queries-") or c.removeprefix("queries-") in languages]


__all__ = [
    "ALL_SPLIT",
    "CONFIGS",
    "CORPUS",
    "CUREV1_DOMAINS",
    "FEATURES",
    "LANGUAGES",
    "QRELS",
    "SCORES",
    "SPLIT_NAME",
    "Omission",
    "ReleaseError",
    "data_path",
    "release_configs",
    "release_splits",
]
