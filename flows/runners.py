"""Chunks as Prefect tasks on a process pool or a Ray cluster (``execution.runner``).

The engine asks a :class:`irforge.parallel.ChunkRunner` to run one call per unfinished
chunk; :class:`PrefectChunkRunner` submits each as a ``chunk`` task run
(``<flow>.<stage>[<index>]`` in the UI) to Prefect's ``ProcessPoolTaskRunner`` (every core
by default) or to ``prefect-ray``'s ``RayTaskRunner``
(https://docs.prefect.io/integrations/prefect-ray), with the chunk's Ray resources
(``num_gpus``, ``memory``) through ``remote_options``. The task runner starts on the first
stage with more than one chunk (a pool: sooner, on ``prestart``) and lives as long as the run,
so workers stay warm (a model loaded by one chunk serves the next); a pool worker holds one
Prefect client and the driver's settings for all its task runs (``_start_worker``). At most twice as many chunks as workers are
in flight: the driver reads its input lazily, whatever its size. When a chunk fails, no
new chunk is submitted, the ones in flight finish (and are persisted by the engine), then
the first error is raised: a rerun resumes with the unfinished chunks only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture
from prefect.settings import PREFECT_API_URL
from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner

from irforge.config import ExecutionConfig
from irforge.errors import ConfigError
from irforge.parallel import INLINE, ChunkCall, ChunkRunner, Resources

log = logging.getLogger("irforge")

_IN_FLIGHT_PER_WORKER = 2


@task(name="chunk", cache_policy=NO_CACHE, persist_result=False)
def chunk_task(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """One chunk of a stage, in a worker process or on a Ray node."""
    return fn(*args)


def ray_options(resources: Resources) -> dict[str, Any]:
    """``ray.remote`` options for a chunk (https://docs.ray.io/en/latest/ray-core/scheduling/resources.html)."""
    options: dict[str, Any] = {"num_cpus": resources.num_cpus}
    if resources.num_gpus:
        options["num_gpus"] = resources.num_gpus
    if resources.memory_mb:
        options["memory"] = resources.memory_mb * 1024 * 1024
    return options


class PrefectChunkRunner:
    """Runs chunk calls as Prefect tasks on the task runner ``execution.runner`` names."""

    def __init__(
        self,
        execution: ExecutionConfig,
        flow_name: str,
        make: Callable[[ExecutionConfig], TaskRunner[Any]] | None = None,
    ) -> None:
        self._execution = execution
        self._flow = flow_name
        self._make = make or make_task_runner  # another: a benchmark's peer (Prefect's pool as it is)
        self._runner: TaskRunner[Any] | None = None
        self._lock = threading.Lock()

    @property
    def workers(self) -> int:
        if self._execution.workers:
            return self._execution.workers
        if self._execution.runner == "ray" and self._runner is not None:
            import ray  # noqa: PLC0415 -- Ray (and what imports it) only where runner is ray

            return max(1, int(ray.cluster_resources().get("CPU", 1)))  # type: ignore[no-untyped-call]
        return os.cpu_count() or 1

    @property
    def description(self) -> str:
        where = self._execution.ray_address or "local" if self._execution.runner == "ray" else "local"
        return f"{self._execution.runner} ({where}, {self.workers} workers)"

    def _started(self) -> TaskRunner[Any]:
        with self._lock:
            if self._runner is None:
                runner = self._make(self._execution)
                runner.__enter__()
                self._runner = runner
                log.info("chunks run on %s", self.description)
            return self._runner

    def prestart(self) -> threading.Thread | None:
        """Start the process pool and spawn its workers now, in a thread, while the run plans its
        stages: spawning and importing Prefect takes a worker 3-8 s on 2 busy cores (bench_scale's
        ``startup``), which the first chunked stage would wait for. None for Ray (``ray.init``
        belongs in the main thread): it starts on the first stage with more than one chunk."""
        if self._execution.runner != "process":
            return None
        thread = threading.Thread(target=self._prestart, name="irforge-prestart", daemon=True)
        thread.start()
        return thread

    def _prestart(self) -> None:
        try:
            runner = self._started()
            executor = getattr(
                runner, "_executor", None
            )  # Prefect's: a worker spawns per call no idle one takes
            if executor is not None:
                for future in [executor.submit(os.getpid) for _ in range(self.workers)]:
                    future.result()
        except Exception as exc:  # the first stage starts it again, and fails with the reason
            log.warning("process pool not prestarted: %s: %s", type(exc).__name__, exc)

    def close(self) -> None:
        with self._lock:
            if self._runner is not None:
                runner, self._runner = self._runner, None
                runner.__exit__(None, None, None)

    def _submit(self, runner: TaskRunner[Any], call: ChunkCall, resources: Resources) -> PrefectFuture[Any]:
        named = chunk_task.with_options(task_run_name=f"{self._flow}.{call.name}")
        parameters = {"fn": call.fn, "args": call.args}
        if self._execution.runner != "ray":
            future: PrefectFuture[Any] = runner.submit(named, parameters)
            return future
        from prefect_ray.context import remote_options  # noqa: PLC0415

        with remote_options(**ray_options(resources)):
            future = runner.submit(named, parameters)
            return future

    def run(self, calls: Iterable[ChunkCall], resources: Resources) -> Iterator[tuple[int, Any]]:
        runner = self._started()
        finished: queue.Queue[PrefectFuture[Any]] = queue.Queue()
        in_flight: dict[PrefectFuture[Any], int] = {}
        pending = iter(calls)
        limit = _IN_FLIGHT_PER_WORKER * self.workers
        error: BaseException | None = None
        exhausted = False
        while True:
            while not exhausted and error is None and len(in_flight) < limit:
                call = next(pending, None)
                if call is None:
                    exhausted = True
                    break
                future = self._submit(runner, call, resources)
                in_flight[future] = call.index
                future.add_done_callback(finished.put)
            if not in_flight:
                break
            future = finished.get()
            index = in_flight.pop(future)
            try:
                result = future.result()
            except BaseException as exc:  # the others in flight still finish and are kept
                error = error or exc
                continue
            yield index, result
        if error is not None:
            raise error


PARENT_POLL_S = 0.5
DRIVER_PID = "IRFORGE_DRIVER_PID"  # in a pool worker's env: the process it dies with


def die_with_parent(parent: int) -> threading.Thread:
    """Exit this process (``os._exit``) within :data:`PARENT_POLL_S` of ``parent``'s death,
    however it died (SIGKILL too): a daemon thread watches for the re-parenting. Not
    PR_SET_PDEATHSIG, which fires when the *thread* that spawned a worker ends, and pool
    workers are spawned from a stage's short-lived thread (issue 30)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # re-parented (to init or a subreaper): the driver is gone

    if os.getppid() != parent:  # it died before the watch began
        os._exit(1)

    thread = threading.Thread(target=watch, name="die-with-parent", daemon=True)
    thread.start()
    return thread


def stop_stale_workers(proc: Path = Path("/proc")) -> list[int]:
    """SIGKILL pool workers of this user whose driver (:data:`DRIVER_PID` in their environment)
    is gone: left by a run killed before :func:`die_with_parent` (issue 30). Their pids."""
    stopped = []
    marker = f"{DRIVER_PID}=".encode()
    for entry in proc.glob("[0-9]*"):
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            variables = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        driver = next((v[len(marker) :] for v in variables if v.startswith(marker)), None)
        if driver is None or not driver.isdigit() or (proc / driver.decode()).exists():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(entry.name), signal.SIGKILL)
            stopped.append(int(entry.name))
    if stopped:
        log.warning("stopped %d pool worker(s) of a run that died: %s", len(stopped), stopped)
    return stopped


def _start_worker(env: dict[str, str], settings: dict[str, Any]) -> None:
    """A pool worker's initializer: ``env``, then Prefect's settings and one client, once for all
    its task runs (entered for the worker's life: its one thread runs every task).

    For each task run Prefect's pool rebuilds the driver's settings from their serialized form
    (``hydrated_context`` in prefect/context.py: pydantic-settings re-reads the environment, the
    dotenv and profile files) and builds a client twice (``hydrated_context``, then the task
    engine's ``SyncClientContext.get_or_create``), each with a new ``ssl.create_default_context``
    even for a loopback ``http://`` server (prefect/client/orchestration/__init__.py): with a
    sub-millisecond chunk, 66 % and 38 % of a worker's samples (py-spy). Both clients come from
    the open ``SyncClientContext`` when there is one; :class:`_PoolTaskRunner` sends no settings.
    """
    os.environ.update(env)
    die_with_parent(int(env.get(DRIVER_PID, os.getppid())))
    from prefect.context import SettingsContext, SyncClientContext  # noqa: PLC0415 -- Prefect's pool imported them

    SettingsContext(**settings).__enter__()  # exited with the process
    if not PREFECT_API_URL.value():  # a client would start a server of its own: left to Prefect
        return
    try:
        SyncClientContext().__enter__()
    except Exception as exc:  # (a worker whose initializer fails breaks the pool) each task run says why
        log.warning("pool worker %d: no shared Prefect client: %s: %s", os.getpid(), type(exc).__name__, exc)


class _PoolTaskRunner(ProcessPoolTaskRunner):
    """Prefect's process pool, its workers holding the driver's settings from the start
    (:func:`_start_worker`): the context each task run gets leaves them out.

    Prefect serializes that context once for the runner's life (``_cached_context``,
    prefect/task_runners.py), the stage task run that submitted first included: every later
    stage's chunks would show under it. Here it is serialized again whenever another task run
    submits (once a stage, not once a chunk). Should a Prefect release drop that attribute,
    every task run gets its settings and context again (slower, the same)."""

    def __init__(self, workers: int, env: dict[str, str]) -> None:
        from prefect.context import SettingsContext  # noqa: PLC0415

        current = SettingsContext.get()
        settings = current.serialize() if current else {}
        super().__init__(workers, initializer=_start_worker, initargs=(env, settings))
        self._context_lock = threading.Lock()  # stages submit from threads of their own
        self._context_of: object = None

    def submit(self, task: Any, parameters: dict[str, Any], *more: Any, **named: Any) -> Any:
        if not hasattr(self, "_cached_context"):
            return super().submit(task, parameters, *more, **named)
        from prefect.context import TaskRunContext, serialize_context  # noqa: PLC0415
        from prefect.settings import get_current_settings  # noqa: PLC0415

        submitter = TaskRunContext.get()
        key = submitter.task_run.id if submitter else None
        with self._context_lock:
            if self._cached_context is None or key != self._context_of:
                self._cached_context = serialize_context() | {"settings_context": {}}
                settings = get_current_settings().to_environment_variables(exclude_unset=True)
                self._cached_env, self._context_of = settings | os.environ, key
            return super().submit(task, parameters, *more, **named)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def thread_shares(workers: int) -> dict[str, str]:
    """Each pool worker's share of the cores for torch's OpenMP / MKL threads, unless set: every
    worker on every core oversubscribes them (two ``train_rerank`` workers on 2 cores: 222 s,
    against 37 s inline). Ray does the same on its own (a task's ``num_cpus``)."""
    share = str(max(1, (os.cpu_count() or 1) // workers))
    return {name: os.environ.get(name) or share for name in THREAD_VARIABLES}


def _worker_environment() -> dict[str, str]:
    """The API of this process's temporary Prefect server (started now if it is not yet), for
    its pool and local Ray workers: without it each worker would start a server of its own
    (seconds and ~200 MB each)."""
    if PREFECT_API_URL.value():
        return {}
    # Imported here: a pool worker imports this module, and the server module takes seconds.
    from prefect.server.api.server import SubprocessASGIServer  # noqa: PLC0415

    server = SubprocessASGIServer()  # a singleton: the server this process's Prefect client uses
    if not server.running:
        server.start()
    return {"PREFECT_API_URL": server.api_url}


def _cluster_environment() -> dict[str, str]:
    """What workers on other hosts need from this one: the API of a real Prefect server. Only
    that: secrets (API keys) never travel in a runtime_env, which Ray shows on its dashboard;
    each node reads its own from its environment."""
    url = PREFECT_API_URL.value()
    if not url:
        log.warning(
            "runner ray on a cluster without PREFECT_API_URL: this host's temporary Prefect server "
            "is not reachable from other nodes, so each of their workers starts one; set "
            "PREFECT_API_URL to a server every node reaches (README: Scheduled runs)"
        )
        return {}
    return {"PREFECT_API_URL": str(url)}


def make_task_runner(execution: ExecutionConfig) -> TaskRunner[Any]:
    """Prefect's task runner for ``execution.runner`` (not started)."""
    if execution.runner == "process":
        workers = execution.workers or os.cpu_count() or 1
        env = _worker_environment() | thread_shares(workers) | {DRIVER_PID: str(os.getpid())}
        stop_stale_workers()
        return _PoolTaskRunner(workers, env)
    if execution.runner == "ray":
        from prefect_ray import RayTaskRunner  # noqa: PLC0415

        init: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
        if execution.ray_address is None and not os.environ.get("RAY_ADDRESS"):
            # a local Ray: its workers reach this host's server
            init["include_dashboard"] = False
            init["runtime_env"] = {"env_vars": _worker_environment()}
            if execution.workers:
                init["num_cpus"] = execution.workers
        else:
            init["runtime_env"] = {"env_vars": _cluster_environment()}
        ray_runner: TaskRunner[Any] = RayTaskRunner(address=execution.ray_address, init_kwargs=init)
        return ray_runner
    raise ConfigError(f"execution.runner: no task runner for {execution.runner!r}")


def chunk_runner(execution: ExecutionConfig, flow_name: str) -> ChunkRunner | PrefectChunkRunner:
    """The run's chunk runner: inline, or Prefect tasks on a pool / Ray started on first use."""
    if execution.runner == "inline":
        return INLINE
    return PrefectChunkRunner(execution, flow_name)
