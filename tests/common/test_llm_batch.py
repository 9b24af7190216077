"""VLLMBatchChatModel against tests/fakes/fake_vllm_run_batch.py, a stand-in for ``vllm run-batch``."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from irforge.config import validate_config
from irforge.errors import ConfigError
from tasks.common.llm.cache import ReplyCache, cached_chat
from tasks.common.llm.config import LLMConfig, chat_model, describe, resolved_timeout_s
from tasks.common.llm.port import (
    ChatFailure,
    ChatModel,
    ChatModelError,
    ChatOutcome,
    ChatReply,
    ChatRequest,
    ReplyInvalid,
    Sampling,
)
from tasks.common.llm.vllm_batch import DEFAULT_COMMAND, VLLMBatchChatModel
from tests.conftest import REPO

FAKE = REPO / "tests" / "fakes" / "fake_vllm_run_batch.py"
MODEL = "qwen2.5-7b-instruct"
SCHEMA = {"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]}


def fake_command(script: Path | None = None, model: str = "{model}") -> list[str]:
    command = [sys.executable, str(FAKE), "-i", "{input}", "-o", "{output}", "--model", model]
    return [*command, "--script", str(script)] if script is not None else command


def write_script(path: Path, **spec: Any) -> Path:
    path.write_text(json.dumps(spec), "utf-8")
    return path


def echo_value(text: str) -> str:
    """The validator of these tests: a JSON object whose ``echo`` is a non-empty string."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReplyInvalid(f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict) or not isinstance(value.get("echo"), str) or not value["echo"]:
        raise ReplyInvalid("no non-empty 'echo' string")
    return str(value["echo"])


def request(custom_id: str, text: str, *, seed: int | None = 7, schema: bool = True) -> ChatRequest:
    return ChatRequest(
        custom_id=custom_id,
        messages=({"role": "system", "content": "Repeat."}, {"role": "user", "content": text}),
        sampling=Sampling(temperature=0.0, top_p=0.9, max_tokens=64, seed=seed),
        json_schema=SCHEMA if schema else None,
        schema_name="echo",
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def only_run_dir(work: Path) -> Path:
    runs = list(work.iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def test_all_valid_replies_in_request_order(tmp_path: Path) -> None:
    work = tmp_path / "work"
    model = VLLMBatchChatModel(MODEL, work, command=fake_command())
    assert isinstance(model, ChatModel)
    seen: list[ChatOutcome] = []
    requests = [request("q1", "alpha beta"), request("q2", "gamma"), request("q3", "delta epsilon zeta")]

    outcomes = model.run(requests, echo_value, on_outcome=seen.append)

    assert [o.custom_id for o in outcomes] == ["q1", "q2", "q3"]
    assert all(isinstance(o, ChatReply) for o in outcomes)
    replies = [o for o in outcomes if isinstance(o, ChatReply)]
    assert [r.value for r in replies] == ["alpha beta", "gamma", "delta epsilon zeta"]
    assert [r.attempts for r in replies] == [1, 1, 1]
    assert [r.finish_reason for r in replies] == ["stop"] * 3
    assert {r.model for r in replies} == {MODEL}
    # The fake counts words: "Repeat." + the user text; the reply {"echo": "..."}.
    assert [r.prompt_tokens for r in replies] == [3, 2, 4]
    assert [r.completion_tokens for r in replies] == [3, 2, 4]
    assert sorted(o.custom_id for o in seen) == ["q1", "q2", "q3"]
    assert list(work.iterdir()) == []  # a fully answered run leaves no files


def test_input_file_is_an_openai_batch_file(tmp_path: Path) -> None:
    model = VLLMBatchChatModel(MODEL, tmp_path, command=fake_command(), keep_files=True)
    model.run([request("a", "one"), request("b", "two", seed=None, schema=False)], echo_value)

    lines = read_jsonl(only_run_dir(tmp_path) / "round-1.input.jsonl")
    assert lines[0] == {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": MODEL,
            "messages": [{"role": "system", "content": "Repeat."}, {"role": "user", "content": "one"}],
            "temperature": 0.0,
            "top_p": 0.9,
            "max_tokens": 64,
            "seed": 7,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "echo", "schema": SCHEMA, "strict": True},
            },
        },
    }
    assert "seed" not in lines[1]["body"]
    assert "response_format" not in lines[1]["body"]
    assert "structured_outputs" not in lines[1]["body"]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("structured_outputs", {"structured_outputs": {"json": SCHEMA}}),
        ("json_object", {"response_format": {"type": "json_object", "schema": SCHEMA}}),
        ("none", {}),
    ],
)
def test_other_structured_output_modes(tmp_path: Path, mode: Any, expected: dict[str, Any]) -> None:
    model = VLLMBatchChatModel(
        MODEL, tmp_path, command=fake_command(), structured_output=mode, keep_files=True
    )
    model.run([request("a", "one")], echo_value)

    body = read_jsonl(only_run_dir(tmp_path) / "round-1.input.jsonl")[0]["body"]
    sent = {key: body[key] for key in ("structured_outputs", "response_format") if key in body}
    assert sent == expected
    assert model.options()["structured_output"] == mode


GRAMMAR = 'root ::= "{\\"echo\\": \\"g\\"}"\n'


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("structured_outputs", {"structured_outputs": {"grammar": GRAMMAR}}),
        ("guided_grammar", {"guided_grammar": GRAMMAR}),
        ("grammar", {"grammar": GRAMMAR}),
        ("none", {}),
    ],
)
def test_grammar_field_in_each_mode(tmp_path: Path, field: Any, expected: dict[str, Any]) -> None:
    model = VLLMBatchChatModel(
        MODEL,
        tmp_path,
        command=fake_command(),
        structured_output="structured_outputs",
        grammar_field=field,
        keep_files=True,
    )
    constrained = dataclasses.replace(request("a", "one", schema=False), grammar=GRAMMAR)
    model.run([constrained, request("b", "two", schema=False), request("c", "three")], echo_value)

    bodies = [line["body"] for line in read_jsonl(only_run_dir(tmp_path) / "round-1.input.jsonl")]
    fields = ("structured_outputs", "guided_grammar", "grammar", "response_format")
    assert {k: v for k, v in bodies[0].items() if k in fields} == expected
    assert not set(bodies[1]) & set(fields)
    assert {k: v for k, v in bodies[2].items() if k in fields} == {"structured_outputs": {"json": SCHEMA}}
    assert model.options()["grammar_field"] == field


def test_faults_are_retried_in_a_second_round(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "script.json",
        actions={
            "err": [{"error": "CUDA error: an illegal memory access", "status_code": 500}],
            "gone": [{"missing": True}],
            "bad": [{"content": "Sure! Here is the echo: two"}],
            "cut": [{"content": '{"echo": "fo', "finish_reason": "length"}],
        },
    )
    work = tmp_path / "work"
    model = VLLMBatchChatModel(MODEL, work, command=fake_command(script), keep_files=True)
    ids = ["ok", "err", "gone", "bad", "cut"]
    seen: list[str] = []

    outcomes = model.run(
        [request(i, f"text {i}") for i in ids], echo_value, lambda o: seen.append(o.custom_id)
    )

    assert all(isinstance(o, ChatReply) for o in outcomes), outcomes
    assert [o.attempts for o in outcomes] == [1, 2, 2, 2, 2]
    assert seen[0] == "ok" and sorted(seen[1:]) == sorted(ids[1:])
    by_id = {o.custom_id: o for o in outcomes}
    # Tokens of the invalid first replies were paid for and are counted.
    assert by_id["bad"].completion_tokens == 6 + 3
    assert by_id["cut"].completion_tokens == 2 + 3
    assert by_id["err"].completion_tokens == 3
    run_dir = only_run_dir(work)
    second = read_jsonl(run_dir / "round-2.input.jsonl")
    assert [line["custom_id"] for line in second] == ["err", "gone", "bad", "cut"]
    # A re-ask after an invalid reply takes seed + 1; a failed line is re-sent as it was.
    assert {line["custom_id"]: line["body"]["seed"] for line in second} == {
        "err": 7,
        "gone": 7,
        "bad": 8,
        "cut": 8,
    }
    assert not (run_dir / "round-3.input.jsonl").exists()


def test_failures_after_the_last_round_carry_reason_and_raw_text(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "script.json",
        actions={
            "err": [{"error": "engine dead", "status_code": 500}] * 2,
            "gone": [{"missing": True}] * 2,
            "bad": [{"content": "no json here"}, {"content": '{"echo": ""}'}],
            "cut": [{"content": '{"echo": "x', "finish_reason": "length"}] * 2,
        },
    )
    work = tmp_path / "work"
    model = VLLMBatchChatModel(
        MODEL, work, command=fake_command(script), max_attempts=2, max_invalid_retries=1
    )

    outcomes = model.run([request(i, "text") for i in ["err", "gone", "bad", "cut", "fine"]], echo_value)

    err, gone, bad, cut, fine = outcomes
    assert isinstance(fine, ChatReply) and fine.attempts == 1
    for failure in (err, gone, bad, cut):
        assert isinstance(failure, ChatFailure)
        assert failure.attempts == 2
    assert isinstance(err, ChatFailure) and err.reason == "request_failed"
    assert "HTTP 500" in err.detail and "engine dead" in err.detail and err.raw_text is None
    assert isinstance(gone, ChatFailure) and gone.reason == "request_failed"
    assert "no line" in gone.detail
    assert isinstance(bad, ChatFailure) and bad.reason == "invalid_reply"
    assert bad.raw_text == '{"echo": ""}' and "echo" in bad.detail
    assert bad.completion_tokens == 3 + 2
    assert isinstance(cut, ChatFailure) and cut.reason == "truncated"
    assert cut.raw_text == '{"echo": "x' and "max_tokens=64" in cut.detail
    # Failures keep the batch files for inspection.
    run_dir = only_run_dir(work)
    assert (run_dir / "round-2.output.jsonl").is_file()
    assert str(run_dir) in err.detail


def test_no_retry_round_when_max_invalid_retries_is_zero(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", actions={"a": [{"content": "junk"}]})
    model = VLLMBatchChatModel(MODEL, tmp_path / "w", command=fake_command(script), max_invalid_retries=0)
    (outcome,) = model.run([request("a", "x")], echo_value)
    assert isinstance(outcome, ChatFailure) and outcome.reason == "invalid_reply" and outcome.attempts == 1


def test_unknown_model_is_a_request_failure_with_vllms_message(tmp_path: Path) -> None:
    model = VLLMBatchChatModel(
        MODEL, tmp_path, command=fake_command(model="other-model"), max_invalid_retries=0
    )
    (outcome,) = model.run([request("a", "x")], echo_value)
    assert isinstance(outcome, ChatFailure) and outcome.reason == "request_failed"
    assert "HTTP 404" in outcome.detail and "does not exist" in outcome.detail
    assert outcome.attempts == 1 and "not retried" in outcome.detail  # it would fail again: one round


def test_failing_command_raises_with_its_stderr_tail(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "s.json", exit_code=3, stderr="torch.OutOfMemoryError: CUDA out of memory"
    )
    model = VLLMBatchChatModel(MODEL, tmp_path / "w", command=fake_command(script))
    with pytest.raises(ChatModelError, match="status 3") as info:
        model.run([request("a", "x")], echo_value)
    assert "CUDA out of memory" in str(info.value)
    assert (only_run_dir(tmp_path / "w") / "round-1.input.jsonl").is_file()  # kept to inspect


def test_default_command_is_vllm_run_batch(tmp_path: Path) -> None:
    model = VLLMBatchChatModel(MODEL, tmp_path, command=None)
    assert model.command_line(Path("in.jsonl"), Path("out.jsonl")) == [
        "vllm", "run-batch", "-i", "in.jsonl", "-o", "out.jsonl", "--model", MODEL
    ]  # fmt: skip


def test_missing_executable_is_a_clear_error(tmp_path: Path) -> None:
    model = VLLMBatchChatModel(MODEL, tmp_path, command=["no-such-vllm-binary", *DEFAULT_COMMAND[1:]])
    with pytest.raises(ChatModelError, match="cannot start 'no-such-vllm-binary'"):
        model.run([request("a", "x")], echo_value)


def test_timeout_stops_the_process(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", sleep_s=60)
    work = tmp_path / "w"
    model = VLLMBatchChatModel(MODEL, work, command=fake_command(script), timeout_s=2.0)
    with pytest.raises(ChatModelError, match="ran past 2 s"):
        model.run([request("a", "x")], echo_value)
    stdout = (only_run_dir(work) / "round-1.stdout.log").read_text("utf-8")
    pid = int(stdout.split("pid: ")[1].split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_damaged_output_is_an_error_not_a_silent_drop(tmp_path: Path) -> None:
    writer = "import sys; open(sys.argv[2], 'w').write(sys.argv[3] + '\\n')"
    for line, message in [
        ("not json", "is not JSON"),
        (json.dumps({"custom_id": "zzz", "response": None, "error": "x"}), "did not send"),
        (json.dumps({"response": None}), "has no custom_id"),
    ]:
        command = [sys.executable, "-c", writer, "{input}", "{output}", line]
        with pytest.raises(ChatModelError, match=message):
            VLLMBatchChatModel(MODEL, tmp_path, command=command).run([request("a", "x")], echo_value)


def test_bad_calls_and_config_are_refused(tmp_path: Path) -> None:
    model = VLLMBatchChatModel(MODEL, tmp_path / "w", command=fake_command())
    with pytest.raises(ValueError, match="given twice"):
        model.run([request("a", "x"), request("a", "y")], echo_value)
    assert model.run([], echo_value) == []
    assert not (tmp_path / "w").exists()  # nothing was run
    with pytest.raises(ChatModelError, match="no \\{input\\} placeholder"):
        VLLMBatchChatModel(MODEL, tmp_path, command=["vllm", "run-batch", "-o", "{output}"])
    with pytest.raises(ChatModelError, match="structured_output 'guided_json'"):
        VLLMBatchChatModel(MODEL, tmp_path, structured_output="guided_json")  # type: ignore[arg-type]
    with pytest.raises(ChatModelError, match="grammar_field 'xgrammar'"):
        VLLMBatchChatModel(MODEL, tmp_path, grammar_field="xgrammar")  # type: ignore[arg-type]
    with pytest.raises(ChatModelError, match="max_invalid_retries"):
        VLLMBatchChatModel(MODEL, tmp_path, max_invalid_retries=-1)
    with pytest.raises(ChatModelError, match="no model"):
        VLLMBatchChatModel(" ", tmp_path)


def test_extra_args_reach_the_command_and_the_options_but_paths_do_not(tmp_path: Path) -> None:
    work = tmp_path / "work-dir-path"
    model = VLLMBatchChatModel(
        MODEL,
        work,
        command=fake_command(),
        extra_args=["--dtype", "bfloat16", "--hf-overrides", '{"architectures": ["X"]}'],
        keep_files=True,
    )
    model.run([request("a", "x")], echo_value)

    assert model.engine == "vllm-batch" and model.model == MODEL
    options = model.options()
    assert options["extra_args"] == ["--dtype", "bfloat16", "--hf-overrides", '{"architectures": ["X"]}']
    assert str(work) not in json.dumps(options) and str(FAKE) not in json.dumps(options)
    stdout = (only_run_dir(work) / "round-1.stdout.log").read_text("utf-8")
    assert '"--hf-overrides", "{\\"architectures\\": [\\"X\\"]}"' in stdout  # braces passed unchanged


# -- every LLMConfig setting of engine vllm-batch acts on the command or its files, or is refused --


def batch_config(tmp_path: Path, script: Path | None = None, **settings: Any) -> LLMConfig:
    command = fake_command(script)
    return validate_config(
        LLMConfig, {"engine": "vllm-batch", "model": MODEL, "batch_command": command, **settings}, "flow.yaml"
    )


def run_config(config: LLMConfig, work: Path, *requests: ChatRequest) -> list[ChatOutcome]:
    model = chat_model(config, work, work)
    assert isinstance(model, VLLMBatchChatModel)
    model._keep_files = True  # inspect the batch files
    return model.run(list(requests), echo_value)


def rounds(work: Path) -> list[list[dict[str, Any]]]:
    run_dir = next(p for p in work.iterdir() if p.name.startswith("run-"))
    count = len(list(run_dir.glob("round-*.input.jsonl")))
    return [read_jsonl(run_dir / f"round-{n}.input.jsonl") for n in range(1, count + 1)]


def stdout_of(work: Path, round_no: int = 1) -> str:
    run_dir = next(p for p in work.iterdir() if p.name.startswith("run-"))
    return (run_dir / f"round-{round_no}.stdout.log").read_text("utf-8")


@pytest.mark.parametrize(("max_attempts", "sent"), [(1, 1), (3, 3)])
def test_config_max_attempts_reruns_failed_lines(tmp_path: Path, max_attempts: int, sent: int) -> None:
    script = write_script(
        tmp_path / "s.json", actions={"a": [{"error": "engine died", "status_code": 500}] * 5}
    )
    config = batch_config(tmp_path, script, max_attempts=max_attempts, max_invalid_retries=4)

    (outcome,) = run_config(config, tmp_path / "w", request("a", "x"))

    assert isinstance(outcome, ChatFailure) and outcome.reason == "request_failed"
    assert outcome.attempts == sent and f"after {sent} attempt(s)" in outcome.detail
    assert [[line["custom_id"] for line in r] for r in rounds(tmp_path / "w")] == [["a"]] * sent


@pytest.mark.parametrize(("retries", "sent"), [(0, 1), (2, 3)])
def test_config_max_invalid_retries_reasks_with_the_next_seed(
    tmp_path: Path, retries: int, sent: int
) -> None:
    script = write_script(tmp_path / "s.json", actions={"a": [{"content": "junk"}] * 5})
    config = batch_config(tmp_path, script, max_invalid_retries=retries)

    (outcome,) = run_config(config, tmp_path / "w", request("a", "x"))

    assert isinstance(outcome, ChatFailure) and outcome.reason == "invalid_reply"
    assert [r[0]["body"]["seed"] for r in rounds(tmp_path / "w")] == [7 + n for n in range(sent)]


@pytest.mark.parametrize(
    ("mode", "sent"),
    [
        ("json_schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "echo", "schema": SCHEMA, "strict": True}}}),
        ("structured_outputs", {"structured_outputs": {"json": SCHEMA}}),
        ("json_object", {"response_format": {"type": "json_object", "schema": SCHEMA}}),
        ("none", {}),
    ],
)  # fmt: skip
def test_config_structured_output_reaches_the_batch_file(
    tmp_path: Path, mode: str, sent: dict[str, Any]
) -> None:
    run_config(batch_config(tmp_path, structured_output=mode), tmp_path / "w", request("a", "x"))

    body = rounds(tmp_path / "w")[0][0]["body"]
    assert {k: body[k] for k in ("response_format", "structured_outputs") if k in body} == sent


def test_config_batch_extra_args_and_command_reach_the_command(tmp_path: Path) -> None:
    extra = ["--dtype", "bfloat16", "--max-model-len", "8192"]
    config = batch_config(tmp_path, batch_extra_args=extra)

    run_config(config, tmp_path / "w", request("a", "x"))

    stdout = stdout_of(tmp_path / "w")
    assert f"extra args: {json.dumps(extra)}" in stdout
    assert "pid: " in stdout  # the configured command ran (the default, vllm, is not installed here)
    # Extra args change replies: fingerprinted (describe) and in the reply cache's key (options).
    assert describe(config, tmp_path)["batch_extra_args"] == extra
    assert chat_model(config, tmp_path, tmp_path).options()["extra_args"] == extra


@pytest.mark.slow
def test_config_timeout_stops_a_stuck_run_and_keeps_its_finished_lines(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", actions={"c": [{"hang": True}]})
    config = batch_config(tmp_path, script, timeout_s=1.5)
    work = tmp_path / "w"
    requests = [request("a", "one"), request("b", "two"), request("c", "three"), request("d", "four")]

    with ReplyCache(tmp_path / "replies.sqlite") as cache:
        model = chat_model(config, work, work)
        with pytest.raises(ChatModelError, match=r"ran past 1\.5 s \(llm\.timeout_s\).*2 finished line"):
            cached_chat(model, cache, requests, echo_value)
        pid = int(stdout_of(work).split("pid: ")[1].split()[0])
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the stuck process was stopped

        # The two replies written before the hang were paid for: a rerun sends only the rest.
        _, stats = cached_chat(chat_model(config, work, work), cache, requests, echo_value)
    assert stats.hits == 2 and stats.sent == 2 and stats.replies == 2


def test_a_crashed_run_keeps_its_finished_lines_too(tmp_path: Path) -> None:
    crash = "import sys; open(sys.argv[2], 'w').write(sys.argv[3] + '\\n' + '{\"cut'); sys.exit(9)"
    done = json.dumps({"id": "x", "custom_id": "a", "error": None, "response": {"status_code": 200, "request_id": "r", "body": {
        "model": MODEL, "choices": [{"message": {"content": '{"echo": "one"}'}, "finish_reason": "stop"}]}}})  # fmt: skip
    model = VLLMBatchChatModel(
        MODEL, tmp_path, command=[sys.executable, "-c", crash, "{input}", "{output}", done]
    )
    seen: list[ChatOutcome] = []
    with pytest.raises(ChatModelError, match=r"status 9 .*; 1 finished line\(s\) of its output are kept"):
        model.run([request("a", "one"), request("b", "two")], echo_value, seen.append)
    assert [(o.custom_id, o.text) for o in seen if isinstance(o, ChatReply)] == [("a", '{"echo": "one"}')]


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"max_concurrency": 4}, "max_concurrency"),
        ({"requests_per_second": 2.0}, "requests_per_second"),
        ({"base_url": "http://gpu:8000/v1"}, "base_url"),
        ({"api_key_env": "MY_KEY"}, "api_key_env"),
        ({"gguf": "model.gguf"}, "gguf"),
        ({"n_ctx": 8192}, "n_ctx"),
    ],
)
def test_settings_that_do_not_act_on_vllm_batch_are_refused(settings: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"flow\.yaml: .*{key} does not apply to engine vllm-batch"):
        validate_config(LLMConfig, {"engine": "vllm-batch", **settings}, "flow.yaml")


def test_batch_settings_are_refused_by_the_other_engines() -> None:
    for engine in ("openai", "llama-cpp"):
        for key, value in (("batch_command", ["vllm"]), ("batch_extra_args", ["--dtype", "half"])):
            with pytest.raises(ConfigError, match=f"{key} does not apply to engine {engine}"):
                validate_config(LLMConfig, {"engine": engine, key: value}, "flow.yaml")
        with pytest.raises(ConfigError, match="structured_outputs is vLLM's batch-file field"):
            validate_config(LLMConfig, {"engine": engine, "structured_output": "structured_outputs"}, "f")


def test_timeout_defaults_bound_a_request_or_a_whole_batch_run(tmp_path: Path) -> None:
    batch = chat_model(LLMConfig(engine="vllm-batch"), tmp_path, tmp_path)
    assert isinstance(batch, VLLMBatchChatModel) and batch._timeout_s == 3600.0  # model load + a chunk
    assert resolved_timeout_s(LLMConfig(engine="openai")) == 120.0
    assert resolved_timeout_s(LLMConfig(engine="vllm-batch", timeout_s=60)) == 60.0
