"""The embedded llama.cpp server never outlives the run that started it (issue 14, item 6).

Real servers (llama-cpp-python on the bundled Gemma 3 270M), real SIGKILLs: the owner is a
separate process killed the way the issue's trials killed ``irforge run``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tasks.common.llm import llama_server
from tasks.common.llm.config import LLMConfig, chat_model, close_local_servers
from tasks.common.llm.llama_server import LlamaServer
from tasks.common.llm.server_process import ServerRecord, guarded_argv, process_start, spawn
from tests.common.test_llama_server import gemma, model_link, needs_gemma, needs_llama, processes_mentioning
from tests.conftest import REPO

__all__ = ["gemma", "model_link"]  # fixtures


# Starts a server from a worker thread that then ends (as a stage thread does), says so, waits.
OWNER = """
import sys, threading, time
from pathlib import Path
from tasks.common.llm.llama_server import LlamaServer
server = LlamaServer(Path(sys.argv[1]), log_path=Path(sys.argv[2]), n_ctx=512)
starter = threading.Thread(target=server.start)
starter.start()
starter.join()
print(server.pid, server.base_url, flush=True)
time.sleep(600)
"""


def serves(base_url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{base_url}/models", timeout=5) as response:
            return bool(json.loads(response.read())["data"])
    except OSError:
        return False


def wait_gone(pid: int, within_s: float) -> bool:
    """Whether ``pid`` stops running (exits, or is left a zombie) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while process_start(pid) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow
@needs_llama
@needs_gemma
def test_a_sigkilled_owner_takes_its_server_with_it(model_link: Path, tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}  # records under tmp_path
    for trial in range(3):
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER, str(model_link), str(tmp_path / f"llama-{trial}.log")],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert owner.stdout is not None
        pid_text, base_url = owner.stdout.readline().split()
        pid = int(pid_text)
        try:
            time.sleep(0.3)  # the thread that started it has ended: the server must still serve
            assert serves(base_url), f"trial {trial}: the server died with the thread that started it"
        finally:
            owner.send_signal(signal.SIGKILL)
            owner.wait()
        assert wait_gone(pid, within_s=5.0), f"trial {trial}: server pid {pid} outlived its killed owner"
    assert processes_mentioning(str(model_link)) == []


@pytest.mark.slow
@needs_llama
@needs_gemma
def test_a_new_start_stops_the_stale_server_of_a_dead_run_only(model_link: Path, tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead_pid = gone.pid
    me, my_start = os.getpid(), process_start(os.getpid())

    def record(instance: str, pid: int, owner: int, owner_start: str | None) -> None:
        ServerRecord(instance, pid, 1, str(model_link), "x.log", owner, owner_start, 0.0).write(runtime)

    # A real server whose run died (its guard's parent is this test, so only the record says so).
    stale_argv = guarded_argv(
        sys.executable, "stale", "llama_cpp.server", ["--model", str(model_link), "--n_ctx", "512"]
    )
    stale = spawn(stale_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record("stale", stale.pid, dead_pid, "long ago")
    # A dead run's record whose pid now belongs to an unrelated process: never signalled.
    unrelated = subprocess.Popen(["sleep", "60"], start_new_session=True)
    record("reused-pid", unrelated.pid, dead_pid, "long ago")
    # A live run's server (here: a stand-in under the guard): left alone.
    live = spawn(guarded_argv(sys.executable, "live", "http.server", ["--bind", "127.0.0.1", "0"]))
    record("live", live.pid, me, my_start)
    try:
        with LlamaServer(model_link, runtime_dir=runtime, n_ctx=512) as server:
            assert stale.wait(timeout=10) is not None  # stopped before the new one started
            assert unrelated.poll() is None and live.poll() is None
            names = sorted(p.stem for p in runtime.glob("*.json"))
            assert names == sorted(["live", server.instance])
            assert server.log_path == runtime / f"{server.instance}.log"
        assert sorted(p.stem for p in runtime.glob("*.json")) == ["live"]
    finally:
        for proc in (stale, unrelated, live):
            proc.kill()
            proc.wait()


@pytest.mark.slow
@needs_llama
@needs_gemma
def test_the_server_log_is_never_written_into_a_stage_folder(
    gemma: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llama_server, "DEFAULT_RUNTIME_DIR", tmp_path / "runtime", raising=False)
    files = tmp_path / "stage" / ".work-abc" / "files"  # what the engine publishes as the artifact
    files.mkdir(parents=True)
    try:
        chat_model(LLMConfig(engine="llama-cpp", n_ctx=512), tmp_path, files)
    finally:
        close_local_servers()
    assert list(files.iterdir()) == []
    (log,) = (tmp_path / "runtime").glob("*.log")
    assert "llama" in log.read_text("utf-8", errors="replace").lower()
