"""What every chunk of the ``candidates`` stage shares: the corpus, its analyses, the abbreviation
plan over every headline and the BM25 indexes, built once per worker process.

The stage (:mod:`tasks.crossgenre.stages.candidates`) runs on chunks of headlines, in parallel
and in any process (:mod:`irforge.parallel`). Nothing here depends on a chunk: the corpus is
``claims``' ``corpus`` side table ∪ the ``distractors`` rows, the plan of
:func:`tasks.crossgenre.preprocess.plan_expansions` counts abbreviations over *all* the
headlines of the ``claims`` artifact (paper 003 §3.1: "more than twice" in the headlines), so
every chunk expands the same abbreviations whatever its size. :func:`prepared` builds it on a
process's first chunk and keeps it in one slot for the chunks that follow, keyed on the
stage's fingerprint (config, upstream fingerprints, dictionary digest), the upstream
artifacts' paths and the config folder; another key replaces it (dropped before the new one
is built, so a worker never holds two). A worker drops it when no chunk has used it for
:data:`IDLE_RELEASE_S`, when :func:`release` is called (the stage's ``finalize`` does, in the
driver), or when the process ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from irforge.stage import StageContext
from tasks.common.search.bm25_rank import F64, I32, I64, Params, RankBm25
from tasks.crossgenre.preprocess import (
    Analysis,
    Expansion,
    Tokenised,
    analyse_corpus,
    expansion_words,
    load_abbreviations,
    phrase_documents,
    plan_expansions,
)

if TYPE_CHECKING:
    from tasks.crossgenre.stages.candidates import CandidatesConfig

VARIANTS: dict[str, tuple[Literal["okapi", "plus"], Analysis]] = {
    "okapi": ("okapi", "plain"),
    "plus": ("plus", "plain"),
    "plus_pre": ("plus", "pre"),
}


@dataclass(frozen=True)
class ChunkFreeBm25(RankBm25):
    """:class:`RankBm25` whose per-query constant (BM25+: ``idf * delta`` summed over the query's
    tokens) is each query's own sum, from 0 in token order. ``RankBm25.constant`` takes
    differences of one running sum over the whole batch, so a headline's BM25+ scores would
    change in their last bits with the chunk it is searched in; here they are what it scores
    searched alone, whatever the chunking."""

    def constant(self, q_terms: I32, q_starts: I64) -> F64:
        per_token = np.zeros(len(q_terms), dtype=np.float64)
        if self.params.variant == "plus":
            known = q_terms >= 0
            per_token[known] = self.idf[q_terms[known]] * self.params.delta_value
        queries = len(q_starts) - 1
        query_of = np.repeat(np.arange(queries, dtype=np.int64), np.diff(q_starts))
        out: F64 = np.bincount(query_of, weights=per_token, minlength=queries).astype(np.float64)
        return out


@dataclass(frozen=True)
class Prepared:
    """The chunk-independent state of one run of the stage."""

    doc_ids: pa.Array  # sorted; a doc's row in every index
    row_of: Mapping[str, int]  # doc id → row
    vocabulary: Mapping[Analysis, Mapping[str, int]]  # term → id, per analysis
    corpora: Mapping[Analysis, Tokenised]  # kept for the elasticsearch backend only
    indexes: Mapping[str, RankBm25]  # per variant (embedded backend, at least one document)
    plan: list[Expansion]  # over every headline of the claims artifact
    words: Mapping[str, list[str]]  # the plan as analyse_queries takes it
    first_query: str | None  # the claims artifact's first query id: its chunk writes the plan


IDLE_RELEASE_S = 60.0  # a worker no chunk has used for this long drops its Prepared


class _Slot:
    """One :class:`Prepared` per process, the chunks using it counted, an idle timer armed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[tuple[str, ...], Prepared] = {}
        self.users = 0
        self.timer: threading.Timer | None = None

    def enter(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
            self.users += 1

    def get(self, ctx: StageContext[CandidatesConfig]) -> Prepared:
        key = _key(ctx)
        with self.lock:
            found = self.held.get(key)
            if found is None:
                self.held.clear()  # the previous run's indexes go before the new ones are built
                found = self.held[key] = _build(ctx)
            return found

    def leave(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                self.timer = threading.Timer(IDLE_RELEASE_S, self.release_if_idle)
                self.timer.daemon = True
                self.timer.start()

    def release_if_idle(self) -> None:
        with self.lock:
            if self.users == 0:
                self.held.clear()

    def release(self) -> None:
        with self.lock:
            self.held.clear()


_SLOT = _Slot()


@contextmanager
def prepared(ctx: StageContext[CandidatesConfig]) -> Iterator[Prepared]:
    """This process's :class:`Prepared` for ``ctx`` (built on first use, then reused) while a
    chunk uses it; :data:`IDLE_RELEASE_S` after the last chunk it is released, so a pool
    worker does not hold the indexes through the flow's later stages."""
    _SLOT.enter()
    try:
        yield _SLOT.get(ctx)
    finally:
        _SLOT.leave()


def release() -> None:
    """Drop this process's :class:`Prepared` now (its memory goes back at once)."""
    _SLOT.release()


def _key(ctx: StageContext[CandidatesConfig]) -> tuple[str, ...]:
    upstream = [f"{name}={artifact.path}" for name, artifact in sorted(ctx.upstream.items())]
    return (ctx.fingerprint or ctx.config.model_dump_json(), str(ctx.base_dir.resolve()), *upstream)


def _build(ctx: StageContext[CandidatesConfig]) -> Prepared:
    config = ctx.config
    doc_ids, texts = corpus(ctx)
    analyses = sorted({VARIANTS[v][1] for v in config.variants})
    corpora = {a: analyse_corpus(texts, a, config.threads) for a in analyses}
    claims = ctx.upstream["claims"].read(columns=["query_id", "headline"])
    plan = _plan(ctx, claims.column("headline").to_pylist(), corpora["pre"]) if "pre" in corpora else []
    indexes: dict[str, RankBm25] = {}
    if config.backend == "embedded" and len(doc_ids):
        for variant in config.variants:
            kind, analysis = VARIANTS[variant]
            params = Params(
                kind, config.k1, config.b, config.delta if kind == "plus" else None, config.epsilon
            )
            tokenised = corpora[analysis]
            indexes[variant] = ChunkFreeBm25.build(
                tokenised.tokens, tokenised.starts, len(tokenised.terms), params
            )
    first = claims.column("query_id")[0].as_py() if claims.num_rows else None
    return Prepared(
        doc_ids=doc_ids,
        row_of={d: r for r, d in enumerate(doc_ids.to_pylist())},
        vocabulary={a: c.index for a, c in corpora.items()},
        corpora=corpora if config.backend == "elasticsearch" else {},
        indexes=indexes,
        plan=plan,
        words=expansion_words(plan),
        first_query=first,
    )


def corpus(ctx: StageContext[CandidatesConfig]) -> tuple[pa.Array, pa.Array]:
    """(doc ids sorted, their texts): claims' corpus ∪ distractors, a doc id once (claims' first)."""
    columns = ["doc_id", "title", "abstract"]
    parts = [
        ctx.upstream["claims"].read(columns=columns, table="corpus"),
        ctx.upstream["distractors"].read(columns=columns),
    ]
    table = pa.concat_tables([t.cast(parts[0].schema) for t in parts])
    ids, first = np.unique(table.column("doc_id").to_numpy(zero_copy_only=False), return_index=True)
    table = table.take(pa.array(first))
    text = table.column("abstract").combine_chunks()
    if ctx.config.document == "title_abstract":
        text = pc.binary_join_element_wise(table.column("title").cast(pa.large_string()), text, "\n")
    return pa.array(ids.tolist(), pa.string()), pc.fill_null(text, "")


def _plan(ctx: StageContext[CandidatesConfig], headlines: list[str], pre: Tokenised) -> list[Expansion]:
    dictionary = load_abbreviations((ctx.base_dir / ctx.config.abbreviations).resolve())
    return plan_expansions(
        headlines,
        dictionary,
        ctx.config.abbreviation_min_count,
        lambda terms: phrase_documents(pre, terms),
        min_documents=ctx.config.abbreviation_min_documents,
    )
