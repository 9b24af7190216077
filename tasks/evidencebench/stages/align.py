"""Stage ``align``: which sentences of the cited paper state each study aspect (App. C).

For every decomposed summary, :func:`tasks.evidencebench.alignment.align` asks one request per
(aspect, window of ``window_size`` pool elements every ``stride``) with prompt
``prompts/evidencebench/align.md``; an element any window selects is a source for the aspect.
Replies are grammar-constrained where the server allows, validated and re-asked. An instance
with a window that got no valid reply is ``alignment_failed``; each failed request is kept in
the side table ``failed_windows`` with its raw reply.

Units: decomposed summaries. Output: ``decompose``'s columns plus ``aspect_sentences`` (per
aspect, the ascending pool indices aligned with it), ``windows``, ``requests`` and their cost.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.stage import (
    ArtifactSource,
    ChunkResult,
    StageContext,
    StageSpec,
    exclusion_schema,
    rows_to_table,
)
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.port import ChatOutcome, ChatReply
from tasks.common.llm.stage import LLMCalls, kept_schema, llm_resources, required
from tasks.evidencebench.alignment import WINDOW_SIZE, WINDOW_STRIDE, align, windows
from tasks.evidencebench.llm_steps import prompt_field, step_prompt
from tasks.evidencebench.pools import SUMMARY_FIELDS, paper_pools
from tasks.evidencebench.stages.decompose import IDENTITY

log = logging.getLogger(__name__)


class AlignConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    prompt: str | None = prompt_field("Alignment", "align")
    window_size: int = Field(WINDOW_SIZE, ge=1, description="Pool elements per request (App. C: 10).")
    stride: int = Field(WINDOW_STRIDE, ge=1, description="Elements between window starts (App. C: 5).")
    require_selection: bool = Field(
        False,
        description="Grammar-constrained replies must pick at least one element per window. Only for "
        "demo models that answer [] to everything: it forces every aspect to be covered.",
    )


_COLUMNS = [*IDENTITY, "paper_id", "aspects"]
_S, _I = pa.string(), pa.int32()
SCHEMA = kept_schema(
    *SUMMARY_FIELDS,
    *required(
        paper_id=_S, aspects=pa.list_(_S), aspect_sentences=pa.list_(pa.list_(_I)), windows=_I, requests=_I
    ),
)
EXCLUDED_SCHEMA = exclusion_schema(
    *required(unit_id=_S, review_id=_S, paper_id=_S),
    pa.field("failed_requests", _I),
    pa.field("requests", _I),
)
FAILED_WINDOWS_SCHEMA = pa.schema(
    [
        *required(unit_id=_S, custom_id=_S, aspect_index=_I, window_start=_I, window_stop=_I),
        *required(reason=_S, detail=_S),
        pa.field("raw_reply", _S),
        *required(attempts=_I),
    ]
)


def inputs(ctx: StageContext[AlignConfig]) -> dict[str, Any]:
    config = ctx.config
    if config.stride > config.window_size:
        raise IrforgeError(
            f"align: stride {config.stride} is larger than window_size {config.window_size}; "
            "pool elements between windows would never be read"
        )
    return {
        "llm": describe(config.llm, ctx.base_dir),
        "prompt": step_prompt("align", config.prompt, ctx.base_dir).sha256,
        "window_size": config.window_size,
        "stride": config.stride,
        "require_selection": config.require_selection,
    }


def _decomposed(ctx: StageContext[AlignConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["decompose"], columns=_COLUMNS)


def process(chunk: pa.Table, ctx: StageContext[AlignConfig]) -> ChunkResult:
    """Align every aspect of every summary of the chunk with its paper's pool."""
    config = ctx.config
    calls = LLMCalls(ctx, config.llm, SCHEMA, EXCLUDED_SCHEMA)
    rows = chunk.to_pylist()
    pools = paper_pools(ctx.upstream["papers"], [r["paper_id"] for r in rows])
    prompt = step_prompt("align", config.prompt, ctx.base_dir)
    kept: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    with calls.session() as (model, cache):
        for done, row in enumerate(rows, start=1):
            pool = pools[row["paper_id"]].texts
            aspect_ids = {f"{row['unit_id']}#aspect{j}": text for j, text in enumerate(row["aspects"])}
            outcomes: list[ChatOutcome] = []
            found = align(
                model, cache, aspect_ids, row["summary"], pool,
                size=config.window_size, stride=config.stride, prompt=prompt,
                sampling=config.llm.sampling, on_outcome=outcomes.append, constrain=True,
                allow_empty=not config.require_selection,
            )  # fmt: skip
            calls.stats = calls.stats + found.stats
            log.info(
                "align %d/%d %s: %d requests (%d from the cache), %d failed",
                done, len(rows), row["unit_id"], found.stats.sent + found.stats.hits,
                found.stats.hits, len(found.failures),
            )  # fmt: skip
            row["windows"] = len(windows(len(pool), config.window_size, config.stride))
            row["requests"] = row["windows"] * len(aspect_ids)
            if found.failures:
                failed += found.failure_rows(row["unit_id"], list(aspect_ids))
                detail, n_failed = found.failure_detail(row["requests"]), len(found.failures)
                calls.exclude(row, reason="alignment_failed", detail=detail, failed_requests=n_failed)
                continue
            row["aspect_sentences"] = [list(found.selected[a]) for a in aspect_ids]
            kept.append(calls.record(row, "align", [o for o in outcomes if isinstance(o, ChatReply)]))
    return calls.result(kept, failed_windows=rows_to_table(failed, FAILED_WINDOWS_SCHEMA))


SPEC: StageSpec[AlignConfig] = StageSpec(
    name="align",
    version=1,
    config_type=AlignConfig,
    upstream=("decompose", "papers"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("unit_id",),
    tables={"failed_windows": FAILED_WINDOWS_SCHEMA},
    inputs=inputs,
    source=_decomposed,
    process=process,
    resources=lambda config: llm_resources(config.llm),
    description="LLM: each aspect aligned with the paper's sentences in windows of 10, stride 5.",
)
