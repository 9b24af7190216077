"""Stage ``translate``: every validated query in English, French and Spanish (CURE §2.2).

Each query keeps its original text in its own language and gets the other two by machine
translation. The translator is a port (:mod:`tasks.common.translate.port`); the production
adapter is DeepL through its official client (``DEEPL_AUTH_KEY``, optional
``DEEPL_SERVER_URL``); an LLM through the chat-model port (:mod:`tasks.common.translate.llm`,
prompt ``prompts/common/translate_query.md``) is the alternative and the offline default.
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
texts translated per engine. Side table ``translate_info``: the configured languages, one row
per chunk (the ``release`` stage's configs). The engine's config and factory are in
:mod:`tasks.common.translate.config`.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from irforge.errors import IrforgeError
from irforge.parallel import CPU, Resources
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.llm.cache import ChatStats, ReplyCache
from tasks.common.llm.port import ChatFailure
from tasks.common.llm.stage import llm_resources
from tasks.common.translate.config import TranslatorConfig, describe, make_translator, resolved_engine
from tasks.common.translate.deepl import DeepLTranslator
from tasks.common.translate.llm import LLMTranslator
from tasks.common.translate.port import CacheStats, Refused, TranslationCache, cached_translate_each

log = logging.getLogger("irforge.translate")


class TranslateConfig(TranslatorConfig):
    languages: tuple[Literal["en", "fr", "es"], ...] = ("en", "fr", "es")


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
INFO_SCHEMA = pa.schema([pa.field("languages", pa.list_(pa.string()), nullable=False)])
_SOURCE_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string()),
        pa.field("language", pa.string()),
        pa.field("source_language", pa.string()),
        pa.field("source_text", pa.string()),
        pa.field("domain", pa.string()),
    ]
)


def inputs(ctx: StageContext[TranslateConfig]) -> dict[str, Any]:
    """The configured engine and what each engine it may use would compute (module
    docstring: never which one the environment picks)."""
    return describe(ctx.config, ctx.base_dir)


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


_NO_ENGINE = "no translation engine: set DEEPL_AUTH_KEY, or configure translate.llm"


@dataclass
class _Outcomes:
    """The rows of one chunk so far, and the translator's options (JSON) for its rows."""

    options: str | None = None
    kept: list[dict[str, Any]] = field(default_factory=list)
    excluded: list[dict[str, Any]] = field(default_factory=list)

    def keep(self, row: dict[str, Any], text: str, engine: str, billed: int) -> None:
        original = engine == "original"
        self.kept.append({
            "query_id": row["query_id"], "language": row["language"], "text": text, "original": original,
            "source_language": row["source_language"], "engine": engine,
            "engine_options": None if original else self.options, "billed_characters": billed,
            "domain": row["domain"],
        })  # fmt: skip

    def refuse(self, row: dict[str, Any], reason: str = "no_translator", detail: str = _NO_ENGINE) -> None:
        self.excluded.append({
            "reason": reason, "detail": detail, "query_id": row["query_id"], "language": row["language"],
            "source_language": row["source_language"], "source_text": row["source_text"],
        })  # fmt: skip


def process(chunk: pa.Table, ctx: StageContext[TranslateConfig]) -> ChunkResult:
    rows = chunk.to_pylist()
    out = _Outcomes()
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["language"] == row["source_language"]:
            out.keep(row, row["source_text"], "original", billed=0)
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
            for r in pair_rows:
                out.refuse(r)
    elif translator is not None:
        if ctx.cache_dir is None:
            raise IrforgeError("translate: no request cache folder (run through the stage engine)")
        ctx.cache_dir.mkdir(parents=True, exist_ok=True)
        out.options = json.dumps(translator.options(), sort_keys=True)
        if isinstance(translator, LLMTranslator):
            chat = _translate_with_llm(translator, by_pair, ctx.cache_dir, out)
        else:
            assert isinstance(translator, DeepLTranslator)
            stats = _translate_with_deepl(translator, by_pair, ctx.cache_dir, out)
    order = {(r["query_id"], r["language"]): i for i, r in enumerate(rows)}
    out.kept.sort(key=lambda r: order[(r["query_id"], r["language"])])
    info = pa.table({"languages": [list(ctx.config.languages)]}, schema=INFO_SCHEMA)
    return ChunkResult(rows_to_table(out.kept, SCHEMA), rows_to_table(out.excluded, EXCLUDED_SCHEMA),
                       tables={"translate_info": info}, cost=_cost(out.kept, stats, chat))  # fmt: skip


def _cost(kept: list[dict[str, Any]], stats: CacheStats, chat: ChatStats) -> dict[str, int]:
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
    return cost


Pairs = dict[tuple[str, str], list[dict[str, Any]]]


def _translate_with_deepl(
    translator: DeepLTranslator, by_pair: Pairs, cache_dir: Path, out: _Outcomes
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
                    out.refuse(r, t.reason, t.detail)
                else:
                    out.keep(r, t.text, translator.engine, billed=t.billed_characters)
    return stats


def _translate_with_llm(
    translator: LLMTranslator, by_pair: Pairs, cache_dir: Path, out: _Outcomes
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
                    out.refuse(r, "translation_failed", f"{outcome.reason}: {outcome.detail}{reply}")
                else:
                    out.keep(r, outcome.text, translator.engine, billed=0)
    return stats


def resources(config: TranslateConfig) -> Resources:
    """The LLM's (:func:`~tasks.common.llm.stage.llm_resources`) when it translates; DeepL (a
    remote API) and no translator at all run on CPU workers."""
    return llm_resources(config.llm) if resolved_engine(config) == "llm" else CPU


SPEC: StageSpec[TranslateConfig] = StageSpec(
    name="translate",
    version=3,  # 2: side table translate_info (the configured languages, read by release); 3: options hold the sent template's digest
    config_type=TranslateConfig,
    upstream=("annotations",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("query_id", "language"),
    inputs=inputs,
    source=source,
    process=process,
    tables={"translate_info": INFO_SCHEMA},
    resources=resources,
    description="Queries in en / fr / es: the original plus DeepL translations through a request cache.",
)
