"""The chat-model port on ``vllm run-batch``: offline batch files on the GPU worker.

vLLM's batch runner reads a JSONL file of OpenAI batch requests and writes one JSONL line
per request (vllm/entrypoints/openai/run_batch.py). What this adapter writes, one line
per request::

    {"custom_id": "<request id>", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model", "messages", "temperature", "top_p", "max_tokens", "seed"?,
              "response_format"? | "structured_outputs"?, <grammar field>?}}

and what it reads back is described in :mod:`tasks.common.llm.vllm_batch_output`.

- Structured output (https://docs.vllm.ai/en/latest/features/structured_outputs.html), for a
  request that carries a JSON schema, by
  ``structured_output`` (the modes of :mod:`tasks.common.llm.openai_chat`, plus vLLM's own field):
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
- Replies are matched to requests by ``custom_id``. A line that failed (``error`` set,
  ``status_code`` ≠ 200; not a 4xx such as an unknown model, which would fail again) or is
  missing from the output file is sent again in a further batch round, up to
  ``max_attempts`` sends per ask (as the openai adapter retries a 5xx);
  a reply that does not validate or stopped at ``max_tokens`` (``finish_reason ==
  "length"``) is asked again, up to ``max_invalid_retries`` times. A request whose
  ``seed`` is set is re-asked with ``seed + ask - 1``: with a fixed seed vLLM would
  sample the same invalid reply again (at ``temperature=0`` it is greedy anyway).
- Each :meth:`VLLMBatchChatModel.run` works in a fresh folder under ``work_dir``:
  ``round-N.input.jsonl``, ``round-N.output.jsonl``, ``round-N.stdout.log``,
  ``round-N.stderr.log``. The folder is removed when every request got a valid reply
  (unless ``keep_files``) and kept otherwise, so a crash or a failure can be inspected.
- A command that exits non-zero, or runs past ``timeout_s`` (its process group is then
  stopped), is a :class:`~tasks.common.llm.port.ChatModelError` carrying the tail of its stderr;
  before it is raised, every valid reply among the complete lines the run wrote (vLLM
  streams them in input order) is handed to ``on_outcome``, so the reply cache keeps what
  was paid for. The process group is stopped on any exception, ``KeyboardInterrupt`` included.

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tasks.common.llm.llama_server import log_tail, stop_process_group
from tasks.common.llm.port import (
    ChatFailure,
    ChatModelError,
    ChatOutcome,
    ChatReply,
    ChatRequest,
    OnOutcome,
    Validator,
)
from tasks.common.llm.vllm_batch_output import Attempt, read_attempt, read_output
from tasks.common.llm.wire import GrammarField, check_requests, check_settings, reply_options, request_fields

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


@dataclass
class _Ledger:
    """One request across rounds: sends, failed sends of the current ask, asks, tokens."""

    sends: int = 0
    failed_sends: int = 0
    asks: int = 1
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class _Round:
    """A round's output lines by custom_id; ``error`` when the run failed (lines: what it wrote)."""

    lines: dict[str, Any]
    error: str | None = None


class VLLMBatchChatModel:
    """The :class:`~tasks.common.llm.port.ChatModel` port on ``vllm run-batch`` (one process per round).

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
        max_attempts: int = 3,
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
        check_settings(
            structured_output, STRUCTURED_OUTPUTS, grammar_field, max_attempts, max_invalid_retries
        )
        if timeout_s is not None and timeout_s <= 0:
            raise ChatModelError(f"timeout_s must be positive, got {timeout_s}")
        self.model = model.strip()
        self.work_dir = Path(work_dir)
        self.max_attempts = max_attempts
        self.max_invalid_retries = max_invalid_retries
        self._command = command
        self._extra_args = [str(arg) for arg in extra_args]
        self._structured_output: StructuredOutput = structured_output
        self._grammar_field: GrammarField = grammar_field
        self._timeout_s = timeout_s
        self._keep_files = keep_files

    # -- the port ---------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        return reply_options(self._structured_output, self._grammar_field, extra_args=list(self._extra_args))

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
        ledgers = {r.custom_id: _Ledger() for r in requests}
        pending = list(requests)
        round_no = 0
        while pending:  # each round adds a send or an ask to every pending request: bounded
            round_no += 1
            result = self._run_round(run_dir, round_no, pending, ledgers)
            still: list[ChatRequest] = []
            for request in pending:
                ledger = ledgers[request.custom_id]
                attempt = read_attempt(
                    request, result.lines.get(request.custom_id), validate, self.model, run_dir
                )
                ledger.sends += 1
                ledger.prompt_tokens += attempt.prompt_tokens
                ledger.completion_tokens += attempt.completion_tokens
                outcome = self._outcome(request, attempt, ledger, final=result.error is not None)
                if outcome is None:
                    still.append(request)
                    continue
                outcomes[request.custom_id] = outcome
                if on_outcome is not None:
                    on_outcome(outcome)
            if result.error is not None:
                raise ChatModelError(result.error)
            pending = still

        if not self._keep_files and all(isinstance(o, ChatReply) for o in outcomes.values()):
            shutil.rmtree(run_dir, ignore_errors=True)
        return [outcomes[r.custom_id] for r in requests]

    # -- extras -----------------------------------------------------------------------

    def batch_line(self, request: ChatRequest, ask: int = 1) -> dict[str, Any]:
        """The input-file line for ``request`` on its ``ask``-th ask (re-asks after invalid replies)."""
        sampling = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed + ask - 1
        body.update(request_fields(self._structured_output, self._grammar_field, request))
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

    def _outcome(
        self, request: ChatRequest, attempt: Attempt, ledger: _Ledger, *, final: bool
    ) -> ChatOutcome | None:
        """How ``request`` ends after ``attempt``, or None to send it again. ``final``: the
        round failed; only a valid reply ends (the error ends the call)."""
        if attempt.failure is None:
            assert attempt.text is not None
            return ChatReply(
                custom_id=request.custom_id,
                text=attempt.text,
                value=attempt.value,
                model=attempt.model,
                finish_reason=attempt.finish_reason,
                prompt_tokens=ledger.prompt_tokens,
                completion_tokens=ledger.completion_tokens,
                attempts=ledger.sends,
            )
        if final:
            return None
        detail = attempt.detail
        if attempt.failure == "request_failed":
            ledger.failed_sends += 1
            if attempt.retry and ledger.failed_sends < self.max_attempts:
                return None
            if attempt.retry:  # else a 4xx the same request would get again
                detail = f"gave up after {ledger.failed_sends} attempt(s) (max_attempts); last: {detail}"
        else:
            if ledger.asks <= self.max_invalid_retries:
                ledger.asks += 1
                ledger.failed_sends = 0
                return None
            detail = f"{detail} (last of {ledger.asks} ask(s))"
        return ChatFailure(
            custom_id=request.custom_id,
            reason=attempt.failure,
            detail=detail,
            raw_text=attempt.text,
            attempts=ledger.sends,
            prompt_tokens=ledger.prompt_tokens,
            completion_tokens=ledger.completion_tokens,
        )

    def _run_round(
        self, run_dir: Path, round_no: int, batch: Sequence[ChatRequest], ledgers: dict[str, _Ledger]
    ) -> _Round:
        """Write the round's input file, run the command, read its output lines by custom_id."""
        input_path = run_dir / f"round-{round_no}.input.jsonl"
        output_path = run_dir / f"round-{round_no}.output.jsonl"
        stderr_path = run_dir / f"round-{round_no}.stderr.log"
        with input_path.open("w", encoding="utf-8") as fh:
            for request in batch:
                line = self.batch_line(request, ledgers[request.custom_id].asks)
                fh.write(json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n")

        argv = self.command_line(input_path, output_path)
        where = f"round {round_no}; batch files kept in {run_dir}"
        wanted = {r.custom_id for r in batch}
        error = self._run_command(argv, run_dir / f"round-{round_no}.stdout.log", stderr_path, where)
        if error is not None:
            lines = read_output(output_path, wanted, where, partial=True)
            kept = f"{len(lines)} finished line(s) of its output are kept" if lines else "it wrote no output"
            headline, _, tail = error.partition("\n")
            return _Round(lines, f"{headline}; {kept}" + (f"; end of its stderr:\n{tail}" if tail else ""))
        if not output_path.is_file():
            raise ChatModelError(
                f"{argv[0]} exited normally but wrote no output file {output_path.name} ({where}): "
                "check that the command passes -o {output}"
            )
        return _Round(read_output(output_path, wanted, where))

    def _run_command(self, argv: list[str], stdout_path: Path, stderr_path: Path, where: str) -> str | None:
        """Run ``argv`` within ``timeout_s``; None when it succeeded, else why not (first line)
        and the end of its stderr (the rest)."""
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
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
                return (
                    f"{argv[0]} {argv[1] if len(argv) > 1 else ''} ran past {self._timeout_s:g} s "
                    f"(llm.timeout_s) and was stopped ({where}): raise timeout_s or send fewer "
                    "requests per call"
                )
            except BaseException:
                stop_process_group(proc, _STOP_GRACE_S)
                raise
            stop_process_group(proc, _STOP_GRACE_S)  # children it left behind
        if code != 0:
            return f"{argv[0]} exited with status {code} ({where})\n{log_tail(stderr_path)}"
        return None
