"""Stage ``evaluate``: baselines on the release, per domain and language condition (CURE §4, Table 7).

The released files are read back (``<split>/<config>.jsonl``, the files MTEB's CUREv1
loader reads; the tests load them with ``datasets.load_dataset``), so what is evaluated
is what was released. Baselines:
``bm25`` (the embedded search backend's BM25) and ``dense`` (the ``embed`` stage's
encoder, exact inner product), over title + text; conditions ``en-en``, ``fr-en``,
``es-en`` (query language - corpus language); measures nDCG@10 and Recall@100 with
ir-measures (pytrec_eval), averaged over the queries that have judgements.

With ``human_labels`` (CSV or JSONL: ``query_id, passage_id, rater, label``) the LLM's
grades (``qrels.llm_score``) are compared with every human rater on the pairs both
labelled: Cohen's κ per pair of raters, Fleiss' κ over all raters on the items all of
them labelled, confusion matrices. Side tables ``agreement`` and ``confusion``.

Units: (model, condition, split). Excluded: ``no_queries`` (no query of that language in
the split).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.evaluate.agreement import agreement
from tasks.common.evaluate.metrics import evaluate
from tasks.cure.dataset.schema import data_path
from tasks.cure.stages.embed import query_encoder

Baseline = Literal["bm25", "dense"]
CONDITIONS = {"en": "en-en", "fr": "fr-en", "es": "es-en"}


class EvaluateConfig(StrictModel):
    baselines: tuple[Baseline, ...] = ("bm25", "dense")
    languages: tuple[Literal["en", "fr", "es"], ...] = ("en", "fr", "es")
    depth: int = Field(100, ge=10, description="Passages retrieved per query (Recall@100 needs 100).")
    human_labels: str | None = Field(
        None,
        description="CSV/JSONL of human grades (query_id, passage_id, rater, label), relative to the config.",
    )


SCHEMA = pa.schema(
    [
        pa.field("model", pa.string(), nullable=False),
        pa.field("condition", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("ndcg_at_10", pa.float64(), nullable=False),
        pa.field("recall_at_100", pa.float64(), nullable=False),
        pa.field("queries", pa.int64(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("model", pa.string(), nullable=False),
    pa.field("condition", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
)
AGREEMENT_SCHEMA = pa.schema(
    [
        pa.field("rater_a", pa.string(), nullable=False),
        pa.field("rater_b", pa.string(), nullable=False),
        pa.field("measure", pa.string(), nullable=False),  # cohen_kappa | fleiss_kappa
        pa.field("kappa", pa.float64()),
        pa.field("items", pa.int64(), nullable=False),
    ]
)
CONFUSION_SCHEMA = pa.schema(
    [
        pa.field("rater_a", pa.string(), nullable=False),
        pa.field("rater_b", pa.string(), nullable=False),
        pa.field("label_a", pa.int8(), nullable=False),
        pa.field("label_b", pa.int8(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
    ]
)
_UNITS_SCHEMA = pa.schema(
    [pa.field("model", pa.string()), pa.field("condition", pa.string()), pa.field("split", pa.string())]
)


def _units(ctx: StageContext[EvaluateConfig], _inputs: dict[str, Any]) -> TableSource:
    # Every domain split, and ``all`` (their union, as datasets and MTEB build it).
    splits = [
        *sorted(set(ctx.upstream["release"].read(columns=["split"]).column("split").to_pylist())),
        "all",
    ]
    rows = [
        {"model": m, "condition": CONDITIONS[lang], "split": s}
        for m in ctx.config.baselines
        for lang in ctx.config.languages
        for s in splits
    ]
    return TableSource(pa.Table.from_pylist(rows, schema=_UNITS_SCHEMA))


def inputs(ctx: StageContext[EvaluateConfig]) -> dict[str, Any]:
    path = _labels_path(ctx)
    if path is None:
        return {}
    from_file = path.read_bytes()
    return {"human_labels_bytes": len(from_file), "human_labels_sha256": _sha256(from_file)}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _labels_path(ctx: StageContext[EvaluateConfig]) -> Path | None:
    if ctx.config.human_labels is None:
        return None
    path = (ctx.base_dir / ctx.config.human_labels).resolve()
    if not path.is_file():
        raise ConfigError(f"evaluate.human_labels: no file at {path}")
    return path


def _load(folder: Path, present: set[tuple[str, str]], config: str, split: str) -> list[dict[str, Any]]:
    """The released rows of ``config`` in ``split`` (``all``: every domain's, in split order)."""
    # The released files themselves (tests load them with datasets.load_dataset, as MTEB does).
    splits = sorted(s for c, s in present if c == config) if split == "all" else [split]
    rows: list[dict[str, Any]] = []
    for name in splits:
        rows += pajson.read_json(folder / data_path(config, name)).to_pylist()
    return rows


def process(chunk: pa.Table, ctx: StageContext[EvaluateConfig]) -> ChunkResult:
    # The baselines' search kernels (numba): imported by a run that evaluates, not by every run.
    from tasks.common.evaluate.baselines import bm25_run, dense_run  # noqa: PLC0415

    release = ctx.upstream["release"]
    folder = release.files / "release"
    present = {(r["config"], r["split"]) for r in release.read(columns=["config", "split"]).to_pylist()}
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    encoder = None
    for split in sorted(set(chunk.column("split").to_pylist())):
        corpus = pa.Table.from_pylist(_load(folder, present, "corpus", split))
        qrels: dict[str, dict[str, int]] = {}
        for r in _load(folder, present, "qrels", split):
            qrels.setdefault(str(r["query-id"]), {})[str(r["corpus-id"])] = int(r["score"])
        units = [u for u in chunk.to_pylist() if u["split"] == split]
        queries: dict[str, list[dict[str, Any]]] = {}
        for lang, condition in CONDITIONS.items():
            todo = [u for u in units if u["condition"] == condition]
            if not todo:
                continue
            if not any(c == f"queries-{lang}" and (split in {s, "all"}) for c, s in present):
                excluded += [
                    {**u, "reason": "no_queries", "detail": f"no {lang} queries in {split}"} for u in todo
                ]
                continue
            queries[lang] = _load(folder, present, f"queries-{lang}", split)
        if not queries:
            continue
        # One retrieval per model over every language's queries (ids made unique by language):
        # the corpus is indexed or encoded once per split, not once per condition.
        every = pa.Table.from_pylist(
            [{"_id": f"{lang}:{q['_id']}", "text": q["text"]} for lang, rows in queries.items() for q in rows]
        )
        for model in sorted({u["model"] for u in units}):
            if model == "bm25":
                run = bm25_run(corpus, every, k=ctx.config.depth)
            else:
                if encoder is None:
                    encoder = query_encoder(ctx.upstream["embed"], ctx.base_dir)
                run = dense_run(corpus, every, encoder, k=ctx.config.depth)
            for lang, rows in queries.items():
                ids = {str(q["_id"]) for q in rows}
                judged = {q: rel for q, rel in qrels.items() if q in ids}
                lang_run = {
                    qid.split(":", 1)[1]: hits for qid, hits in run.items() if qid.startswith(f"{lang}:")
                }
                scores = evaluate(judged, lang_run, measures=("nDCG@10", "R@100"))
                kept += [
                    {
                        **u,
                        "ndcg_at_10": scores["nDCG@10"],
                        "recall_at_100": scores["R@100"],
                        "queries": len(judged),
                    }
                    for u in units
                    if u["model"] == model and u["condition"] == CONDITIONS[lang]
                ]
    tables: dict[str, pa.Table] = {}
    path = _labels_path(ctx)
    if path is not None:
        tables = _agreement_tables(ctx, path)
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA), tables=tables)


def _agreement_tables(ctx: StageContext[EvaluateConfig], path: Path) -> dict[str, pa.Table]:
    humans = pajson.read_json(path) if path.suffix == ".jsonl" else pacsv.read_csv(path)
    missing = {"query_id", "passage_id", "rater", "label"} - set(humans.column_names)
    if missing:
        raise ConfigError(f"evaluate.human_labels {path}: missing columns {sorted(missing)}")
    qrels = ctx.upstream["qrels"].read(columns=["query_id", "passage_id", "llm_score"])
    judge_model = "llm"
    labels = [
        {"query_id": str(r["query_id"]), "passage_id": str(r["passage_id"]), "rater": str(r["rater"]),
         "label": int(r["label"])}
        for r in humans.to_pylist()
    ]  # fmt: skip
    labels += [
        {
            "query_id": r["query_id"],
            "passage_id": r["passage_id"],
            "rater": judge_model,
            "label": int(r["llm_score"]),
        }
        for r in qrels.to_pylist()
        if r["llm_score"] is not None
    ]
    result = agreement(pa.Table.from_pylist(labels))
    return {"agreement": result.agreement, "confusion": result.confusion}


SPEC: StageSpec[EvaluateConfig] = StageSpec(
    name="evaluate",
    version=1,
    config_type=EvaluateConfig,
    upstream=("release", "embed", "qrels"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("model", "condition", "split"),
    inputs=inputs,
    source=_units,
    process=process,
    tables={"agreement": AGREEMENT_SCHEMA, "confusion": CONFUSION_SCHEMA},
    whole_input=True,
    description="BM25 and dense baselines: nDCG@10 and Recall@100 per domain and language condition.",
)
