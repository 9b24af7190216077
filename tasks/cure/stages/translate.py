"""Stage ``translate``: every validated query in English, French and Spanish (CURE §2.2).

Each query keeps its original text in its own language and gets the other two by machine
translation. The translator is a port (:mod:`tasks.common.translate.port`); the production
adapter is DeepL through its official client (``DEEPL_AUTH_KEY``, optional
``DEEPL_SERVER_URL``); an LLM through the chat-model port (:mod:`tasks.common.translate.llm`,
prompt ``prompts/common/common/translate_query.md``) is the alternative and the offline default.
``engine: auto`` uses DeepL when a key is set, else the LLM when ``llm`` is configured,
and otherwise translates nothing: the missing languages are then excluded as
``no_translator`` (the run still completes and says so). A switch away from DeepL is a
warning in the log, and the manifest's ``cost`` counts the texts each engine translated
(``translated_by_deepl``, ``translated_by_llm``; the run report shows them).

Fingerprint: the configured engine and what each engine it may use would compute (the
``deepl`` options and glossary digests, the ``llm`` description and the prompt's digest),
never which one the environment picked. Whether ``DEEPL_AUTH_KEY`` is set (and where
``DEEPL_SERVER_URL`` points) is how the translations are reached, like a server URL, not
the recipe: the config names the engines and their settings, and both outcomes of ``auto``
are valid results of it. So a run without the key after a DeepL run reuses the DeepL
translations (and everything downstream) instead of silently replacing them with the LLM's,
and a run with the key after an LLM run keeps the LLM's until asked (``irforge run --only
translate``; the request caches make that pay only for DeepL). Pinning one engine is
``engine: deepl`` or ``engine: llm``, which are different configs and fingerprints.

Every request goes through a SQLite cache under the artifact root's ``cache/`` folder,
keyed by (text, source, target, engine, options) and committed batch by batch, so a
rerun, a resumed run or another fingerprint never pays twice for the same text. A quota
(456), key (403) or rate-limit error stops the stage with a one-line message; finished
chunks and every cached batch are kept.

Input: the ``queries`` table of the ``annotations`` stage, one unit per (query, target
language). Output columns: ``query_id``, ``language``, ``text``, ``original`` (True for the
annotator's own text), ``source_language``, ``engine`` (``original`` | ``deepl``),
``engine_options`` (JSON), ``billed_characters`` (what DeepL billed when this text was
first paid for — a cached answer keeps it; the manifest's ``cost`` counts this run only),
``domain``.
Excluded: ``no_translator``, ``translation_failed`` (the LLM's reply never validated),
``too_large`` (a text DeepL refuses even alone: over ``deepl.max_request_bytes``, or HTTP
413). The manifest's ``cost`` has billed and sent characters, texts sent, cache hits and the
texts translated per engine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError, IrforgeError
from irforge.fingerprint import Transport
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.llm.cache import ChatStats, ReplyCache
from tasks.common.llm.config import LLMConfig, chat_model, describe
from tasks.common.llm.port import ChatFailure
from tasks.common.translate.deepl import (
    DEFAULT_REQUEST_BYTES,
    DEFAULT_TIMEOUT_S,
    MAX_REQUEST_BYTES,
    DeepLTranslator,
)
from tasks.common.translate.deepl_glossary import glossary_digests, read_glossaries
from tasks.common.translate.llm import DEFAULT_PROMPT, LLMTranslator
from tasks.common.translate.port import (
    CacheStats,
    Refused,
    TranslationCache,
    Translator,
    cached_translate_each,
)

log = logging.getLogger("irforge.translate")

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


class TranslateConfig(StrictModel):
    engine: Engine = Field(
        "auto",
        description="auto: DeepL when DEEPL_AUTH_KEY is set, else the LLM when one is configured, else none.",
    )
    languages: tuple[Literal["en", "fr", "es"], ...] = ("en", "fr", "es")
    deepl: DeepLOptions = DeepLOptions()
    llm: LLMConfig | None = Field(
        None, description="engine llm: the chat model (prompt: prompts/common/common/translate_query.md)."
    )


SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("language", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("original", pa.bool_(), nullable=False),
        pa.field("source_language", pa.string(), nullable=False),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("engine_options", pa.string()),
        pa.field("billed_characters", pa.int64(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("query_id", pa.string(), nullable=False),
    pa.field("language", pa.string(), nullable=False),
    pa.field("source_language", pa.string(), nullable=False),
    pa.field("source_text", pa.string(), nullable=False),
)
_SOURCE_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string()),
        pa.field("language", pa.string()),
        pa.field("source_language", pa.string()),
        pa.field("source_text", pa.string()),
        pa.field("domain", pa.string()),
    ]
)


def resolved_engine(config: TranslateConfig) -> str:
    if config.engine != "auto":
        return config.engine
    if os.environ.get("DEEPL_AUTH_KEY", "").strip():
        return "deepl"
    return "llm" if config.llm is not None else "none"


def _llm_config(config: TranslateConfig) -> LLMConfig:
    if config.llm is None:
        raise ConfigError("translate.llm is required with engine: llm")
    return config.llm


def make_translator(config: TranslateConfig, base_dir: Path, work_dir: Path) -> Translator | None:
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


def inputs(ctx: StageContext[TranslateConfig]) -> dict[str, Any]:
    """The configured engine and what each engine it may use would compute (module
    docstring: never which one the environment picks). Described, not started: planning
    (``irforge status``) needs no key and must not launch a model server."""
    config = ctx.config
    out: dict[str, Any] = {"engine": config.engine}
    if config.engine in ("auto", "deepl"):
        entries = read_glossaries(_glossary_files(config.deepl, ctx.base_dir))
        out["deepl"] = {"glossary": glossary_digests(entries) or None}
    if config.engine == "llm" or (config.engine == "auto" and config.llm is not None):
        prompt = hashlib.sha256(DEFAULT_PROMPT.read_bytes()).hexdigest()
        out["llm"] = {"llm": describe(_llm_config(config), ctx.base_dir), "prompt_sha256": prompt}
    return out


_warned: set[tuple[Path | None, str]] = set()


def _warn_switch(ctx: StageContext[TranslateConfig], engine: str) -> None:
    """Say once per run (work folder) that ``engine: auto`` did not get DeepL."""
    if ctx.config.engine != "auto" or engine == "deepl" or (ctx.files_dir, engine) in _warned:
        return
    _warned.add((ctx.files_dir, engine))
    instead = (
        "the LLM (translate.llm) translates instead"
        if engine == "llm"
        else "no translate.llm is configured either, so nothing is translated (excluded as no_translator)"
    )
    log.warning(
        "translate: engine auto: DEEPL_AUTH_KEY is not set: %s; the fingerprint "
        "stays the config's, so to translate with DeepL later set the key and run "
        "`irforge run <flow> --only translate`",
        instead,
    )


def source(ctx: StageContext[TranslateConfig], _inputs: dict[str, Any]) -> TableSource:
    rows = []
    for q in ctx.upstream["annotations"].read(table="queries").to_pylist():
        for language in ctx.config.languages:
            rows.append(
                {
                    "query_id": q["query_id"],
                    "language": language,
                    "source_language": q["language"],
                    "source_text": q["text"],
                    "domain": q["domain"],
                }
            )
    return TableSource(pa.Table.from_pylist(rows, schema=_SOURCE_SCHEMA))


def process(chunk: pa.Table, ctx: StageContext[TranslateConfig]) -> ChunkResult:
    rows = chunk.to_pylist()
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["language"] == row["source_language"]:
            kept.append(
                _row(row, row["source_text"], original=True, engine="original", options=None, billed=0)
            )
        else:
            by_pair[(row["source_language"], row["language"])].append(row)
    stats = CacheStats(0, 0, 0, 0)
    chat = ChatStats()
    work_dir = ctx.files_dir or ctx.base_dir
    if by_pair:
        _warn_switch(ctx, resolved_engine(ctx.config))
    translator = make_translator(ctx.config, ctx.base_dir, work_dir) if by_pair else None
    if by_pair and translator is None:
        for pair_rows in by_pair.values():
            excluded += [_no_translator(r) for r in pair_rows]
    elif translator is not None:
        if ctx.cache_dir is None:
            raise IrforgeError("translate: no request cache folder (run through the stage engine)")
        ctx.cache_dir.mkdir(parents=True, exist_ok=True)
        options = json.dumps(translator.options(), sort_keys=True)
        if isinstance(translator, LLMTranslator):
            chat = _translate_with_llm(translator, by_pair, ctx.cache_dir, options, kept, excluded)
        else:
            assert isinstance(translator, DeepLTranslator)
            stats = _translate_with_deepl(translator, by_pair, ctx.cache_dir, options, kept, excluded)
    order = {(r["query_id"], r["language"]): i for i, r in enumerate(rows)}
    kept.sort(key=lambda r: order[(r["query_id"], r["language"])])
    cost = {
        "billed_characters": stats.billed_characters,
        "sent_characters": stats.sent_characters,
        "texts_sent": stats.sent_texts,
        "cache_hits": stats.hits + chat.hits,
        "requests_sent": chat.sent,
        "prompt_tokens": chat.prompt_tokens,
        "completion_tokens": chat.completion_tokens,
    }
    for row in kept:  # which engine translated what (auto may switch): summed over chunks
        if not row["original"]:
            cost[f"translated_by_{row['engine']}"] = cost.get(f"translated_by_{row['engine']}", 0) + 1
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA), cost=cost)


def _translate_with_deepl(
    translator: DeepLTranslator,
    by_pair: dict[tuple[str, str], list[dict[str, Any]]],
    cache_dir: Path,
    options: str,
    kept: list[dict[str, Any]],
    excluded: list[dict[str, Any]],
) -> CacheStats:
    """DeepL translations through the request cache, one cached chunk per request; a text
    DeepL refuses even alone (too large) is excluded as ``too_large``."""
    stats = CacheStats(0, 0, 0, 0)
    max_texts, max_bytes = translator.chunk_limits
    with translator, TranslationCache(cache_dir / "translations.sqlite") as cache:
        for (src, tgt), pair_rows in sorted(by_pair.items()):
            texts = [r["source_text"] for r in pair_rows]
            outcomes, pair_stats = cached_translate_each(
                translator, cache, texts, src, tgt, max_batch_texts=max_texts, max_batch_bytes=max_bytes
            )
            stats += pair_stats
            for r, t in zip(pair_rows, outcomes, strict=True):
                if isinstance(t, Refused):
                    excluded.append({**_no_translator(r), "reason": t.reason, "detail": t.detail})
                else:
                    kept.append(_row(r, t.text, original=False, engine=translator.engine, options=options,
                                     billed=t.billed_characters))  # fmt: skip
    return stats


def _translate_with_llm(
    translator: LLMTranslator,
    by_pair: dict[tuple[str, str], list[dict[str, Any]]],
    cache_dir: Path,
    options: str,
    kept: list[dict[str, Any]],
    excluded: list[dict[str, Any]],
) -> ChatStats:
    """LLM translations through the chat reply cache; a text the model fails on is
    quarantined as ``translation_failed`` with the reply, the others are kept."""
    stats = ChatStats()
    with ReplyCache(cache_dir / "llm_replies.sqlite") as cache:
        for (src, tgt), pair_rows in sorted(by_pair.items()):
            outcomes, pair_stats = translator.translate_each(
                [r["source_text"] for r in pair_rows], src, tgt, cache
            )
            stats += pair_stats
            for r, outcome in zip(pair_rows, outcomes, strict=True):
                if isinstance(outcome, ChatFailure):
                    reply = f"; reply: {outcome.raw_text[:300]!r}" if outcome.raw_text else ""
                    excluded.append({**_no_translator(r), "reason": "translation_failed",
                                     "detail": f"{outcome.reason}: {outcome.detail}{reply}"})  # fmt: skip
                else:
                    kept.append(_row(r, outcome.text, original=False, engine=translator.engine, options=options,
                                     billed=0))  # fmt: skip
    return stats


def _row(
    row: dict[str, Any], text: str, *, original: bool, engine: str, options: str | None, billed: int
) -> dict[str, Any]:
    return {
        "query_id": row["query_id"],
        "language": row["language"],
        "text": text,
        "original": original,
        "source_language": row["source_language"],
        "engine": engine,
        "engine_options": options,
        "billed_characters": billed,
        "domain": row["domain"],
    }


def _no_translator(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "reason": "no_translator",
        "detail": "no translation engine: set DEEPL_AUTH_KEY, or configure translate.llm",
        "query_id": row["query_id"],
        "language": row["language"],
        "source_language": row["source_language"],
        "source_text": row["source_text"],
    }


SPEC: StageSpec[TranslateConfig] = StageSpec(
    name="translate",
    version=1,
    config_type=TranslateConfig,
    upstream=("annotations",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("query_id", "language"),
    inputs=inputs,
    source=source,
    process=process,
    description="Queries in en / fr / es: the original plus DeepL translations through a request cache.",
)
