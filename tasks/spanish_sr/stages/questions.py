"""Stage ``questions``: each cleaned record becomes a (question, abstract) pair (issue 17 §3).

Paper 004 §3.1 follows PubMedQA: the question of a pair comes from the article's title and
the abstract is its passage. Modes:

- ``title`` (default, the paper's setting): the title itself, whitespace collapsed and a
  final full stop, colon or semicolon dropped;
- ``rule``: a "¿…?" template chosen by the title's shape from the language profile
  (:func:`tasks.spanish_sr.question_rules.rule_question` lists the shapes);
- ``llm``: the title rewritten by an LLM (:mod:`tasks.spanish_sr.question_llm`, prompt
  ``prompts/spanish_sr/question.md``; JSON reply validated, cached, cost counted).

Kept: ``record_id``, ``question``, ``mode``, ``shape`` (rule), ``model`` (llm), ``title``,
``abstract``. Excluded: ``no_title``, ``title_equals_abstract`` (equal once normalised) and the
LLM's ``invalid_reply`` / ``truncated`` / ``request_failed`` with the raw reply.
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from irforge.config import StrictModel
from irforge.stage import ArtifactSource, ChunkResult, StageContext, StageSpec, rows_to_table
from tasks.common.llm.config import LLMConfig, describe
from tasks.common.llm.stage import LLMCalls, failure_schema, llm_cost, llm_resources, required
from tasks.spanish_sr.language import PROFILES, profile
from tasks.spanish_sr.question_llm import DEFAULT_PROMPT, ask_llm, load_prompt
from tasks.spanish_sr.question_rules import clean_title, rule_question, title_problem

Mode = Literal["title", "rule", "llm"]
INPUT_COLUMNS = ["record_id", "source", "record", "title", "abstract"]


class QuestionsConfig(StrictModel):
    mode: Mode = Field("title", description="title (the paper's setting), rule (profile templates) or llm.")
    language: str = Field("es", description="The profile whose rules (or language name, for llm) are used.")
    llm: LLMConfig | None = Field(None, description="Required by mode llm.")
    prompt: str = Field(
        DEFAULT_PROMPT, description="Template in prompts/ (or a path relative to the config)."
    )

    @field_validator("language")
    @classmethod
    def _known(cls, code: str) -> str:
        if code not in PROFILES:
            raise ValueError(f"no language profile {code!r}; known: {', '.join(sorted(PROFILES))}")
        return code

    @model_validator(mode="after")
    def _llm_for_llm(self) -> QuestionsConfig:
        if self.mode == "llm" and self.llm is None:
            raise ValueError("mode llm needs an llm section")
        return self


_S = pa.string()
SCHEMA = pa.schema(
    [
        *required(record_id=_S, question=_S, mode=_S),
        pa.field("shape", _S),
        pa.field("model", _S),
        *required(title=_S, abstract=pa.large_string()),
    ]
)
EXCLUDED_SCHEMA = failure_schema(
    pa.field("record_id", _S, nullable=False),
    step=False,
    extra=[pa.field("source", _S), pa.field("record", pa.int32())],
    attempts_required=False,
)


def _place(row: dict[str, Any]) -> str:
    return f"{row['source']}#{row['record']} ({row['record_id']})"


def _excluded(row: dict[str, Any], reason: str, detail: str) -> dict[str, Any]:
    return {
        "reason": reason,
        "detail": f"{_place(row)}: {detail}",
        "record_id": row["record_id"],
        "source": row["source"],
        "record": row["record"],
        "raw_reply": None,
        "attempts": None,
    }


def inputs(ctx: StageContext[QuestionsConfig]) -> dict[str, Any]:
    config = ctx.config
    if config.mode != "llm" or config.llm is None:
        return {}
    return {
        "llm": describe(config.llm, ctx.base_dir),
        "prompt_sha256": load_prompt(ctx.base_dir, config.prompt).sha256,
    }


def _source(ctx: StageContext[QuestionsConfig], _inputs: dict[str, Any]) -> ArtifactSource:
    return ArtifactSource(ctx.upstream["clean"], columns=INPUT_COLUMNS)


def process(chunk: pa.Table, ctx: StageContext[QuestionsConfig]) -> ChunkResult:
    config = ctx.config
    lang = profile(config.language)
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for row in chunk.to_pylist():
        verdict = title_problem(row["title"] or "", row["abstract"] or "")
        if verdict is not None:
            excluded.append(_excluded(row, *verdict))
            continue
        row.update(mode=config.mode, shape=None, model=None, question=clean_title(row["title"]))
        if config.mode == "rule":
            row["question"], row["shape"] = rule_question(row["title"], lang)
        kept.append(row)
    cost: dict[str, float] = {}
    if config.mode == "llm" and config.llm is not None:
        calls = LLMCalls(ctx, config.llm, SCHEMA, EXCLUDED_SCHEMA)
        kept = ask_llm(ctx, config.llm, lang.name, kept, calls) if kept else []
        excluded += [{**r, "detail": f"{_place(r)}: {r['detail']}"} for r in calls.excluded]
        cost = llm_cost(config.llm, calls.stats)
    return ChunkResult(
        rows_to_table([{n: r[n] for n in SCHEMA.names} for r in kept], SCHEMA),
        rows_to_table([{n: r.get(n) for n in EXCLUDED_SCHEMA.names} for r in excluded], EXCLUDED_SCHEMA),
        cost=cost,
    )


SPEC: StageSpec[QuestionsConfig] = StageSpec(
    name="questions",
    version=1,
    config_type=QuestionsConfig,
    upstream=("clean",),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("record_id",),
    inputs=inputs,
    source=_source,
    process=process,
    resources=lambda c: llm_resources(c.llm if c.mode == "llm" else None),
    description="Title → question pairs with their abstracts (title as is, profile rules, or an LLM).",
)
