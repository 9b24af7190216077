"""Stage ``hypothesis``: the hypothesis each refined summary was written to support (EvidenceBench App. G).

Two LLM steps per summary kept by ``refine`` (prompts ``prompts/evidencebench/hypothesis_recover.md``
and ``hypothesis_trim.md``, see :mod:`tasks.evidencebench.llm_steps`):

1. **recover**: from the refined summary and the review's text around it (the summary's
   paragraph with the context paragraphs before and after it), the hypothesis the
   review's authors reported this evidence for (``HYPOTHESIS:``);
2. **trim**: that hypothesis cut to its central claim, without the summarised evidence,
   read against the summary's paragraph (``HYPOTHESIS:``).

Units: refined summaries (``unit_id``). Output: ``unit_id``, ``review_id``,
``cited_ref_id``, ``summary``, ``suitability``, ``recovered_hypothesis`` (step 1),
``hypothesis`` (step 2) and both requests' cost. Excluded (``reason``, with ``step``:
``hypothesis_recover`` or ``hypothesis_trim``): ``invalid_reply``, ``truncated``,
``request_failed`` (``raw_reply`` holds the last reply, if any).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from irforge.config import StrictModel
from irforge.stage import ArtifactSource, ChunkResult, StageContext, StageSpec
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.stage import LLMCalls, failure_schema, kept_schema, llm_resources, required
from tasks.evidencebench.grammars import hypothesis_grammar
from tasks.evidencebench.llm_steps import (
    prompt_field,
    recover_hypothesis_request,
    step_prompt,
    trim_hypothesis_request,
)
from tasks.evidencebench.parsers import parse_hypothesis


class HypothesisConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    recover_prompt: str | None = prompt_field("Recover", "hypothesis_recover")
    trim_prompt: str | None = prompt_field("Trim", "hypothesis_trim")


_S = pa.string()
SCHEMA = kept_schema(
    *required(unit_id=_S, review_id=_S, cited_ref_id=_S, summary=_S, suitability=_S),
    *required(recovered_hypothesis=_S, hypothesis=_S),
)
EXCLUDED_SCHEMA = failure_schema(*required(unit_id=_S, review_id=_S))


def review_context(paragraph: str, before: list[str], after: list[str]) -> str:
    """The review's text around a summary: its paragraph between the context paragraphs, blank-line separated."""
    return "\n\n".join([*before, paragraph, *after])


def inputs(ctx: StageContext[HypothesisConfig]) -> dict[str, Any]:
    config = ctx.config
    return {
        "llm": describe(config.llm, ctx.base_dir),
        "prompts": {
            "recover": step_prompt("hypothesis_recover", config.recover_prompt, ctx.base_dir).sha256,
            "trim": step_prompt("hypothesis_trim", config.trim_prompt, ctx.base_dir).sha256,
        },
    }


def _refined(ctx: StageContext[HypothesisConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    columns = ["unit_id", "review_id", "cited_ref_id", "summary", "suitability", "paragraph"]
    return ArtifactSource(ctx.upstream["refine"], columns=[*columns, "context_before", "context_after"])


def process(chunk: pa.Table, ctx: StageContext[HypothesisConfig]) -> ChunkResult:
    """Recover the hypothesis of every summary of the chunk, then trim the recovered ones."""
    config, sampling = ctx.config, ctx.config.llm.sampling
    calls = LLMCalls(ctx, config.llm, SCHEMA, EXCLUDED_SCHEMA)
    grammar = hypothesis_grammar(400)  # a longer grammar bound compiles slowly; hypotheses are shorter
    prompt = step_prompt("hypothesis_recover", config.recover_prompt, ctx.base_dir)
    recovered = calls.step(
        "hypothesis_recover",
        chunk.to_pylist(),
        lambda r: recover_hypothesis_request(
            r["unit_id"],
            review_context(r["paragraph"], r["context_before"], r["context_after"]),
            r["summary"],
            prompt=prompt,
            sampling=sampling,
        ),
        parse_hypothesis,
        grammar=grammar,
        into="recovered_hypothesis",
    )
    trim = step_prompt("hypothesis_trim", config.trim_prompt, ctx.base_dir)
    trimmed = calls.step(
        "hypothesis_trim",
        recovered,
        lambda r: trim_hypothesis_request(
            r["unit_id"], r["paragraph"], r["recovered_hypothesis"], prompt=trim, sampling=sampling
        ),
        parse_hypothesis,
        grammar=grammar,
        into="hypothesis",
    )
    return calls.result(trimmed)


SPEC: StageSpec[HypothesisConfig] = StageSpec(
    name="hypothesis",
    version=1,
    config_type=HypothesisConfig,
    upstream=("refine",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    inputs=inputs,
    source=_refined,
    process=process,
    resources=lambda config: llm_resources(config.llm),
    description="LLM: the hypothesis each refined summary supports, recovered then trimmed to its claim.",
)
