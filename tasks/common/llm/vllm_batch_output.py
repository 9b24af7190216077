"""Reading what ``vllm run-batch`` wrote: its output file, and what one line says of one request.

vLLM writes one line per request, in input order, as requests finish
(``OrderedStreamingWriter`` in vllm/entrypoints/openai/run_batch.py)::

    {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}

``body`` is a chat completion, or null when the request failed (``error`` then says why).
A failed line is worth sending again unless its status is a 4xx other than 408, 409 and
429 (the same request is refused again), as in :mod:`tasks.common.llm.wire`.
A run that was stopped (timeout) or crashed leaves the lines written so far, the last one
possibly cut: :func:`read_output` with ``partial=True`` keeps every complete line, so the
replies already paid for are not lost (:mod:`tasks.common.llm.vllm_batch`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.common.llm.port import ChatModelError, ChatRequest, FailureReason, ReplyInvalid, Validator
from tasks.common.llm.wire import RETRIED_4XX

_DETAIL_CHARS = 300


@dataclass(frozen=True)
class Attempt:
    """What one output line (or its absence) says about one request."""

    text: str | None
    value: Any = None
    failure: FailureReason | None = None
    detail: str = ""
    model: str = ""
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retry: bool = True  # a failed line worth sending again (not a 4xx the same request gets again)


def read_output(path: Path, wanted: set[str], where: str, *, partial: bool = False) -> dict[str, Any]:
    """The output lines of ``path`` by custom_id; a damaged file is a ChatModelError.

    ``partial``: the run was stopped, so a last line without its newline is cut, not damaged,
    and is left out."""
    lines: dict[str, Any] = {}
    if partial and not path.is_file():
        return lines
    with path.open(encoding="utf-8", errors="replace") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip() or (partial and not raw.endswith("\n")):
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ChatModelError(
                    f"{path.name} line {number} is not JSON ({exc.msg}; {where}): the batch runner's "
                    "output is damaged"
                ) from None
            custom_id = line.get("custom_id") if isinstance(line, dict) else None
            if not isinstance(custom_id, str):
                raise ChatModelError(
                    f"{path.name} line {number} has no custom_id ({where}): not a batch output line"
                )
            if custom_id not in wanted:
                raise ChatModelError(
                    f"{path.name} line {number} answers custom_id {custom_id!r}, which this round did "
                    f"not send ({where}): the output belongs to another input file"
                )
            if custom_id in lines:
                raise ChatModelError(
                    f"{path.name} line {number} answers custom_id {custom_id!r} a second time ({where})"
                )
            lines[custom_id] = line
    return lines


def read_attempt(
    request: ChatRequest, line: Mapping[str, Any] | None, validate: Validator, model: str, run_dir: Path
) -> Attempt:
    """The attempt ``line`` (None: no line) records for ``request``; the validator decides."""
    if line is None:
        return Attempt(
            text=None,
            failure="request_failed",
            detail=f"the batch output has no line for this request (files in {run_dir})",
        )
    response = line.get("response")
    status = response.get("status_code") if isinstance(response, dict) else None
    body = response.get("body") if isinstance(response, dict) else None
    error = line.get("error")
    if error is not None or status != 200 or not isinstance(body, dict):
        shown = short(error) if error is not None else "no error given"
        refused = isinstance(status, int) and 400 <= status < 500 and status not in RETRIED_4XX
        return Attempt(
            text=None,
            failure="request_failed",
            detail=f"HTTP {status}: {shown}{'; not retried' if refused else ''} (files in {run_dir})",
            retry=not refused,
        )

    usage = _dict(body.get("usage"))
    choices = body.get("choices")
    choice = _dict(choices[0]) if isinstance(choices, list) and choices else {}
    text = _dict(choice.get("message")).get("content")
    finish = str(choice.get("finish_reason") or "")

    def attempt(failure: FailureReason | None, detail: str = "", value: Any = None) -> Attempt:
        return Attempt(
            text=text if isinstance(text, str) else None,
            value=value,
            failure=failure,
            detail=detail,
            model=str(body.get("model") or model),
            finish_reason=finish,
            prompt_tokens=_count(usage, "prompt_tokens"),
            completion_tokens=_count(usage, "completion_tokens"),
        )

    if not choice:
        return attempt("request_failed", f"the reply has no choices: {short(body)}")
    if not isinstance(text, str):
        return attempt("invalid_reply", "the reply has no text content")
    if finish == "length":
        return attempt("truncated", f"the reply stopped at max_tokens={request.sampling.max_tokens}")
    try:
        value = validate(text)
    except ReplyInvalid as exc:
        return attempt("invalid_reply", str(exc))
    return attempt(None, value=value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value >= 0 else 0


def short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= _DETAIL_CHARS else one_line[: _DETAIL_CHARS - 3] + "..."
