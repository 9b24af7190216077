"""Stage ``judge``: an LLM grades every pooled pair 0 / 1 / 2 with an explanation (CURE §2.3, App. B).

The pairs are the ``pool`` stage's stored scores seen through a cut-off (``pool``:
0.42 on the sigmoid by default), so a new cut-off reruns only this stage. The prompt
(:mod:`tasks.cure.judgement`) shows the clinical role of the query's domain, the
reasoning steps, optional rated examples, the question, the article title and the passage;
the reply must be the JSON object ``{"explanation": str, "score": 0 | 1 | 2}``: the schema is
requested from the server *and* every reply is validated (:func:`~tasks.cure.judgement.validate_judgement`).
A reply that does not validate is asked again (``llm.max_invalid_retries``) and then
quarantined with its raw text — never counted as a 0. Requests are sent grouped by query,
the question before the passage, so a server's prefix cache reuses the shared part.

Units: pooled pairs. Output: ``query_id``, ``passage_id``, ``domain``, ``score``,
``explanation``, ``engine``, ``model``, ``prompt_sha256`` (of the rendered prompt),
``prompt_tokens``, ``completion_tokens``, ``attempts``, ``cached``, ``probability``
(the pair's pool score). Excluded: ``invalid_reply``, ``truncated``, ``request_failed``
with the raw reply. The manifest's cost: requests sent, cache hits, tokens, USD.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from irforge.config import StrictModel
from irforge.contents import accounting
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.port import ChatRequest
from tasks.common.llm.stage import LLMCalls, failure_schema, llm_resources, required
from tasks.common.rerank.cutoff import PoolCutoff
from tasks.cure.judgement import JudgePrompt, judgement_schema, validate_judgement
from tasks.cure.queries import english_queries
from tasks.cure.stages.pool import pool_view


class JudgeConfig(StrictModel):
    llm: LLMConfig = LLMConfig()
    pool: PoolCutoff = PoolCutoff()
    prompt: str = Field(
        "cure/judge.md", description="Template in prompts/ (or a path relative to the config)."
    )
    roles: str = Field("cure/clinical_roles.yaml", description="Domain → clinical role and profession.")
    examples: str | None = Field(
        None, description="JSONL of rated examples {query, article_title, passage, explanation, score}."
    )
    max_explanation_chars: int = Field(
        2000,
        ge=50,
        description="Longest explanation (schema maxLength); keep it within llm.sampling.max_tokens.",
    )


_S = pa.string()
SCHEMA = pa.schema(
    [
        *required(query_id=_S, passage_id=_S, domain=_S, score=pa.int8(), explanation=_S),
        *required(
            engine=_S, model=_S, prompt_sha256=_S, prompt_tokens=pa.int64(), completion_tokens=pa.int64()
        ),
        *map(accounting, required(attempts=pa.int32(), cached=pa.bool_())),  # how, not what
        pa.field("probability", pa.float64(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = failure_schema(*required(query_id=_S, passage_id=_S, domain=_S), step=False)
_PAIRS_SCHEMA = pa.schema(
    [
        *(pa.field(name, _S) for name in ("query_id", "passage_id", "domain")),
        pa.field("probability", pa.float64()),
        *(pa.field(name, _S) for name in ("query_text", "passage", "article_title")),
    ]
)


@functools.lru_cache(maxsize=4)
def _prompt(config: JudgeConfig, base_dir: Path) -> JudgePrompt:
    return JudgePrompt(base_dir, config.prompt, config.roles, config.examples)


def inputs(ctx: StageContext[JudgeConfig]) -> dict[str, Any]:
    return {
        "llm": describe(ctx.config.llm, ctx.base_dir),
        "prompt": _prompt(ctx.config, ctx.base_dir).digests(),
        "schema": judgement_schema(ctx.config.max_explanation_chars),
    }


def _pairs(ctx: StageContext[JudgeConfig], _inputs: dict[str, Any]) -> TableSource:
    pairs = pool_view(ctx.upstream["pool"], ctx.config.pool)
    queries = english_queries(ctx.upstream["annotations"], ctx.upstream["translate"])
    query_text = dict(
        zip(queries.column("query_id").to_pylist(), queries.column("query_text").to_pylist(), strict=True)
    )
    corpus = ctx.upstream["corpus"].read(columns=["passage_id", "title", "text"])
    wanted = corpus.filter(pc.is_in(corpus.column("passage_id"), pairs.column("passage_id").unique()))
    passages = {r["passage_id"]: (r["text"], r["title"]) for r in wanted.to_pylist()}
    rows = [
        {
            "query_id": r["query_id"],
            "passage_id": r["passage_id"],
            "domain": r["domain"],
            "probability": r["probability"],
            "query_text": query_text[r["query_id"]],
            "passage": passages[r["passage_id"]][0],
            "article_title": passages[r["passage_id"]][1],
        }
        for r in pairs.select(["query_id", "passage_id", "domain", "probability"]).to_pylist()
    ]
    return TableSource(pa.Table.from_pylist(rows, schema=_PAIRS_SCHEMA))


def process(chunk: pa.Table, ctx: StageContext[JudgeConfig]) -> ChunkResult:
    config = ctx.config
    calls = LLMCalls(ctx, config.llm, SCHEMA, EXCLUDED_SCHEMA)
    prompt = _prompt(config, ctx.base_dir)
    schema = judgement_schema(config.max_explanation_chars)
    rows = chunk.to_pylist()
    for i, row in enumerate(rows):
        text = prompt.render(row["domain"], row["query_text"], row["passage"], row["article_title"])
        message = {"role": "user", "content": text}
        row["prompt_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        row["request"] = ChatRequest(
            str(i), (message,), config.llm.sampling, json_schema=schema, schema_name="relevance_judgement"
        )
    judged = calls.step(None, rows, lambda row: row["request"], validate_judgement, into="judgement")
    for row in judged:
        row["score"], row["explanation"] = row["judgement"]
    return calls.result(judged)


SPEC: StageSpec[JudgeConfig] = StageSpec(
    name="judge",
    version=1,
    config_type=JudgeConfig,
    upstream=("pool", "corpus", "annotations", "translate"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("query_id", "passage_id"),
    inputs=inputs,
    source=_pairs,
    process=process,
    resources=lambda config: llm_resources(config.llm),
    description="LLM relevance judgements 0 / 1 / 2 with explanations, through a reply cache.",
)
