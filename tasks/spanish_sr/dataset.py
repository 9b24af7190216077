"""The spanish_sr release folder: JSON Lines files in the layout ``datasets`` reads (issue 17 §9).

::

    folder/
      README.md                            the card (tasks.spanish_sr.card)
      corpus/corpus.jsonl                  {"_id", "title", "text", "year", "language", "doi", "descriptors"}
      questions/<train|validation>.jsonl   {"corpus-id", "question", "mode"}   title-question pairs
      queries/test.jsonl                   {"_id", "text", "review_id", "kind", "language"}  review queries
      qrels/test.jsonl                     {"query-id", "corpus-id", "score"}
      results/results.jsonl                the evaluation summary (mean, std, min, max over seeds)
      significance/significance.jsonl      question vs expert queries (paper 004 Table 5)
      bm25/bm25.jsonl                      the chosen BM25 parameters (one row)
      models/models.jsonl                  the trained models: where their weights are, validation numbers

``corpus``, ``queries`` and ``qrels`` follow BEIR's names (what MTEB's retrieval loader
reads); the questions' split is the first seed's train/validation split of ``train_dense``.
A config that is not split by query has one split named as the config (BEIR's
``corpus/corpus``). Parameters and model links are configs too, not loose JSON files: the
Hub push (:func:`tasks.common.release.hub.push_release`) sends ``README.md`` and
``<config>/<split>.jsonl`` files only. No weights are copied: ``models`` names each model's
folder relative to the artifact root.

Deterministic: rows sorted by the caller, keys in :data:`FEATURES` order, UTF-8 not
escaped; the folder is written under a temporary name and swapped in
(:func:`tasks.common.release.files.staged_folder`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from tasks.common.release.files import ReleaseFile, staged_folder, write_jsonl
from tasks.common.release.hub import CARD_FILE
from tasks.spanish_sr.significance import RESULT_SCHEMA

Feature = tuple[str, str]  # (name, datasets dtype); "list:<dtype>" is a list of that dtype

_HF_TYPES: Final = {
    pa.string(): "string",
    pa.large_string(): "string",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.float64(): "float64",
    pa.bool_(): "bool",
}


def arrow_features(schema: pa.Schema) -> tuple[Feature, ...]:
    """``datasets`` dtypes of an Arrow schema's scalar columns."""
    return tuple((f.name, _HF_TYPES[f.type]) for f in schema)


TEST_SPLIT: Final = "test"
QUESTION_SPLITS: Final = ("train", "validation")
FEATURES: Final[Mapping[str, tuple[Feature, ...]]] = {
    "corpus": (
        ("_id", "string"),
        ("title", "string"),
        ("text", "string"),
        ("year", "int64"),
        ("language", "string"),
        ("doi", "string"),
        ("descriptors", "list:string"),
    ),
    "questions": (("corpus-id", "string"), ("question", "string"), ("mode", "string")),
    "queries": (
        ("_id", "string"),
        ("text", "string"),
        ("review_id", "string"),
        ("kind", "string"),
        ("language", "string"),
    ),
    "qrels": (("query-id", "string"), ("corpus-id", "string"), ("score", "int64")),
    "results": (
        ("review_id", "string"),
        ("query_kind", "string"),
        ("system", "string"),
        ("measure", "string"),
        ("mean", "float64"),
        ("std", "float64"),
        ("min", "float64"),
        ("max", "float64"),
        ("seeds", "int64"),
        ("queries", "int64"),
    ),
    "significance": arrow_features(RESULT_SCHEMA),
    "bm25": (
        ("k1", "float64"),
        ("b", "float64"),
        ("mrr", "float64"),
        ("variant", "string"),
        ("fold_accents", "bool"),
        ("language", "string"),
    ),
    "models": (
        ("kind", "string"),  # dual_encoder | reranker
        ("seed", "int64"),
        ("base_model", "string"),
        ("revision", "string"),
        ("path", "string"),
        ("best_epoch", "int64"),
        ("val_loss", "float64"),
        ("val_mrr", "float64"),
        ("train_examples", "int64"),
        ("val_examples", "int64"),
    ),
}
"""Columns of each config's files with their ``datasets`` dtypes (declared in the card)."""
CONFIGS: Final = tuple(FEATURES)
SPLITS: Final[Mapping[str, tuple[str, ...]]] = {
    c: QUESTION_SPLITS if c == "questions" else (TEST_SPLIT,) if c in ("queries", "qrels") else (c,)
    for c in CONFIGS
}
"""The splits each config may have (a split without rows is not written)."""


def data_path(config: str, split: str) -> str:
    return f"{config}/{split}.jsonl"


def feature_yaml(name: str, dtype: str) -> dict[str, Any]:
    """One feature as the card's ``dataset_info`` declares it (datasets 4+: ``list`` for sequences)."""
    if dtype.startswith("list:"):
        return {"name": name, "list": dtype.removeprefix("list:")}
    return {"name": name, "dtype": dtype}


def write_release(
    folder: Path, files: Mapping[tuple[str, str], Sequence[Sequence[Any]]], card: str
) -> list[ReleaseFile]:
    """Write each (config, split)'s rows (value tuples in :data:`FEATURES` order) and the card."""
    with staged_folder(Path(folder)) as partial:
        written = [
            write_jsonl(
                partial, data_path(config, split), config, split, [n for n, _t in FEATURES[config]], rows
            )
            for (config, split), rows in files.items()
        ]
        (partial / CARD_FILE).write_text(card, encoding="utf-8")
    return written
