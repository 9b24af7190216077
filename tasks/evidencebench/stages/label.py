"""Stage ``label``: which study aspects are results, which background or methods (§2.2, §3.4).

One LLM request per aligned summary (prompt ``prompts/evidencebench/label.md``): every aspect,
in order, labelled ``results``, ``background`` or ``methods`` (``LABELS:``, exactly one
line per aspect; grammar-constrained where the server takes GBNF grammars). The
``results`` aspects form the Result-ER evidence set of ``select``.

The 70 % coverage rule (§2.2; ``select`` applies it) is applied here first: an
instance with fewer than 70 % of its aspects aligned is dropped before its labels are paid for.

Units: aligned summaries (``unit_id``). Output: ``align``'s instance columns plus
``aspect_labels`` (one per aspect) and the request's cost. Excluded (``reason``):
``low_coverage`` (``step`` coverage, no request sent), ``invalid_reply``, ``truncated``,
``request_failed`` (``raw_reply`` holds the last reply).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from irforge.config import StrictModel
from irforge.stage import ArtifactSource, ChunkResult, StageContext, StageSpec
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.port import ChatOutcome
from tasks.common.llm.stage import (
    LLMCalls,
    Row,
    constrained,
    failure_schema,
    kept_schema,
    llm_resources,
    required,
)
from tasks.evidencebench.grammars import labels_grammar
from tasks.evidencebench.instance import low_coverage
from tasks.evidencebench.llm_steps import aspects_request, prompt_field, step_prompt
from tasks.evidencebench.parsers import labels_validator
from tasks.evidencebench.pools import SUMMARY_FIELDS
from tasks.evidencebench.stages.decompose import IDENTITY


class LabelConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    prompt: str | None = prompt_field("Label", "label")


INSTANCE = (*IDENTITY, "paper_id", "aspects", "aspect_sentences")
_S, _LIST = pa.string(), pa.list_(pa.string())
SCHEMA = kept_schema(
    *SUMMARY_FIELDS,
    *required(paper_id=_S, aspects=_LIST, aspect_sentences=pa.list_(pa.list_(pa.int32()))),
    *required(aspect_labels=_LIST),
)
EXCLUDED_SCHEMA = failure_schema(*required(unit_id=_S, review_id=_S))


def inputs(ctx: StageContext[LabelConfig]) -> dict[str, Any]:
    config = ctx.config
    return {
        "llm": describe(config.llm, ctx.base_dir),
        "prompt": step_prompt("label", config.prompt, ctx.base_dir).sha256,
    }


def _aligned(ctx: StageContext[LabelConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["align"], columns=list(INSTANCE))


def process(chunk: pa.Table, ctx: StageContext[LabelConfig]) -> ChunkResult:
    """Label the aspects of every summary of the chunk, one request per summary."""
    config = ctx.config
    calls = LLMCalls(ctx, config.llm, SCHEMA, EXCLUDED_SCHEMA)
    prompt = step_prompt("label", config.prompt, ctx.base_dir)
    # The validator depends on the number of aspects: one cached call per aspect count.
    rows = chunk.to_pylist()
    by_count: dict[int, list[Row]] = {}
    for row in rows:
        why = low_coverage(row["aspect_sentences"])
        if why is None:
            by_count.setdefault(len(row["aspects"]), []).append(row)
        else:
            calls.exclude(row, reason="low_coverage", detail=why, step="coverage", attempts=0)
    outcomes: dict[int, ChatOutcome] = {}
    for count, members in sorted(by_count.items()):
        requests = [
            constrained(
                aspects_request(
                    "label", row["unit_id"], row["summary"], row["aspects"],
                    prompt=prompt, sampling=config.llm.sampling,
                ),
                labels_grammar(count),
            )
            for row in members
        ]  # fmt: skip
        answered = calls.ask(requests, labels_validator(count))
        outcomes.update((id(row), outcome) for row, outcome in zip(members, answered, strict=True))
    asked = [row for row in rows if id(row) in outcomes]
    labelled = calls.settle("label", asked, [outcomes[id(row)] for row in asked], into="aspect_labels")
    return calls.result(labelled)


SPEC: StageSpec[LabelConfig] = StageSpec(
    name="label",
    version=2,  # 2: the 70 % rule applied before labelling
    config_type=LabelConfig,
    upstream=("align",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    inputs=inputs,
    source=_aligned,
    process=process,
    resources=lambda config: llm_resources(config.llm),
    description="LLM: each aspect labelled results, background or methods.",
)
