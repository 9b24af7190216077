"""Stage ``refine``: each evidence summary cut to the cited paper's own evidence, then kept if suitable.

Two LLM steps per harvested summary (EvidenceBench App. H.2–H.3, prompts
``prompts/evidencebench/refine.md`` and ``suitability.md``): **refine** copies from the review
paragraph the sentences on the cited paper's own experiments and observations (the citation
shown as written, ``[3]``); a reply whose sentences are not the paragraph's, or miss the
citing one, is ``invalid_reply`` (not re-asked: greedy decoding would repeat it). **suitability**
classifies the refined summary ``experiment`` / ``results`` / ``both`` / ``neither``
(``DECISION:``); only ``results`` and ``both`` are kept.

Units: harvested summaries. Output: their identity, ``citation``, ``sentence``,
``paragraph`` with context, ``refined_sentences``, ``summary``, ``suitability``, cost. Excluded (with ``step``): ``not_suitable``,
``invalid_reply``, ``truncated``, ``request_failed`` (``raw_reply`` holds the last reply).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, get_args

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.stage import ArtifactSource, ChunkResult, StageContext, StageSpec
from tasks.common.llm import stage as llm_stage
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.port import ChatReply
from tasks.common.llm.stage import Check, LLMCalls, Row, failure_schema, kept_schema, recheck, required
from tasks.evidencebench.grammars import choice_grammar, refine_grammar_for
from tasks.evidencebench.llm_steps import prompt_field, refine_request, step_prompt, suitability_request
from tasks.evidencebench.parsers import (
    SUITABLE,
    Suitability,
    parse_refine,
    parse_suitability,
    refine_validator,
)


class RefineConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    refine_prompt: str | None = prompt_field("Refine", "refine")
    suitability_prompt: str | None = prompt_field("Suitability", "suitability")
    keep: tuple[Suitability, ...] = Field(
        tuple(sorted(SUITABLE)),
        min_length=1,
        description="Suitability labels kept (App. H.3: results and both); the others are not_suitable.",
    )


_S, _LIST = pa.string(), pa.list_(pa.string())
SCHEMA = kept_schema(
    *required(unit_id=_S, review_id=_S, cited_ref_id=_S, citation=_S, sentence=_S, paragraph=_S),
    *required(context_before=_LIST, context_after=_LIST, refined_sentences=_LIST),
    *required(summary=_S, suitability=_S),
)
EXCLUDED_SCHEMA = failure_schema(*required(unit_id=_S, review_id=_S), extra=[pa.field("suitability", _S)])


def citation_marker(paragraph: str, spans: Sequence[dict[str, int]]) -> str:
    """The first citation's text in ``paragraph``, with the brackets or parentheses right around it.

    The harvest's spans cover an xref's text ("3"); the paragraph usually shows it as "[3]",
    which is what a reader (and the model) recognises as the citation.
    """
    if not spans:
        raise ValueError("a summary without citation spans: the harvest keeps only sentences citing a paper")
    start, end = spans[0]["start"], spans[0]["end"]
    if start > 0 and end < len(paragraph) and paragraph[start - 1] + paragraph[end] in ("[]", "()"):
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


def _harvested(ctx: StageContext[RefineConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    columns = ["unit_id", "review_id", "cited_ref_id", "sentence", "paragraph", "citation_spans"]
    return ArtifactSource(ctx.upstream["harvest"], columns=[*columns, "context_before", "context_after"])


def _suitable(keep: tuple[Suitability, ...]) -> Check:
    def check(_row: Row, reply: ChatReply) -> Mapping[str, Any] | None:
        if reply.value in keep:
            return None
        detail = f"suitability: {reply.value}"
        return {"reason": "not_suitable", "detail": detail, "step": "suitability", "attempts": reply.attempts}

    return check


def process(chunk: pa.Table, ctx: StageContext[RefineConfig]) -> ChunkResult:
    """Refine every summary of the chunk, then classify the refined ones."""
    config, sampling = ctx.config, ctx.config.llm.sampling
    calls = LLMCalls(ctx, config.llm, SCHEMA, EXCLUDED_SCHEMA)
    rows = chunk.to_pylist()
    for row in rows:
        row["citation"] = citation_marker(row["paragraph"], row["citation_spans"])
    # Where the server takes grammars, the reply can only copy the paragraph's sentences in
    # order and must include the citing one; the validator still checks both.
    prompt = step_prompt("refine", config.refine_prompt, ctx.base_dir)
    refined = calls.step(
        "refine",
        rows,
        lambda r: refine_request(
            r["unit_id"], r["paragraph"], r["citation"], prompt=prompt, sampling=sampling
        ),
        parse_refine,
        grammar=lambda r: refine_grammar_for(r["paragraph"], r["citation"]),
        into="refined_sentences",
        check=recheck("refine", lambda r: refine_validator(r["paragraph"], r["citation"])),
    )
    for row in refined:
        row["summary"] = " ".join(row["refined_sentences"])
    prompt = step_prompt("suitability", config.suitability_prompt, ctx.base_dir)
    kept = calls.step(
        "suitability",
        refined,
        lambda r: suitability_request(r["unit_id"], r["summary"], prompt=prompt, sampling=sampling),
        parse_suitability,
        grammar=choice_grammar("DECISION", get_args(Suitability)),
        into="suitability",
        check=_suitable(config.keep),
    )
    return calls.result(kept)


SPEC: StageSpec[RefineConfig] = StageSpec(
    name="refine",
    version=1,
    config_type=RefineConfig,
    upstream=("harvest",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    inputs=inputs,
    source=_harvested,
    process=process,
    resources=lambda config: llm_stage.llm_resources(config.llm),
    description="LLM: each summary cut to the cited paper's own evidence, kept if it reports results.",
)
