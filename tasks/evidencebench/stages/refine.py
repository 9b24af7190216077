"""Stage ``refine``: each evidence summary cut to the cited paper's own evidence, then kept if suitable.

Two LLM steps per harvested summary (EvidenceBench App. H.2–H.3, prompts
``prompts/evidencebench/refine.md`` and ``prompts/evidencebench/suitability.md``, see
:mod:`tasks.evidencebench.llm_steps`):

1. **refine**: from the summary's review paragraph, the sentences describing the cited
   paper's own experiments and observations, copied verbatim (``HINT:``). The citation
   marker shown to the model is the citation's text in the paragraph with the brackets
   or parentheses around it (``[3]``, ``(Doe et al., 2020)``).
2. **suitability**: the refined summary classified ``experiment`` / ``results`` /
   ``both`` / ``neither`` (``DECISION:``); only ``results`` and ``both`` are kept.

Each step is one batched call per chunk through the reply cache
(``<artifacts>/cache/llm_replies.sqlite``): a rerun sends only what was never answered.
The chat model checks each reply's format (and re-asks, ``llm.max_invalid_retries``);
whether the refine reply's sentences are really in the paragraph and carry the citation
depends on the request, so that check runs after the call and a reply failing it is
quarantined as ``invalid_reply`` (not re-asked: greedy decoding would repeat it, and the
cache answers the same request with the same reply). The fingerprint holds the model's
description and both prompts' digests.

Units: harvested summaries (``unit_id``). Output: ``unit_id``, ``review_id``,
``cited_ref_id``, ``citation`` (the marker), ``sentence`` (as harvested), ``paragraph``,
``context_before``, ``context_after``, ``refined_sentences``, ``summary`` (them joined by
spaces), ``suitability``, ``engine``, ``model``, and what both requests cost together:
``prompt_tokens``, ``completion_tokens``, ``attempts``, ``cached`` (both from the cache).

Excluded (``reason``, with ``step``: ``refine`` or ``suitability``): ``not_suitable``
(``suitability`` holds the label), ``invalid_reply``, ``truncated``, ``request_failed``
(``raw_reply`` holds the last reply, if any). The manifest's cost: requests sent, cache
hits, tokens, USD, over both steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.port import ChatFailure, ChatReply, ReplyInvalid
from tasks.evidencebench.grammars import choice_grammar, refine_grammar_for
from tasks.evidencebench.llm_calls import (
    LLM_COST_FIELDS,
    ask,
    constrained,
    excluded_row,
    failure_fields,
    llm_cost,
    spent,
    step_prompt,
)
from tasks.evidencebench.llm_steps import (
    SUITABLE,
    Suitability,
    parse_refine,
    parse_suitability,
    refine_request,
    refine_validator,
    suitability_request,
)

_BRACKETS = ("[]", "()")


class RefineConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    refine_prompt: str | None = Field(
        None,
        description="Refine prompt file relative to the config; default prompts/evidencebench/refine.md.",
    )
    suitability_prompt: str | None = Field(
        None,
        description="Suitability prompt file relative to the config; default prompts/evidencebench/suitability.md.",
    )
    keep: tuple[Suitability, ...] = Field(
        tuple(sorted(SUITABLE)),
        min_length=1,
        description="Suitability labels kept (App. H.3: results and both); the others are not_suitable.",
    )


SCHEMA = pa.schema(
    [
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("review_id", pa.string(), nullable=False),
        pa.field("cited_ref_id", pa.string(), nullable=False),
        pa.field("citation", pa.string(), nullable=False),
        pa.field("sentence", pa.string(), nullable=False),
        pa.field("paragraph", pa.string(), nullable=False),
        pa.field("context_before", pa.list_(pa.string()), nullable=False),
        pa.field("context_after", pa.list_(pa.string()), nullable=False),
        pa.field("refined_sentences", pa.list_(pa.string()), nullable=False),
        pa.field("summary", pa.string(), nullable=False),
        pa.field("suitability", pa.string(), nullable=False),
        *LLM_COST_FIELDS,
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("unit_id", pa.string(), nullable=False),
    pa.field("review_id", pa.string(), nullable=False),
    pa.field("step", pa.string(), nullable=False),
    pa.field("suitability", pa.string()),
    pa.field("raw_reply", pa.string()),
    pa.field("attempts", pa.int32(), nullable=False),
)
_COLUMNS = [
    "unit_id",
    "review_id",
    "cited_ref_id",
    "sentence",
    "paragraph",
    "citation_spans",
    "context_before",
    "context_after",
]


def citation_marker(paragraph: str, spans: Sequence[dict[str, int]]) -> str:
    """The first citation's text in ``paragraph``, with the brackets or parentheses right around it.

    The harvest's spans cover an xref's text ("3"); the paragraph usually shows it as "[3]",
    which is what a reader (and the model) recognises as the citation.
    """
    if not spans:
        raise ValueError("a summary without citation spans: the harvest keeps only sentences citing a paper")
    start, end = spans[0]["start"], spans[0]["end"]
    if start > 0 and end < len(paragraph) and paragraph[start - 1] + paragraph[end] in _BRACKETS:
        start, end = start - 1, end + 1
    return paragraph[start:end]


def inputs(ctx: StageContext[RefineConfig]) -> dict[str, Any]:
    config = ctx.config
    return {
        "llm": describe(config.llm, ctx.base_dir),
        "prompts": {
            "refine": step_prompt("refine", config.refine_prompt, ctx.base_dir).sha256,
            "suitability": step_prompt("suitability", config.suitability_prompt, ctx.base_dir).sha256,
        },
    }


def source(ctx: StageContext[RefineConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["harvest"], columns=_COLUMNS)


def process(chunk: pa.Table, ctx: StageContext[RefineConfig]) -> ChunkResult:
    """Refine every summary of the chunk, then classify the refined ones."""
    config = ctx.config
    sampling = config.llm.sampling
    refine_prompt = step_prompt("refine", config.refine_prompt, ctx.base_dir)
    rows = chunk.to_pylist()
    for row in rows:
        row["citation"] = citation_marker(row["paragraph"], row["citation_spans"])
    # Where the server takes grammars, the reply can only copy the paragraph's sentences in
    # order and must include the citing one; the validator still checks both.
    requests = [
        constrained(
            refine_request(
                r["unit_id"], r["paragraph"], r["citation"], prompt=refine_prompt, sampling=sampling
            ),
            refine_grammar_for(r["paragraph"], r["citation"]),
        )
        for r in rows
    ]
    refined, refine_stats = ask(ctx, config.llm, requests, parse_refine)

    excluded: list[dict[str, Any]] = []
    summaries: list[tuple[dict[str, Any], ChatReply, tuple[str, ...]]] = []
    for row, outcome in zip(rows, refined, strict=True):
        if isinstance(outcome, ChatFailure):
            excluded.append(excluded_row(row, failure_fields("refine", outcome)))
            continue
        assert isinstance(outcome, ChatReply)
        try:
            sentences = refine_validator(row["paragraph"], row["citation"])(outcome.text)
        except ReplyInvalid as err:
            fields = {"reason": "invalid_reply", "detail": f"refine: {err}", "step": "refine"}
            excluded.append(
                excluded_row(row, {**fields, "raw_reply": outcome.text, "attempts": outcome.attempts})
            )
            continue
        summaries.append((row, outcome, sentences))

    suitability_prompt = step_prompt("suitability", config.suitability_prompt, ctx.base_dir)
    grammar = choice_grammar("DECISION", get_args(Suitability))
    requests = [
        constrained(
            suitability_request(row["unit_id"], " ".join(s), prompt=suitability_prompt, sampling=sampling),
            grammar,
        )
        for row, _, s in summaries
    ]
    labelled, suitability_stats = ask(ctx, config.llm, requests, parse_suitability)

    kept: list[dict[str, Any]] = []
    for (row, refine_reply, sentences), outcome in zip(summaries, labelled, strict=True):
        if isinstance(outcome, ChatFailure):
            excluded.append(excluded_row(row, failure_fields("suitability", outcome)))
            continue
        assert isinstance(outcome, ChatReply)
        label = outcome.value
        if label not in config.keep:
            fields = {"reason": "not_suitable", "detail": f"suitability: {label}", "step": "suitability"}
            excluded.append(excluded_row(row, {**fields, "suitability": label, "attempts": outcome.attempts}))
            continue
        kept.append(
            {
                **{name: row[name] for name in ("unit_id", "review_id", "cited_ref_id", "citation")},
                **{name: row[name] for name in ("sentence", "paragraph", "context_before", "context_after")},
                "refined_sentences": list(sentences),
                "summary": " ".join(sentences),
                "suitability": label,
                "engine": config.llm.engine,
                "model": outcome.model,
                **spent(refine_reply, outcome),
            }
        )
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        cost=llm_cost(config.llm, refine_stats + suitability_stats),
    )


SPEC: StageSpec[RefineConfig] = StageSpec(
    name="refine",
    version=1,
    config_type=RefineConfig,
    upstream=("harvest",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    inputs=inputs,
    source=source,
    process=process,
    description="LLM: each summary cut to the cited paper's own evidence, kept if it reports results.",
)
