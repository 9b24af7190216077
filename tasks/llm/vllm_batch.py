"""The chat-model port on ``vllm run-batch``: offline batch files on the GPU worker.

vLLM's batch runner reads a JSONL file of OpenAI batch requests and writes one JSONL line
per request (vllm/entrypoints/openai/run_batch.py). What this adapter writes, one line
per request::

    {"custom_id": "<request id>", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model", "messages", "temperature", "top_p", "max_tokens", "seed"?,
              "response_format"? | "structured_outputs"?, <grammar field>?}}

and what it reads back::

    {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}

where ``body`` is a chat completion (``choices[0].message.content``, ``finish_reason``,
``usage``) or null when the request failed (``error`` then says why).

- Structured output (components.md §2), for a request that carries a JSON schema, by
  ``structured_output`` (the modes of :mod:`tasks.llm.openai_chat`, plus vLLM's own field):
  ``"json_schema"`` sends ``response_format={"type": "json_schema", "json_schema": {"name",
  "schema", "strict": true}}`` (every vLLM with JSON-schema support); ``"structured_outputs"``
  sends ``structured_outputs={"json": schema}`` (vLLM ≥ 0.11); ``"json_object"`` sends
  ``response_format={"type": "json_object", "schema": schema}`` (vLLM: any JSON, the schema
  is not enforced); ``"none"`` sends nothing. vLLM ignores fields it does not know, so every
  reply is validated anyway.
- A GBNF grammar, for a request that carries one, by ``grammar_field`` (run-batch reads
  the request-body extensions of ``vllm serve``): ``"structured_outputs"`` sends
  ``structured_outputs={"grammar": g}`` (vLLM ≥ 0.11), ``"guided_grammar"`` sends
  ``guided_grammar=g`` (vLLM < 0.11), ``"grammar"`` sends ``grammar=g`` (llama.cpp's field,
  for a look-alike runner), ``"none"`` (the default) sends nothing.
- Replies are matched to requests by ``custom_id``. A reply that does not validate, that
  stopped at ``max_tokens`` (``finish_reason == "length"``), that failed
  (``error`` set, ``status_code`` ≠ 200) or that is missing from the output file is sent
  again in a further batch round, up to ``max_invalid_retries`` rounds. A request whose
  ``seed`` is set is re-sent with ``seed + attempt - 1``: with a fixed seed vLLM would
  sample the same invalid reply again (at ``temperature=0`` it is greedy anyway).
- Each :meth:`VLLMBatchChatModel.run` works in a fresh folder under ``work_dir``:
  ``round-N.input.jsonl``, ``round-N.output.jsonl``, ``round-N.stdout.log``,
  ``round-N.stderr.log``. The folder is removed when every request got a valid reply
  (unless ``keep_files``) and kept otherwise, so a crash or a failure can be inspected.
- A command that exits non-zero (or runs past ``timeout_s``) is a
  :class:`~tasks.llm.port.ChatModelError` carrying the tail of its stderr; its process
  group is stopped on any exception, ``KeyboardInterrupt`` included.

The command is a list of strings in which ``{input}``, ``{output}`` and ``{model}`` are
replaced (plain text replacement, so JSON arguments such as ``--hf-overrides '{...}'``
need no escaping). Serve local weights under a stable name with
``["vllm", "run-batch", "-i", "{input}", "-o", "{output}", "--model", "/models/qwen",
"--served-model-name", "{model}"]``: the body's ``model`` must be a served name.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tasks.llm.cache import plain
from tasks.llm.llama_server import log_tail, stop_process_group
from tasks.llm.openai_chat import (
    GrammarField,
    check_grammar_field,
    check_requests,
    grammar_fields,
    merge_fields,
)
from tasks.llm.port import (
    ChatFailure,
    ChatModelError,
    ChatOutcome,
    ChatReply,
    ChatRequest,
    FailureReason,
    OnOutcome,
    ReplyInvalid,
    Validator,
)

StructuredOutput = Literal["json_schema", "structured_outputs", "json_object", "none"]
STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = (
    "json_schema",
    "structured_outputs",
    "json_object",
    "none",
)

ENGINE = "vllm-batch"
CHAT_URL = "/v1/chat/completions"
DEFAULT_COMMAND: tuple[str, ...] = (
    "vllm",
    "run-batch",
    "-i",
    "{input}",
    "-o",
    "{output}",
    "--model",
    "{model}",
)
_STOP_GRACE_S = 10.0
_DETAIL_CHARS = 300


@dataclass(frozen=True)
class _Attempt:
    """What one output line (or its absence) says about one request."""

    text: str | None
    value: Any = None
    failure: FailureReason | None = None
    detail: str = ""
    model: str = ""
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


class VLLMBatchChatModel:
    """The :class:`~tasks.llm.port.ChatModel` port on ``vllm run-batch`` (one process per round).

    ``extra_args`` are appended to ``command``; they are meant for engine settings that
    change replies (``--dtype``, ``--quantization``, ``--revision``, ``--max-model-len``,
    ``--generation-config vllm``) and are part of :meth:`options`. Settings that only say
    where or how fast it runs (paths, ``--gpu-memory-utilization``) belong in ``command``,
    which is not.
    """

    engine: str = ENGINE

    def __init__(
        self,
        model: str,
        work_dir: Path | str,
        *,
        command: Sequence[str] | None = None,
        extra_args: Sequence[str] = (),
        structured_output: StructuredOutput = "json_schema",
        grammar_field: GrammarField = "none",
        max_invalid_retries: int = 2,
        timeout_s: float | None = None,
        keep_files: bool = False,
    ) -> None:
        if not model.strip():
            raise ChatModelError("no model given for vllm run-batch: use the (served) model name")
        command = [str(part) for part in (DEFAULT_COMMAND if command is None else command)]
        if not command:
            raise ChatModelError("the vllm run-batch command is empty: leave it unset for the default")
        for placeholder in ("{input}", "{output}"):
            if not any(placeholder in part for part in command):
                raise ChatModelError(
                    f"the vllm run-batch command {command!r} has no {placeholder} placeholder: "
                    "the adapter could not pass its batch files"
                )
        if structured_output not in STRUCTURED_OUTPUTS:
            raise ChatModelError(
                f"structured_output {structured_output!r}: use one of {', '.join(STRUCTURED_OUTPUTS)}"
            )
        check_grammar_field(grammar_field)
        if max_invalid_retries < 0:
            raise ChatModelError(f"max_invalid_retries must be >= 0, got {max_invalid_retries}")
        if timeout_s is not None and timeout_s <= 0:
            raise ChatModelError(f"timeout_s must be positive, got {timeout_s}")
        self.model = model.strip()
        self.work_dir = Path(work_dir)
        self.max_invalid_retries = max_invalid_retries
        self._command = command
        self._extra_args = [str(arg) for arg in extra_args]
        self._structured_output: StructuredOutput = structured_output
        self._grammar_field: GrammarField = grammar_field
        self._timeout_s = timeout_s
        self._keep_files = keep_files

    # -- the port ---------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        # grammar_field changes only requests that carry a grammar; the reply cache's key
        # leaves it out for the others (tasks.llm.cache.request_key).
        return {
            "structured_output": self._structured_output,
            "grammar_field": self._grammar_field,
            "extra_args": list(self._extra_args),
        }

    def run(
        self,
        requests: Sequence[ChatRequest],
        validate: Validator,
        on_outcome: OnOutcome | None = None,
    ) -> list[ChatOutcome]:
        """Answer every request; see the module docstring for rounds, files and errors."""
        check_requests(requests)  # replies are matched by custom_id: each must be unique
        if not requests:
            return []

        run_dir = self._new_run_dir()
        outcomes: dict[str, ChatOutcome] = {}
        tokens = {r.custom_id: [0, 0] for r in requests}
        pending = list(requests)
        rounds = self.max_invalid_retries + 1
        for round_no in range(1, rounds + 1):
            lines = self._run_round(run_dir, round_no, pending)
            still: list[ChatRequest] = []
            for request in pending:
                attempt = self._read_attempt(request, lines.get(request.custom_id), validate, run_dir)
                used = tokens[request.custom_id]
                used[0] += attempt.prompt_tokens
                used[1] += attempt.completion_tokens
                outcome: ChatOutcome
                if attempt.failure is None:
                    assert attempt.text is not None
                    outcome = ChatReply(
                        custom_id=request.custom_id,
                        text=attempt.text,
                        value=attempt.value,
                        model=attempt.model,
                        finish_reason=attempt.finish_reason,
                        prompt_tokens=used[0],
                        completion_tokens=used[1],
                        attempts=round_no,
                    )
                elif round_no == rounds:
                    outcome = ChatFailure(
                        custom_id=request.custom_id,
                        reason=attempt.failure,
                        detail=attempt.detail,
                        raw_text=attempt.text,
                        attempts=round_no,
                        prompt_tokens=used[0],
                        completion_tokens=used[1],
                    )
                else:
                    still.append(request)
                    continue
                outcomes[request.custom_id] = outcome
                if on_outcome is not None:
                    on_outcome(outcome)
            pending = still
            if not pending:
                break

        if not self._keep_files and all(isinstance(o, ChatReply) for o in outcomes.values()):
            shutil.rmtree(run_dir, ignore_errors=True)
        return [outcomes[r.custom_id] for r in requests]

    # -- extras -----------------------------------------------------------------------

    def batch_line(self, request: ChatRequest, attempt: int = 1) -> dict[str, Any]:
        """The input-file line for ``request`` on its ``attempt``-th round."""
        sampling = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed + attempt - 1
        if request.json_schema is not None:
            schema = plain(request.json_schema)
            if self._structured_output == "json_schema":
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": request.schema_name, "schema": schema, "strict": True},
                }
            elif self._structured_output == "structured_outputs":
                body["structured_outputs"] = {"json": schema}
            elif self._structured_output == "json_object":
                body["response_format"] = {"type": "json_object", "schema": schema}
        merge_fields(body, grammar_fields(self._grammar_field, request.grammar))
        return {"custom_id": request.custom_id, "method": "POST", "url": CHAT_URL, "body": body}

    def command_line(self, input_path: Path, output_path: Path) -> list[str]:
        """The command run for one round, placeholders replaced, ``extra_args`` appended."""
        values = {"{input}": str(input_path), "{output}": str(output_path), "{model}": self.model}
        argv = []
        for template in [*self._command, *self._extra_args]:
            part = template
            for placeholder, value in values.items():
                part = part.replace(placeholder, value)
            argv.append(part)
        return argv

    def __repr__(self) -> str:
        return f"VLLMBatchChatModel(model={self.model!r}, options={self.options()!r})"

    # -- internals --------------------------------------------------------------------

    def _new_run_dir(self) -> Path:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        run_dir = self.work_dir / f"run-{stamp}-{uuid.uuid4().hex[:8]}"
        run_dir.mkdir(parents=True)
        return run_dir

    def _run_round(self, run_dir: Path, round_no: int, batch: Sequence[ChatRequest]) -> dict[str, Any]:
        """Write the round's input file, run the command, return its output lines by custom_id."""
        input_path = run_dir / f"round-{round_no}.input.jsonl"
        output_path = run_dir / f"round-{round_no}.output.jsonl"
        stderr_path = run_dir / f"round-{round_no}.stderr.log"
        with input_path.open("w", encoding="utf-8") as fh:
            for request in batch:
                line = self.batch_line(request, round_no)
                fh.write(json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n")

        argv = self.command_line(input_path, output_path)
        where = f"round {round_no}; batch files kept in {run_dir}"
        with (
            (run_dir / f"round-{round_no}.stdout.log").open("wb") as out,
            stderr_path.open("wb") as err,
        ):
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
                )
            except OSError as exc:
                raise ChatModelError(
                    f"cannot start {argv[0]!r} ({exc.strerror}): install vLLM on this worker "
                    "or point the command at it"
                ) from None
            try:
                code = proc.wait(timeout=self._timeout_s)
            except subprocess.TimeoutExpired:
                stop_process_group(proc, _STOP_GRACE_S)
                raise ChatModelError(
                    f"{argv[0]} {argv[1] if len(argv) > 1 else ''} ran past {self._timeout_s:g} s and was "
                    f"stopped ({where}): raise timeout_s or send fewer requests per call"
                ) from None
            except BaseException:
                stop_process_group(proc, _STOP_GRACE_S)
                raise
            stop_process_group(proc, _STOP_GRACE_S)  # children it left behind
        if code != 0:
            raise ChatModelError(
                f"{argv[0]} exited with status {code} ({where}); end of its stderr:\n{log_tail(stderr_path)}"
            )
        if not output_path.is_file():
            raise ChatModelError(
                f"{argv[0]} exited normally but wrote no output file {output_path.name} ({where}): "
                "check that the command passes -o {output}"
            )
        return self._read_output(output_path, {r.custom_id for r in batch}, where)

    def _read_output(self, path: Path, wanted: set[str], where: str) -> dict[str, Any]:
        lines: dict[str, Any] = {}
        with path.open(encoding="utf-8") as fh:
            for number, raw in enumerate(fh, start=1):
                if not raw.strip():
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

    def _read_attempt(
        self, request: ChatRequest, line: Mapping[str, Any] | None, validate: Validator, run_dir: Path
    ) -> _Attempt:
        if line is None:
            return _Attempt(
                text=None,
                failure="request_failed",
                detail=f"the batch output has no line for this request (files in {run_dir})",
            )
        response = line.get("response")
        status = response.get("status_code") if isinstance(response, dict) else None
        body = response.get("body") if isinstance(response, dict) else None
        error = line.get("error")
        if error is not None or status != 200 or not isinstance(body, dict):
            shown = _short(error) if error is not None else "no error given"
            return _Attempt(
                text=None, failure="request_failed", detail=f"HTTP {status}: {shown} (files in {run_dir})"
            )

        usage = _dict(body.get("usage"))
        choices = body.get("choices")
        choice = _dict(choices[0]) if isinstance(choices, list) and choices else {}
        text = _dict(choice.get("message")).get("content")
        finish = str(choice.get("finish_reason") or "")

        def attempt(failure: FailureReason | None, detail: str = "", value: Any = None) -> _Attempt:
            return _Attempt(
                text=text if isinstance(text, str) else None,
                value=value,
                failure=failure,
                detail=detail,
                model=str(body.get("model") or self.model),
                finish_reason=finish,
                prompt_tokens=_count(usage, "prompt_tokens"),
                completion_tokens=_count(usage, "completion_tokens"),
            )

        if not choice:
            return attempt("request_failed", f"the reply has no choices: {_short(body)}")
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


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= _DETAIL_CHARS else one_line[: _DETAIL_CHARS - 3] + "..."
