"""The crossgenre release folder: JSON Lines files in the layout ``datasets`` and MTEB read.

::

    folder/
      README.md                  the card (tasks.crossgenre.card): configs, features, statistics, licences
      corpus/corpus.jsonl        {"_id", "title", "text"}                   cited abstracts ∪ distractors
      queries/<split>.jsonl      {"_id", "text", "url", "site", "date"}      headline (the news text is not released)
      qrels/<split>.jsonl        {"query-id", "corpus-id", "score"}
      candidates/<split>.jsonl   {"query-id", "corpus-id", "rank", "score"}  BM25+† top 500
      pairs/<split>.jsonl        {"query-id", "corpus-id", "query", "label", "kind"} (+ "document")

Splits ``train``, ``dev``, ``test``; the corpus has one split, ``corpus``, as BEIR's
datasets on the Hub (which MTEB's retrieval loader takes when a config has a single split,
``mteb/abstasks/retrieval_dataset_loaders.py``). Every file sits one folder deep, which is
what :func:`tasks.common.release.hub.push_release` pushes.

Deterministic: rows sorted by the caller, keys in :data:`FEATURES` order, ``ensure_ascii=False``,
``\\n`` line ends; the folder is written under a temporary name and swapped in, so a
half-written release is never visible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from tasks.common.release.files import ReleaseFile, staged_folder, write_jsonl
from tasks.common.release.hub import CARD_FILE

CORPUS_SPLIT: Final = "corpus"
SPLITS: Final = ("train", "dev", "test")
FEATURES: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    "corpus": (("_id", "string"), ("title", "string"), ("text", "string")),
    "queries": (
        ("_id", "string"),
        ("text", "string"),
        ("url", "string"),
        ("site", "string"),
        ("date", "string"),
    ),
    "qrels": (("query-id", "string"), ("corpus-id", "string"), ("score", "int64")),
    "candidates": (("query-id", "string"), ("corpus-id", "string"), ("rank", "int64"), ("score", "float64")),
    "pairs": (
        ("query-id", "string"),
        ("corpus-id", "string"),
        ("query", "string"),
        ("label", "int64"),
        ("kind", "string"),
    ),
}
"""Columns of each config's files with their ``datasets`` dtypes (declared in the card)."""
CONFIGS: Final = tuple(FEATURES)
PAIRS_DOCUMENT: Final = ("document", "string")
"""The abstract's text in ``pairs`` rows, when the release config asks for it."""


def data_path(config: str, split: str) -> str:
    return f"{config}/{split}.jsonl"


def features(config: str, pairs_text: bool) -> tuple[tuple[str, str], ...]:
    extra = (PAIRS_DOCUMENT,) if config == "pairs" and pairs_text else ()
    return (*FEATURES[config], *extra)


def write_release(
    folder: Path,
    files: Mapping[tuple[str, str], Sequence[Sequence[Any]]],
    card: str,
    *,
    pairs_text: bool = False,
) -> list[ReleaseFile]:
    """Write each (config, split)'s rows (value tuples in :func:`features` order) and the card."""
    with staged_folder(Path(folder)) as partial:
        written = [
            write_jsonl(
                partial,
                data_path(config, split),
                config,
                split,
                [n for n, _t in features(config, pairs_text)],
                rows,
            )
            for (config, split), rows in files.items()
        ]
        (partial / CARD_FILE).write_text(card, encoding="utf-8")
    return written
