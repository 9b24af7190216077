"""A stand-in for ``vllm run-batch`` (which needs CUDA and cannot be installed here), for tests.

Usage, like the real command plus a script::

    python tests/fake_vllm_run_batch.py [--script SPEC.json] -i IN.jsonl -o OUT.jsonl --model M [...]

It reads the input file the way vLLM's batch runner does (one request per non-blank line:
``custom_id``, ``method`` POST, ``url`` ``/v1/chat/completions``, ``body`` with ``model``
and ``messages``), and writes one output line per request in input order:
``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``. A
malformed input line makes it exit with status 1 and a message on stderr (vLLM crashes the
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
"status_code": 500}`` (an error line, body null) or ``{"missing": true}`` (no line at all).
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

    served = args.served_model_name or args.model
    actions: dict[str, list[dict[str, Any]]] = script.get("actions", {})
    out_lines: list[dict[str, Any]] = []
    with Path(args.input_file).open(encoding="utf-8") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            request = json.loads(raw)
            problem = _check_request(request)
            if problem is not None:
                sys.stderr.write(f"ValidationError: input line {number}: {problem}\n")
                return 1
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
                out_lines.append(_line(custom_id, 404, None, error))
                continue
            queue = actions.get(custom_id) or []
            action = queue.pop(0) if queue else {}
            if action.get("missing"):
                continue
            if "error" in action:
                out_lines.append(_line(custom_id, int(action.get("status_code", 500)), None, action["error"]))
                continue
            user = [m for m in body["messages"] if m.get("role") == "user"]
            content = action.get("content", json.dumps({"echo": user[-1]["content"] if user else ""}))
            out_lines.append(_reply(custom_id, body, content, action.get("finish_reason", "stop")))

    if script_path is not None:
        script_path.write_text(json.dumps(script), "utf-8")
    with Path(args.output_file).open("w", encoding="utf-8") as fh:
        for line in out_lines:
            fh.write(json.dumps(line) + "\n")
    if extra:
        print(f"extra args: {json.dumps(extra)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
