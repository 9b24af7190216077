"""Which engine translates queries, as a typed config, and the one place translators are built.

Engines: ``deepl`` (:mod:`tasks.common.translate.deepl`, ``DEEPL_AUTH_KEY`` and optional
``DEEPL_SERVER_URL``), ``llm`` (:mod:`tasks.common.translate.llm`, any chat model of
:mod:`tasks.common.llm.config`, prompt ``prompts/common/translate_query.md``), ``none``;
``auto`` picks DeepL when a key is set, else the LLM when ``llm`` is configured, else none.

:func:`describe` is the fingerprint material: the configured engine and what each engine
it may use would compute (the DeepL glossary digests, the chat model and the prompt's
digest), never which one the environment picked. Whether ``DEEPL_AUTH_KEY`` is set is how
translations are reached, not the recipe: a run without the key after a DeepL run reuses
the DeepL translations instead of silently replacing them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError
from irforge.fingerprint import Transport
from tasks.common.llm.config import LLMConfig, chat_model
from tasks.common.llm.config import describe as describe_llm
from tasks.common.translate.deepl import DeepLTranslator
from tasks.common.translate.deepl_glossary import glossary_digests, read_glossaries
from tasks.common.translate.deepl_requests import DEFAULT_REQUEST_BYTES, DEFAULT_TIMEOUT_S, MAX_REQUEST_BYTES
from tasks.common.translate.llm import DEFAULT_PROMPT, LLMTranslator
from tasks.common.translate.port import Translator

Engine = Literal["auto", "deepl", "llm", "none"]


class DeepLOptions(StrictModel):
    formality: Literal["prefer_more", "prefer_less"] | None = Field(
        None, description="Register of the output."
    )
    model_type: Literal["quality_optimized", "prefer_quality_optimized", "latency_optimized"] | None = None
    english_variant: Literal["EN-US", "EN-GB"] = "EN-US"
    glossaries: dict[str, str] = Field(
        default_factory=dict,
        description='Language pair ("en-fr") → CSV of medical terms (source_term,target_term), relative to the config.',
    )
    max_network_retries: Transport[int] = Field(
        5, ge=0, description="Retries of a request on 429 / 5xx / dropped or timed-out connections."
    )
    timeout_s: Transport[float] = Field(
        DEFAULT_TIMEOUT_S, gt=0, description="Longest wait for one request, its retries included."
    )
    max_request_bytes: Transport[int] = Field(
        DEFAULT_REQUEST_BYTES,
        ge=4096,
        le=MAX_REQUEST_BYTES,
        description="Largest JSON body of one request (DeepL's 128 KiB limit counts the headers too); "
        "a request DeepL still refuses (413) is halved.",
    )


class TranslatorConfig(StrictModel):
    engine: Engine = Field(
        "auto",
        description="auto: DeepL when DEEPL_AUTH_KEY is set, else the LLM when one is configured, else none.",
    )
    deepl: DeepLOptions = DeepLOptions()
    llm: LLMConfig | None = Field(
        None, description="engine llm: the chat model (prompt: prompts/common/translate_query.md)."
    )


def resolved_engine(config: TranslatorConfig) -> str:
    """The engine ``config`` translates with here: ``auto`` resolved by the environment."""
    if config.engine != "auto":
        return config.engine
    if os.environ.get("DEEPL_AUTH_KEY", "").strip():
        return "deepl"
    return "llm" if config.llm is not None else "none"


def _llm_config(config: TranslatorConfig) -> LLMConfig:
    if config.llm is None:
        raise ConfigError("translate.llm is required with engine: llm")
    return config.llm


def make_translator(config: TranslatorConfig, base_dir: Path, work_dir: Path) -> Translator | None:
    """The translator of :func:`resolved_engine`, None for ``none``."""
    engine = resolved_engine(config)
    if engine == "none":
        return None
    if engine == "llm":
        llm = _llm_config(config)
        return LLMTranslator(chat_model(llm, base_dir, work_dir), sampling=llm.sampling)
    options = config.deepl
    return DeepLTranslator.from_env(
        formality=options.formality,
        model_type=options.model_type,
        english_variant=options.english_variant,
        glossaries=_glossary_files(options, base_dir),
        max_network_retries=options.max_network_retries,
        timeout_s=options.timeout_s,
        max_request_bytes=options.max_request_bytes,
    )


def _glossary_files(options: DeepLOptions, base_dir: Path) -> dict[str, Path]:
    return {pair: base_dir / path for pair, path in options.glossaries.items()}


def describe(config: TranslatorConfig, base_dir: Path) -> dict[str, Any]:
    """The configured engine and what each engine it may use would compute. Described, not
    started: planning (``irforge status``) needs no key and must not launch a model server."""
    out: dict[str, Any] = {"engine": config.engine}
    if config.engine in ("auto", "deepl"):
        entries = read_glossaries(_glossary_files(config.deepl, base_dir))
        out["deepl"] = {"glossary": glossary_digests(entries) or None}
    if config.engine == "llm" or (config.engine == "auto" and config.llm is not None):
        prompt = hashlib.sha256(DEFAULT_PROMPT.read_bytes()).hexdigest()
        out["llm"] = {"llm": describe_llm(_llm_config(config), base_dir), "prompt_sha256": prompt}
    return out
