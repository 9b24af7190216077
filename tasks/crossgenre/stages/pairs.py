"""Stage ``pairs``: reranker training and evaluation pairs from the candidates (contract §10).

Paper 003 §3.2: the input of the reranker is a headline with an abstract; label 1 when the
article cites the abstract, 0 for the other abstracts of its BM25+† top 500. Per query
(the ``splits`` rows), from the candidates of ``variant``:

- ``cited`` (label 1): every cited abstract among the candidates;
- ``added_back`` (label 1, **train only**): a cited abstract the candidates missed — the
  paper adds it back for training, never for testing;
- ``negative`` (label 0): the ``negatives`` best-ranked candidates that are not cited
  (rank order; fewer when the list is shorter). Dev and test use ``eval_negatives`` when set
  (e.g. 499 for the whole list), else ``negatives``;
- ``augmented`` (label 1, **train only**): ``augmented`` headlines made from the query's by
  word insertion and substitution (:mod:`tasks.crossgenre.augment`), each paired with every
  cited abstract. The paper's (m, n) settings are (0, 1), (4, 10) and (20, 50).

Rows of a query: positives by doc id, negatives by rank, augmented ones in the order made.
Besides the contract's columns, ``rank``: the document's rank in the candidates (null for
added-back and augmented rows).
Side table ``augmentation``: per train query and action, how many augmented headlines were
wanted and kept, how many draws were duplicates, and the token limit — a shortfall is
said there, never hidden. The embeddings engine's word vectors are built once, in the stage's
process before its chunks run (when a train query is to be augmented), into
``files/word_vectors.txt`` (word2vec text format); every chunk, in whatever process, reads them
back from there, so parallel chunks and a resumed run augment with the same vectors.

Units: queries. Excluded: ``no_headline`` (the query is not in claims), ``no_candidates``
(no candidate list of ``variant`` for it), ``missing_document`` (a cited or candidate
abstract is in neither claims' corpus nor the distractors), ``no_pairs`` (nothing to pair:
a dev/test query whose cited abstracts were all missed, with no negatives asked).
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import Field

from irforge.artifacts import Artifact
from irforge.config import StrictModel
from irforge.parallel import CPU, Resources
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.crossgenre.augment import AugmentConfig, HeadlineAugmenter, query_seed
from tasks.crossgenre.documents import headlines, qrels, read_documents
from tasks.crossgenre.word_vectors import WordVectors, build_vectors, read_word2vec, write_word2vec

TRAIN = "train"
VECTORS_FILE = "word_vectors.txt"


class PairsConfig(StrictModel):
    variant: str = Field("plus_pre", description="Which candidates variant the pairs come from (BM25+†).")
    negatives: int = Field(50, ge=0, description="n: non-cited candidates per query (label 0).")
    augmented: int = Field(20, ge=0, description="m: augmented headlines per train query (label 1).")
    eval_negatives: int | None = Field(
        None, ge=0, description="Negatives per dev/test query (None: as many as `negatives`)."
    )
    augment: AugmentConfig = AugmentConfig()
    seed: int = 42


SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("query", pa.string(), nullable=False),
        pa.field("document", pa.large_string(), nullable=False),
        pa.field("label", pa.int8(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("rank", pa.int32()),  # the candidate's rank (null: added back)
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("query_id", pa.string(), nullable=False), pa.field("split", pa.string(), nullable=False)
)
AUGMENTATION_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("action", pa.string(), nullable=False),
        pa.field("wanted", pa.int32(), nullable=False),
        pa.field("kept", pa.int32(), nullable=False),
        pa.field("duplicates", pa.int32(), nullable=False),
        pa.field("limit", pa.int32(), nullable=False),
    ]
)


def _candidates(artifact: Artifact, variant: str, query_ids: list[str]) -> dict[str, list[tuple[int, str]]]:
    """Query id → [(rank, doc id)] of ``variant``, by rank."""
    table = artifact.read(
        columns=["query_id", "doc_id", "rank"],
        filters=[("variant", "=", variant), ("query_id", "in", query_ids)],
    )
    out: dict[str, list[tuple[int, str]]] = {}
    for q, d, r in zip(*(table.column(c).to_pylist() for c in ("query_id", "doc_id", "rank")), strict=True):
        out.setdefault(q, []).append((int(r), d))
    return {q: sorted(v) for q, v in out.items()}


def _vector_texts(ctx: StageContext[PairsConfig]) -> Iterable[str]:
    """Titles and abstracts: every cited one and a seeded sample of ``max_documents`` distractors."""
    cited = ctx.upstream["claims"].read(columns=["title", "abstract"], table="corpus").to_pylist()
    distractors = ctx.upstream["distractors"]
    ids = sorted(distractors.read(columns=["doc_id"]).column("doc_id").to_pylist())
    limit = ctx.config.augment.max_documents
    if len(ids) > limit:
        chosen = np.random.default_rng(ctx.config.seed).choice(len(ids), size=limit, replace=False)
        ids = sorted(ids[i] for i in chosen.tolist())
    sampled = read_documents(ctx.upstream["claims"], distractors, ["title", "abstract"], ids).to_pylist()
    return (f"{r['title']} {r['abstract']}" for r in [*cited, *sampled])


def _vectors(ctx: StageContext[PairsConfig]) -> WordVectors | None:
    assert ctx.files_dir is not None, "pairs: run through the stage engine"
    path = ctx.files_dir / VECTORS_FILE
    if not path.is_file():
        a = ctx.config.augment
        built = build_vectors(
            _vector_texts(ctx), dims=a.dims, window=a.window, min_count=a.min_count,
            max_words=a.max_words, seed=ctx.config.seed,
        )  # fmt: skip
        if built is None:
            return None
        # Parallel chunks may build the same (deterministic) vectors at once: each writes a file
        # of its own beside files/ (never published) and renames it into place, atomically.
        own = ctx.files_dir.parent / f".{VECTORS_FILE}.{os.getpid()}.{uuid.uuid4().hex}"
        write_word2vec(own, built)
        own.replace(path)
    return _read_vectors(path, path.stat().st_mtime_ns)


def _splits(ctx: StageContext[PairsConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    """The ``splits`` rows; the word vectors built first, here in the stage's process, when a
    train query is to be augmented with them (chunks then only read them)."""
    splits = ctx.upstream["splits"]
    augment = ctx.config.augmented > 0 and ctx.config.augment.engine == "embeddings"
    if augment and TRAIN in splits.read(columns=["split"]).column("split").to_pylist():
        _vectors(ctx)
    return ArtifactSource(splits)


@functools.lru_cache(maxsize=1)
def _read_vectors(path: Path, _mtime: int) -> WordVectors:
    return read_word2vec(path)


@functools.lru_cache(maxsize=2)
def _contextual(config: AugmentConfig) -> HeadlineAugmenter:
    return HeadlineAugmenter(config, None)


def _augmenter(ctx: StageContext[PairsConfig]) -> HeadlineAugmenter:
    if ctx.config.augment.engine == "contextual":
        return _contextual(ctx.config.augment)
    return HeadlineAugmenter(ctx.config.augment, _vectors(ctx))


def _query_rows(
    q: dict[str, Any], headline: str, cited: list[str], ranked: list[tuple[int, str]], config: PairsConfig
) -> list[dict[str, Any]]:
    """The query's cited / added-back / negative rows (document text filled in later)."""
    train = q["split"] == TRAIN
    found = {d: r for r, d in ranked}
    n = config.negatives if train or config.eval_negatives is None else config.eval_negatives
    base = {"query_id": q["query_id"], "split": q["split"], "query": headline}
    rows = [
        {
            **base,
            "doc_id": d,
            "label": 1,
            "kind": "cited" if d in found else "added_back",
            "rank": found.get(d),
        }
        for d in cited
        if d in found or train
    ]
    relevant = set(cited)
    negatives = [(r, d) for r, d in ranked if d not in relevant][:n]
    rows += [{**base, "doc_id": d, "label": 0, "kind": "negative", "rank": r} for r, d in negatives]
    return rows


def process(chunk: pa.Table, ctx: StageContext[PairsConfig]) -> ChunkResult:
    config = ctx.config
    claims, distractors = ctx.upstream["claims"], ctx.upstream["distractors"]
    ids = chunk.column("query_id").to_pylist()
    titles, cited = headlines(claims, ids), qrels(claims, ids)
    ranked = _candidates(ctx.upstream["candidates"], config.variant, ids)
    rows: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for q in chunk.select(["query_id", "split"]).to_pylist():
        qid = q["query_id"]
        if qid not in titles:
            excluded.append({**q, "reason": "no_headline", "detail": f"query {qid} has no claims row"})
        elif qid not in ranked:
            excluded.append({**q, "reason": "no_candidates", "detail": f"no {config.variant} candidates"})
        else:
            made = _query_rows(q, titles[qid], cited.get(qid, []), ranked[qid], config)
            if made:
                rows += made
            else:
                detail = "every cited abstract was missed by the candidates and no negative is asked"
                excluded.append({**q, "reason": "no_pairs", "detail": detail})
    texts = read_documents(claims, distractors, ["abstract"], (r["doc_id"] for r in rows))
    text_of = dict(zip(texts.column("doc_id").to_pylist(), texts.column("abstract").to_pylist(), strict=True))
    missing = {r["query_id"]: r["doc_id"] for r in rows if r["doc_id"] not in text_of}
    for q in chunk.select(["query_id", "split"]).to_pylist():
        if q["query_id"] in missing:
            detail = f"doc {missing[q['query_id']]} is in neither claims' corpus nor the distractors"
            excluded.append({**q, "reason": "missing_document", "detail": detail})
    rows = [{**r, "document": text_of[r["doc_id"]]} for r in rows if r["query_id"] not in missing]
    rows, report = _with_augmented(rows, ctx)
    return ChunkResult(
        rows_to_table(rows, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={"augmentation": rows_to_table(report, AUGMENTATION_SCHEMA)},
    )


def _with_augmented(
    rows: list[dict[str, Any]], ctx: StageContext[PairsConfig]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each train query's rows followed by its augmented positives; the augmentation report."""
    m = ctx.config.augmented
    by_query: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_query.setdefault(r["query_id"], []).append(r)
    if m == 0 or not any(r["split"] == TRAIN for r in rows):
        return rows, []
    augmenter = _augmenter(ctx)
    out: list[dict[str, Any]] = []
    report: list[dict[str, Any]] = []
    for qid, own in by_query.items():
        out += own
        if own[0]["split"] != TRAIN:
            continue
        made = augmenter.augment(own[0]["query"], m, query_seed(ctx.config.seed, qid))
        report += [{"query_id": qid, **vars(r)} for r in made.reports]
        positives = [r for r in own if r["label"] == 1]
        out += [
            {**p, "query": text, "kind": "augmented", "rank": None}
            for _action, text in made.texts
            for p in positives
        ]
    return out, report


def resources(config: PairsConfig) -> Resources:
    """The contextual engine's masked language model on its device (``cuda``: one GPU); the
    embeddings engine (corpus word vectors, :func:`_splits`) on CPU workers."""
    augment = config.augment
    if augment.engine == "contextual" and augment.device.startswith("cuda"):
        return Resources(num_gpus=1, memory_mb=2048)
    return CPU


SPEC: StageSpec[PairsConfig] = StageSpec(
    name="pairs",
    version=2,  # 2: an inserted word is never one of the headline's own
    config_type=PairsConfig,
    upstream=("claims", "distractors", "candidates", "splits"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("query_id",),
    source=_splits,
    process=process,
    resources=resources,
    tables={"augmentation": AUGMENTATION_SCHEMA},
    description="Headline-abstract pairs for the reranker: cited, added back, negatives, augmented.",
)
