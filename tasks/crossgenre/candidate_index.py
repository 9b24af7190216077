"""What every chunk of ``candidates`` searches, built once per host and memory-mapped by each.

The corpus (claims' ``corpus`` side table ∪ the ``distractors`` rows, a doc id once, sorted)
analysed as each variant needs (:func:`tasks.crossgenre.preprocess.analyse_corpus`), the
abbreviation plan over *all* headlines (paper 003 §3.1: an abbreviation written more than
twice in the headlines), and, for the embedded backend, one rank_bm25 index per variant
(:mod:`tasks.common.search.bm25_rank_files`). Built under the stage's scratch dir by the first
chunk that needs it (:func:`tasks.common.built_once.built_once`); the others wait, then map
the same files, so N workers cost one build and one copy in memory, and a resumed run
builds nothing.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.common.built_once import DONE, built_once
from tasks.common.search import bm25_rank_files
from tasks.common.search.bm25_rank import Params, RankBm25
from tasks.crossgenre.domains import DATA_DIR
from tasks.crossgenre.preprocess import (
    Analysis,
    Expansion,
    Tokenised,
    analyse_corpus,
    load_abbreviations,
    phrase_documents,
    plan_expansions,
)

if TYPE_CHECKING:
    from irforge.stage import StageContext
    from tasks.crossgenre.stages.candidates import CandidatesConfig

VARIANTS: dict[str, tuple[Literal["okapi", "plus"], Analysis]] = {
    "okapi": ("okapi", "plain"),
    "plus": ("plus", "plain"),
    "plus_pre": ("plus", "pre"),
}

ABBREVIATIONS = DATA_DIR / "abbreviations" / "wikipedia_abbreviation_database.csv"
"""The bundled dictionary: the default wherever the config file lives (issue 27)."""


def abbreviations_path(base_dir: Path, named: str | None) -> Path:
    """The configured abbreviation CSV (relative to the config), else the bundled one."""
    return (base_dir / named).resolve() if named else ABBREVIATIONS


@dataclass(frozen=True)
class Shared:
    """The corpus' doc ids (sorted), its analyses, the expansion plan and the indexes."""

    doc_ids: pa.Array
    corpora: dict[Analysis, Tokenised]
    plan: list[Expansion]
    indexes: dict[str, RankBm25]  # by variant; empty on Elasticsearch


def params_of(config: CandidatesConfig, variant: str) -> Params:
    kind = VARIANTS[variant][0]
    return Params(kind, config.k1, config.b, config.delta if kind == "plus" else None, config.epsilon)


def shared(ctx: StageContext[CandidatesConfig]) -> Shared:
    """This run's :class:`Shared`, built here unless a process of this host did already."""
    if ctx.scratch_dir is None:  # outside the engine: nothing to share
        return _compute(ctx)
    folder = built_once(ctx.scratch_dir / "candidates-index", lambda tmp: _save(_compute(ctx), tmp))
    return _load(folder, ctx.config)


def plan_of(ctx: StageContext[CandidatesConfig]) -> list[Expansion]:
    """The expansion plan: read from this host's build, else computed alone (a driver whose
    chunks all ran on other hosts needs no index for it)."""
    folder = ctx.scratch_dir / "candidates-index" if ctx.scratch_dir else None
    if folder is not None and (folder / DONE).is_file():
        return _read_plan(folder)
    if "pre" not in {VARIANTS[v][1] for v in ctx.config.variants}:
        return []
    return _plan(ctx, analyse_corpus(corpus(ctx)[1], "pre", ctx.config.threads))


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


def _compute(ctx: StageContext[CandidatesConfig]) -> Shared:
    config = ctx.config
    doc_ids, texts = corpus(ctx)
    analyses = sorted({VARIANTS[v][1] for v in config.variants})
    corpora = {a: analyse_corpus(texts, a, config.threads) for a in analyses}
    plan = _plan(ctx, corpora["pre"]) if "pre" in corpora else []
    indexes: dict[str, RankBm25] = {}
    if config.backend == "embedded" and len(doc_ids):
        for variant in config.variants:
            tokenised = corpora[VARIANTS[variant][1]]
            params = params_of(config, variant)
            indexes[variant] = RankBm25.build(
                tokenised.tokens, tokenised.starts, len(tokenised.terms), params
            )
    return Shared(doc_ids, corpora, plan, indexes)


def _save(built: Shared, folder: Path) -> None:
    pq.write_table(pa.table({"doc_id": built.doc_ids}), folder / "doc_ids.parquet")
    for analysis, tokenised in built.corpora.items():
        terms = pa.table({"term": pa.array(tokenised.terms, pa.string())})
        pq.write_table(terms, folder / f"{analysis}.terms.parquet")
        np.save(folder / f"{analysis}.tokens.npy", tokenised.tokens, allow_pickle=False)
        np.save(folder / f"{analysis}.starts.npy", tokenised.starts, allow_pickle=False)
    plan = [dataclasses.asdict(e) for e in built.plan]
    (folder / "plan.json").write_text(json.dumps(plan, ensure_ascii=False), encoding="utf-8")
    for variant, index in built.indexes.items():
        bm25_rank_files.save(index, folder / f"index-{variant}")


def _plan(ctx: StageContext[CandidatesConfig], corpus: Tokenised) -> list[Expansion]:
    headlines = ctx.upstream["claims"].read(columns=["headline"]).column("headline").to_pylist()
    dictionary = load_abbreviations(abbreviations_path(ctx.base_dir, ctx.config.abbreviations))
    return plan_expansions(
        headlines,
        dictionary,
        ctx.config.abbreviation_min_count,
        lambda terms: phrase_documents(corpus, terms),
        min_documents=ctx.config.abbreviation_min_documents,
    )


def _load(folder: Path, config: CandidatesConfig) -> Shared:
    corpora: dict[Analysis, Tokenised] = {}
    for analysis in sorted({VARIANTS[v][1] for v in config.variants}):
        terms = pq.read_table(folder / f"{analysis}.terms.parquet").column("term").to_pylist()
        tokens, starts = (
            bm25_rank_files.mapped(folder / f"{analysis}.{a}.npy") for a in ("tokens", "starts")
        )
        corpora[analysis] = Tokenised(terms, tokens, starts)
    plan = _read_plan(folder)
    indexes: dict[str, RankBm25] = {
        v: bm25_rank_files.load(folder / f"index-{v}")
        for v in config.variants
        if (folder / f"index-{v}").is_dir()
    }
    doc_ids = pq.read_table(folder / "doc_ids.parquet").column("doc_id").combine_chunks()
    return Shared(doc_ids, corpora, plan, indexes)


def _read_plan(folder: Path) -> list[Expansion]:
    saved = json.loads((folder / "plan.json").read_text(encoding="utf-8"))
    return [Expansion(**{**e, "long_forms": tuple(e["long_forms"])}) for e in saved]
