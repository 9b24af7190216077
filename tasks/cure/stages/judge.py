"""Stage ``judge``: an LLM grades every pooled pair 0 / 1 / 2 with an explanation (CURE §2.3, App. B).

The pairs are the ``pool`` stage's stored scores seen through a cut-off (``pool``:
0.42 on the sigmoid by default), so a new cut-off reruns only this stage.

The prompt is ``prompts/cure/judge.md`` (our wording of CURE's Appendix B: the clinical
role of the query's domain from ``prompts/cure/clinical_roles.yaml``, the reasoning
steps, optional rated examples, the question, the article title and the passage) and the
reply must be the JSON object ``{"explanation": str, "score": 0 | 1 | 2}``: the schema is
requested from the server *and* every reply is validated. A reply that does not validate
is asked again (``llm.max_invalid_retries``) and then quarantined with its raw text —
never counted as a 0. Requests are sent grouped by query, the question before the
passage, so a server's prefix cache reuses the shared part.

Every request goes through a reply cache (``<artifacts>/cache/llm_replies.sqlite``,
keyed by model, sampling, messages and schema): a rerun, a resumed run or another
fingerprint with the same prompt never pays twice. The fingerprint holds the model's
description, the template's, roles' and examples' digests, and the cut-off.

Units: pooled pairs. Output: ``query_id``, ``passage_id``, ``domain``, ``score``,
``explanation``, ``engine``, ``model``, ``prompt_sha256`` (of the rendered prompt),
``prompt_tokens``, ``completion_tokens``, ``attempts``, ``cached``, ``probability``
(the pair's pool score). Excluded: ``invalid_reply``, ``truncated``, ``request_failed``
with the raw reply. The manifest's cost: requests sent, cache hits, tokens, USD.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import ConfigError, IrforgeError
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.llm.cache import ReplyCache, cached_chat
from tasks.common.llm.config import LLMConfig, chat_model, cost_usd, describe
from tasks.common.llm.port import ChatFailure, ChatReply, ChatRequest, ReplyInvalid
from tasks.common.llm.prompt import PROMPTS_DIR, load_template
from tasks.common.rerank.cutoff import PoolCutoff
from tasks.cure.queries import english_queries
from tasks.cure.stages.pool import pool_view

PROMPTS = PROMPTS_DIR


def judgement_schema(max_explanation_chars: int) -> dict[str, Any]:
    """The reply's JSON schema. The explanation comes first (reason, then grade), and its
    length is bounded so a grammar-constrained server closes the object within budget."""
    return {
        "type": "object",
        "properties": {
            "explanation": {"type": "string", "minLength": 1, "maxLength": max_explanation_chars},
            "score": {"type": "integer", "enum": [0, 1, 2]},
        },
        "required": ["explanation", "score"],
        "additionalProperties": False,
    }


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


SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("passage_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("score", pa.int8(), nullable=False),
        pa.field("explanation", pa.string(), nullable=False),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("prompt_sha256", pa.string(), nullable=False),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("completion_tokens", pa.int64(), nullable=False),
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("cached", pa.bool_(), nullable=False),
        pa.field("probability", pa.float64(), nullable=False),
    ]
)
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("query_id", pa.string(), nullable=False),
    pa.field("passage_id", pa.string(), nullable=False),
    pa.field("domain", pa.string(), nullable=False),
    pa.field("raw_reply", pa.string()),
    pa.field("attempts", pa.int32(), nullable=False),
)
_PAIRS_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string()),
        pa.field("passage_id", pa.string()),
        pa.field("domain", pa.string()),
        pa.field("probability", pa.float64()),
        pa.field("query_text", pa.string()),
        pa.field("passage", pa.string()),
        pa.field("article_title", pa.string()),
    ]
)


def _prompt_file(base_dir: Path, name: str) -> Path:
    """A prompt file: relative to the config file if it exists there, else in prompts/."""
    for candidate in (base_dir / name, PROMPTS / name):
        if candidate.is_file():
            return candidate.resolve()
    raise ConfigError(f"judge: no prompt file {name!r} next to the config or in {PROMPTS}")


class JudgePrompt:
    """The judge template with its roles and examples, rendered per pair."""

    def __init__(self, config: JudgeConfig, base_dir: Path) -> None:
        loaded = load_template(_prompt_file(base_dir, config.prompt), "judge prompt")
        self.template_sha256, self.template = loaded.sha256, loaded.template
        self.roles_text = _prompt_file(base_dir, config.roles).read_text(encoding="utf-8")
        roles = yaml.safe_load(self.roles_text) or {}
        self.roles: dict[str, dict[str, str]] = {str(k): dict(v) for k, v in roles.items()}
        self.examples_text = ""
        if config.examples:
            path = _prompt_file(base_dir, config.examples)
            lines = path.read_text(encoding="utf-8").splitlines()
            items = []
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    ex = json.loads(line)
                    reply = json.dumps({"explanation": ex["explanation"], "score": int(ex["score"])})
                    items.append(
                        f"\nQuestion: {ex['query']}\nArticle title: {ex.get('article_title') or ''}\n"
                        f"Passage: {ex['passage']}\nReply: {reply}\n"
                    )
                except (ValueError, KeyError, TypeError) as exc:
                    raise ConfigError(f"judge.examples {path}:{number}: not a rated example ({exc})") from exc
            wrapper = load_template(_prompt_file(base_dir, "cure/judge_examples.md"), "judge examples prompt")
            self.examples_text = wrapper.template.substitute(items="".join(items))

    def digests(self) -> dict[str, str]:
        return {"template": self.template_sha256} | {
            name: hashlib.sha256(text.encode("utf-8")).hexdigest()
            for name, text in (("roles", self.roles_text), ("examples", self.examples_text))
        }

    def render(self, domain: str, query: str, passage: str, article_title: str | None) -> str:
        role = self.roles.get(domain)
        if role is None:
            raise IrforgeError(
                f"judge: no clinical role for domain {domain!r}; add it to the roles file "
                f"(known: {', '.join(sorted(self.roles))})"
            )
        return self.template.substitute(
            clinical_role=role["clinical_role"],
            profession=role["profession"],
            examples=self.examples_text,
            query=query,
            passage=passage,
            article_title=article_title or "(no title)",
        )


@functools.lru_cache(maxsize=4)
def _prompt(config: JudgeConfig, base_dir: Path) -> JudgePrompt:
    return JudgePrompt(config, base_dir)


def validate_judgement(text: str) -> tuple[int, str]:
    """``(score, explanation)`` from a reply, or :class:`ReplyInvalid` saying what is wrong.

    Accepts the JSON object alone or inside a Markdown code fence, raw control characters
    inside its strings, and the score as 0, 1, 2 or the same digit as a string (Appendix
    B's wording asks for a string).
    """
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        # strict=False: a raw line break inside the explanation string (which grammar-
        # constrained decoders such as llama.cpp's let through) does not change its meaning.
        value = json.loads(body, strict=False)
    except json.JSONDecodeError as exc:
        raise ReplyInvalid(f"not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(value, dict):
        raise ReplyInvalid(f"not a JSON object but {type(value).__name__}")
    explanation = value.get("explanation")
    if not isinstance(explanation, str) or not explanation.strip():
        raise ReplyInvalid("missing or empty explanation")
    score = value.get("score")
    if isinstance(score, str) and score.strip() in {"0", "1", "2"}:
        score = int(score.strip())
    if isinstance(score, bool) or score not in (0, 1, 2):
        raise ReplyInvalid(f"score {score!r} is not one of 0, 1, 2")
    return int(score), explanation.strip()


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
    if ctx.cache_dir is None or ctx.files_dir is None:
        raise IrforgeError("judge: no cache or work folder (run through the stage engine)")
    prompt = _prompt(config, ctx.base_dir)
    rows = chunk.to_pylist()
    schema = judgement_schema(config.max_explanation_chars)
    requests = []
    digests = []
    for i, r in enumerate(rows):
        text = prompt.render(r["domain"], r["query_text"], r["passage"], r["article_title"])
        digests.append(hashlib.sha256(text.encode("utf-8")).hexdigest())
        requests.append(
            ChatRequest(
                custom_id=str(i),
                messages=({"role": "user", "content": text},),
                sampling=config.llm.sampling,
                json_schema=schema,
                schema_name="relevance_judgement",
            )
        )
    model = chat_model(config.llm, ctx.base_dir, ctx.files_dir)
    ctx.cache_dir.mkdir(parents=True, exist_ok=True)
    with ReplyCache(ctx.cache_dir / "llm_replies.sqlite") as cache:
        outcomes, stats = cached_chat(model, cache, requests, validate_judgement)
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for r, digest, outcome in zip(rows, digests, outcomes, strict=True):
        if isinstance(outcome, ChatReply):
            score, explanation = outcome.value
            kept.append(
                {
                    "query_id": r["query_id"], "passage_id": r["passage_id"], "domain": r["domain"],
                    "score": score, "explanation": explanation, "engine": config.llm.engine, "model": outcome.model,
                    "prompt_sha256": digest, "prompt_tokens": outcome.prompt_tokens,
                    "completion_tokens": outcome.completion_tokens, "attempts": outcome.attempts,
                    "cached": outcome.cached, "probability": r["probability"],
                }
            )  # fmt: skip
        else:
            assert isinstance(outcome, ChatFailure)
            excluded.append(
                {
                    "reason": outcome.reason, "detail": outcome.detail, "query_id": r["query_id"],
                    "passage_id": r["passage_id"], "domain": r["domain"], "raw_reply": outcome.raw_text,
                    "attempts": outcome.attempts,
                }
            )  # fmt: skip
    cost = {
        "requests_sent": stats.sent,
        "cache_hits": stats.hits,
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "usd": cost_usd(config.llm, stats.prompt_tokens, stats.completion_tokens),
    }
    return ChunkResult(rows_to_table(kept, SCHEMA), rows_to_table(excluded, EXCLUDED_SCHEMA), cost=cost)


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
    description="LLM relevance judgements 0 / 1 / 2 with explanations, through a reply cache.",
)
