"""The judge's request and reply (CURE App. B): its prompt rendered per pair, and the reply's schema and parser.

The template is ``prompts/cure/judge.md`` (our wording of CURE's Appendix B), the roles
``prompts/cure/clinical_roles.yaml`` (domain → clinical role and profession) and the optional
examples a JSONL file of rated pairs shown through ``prompts/cure/judge_examples.md``. Each
file is looked up next to the config first, then in ``prompts/``; their digests are the
judge stage's fingerprint material (:mod:`tasks.cure.stages.judge`). The reply must be the
JSON object ``{"explanation": str, "score": 0 | 1 | 2}`` (:func:`judgement_schema`,
:func:`validate_judgement`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from irforge.errors import ConfigError, IrforgeError
from tasks.common.llm.port import ReplyInvalid
from tasks.common.llm.prompt import PROMPTS_DIR, load_template


def prompt_file(base_dir: Path, name: str) -> Path:
    """A prompt file: relative to the config file if it exists there, else in prompts/."""
    for candidate in (base_dir / name, PROMPTS_DIR / name):
        if candidate.is_file():
            return candidate.resolve()
    raise ConfigError(f"judge: no prompt file {name!r} next to the config or in {PROMPTS_DIR}")


def examples_text(base_dir: Path, examples: str) -> str:
    """The rated examples of the JSONL file ``examples``, as the examples prompt shows them."""
    path = prompt_file(base_dir, examples)
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
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
    wrapper = load_template(prompt_file(base_dir, "cure/judge_examples.md"), "judge examples prompt")
    return wrapper.template.substitute(items="".join(items))


class JudgePrompt:
    """The judge template with its roles and examples, rendered per pair."""

    def __init__(self, base_dir: Path, prompt: str, roles: str, examples: str | None) -> None:
        loaded = load_template(prompt_file(base_dir, prompt), "judge prompt")
        self.template_sha256, self.template = loaded.sha256, loaded.template
        self.roles_text = prompt_file(base_dir, roles).read_text(encoding="utf-8")
        found = yaml.safe_load(self.roles_text) or {}
        self.roles: dict[str, dict[str, str]] = {str(k): dict(v) for k, v in found.items()}
        self.examples_text = examples_text(base_dir, examples) if examples else ""

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
