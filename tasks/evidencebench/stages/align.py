"""Stage ``align``: which sentences of the cited paper state each study aspect (App. C).

For every decomposed summary, :func:`tasks.evidencebench.alignment.align` asks one request per
(aspect, window of ``window_size`` pool elements every ``stride``), the summary shown as the
aspect's context (prompt ``prompts/evidencebench/align.md``); a pool element is a source of
information for an aspect when any window selects it. Requests go through the reply cache
(a rerun or a resumed run pays for nothing twice) and, where the server takes GBNF
grammars, each reply is constrained to ``DECISION: [i, j, ...]`` with indices inside its
window; every reply is validated (indices in the window, no repeats) and re-asked
(``llm.max_invalid_retries``) before it fails.

An instance with a window that got no valid reply is excluded (``alignment_failed``):
its coverage would silently miss what that window says. Each failed request is kept in the
side table ``failed_windows`` with its raw reply, so the loss is inspectable.

Units: decomposed summaries (``unit_id``). Output: ``decompose``'s columns plus
``aspect_sentences`` (per aspect, the ascending pool indices aligned with it), ``windows``
(per aspect) and ``requests``, and what the requests cost (``prompt_tokens``,
``completion_tokens``, ``attempts``, ``cached``: every reply from the cache).
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
from tasks.common.llm.cache import ChatStats, ReplyCache
from tasks.common.llm.config import LLMConfig, chat_model, describe
from tasks.common.llm.port import ChatOutcome, ChatReply
from tasks.evidencebench.alignment import WINDOW_SIZE, WINDOW_STRIDE, align, windows
from tasks.evidencebench.llm_calls import LLM_COST_FIELDS, llm_cost, spent, step_prompt
from tasks.evidencebench.pools import SUMMARY_FIELDS, paper_pools
from tasks.evidencebench.stages.decompose import IDENTITY

log = logging.getLogger(__name__)


class AlignConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    prompt: str | None = Field(
        None,
        description="Alignment prompt file relative to the config; default prompts/evidencebench/align.md.",
    )
    window_size: int = Field(WINDOW_SIZE, ge=1, description="Pool elements per request (App. C: 10).")
    stride: int = Field(WINDOW_STRIDE, ge=1, description="Elements between window starts (App. C: 5).")
    require_selection: bool = Field(
        False,
        description="Grammar-constrained replies must pick at least one element per window. Only for "
        "demo models that answer [] to everything: it forces every aspect to be covered.",
    )


_COLUMNS = [*IDENTITY, "paper_id", "aspects"]
SCHEMA = pa.schema(
    [
        *SUMMARY_FIELDS,
        pa.field("paper_id", pa.string(), nullable=False),
        pa.field("aspects", pa.list_(pa.string()), nullable=False),
        pa.field("aspect_sentences", pa.list_(pa.list_(pa.int32())), nullable=False),
        pa.field("windows", pa.int32(), nullable=False),
        pa.field("requests", pa.int32(), nullable=False),
        *LLM_COST_FIELDS,
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("unit_id", pa.string(), nullable=False),
    pa.field("review_id", pa.string(), nullable=False),
    pa.field("paper_id", pa.string(), nullable=False),
    pa.field("failed_requests", pa.int32()),
    pa.field("requests", pa.int32()),
)
FAILED_WINDOWS_SCHEMA = pa.schema(
    [
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("custom_id", pa.string(), nullable=False),
        pa.field("aspect_index", pa.int32(), nullable=False),
        pa.field("window_start", pa.int32(), nullable=False),
        pa.field("window_stop", pa.int32(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("raw_reply", pa.string()),
        pa.field("attempts", pa.int32(), nullable=False),
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


def source(ctx: StageContext[AlignConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["decompose"], columns=_COLUMNS)


def process(chunk: pa.Table, ctx: StageContext[AlignConfig]) -> ChunkResult:
    """Align every aspect of every summary of the chunk with its paper's pool."""
    config = ctx.config
    if ctx.cache_dir is None or ctx.files_dir is None:
        raise IrforgeError(
            "align: no cache or work folder for the LLM replies (run the stage through the engine)"
        )
    rows = chunk.to_pylist()
    pools = paper_pools(ctx.upstream["papers"], [r["paper_id"] for r in rows])
    prompt = step_prompt("align", config.prompt, ctx.base_dir)
    model = chat_model(config.llm, ctx.base_dir, ctx.files_dir)
    ctx.cache_dir.mkdir(parents=True, exist_ok=True)
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    stats = ChatStats()
    done = 0
    with ReplyCache(ctx.cache_dir / "llm_replies.sqlite") as cache:
        for row in rows:
            pool = pools[row["paper_id"]].texts
            aspect_ids = {f"{row['unit_id']}#aspect{j}": text for j, text in enumerate(row["aspects"])}
            outcomes: list[ChatOutcome] = []
            found = align(
                model, cache, aspect_ids, row["summary"], pool,
                size=config.window_size, stride=config.stride, prompt=prompt,
                sampling=config.llm.sampling, on_outcome=outcomes.append, constrain=True,
                allow_empty=not config.require_selection,
            )  # fmt: skip
            stats = stats + found.stats
            # A chunk holds many papers of a few hundred requests each: say where it is.
            done += 1
            log.info(
                "align %d/%d %s: %d requests (%d from the cache), %d failed",
                done, len(rows), row["unit_id"], found.stats.sent + found.stats.hits,
                found.stats.hits, len(found.failures),
            )  # fmt: skip
            n_windows = len(windows(len(pool), config.window_size, config.stride))
            requests = n_windows * len(aspect_ids)
            order = list(aspect_ids)
            if found.failures:
                for custom_id, failure in sorted(found.failures.items()):
                    aspect_id, span = found.failed_windows[custom_id]
                    failed.append(
                        {
                            "unit_id": row["unit_id"],
                            "custom_id": custom_id,
                            "aspect_index": order.index(aspect_id),
                            "window_start": span.start,
                            "window_stop": span.stop,
                            "reason": failure.reason,
                            "detail": failure.detail,
                            "raw_reply": failure.raw_text,
                            "attempts": failure.attempts,
                        }
                    )
                first = min(found.failures)
                excluded.append(
                    {
                        "unit_id": row["unit_id"],
                        "review_id": row["review_id"],
                        "paper_id": row["paper_id"],
                        "reason": "alignment_failed",
                        "detail": f"{len(found.failures)} of {requests} window requests got no valid reply "
                        f"(first {first}: {found.failures[first].reason}: {found.failures[first].detail}); "
                        "see the failed_windows table",
                        "failed_requests": len(found.failures),
                        "requests": requests,
                    }
                )
                continue
            kept.append(
                {
                    **{name: row[name] for name in _COLUMNS},
                    "aspect_sentences": [list(found.selected[a]) for a in order],
                    "windows": n_windows,
                    "requests": requests,
                    "engine": config.llm.engine,
                    "model": next((o.model for o in outcomes if isinstance(o, ChatReply)), config.llm.model),
                    **spent(*(o for o in outcomes if isinstance(o, ChatReply))),
                }
            )
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={"failed_windows": rows_to_table(failed, FAILED_WINDOWS_SCHEMA)},
        cost=llm_cost(config.llm, stats),
    )


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
    source=source,
    process=process,
    description="LLM: each aspect aligned with the paper's sentences in windows of 10, stride 5.",
)
