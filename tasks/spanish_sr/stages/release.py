"""Stage ``release``: the collection as a Hugging Face dataset folder with its card (issue 17 §9).

Configs (layout: :mod:`tasks.spanish_sr.dataset`): ``corpus`` (``clean``'s kept records),
``questions`` (the ``questions`` pairs, split train / validation as the first seed of
``train_dense`` split them), ``queries`` and ``qrels`` (``reviews``: every query of a review
× the review's kept records), ``results`` and ``significance`` (``evaluate``'s ``summary``
and ``significance`` tables), ``bm25`` (``bm25``'s ``params``) and ``models`` (each seed's
dual encoder and reranker: base model from the training stage's config, folder relative to
the artifact root, validation numbers; no weights copied).

The card (:mod:`tasks.spanish_sr.card`) takes the cleaning funnel from the manifests of
``ingest``, ``clean`` and ``questions`` and the per-year table (paper 004 Table 1) from the
corpus. Every stage read is declared upstream, so its fingerprint is this artifact's input.
The folder lands in ``files/release/``; ``irforge release`` copies it out or pushes it
(:mod:`tasks.common.release.hub`).

Units: one file per (config, split). Excluded: ``empty_split`` (no row: ``datasets`` cannot
load an empty split, so the card does not declare it). Upstream tables that disagree (a
pair without a split, a judgement naming a record not in the corpus, a model folder
missing) are a one-line :class:`IrforgeError`.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import Field, field_validator

from irforge.artifacts import Artifact, lineage
from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource
from tasks.common.release.files import FILE_EXCLUDED_SCHEMA, FILE_UNITS, FILES_SCHEMA, file_outcome
from tasks.spanish_sr.card import CardInfo, render_card
from tasks.spanish_sr.dataset import CONFIGS, FEATURES, QUESTION_SPLITS, SPLITS, TEST_SPLIT, write_release
from tasks.spanish_sr.release_stats import funnel, year_table

UPSTREAM = ("ingest", "clean", "questions", "bm25", "train_dense", "train_rerank", "reviews", "evaluate")
PAPER_YEARS = [(2009, 2012), (2013, 2015), (2016, 2019), (2020, 2023)]  # paper 004 Table 1
DEMO_REVIEW_NOTE = (
    "The review sets bundled with the demo (`data/spanish_sr/reviews/`) were written by one reader of "
    "the corpus, who chose each review's included records by reading the abstracts. They show the format "
    "and exercise the code; they are a demo, not a benchmark: the numbers below say nothing about how "
    "well these systems serve real systematic reviews."
)


class ReleaseConfig(StrictModel):
    name: str = Field("irforge/spanish-sr-demo", description="Hub repository id (used in the card).")
    pretty_name: str = "Spanish biomedical systematic-review retrieval (paper 004 recipe, CT-EBM-SP demo)"
    license: str = Field(
        "cc-by-nc-sa-4.0", description="Hub licence id of the collection; compatible with source_license."
    )
    source_license: str = Field(
        "CT-EBM-SP: CC BY-NC-SA 4.0", description="Licence of the source records, said on the card."
    )
    corpus_note: str | None = Field(
        "Spanish abstracts of SciELO journals from CT-EBM-SP v3 (Campillos-Llanos et al.)",
        description="Where the records come from, said on the card.",
    )
    review_note: str = Field(DEMO_REVIEW_NOTE, description="What the review sets are (demo or real).")
    year_bins: list[tuple[int, int]] = Field(
        PAPER_YEARS, description="Year ranges [first, last] of the per-year table (paper 004 Table 1)."
    )

    @field_validator("year_bins")
    @classmethod
    def _ranges(cls, bins: list[tuple[int, int]]) -> list[tuple[int, int]]:
        if any(start > end for start, end in bins):
            raise ValueError(f"a range's first year is after its last: {bins}")
        ordered = sorted(bins)
        if any(a[1] >= b[0] for a, b in itertools.pairwise(ordered)):
            raise ValueError(f"year ranges overlap: {bins}")
        return bins


SCHEMA = FILES_SCHEMA
EXCLUDED_SCHEMA = FILE_EXCLUDED_SCHEMA
_UNITS = FILE_UNITS

Rows = dict[tuple[str, str], list[tuple[Any, ...]]]


def _units(_ctx: StageContext[ReleaseConfig], _inputs: dict[str, Any]) -> TableSource:
    return TableSource(
        pa.Table.from_pylist([{"config": c, "split": s} for c in CONFIGS for s in SPLITS[c]], _UNITS)
    )


def _finite(value: Any) -> Any:
    """JSON has no NaN: a non-finite float is written as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _values(config: str, row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(_finite(row[name]) for name, _t in FEATURES[config])


def _question_split(ctx: StageContext[ReleaseConfig]) -> tuple[int, dict[str, str]]:
    """The first seed of ``train_dense`` and its record id → part."""
    dense = ctx.upstream["train_dense"]
    seeds = dense.read(columns=["seed"]).column("seed").to_pylist()
    if not seeds:
        raise IrforgeError(
            f"release: train_dense {dense.fingerprint} kept no model, so the questions have no split"
        )
    table = dense.read(columns=["record_id", "part"], table="split", filters=[("seed", "=", seeds[0])])
    parts = dict(zip(table.column("record_id").to_pylist(), table.column("part").to_pylist(), strict=True))
    unknown = sorted(set(parts.values()) - set(QUESTION_SPLITS))
    if unknown:
        raise IrforgeError(
            f"release: train_dense split parts {unknown} are not among {list(QUESTION_SPLITS)}"
        )
    return int(seeds[0]), parts


def _qrels(ctx: StageContext[ReleaseConfig], corpus: set[str]) -> list[tuple[Any, ...]]:
    reviews = ctx.upstream["reviews"]
    queries: dict[str, list[str]] = {}
    for q in reviews.read(columns=["query_id", "review_id"], table="queries").to_pylist():
        queries.setdefault(q["review_id"], []).append(q["query_id"])
    rows = []
    for r in reviews.read(columns=["review_id", "record_id", "relevance"]).to_pylist():
        if r["record_id"] not in corpus:
            raise IrforgeError(
                f"release: review {r['review_id']!r} judges record {r['record_id']!r}, which is not in the corpus"
            )
        rows += [(q, r["record_id"], r["relevance"]) for q in queries.get(r["review_id"], [])]
    return sorted(rows)


def _models(ctx: StageContext[ReleaseConfig]) -> list[tuple[Any, ...]]:
    rows = []
    for kind, stage, examples in (
        ("dual_encoder", "train_dense", "pairs"),
        ("reranker", "train_rerank", "lists"),
    ):
        artifact = ctx.upstream[stage]
        config = artifact.manifest["material"]["config"]
        for m in artifact.read().to_pylist():
            folder = artifact.files / m["model_dir"]
            if not folder.is_dir():
                raise IrforgeError(f"release: {stage} seed {m['seed']}: model folder {folder} is missing")
            row = {
                "kind": kind,
                "seed": m["seed"],
                "base_model": config.get("base_model"),
                "revision": config.get("revision"),
                "path": _relative(artifact, m["model_dir"]),
                "train_examples": m[f"train_{examples}"],
                "val_examples": m[f"val_{examples}"],
                **{k: m[k] for k in ("best_epoch", "val_loss", "val_mrr")},
            }
            rows.append(_values("models", row))
    return rows


def _relative(artifact: Artifact, model_dir: str) -> str:
    """The model folder relative to the artifact root: ``<flow>/<stage>/<fingerprint>/files/<dir>``."""
    return (artifact.files / model_dir).relative_to(artifact.path.parents[2]).as_posix()


def collect(ctx: StageContext[ReleaseConfig]) -> tuple[Rows, int]:
    """Every file's rows, keyed by (config, split), and the seed whose split the questions follow."""
    up = ctx.upstream
    out: Rows = {}
    corpus = up["clean"].read(
        columns=["record_id", "title", "abstract", "year", "language", "doi", "descriptors"]
    )
    out["corpus", "corpus"] = [
        _values("corpus", {**r, "_id": r["record_id"], "text": r["abstract"]}) for r in corpus.to_pylist()
    ]
    seed, part = _question_split(ctx)
    questions = up["questions"].read(columns=["record_id", "question", "mode"]).to_pylist()
    missing = [q["record_id"] for q in questions if q["record_id"] not in part]
    if missing:
        raise IrforgeError(
            f"release: {len(missing)} question pair(s) (first {missing[:3]}) are in no split of train_dense seed {seed}"
        )
    for q in questions:
        out.setdefault(("questions", part[q["record_id"]]), []).append(
            (q["record_id"], q["question"], q["mode"])
        )
    queries = up["reviews"].read(table="queries").to_pylist()
    out["queries", TEST_SPLIT] = [_values("queries", {**q, "_id": q["query_id"]}) for q in queries]
    out["qrels", TEST_SPLIT] = _qrels(ctx, set(corpus.column("record_id").to_pylist()))
    for config, table in (("results", "summary"), ("significance", "significance")):
        out[config, config] = [_values(config, r) for r in up["evaluate"].read(table=table).to_pylist()]
    params = up["bm25"].read(table="params").to_pylist()
    if len(params) != 1:
        raise IrforgeError(f"release: bm25 {up['bm25'].fingerprint} has {len(params)} params rows, not one")
    out["bm25", "bm25"] = [_values("bm25", params[0])]
    out["models", "models"] = _models(ctx)
    return out, seed


def _reviews(ctx: StageContext[ReleaseConfig], files: Rows) -> list[dict[str, Any]]:
    kinds = Counter((q[2], q[3]) for q in files.get(("queries", TEST_SPLIT), []))  # (review_id, kind)
    rows = ctx.upstream["reviews"].read(table="reviews").to_pylist()
    return [
        {
            **r,
            "question_queries": kinds[r["review_id"], "question"],
            "expert_queries": kinds[r["review_id"], "expert"],
        }
        for r in rows
    ]


def card_info(ctx: StageContext[ReleaseConfig], files: Rows, seed: int) -> CardInfo:
    up, config = ctx.upstream, ctx.config
    clean = up["clean"].read(columns=["title", "abstract", "year", "fixed"]).to_pylist()
    models = [
        dict(zip([n for n, _t in FEATURES["models"]], m, strict=True)) for m in files[("models", "models")]
    ]
    bm25 = dict(zip([n for n, _t in FEATURES["bm25"]], files[("bm25", "bm25")][0], strict=True))
    languages = [str(bm25["language"]), *(str(q[4]) for q in files.get(("queries", TEST_SPLIT), []))]
    named = {c: [n for n, _t in FEATURES[c]] for c in ("results", "significance")}
    return CardInfo(
        name=config.name,
        pretty_name=config.pretty_name,
        license=config.license,
        source_license=config.source_license,
        review_note=config.review_note,
        corpus_note=config.corpus_note,
        languages=sorted(set(languages)),
        files={key: len(rows) for key, rows in files.items() if rows},
        funnel=funnel(up),
        repaired=sum(bool(r["fixed"]) for r in clean),
        years=year_table(clean, config.year_bins),
        question_modes=dict(sorted(Counter(q[2] for s in QUESTION_SPLITS for q in files.get(("questions", s), [])).items())),
        split_seed=seed,
        bm25=bm25,
        models=models,
        reviews=_reviews(ctx, files),
        summary=[dict(zip(named["results"], r, strict=True)) for r in files[("results", "results")]],
        significance=[dict(zip(named["significance"], r, strict=True)) for r in files[("significance", "significance")]],
        fingerprints={name: a.fingerprint for name, a in lineage(dict(up)).items()},
        answered=_question_models(up["questions"]),
    )  # fmt: skip


def _question_models(questions: Artifact) -> tuple[str, ...]:
    """The models that wrote questions (mode ``llm``), as the card's provenance names them."""
    rows = questions.read(columns=["mode", "model"]).to_pylist()
    models = Counter(r["model"] for r in rows if r["mode"] == "llm" and r["model"])
    return tuple(f"`questions`: {n} question(s) written by `{m}`" for m, n in sorted(models.items()))


def process(chunk: pa.Table, ctx: StageContext[ReleaseConfig]) -> ChunkResult:
    assert ctx.files_dir is not None, "release: run through the stage engine"
    collected, seed = collect(ctx)
    files = {key: rows for key, rows in collected.items() if rows}
    card = render_card(card_info(ctx, collected, seed))
    written = {(f.config, f.split): f for f in write_release(Path(ctx.files_dir) / "release", files, card)}
    kept, excluded = file_outcome(chunk, written.values())
    return ChunkResult(kept, excluded)


SPEC: StageSpec[ReleaseConfig] = StageSpec(
    name="release",
    version=1,
    config_type=ReleaseConfig,
    upstream=UPSTREAM,
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("config", "split"),
    source=_units,
    process=process,
    whole_input=True,
    description="A Hugging Face dataset folder (corpus, question pairs, review queries and qrels, "
    "results, BM25 parameters, model links) with its card.",
)
