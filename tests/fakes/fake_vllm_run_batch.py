"""A stand-in for ``vllm run-batch`` (which needs CUDA and cannot be installed here), for tests.

Usage, like the real command plus a script::

    python tests/fakes/fake_vllm_run_batch.py [--script SPEC.json] -i IN.jsonl -o OUT.jsonl --model M [...]

It reads the input file the way vLLM's batch runner does (one request per non-blank line:
``custom_id``, ``method`` POST, ``url`` ``/v1/chat/completions``, ``body`` with ``model``
and ``messages``), and writes one output line per request in input order:
``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``,
streamed as each request ends, like vLLM's ``OrderedStreamingWriter``
(vllm/entrypoints/openai/run_batch.py), so a run stopped part-way leaves the lines before.
A malformed input line makes it exit with status 1 and a message on stderr (vLLM crashes the
same way); a request for another model than ``--model`` gets vLLM's 404 error line. Other
arguments are accepted; the process id and the arguments are printed on stdout
(``pid: N``, ``argv: [...]``).

By default a request is answered with the JSON text ``{"echo": <last user message>}``,
``finish_reason`` ``"stop"``, and usage counted in words. The optional script (a JSON file)
scripts faults; each run *consumes* the first action listed for a custom_id and writes the
script back, so successive runs (the adapter's retry rounds) see successive actions::

    {
      "actions": {"<custom_id>": [ACTION, ...]},
      "exit_code": 0,      # exit with this status and no output file (after "stderr")
      "stderr": "...",     # written to stderr first
      "sleep_s": 0         # sleep this long before anything else
    }

An ACTION is one of ``{"content": TEXT}`` (answer TEXT), ``{"content": TEXT,
"finish_reason": "length"}`` (a reply cut at max_tokens), ``{"error": MESSAGE,
"status_code": 500}`` (an error line, body null), ``{"missing": true}`` (no line at all)
or ``{"hang": true}`` (stop answering: the lines before it are written, then it sleeps
until killed, as a stuck engine does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any


def _words(text: str) -> int:
    return len(text.split())


def _reply(custom_id: str, body: dict[str, Any], content: str, finish_reason: str) -> dict[str, Any]:
    prompt_tokens = sum(_words(str(m.get("content", ""))) for m in body["messages"])
    completion = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": _words(content),
            "total_tokens": prompt_tokens + _words(content),
        },
    }
    return _line(custom_id, 200, completion, None)


def _line(custom_id: str, status: int, body: dict[str, Any] | None, error: Any) -> dict[str, Any]:
    return {
        "id": f"vllm-{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": f"vllm-batch-{uuid.uuid4().hex}", "body": body},
        "error": error,
    }


def _check_request(request: Any) -> str | None:
    """Why vLLM would refuse this input line (it stops the whole run), or None."""
    if not isinstance(request, dict):
        return "not a JSON object"
    for key in ("custom_id", "method", "url", "body"):
        if key not in request:
            return f"missing field {key!r}"
    if request["url"] != "/v1/chat/completions":
        return f"unsupported url {request['url']!r} in this fake"
    body = request["body"]
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return "body.messages must be a list"
    if not isinstance(body.get("model"), str):
        return "body.model must be a string"
    return None


def _read_requests(path: Path) -> list[Any] | str:
    """The input lines, or why vLLM would stop at one of them."""
    requests = []
    with path.open(encoding="utf-8") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            request = json.loads(raw)
            problem = _check_request(request)
            if problem is not None:
                return f"ValidationError: input line {number}: {problem}"
            requests.append(request)
    return requests


def _output_line(request: dict[str, Any], served: str, action: dict[str, Any]) -> dict[str, Any] | None:
    custom_id, body = request["custom_id"], request["body"]
    if body["model"] != served:
        error = {
            "error": {
                "message": f"The model `{body['model']}` does not exist.",
                "type": "NotFoundError",
                "param": "model",
                "code": 404,
            }
        }
        return _line(custom_id, 404, None, error)
    if action.get("missing"):
        return None
    if "error" in action:
        return _line(custom_id, int(action.get("status_code", 500)), None, action["error"])
    user = [m for m in body["messages"] if m.get("role") == "user"]
    content = action.get("content", json.dumps({"echo": user[-1]["content"] if user else ""}))
    return _reply(custom_id, body, content, action.get("finish_reason", "stop"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fake-vllm-run-batch")
    parser.add_argument("-i", "--input-file", required=True)
    parser.add_argument("-o", "--output-file", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--script", default=None)
    args, extra = parser.parse_known_args(argv)
    print(f"pid: {os.getpid()}", flush=True)
    print(f"argv: {json.dumps(argv)}", flush=True)

    script_path = Path(args.script) if args.script else None
    script: dict[str, Any] = json.loads(script_path.read_text("utf-8")) if script_path else {}
    if script.get("sleep_s"):
        time.sleep(float(script["sleep_s"]))
    if script.get("stderr"):
        sys.stderr.write(str(script["stderr"]) + "\n")
    if script.get("exit_code"):
        return int(script["exit_code"])

    requests = _read_requests(Path(args.input_file))
    if isinstance(requests, str):
        sys.stderr.write(requests + "\n")
        return 1
    served = args.served_model_name or args.model
    queues: dict[str, list[dict[str, Any]]] = script.get("actions", {})
    actions: list[dict[str, Any]] = []
    for request in requests:
        queue = queues.get(request["custom_id"]) or []
        actions.append(queue.pop(0) if queue else {})
    if script_path is not None:  # this run consumed its actions, even if it is killed below
        script_path.write_text(json.dumps(script), "utf-8")
    if extra:
        print(f"extra args: {json.dumps(extra)}", flush=True)
    with Path(args.output_file).open("w", encoding="utf-8") as fh:
        for request, action in zip(requests, actions, strict=True):
            if action.get("hang"):
                fh.flush()
                time.sleep(3600)
            line = _output_line(request, served, action)
            if line is not None:
                fh.write(json.dumps(line) + "\n")
                fh.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
