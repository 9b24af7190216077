"""Scheduled runs against a real ``prefect server start`` (README "Scheduled runs").

The slow test runs the README's commands: a server on a free loopback port (SQLite in
``tmp_path``), the ``gpu`` process pool, ``prefect deploy --all`` of ``infra/prefect.yaml``,
``infra/worker.sh``, and one more schedule of the deployment a few seconds ahead, which the
server's scheduler service (its loop lowered to 1 s) must turn into a flow run. That run's
artifacts must equal a direct ``irforge run`` of the same config, and the flow run must
carry the stage table, the report link and each stage's line in its task runs' logs.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from flows.registry import PIPELINES
from tests.conftest import REPO

BIN = Path(sys.executable).parent
PREFECT_FILE = REPO / "infra" / "prefect.yaml"
DEPLOYMENT = "irforge/cure-weekly"  # <flow>/<deployment>: every deployment runs the one flow
RAY_DEPLOYMENT = "irforge/cure-ray"  # the same flow, its chunks on Ray
STAGES = ["ingest", "parse", "segment", "filter"]  # `until: filter`: no model, no LLM


def test_deployments_name_flows_that_exist() -> None:
    """Each entrypoint in infra/prefect.yaml is the ``@flow`` of its module that takes the
    parameters the deployment sets, and its ``flow`` parameter is in flows/registry.py. The
    entrypoint is a module path, not a file: a flow loaded from a file lives in a module
    named after the file (``run``), which a Ray worker cannot import when it unpickles a chunk."""
    spec = yaml.safe_load(PREFECT_FILE.read_text(encoding="utf-8"))
    assert spec["deployments"]
    for deployment in spec["deployments"]:
        module, func = deployment["entrypoint"].split(":")
        assert not module.endswith(".py"), f"{deployment['name']}: give the module (flows.run), not a file"
        path = module.replace(".", "/") + ".py"
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        flows = {
            node.name: _flow_name(node)
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and _flow_name(node) is not None
        }
        assert func in flows, f"{deployment['name']}: {path} has no @flow {func} (flows: {sorted(flows)})"
        assert flows[func] == DEPLOYMENT.split("/", maxsplit=1)[0]
        flow = deployment["parameters"]["flow"]
        assert flow in PIPELINES, f"{deployment['name']}: flow {flow!r} is not in the registry"
        assert set(deployment["parameters"]) <= _flow_parameters(tree, func)


def test_every_registered_flow_has_a_deployment_with_an_existing_config() -> None:
    """A flow added to flows/registry.py without a deployment in infra/prefect.yaml fails here."""
    spec = yaml.safe_load(PREFECT_FILE.read_text())
    deployed = {d["parameters"]["flow"] for d in spec["deployments"]}
    assert set(PIPELINES) - deployed == set()
    for deployment in spec["deployments"]:
        assert (REPO / deployment["parameters"]["config"]).is_file(), deployment["name"]
    ray = [d for d in spec["deployments"] if d["parameters"].get("runner") == "ray"]
    assert [d["name"] for d in ray] == [RAY_DEPLOYMENT.split("/")[1]]  # the Ray-runner variant


def test_every_registered_flow_gets_a_valid_prefect_artifact_key() -> None:
    """Prefect refuses keys with anything but lower-case letters, digits and dashes (``spanish_sr``)."""
    import re

    from flows.run import artifact_key

    for flow in PIPELINES:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", artifact_key(flow)), flow
    assert artifact_key("spanish_sr") == "spanish-sr" and artifact_key("cure") == "cure"


def test_flow_artifacts_default_to_irforge_artifacts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A deployed run (no ``artifacts`` parameter) writes where the worker's environment says."""
    from flows.plain_run import CHECKOUT, artifact_root

    monkeypatch.delenv("IRFORGE_ARTIFACTS", raising=False)
    monkeypatch.delenv("IRFORGE_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert Path(artifact_root(None)) == CHECKOUT / "data" / "artifacts"  # not the working directory's
    monkeypatch.setenv("IRFORGE_HOME", str(tmp_path / "home"))
    assert Path(artifact_root(None)) == tmp_path / "home" / "data" / "artifacts"
    monkeypatch.setenv("IRFORGE_ARTIFACTS", "runs/a")
    assert Path(artifact_root(None)) == tmp_path / "home" / "runs" / "a"
    monkeypatch.setenv("IRFORGE_ARTIFACTS", str(tmp_path / "abs"))
    assert Path(artifact_root(None)) == tmp_path / "abs"
    # a parameter wins, as `irforge run -a` passes it
    assert Path(artifact_root("given")) == tmp_path / "given"
    monkeypatch.setenv("IRFORGE_ARTIFACTS", "s3://bucket/irforge")
    assert artifact_root(None) == "s3://bucket/irforge"  # a URL is kept whole, never made a folder


def test_worker_script_needs_an_environment_and_does_not_build_one(tmp_path: Path) -> None:
    """infra/worker.sh starts the worker from the checkout's ``.venv``; it never reruns setup."""
    env = {
        "PATH": os.environ["PATH"],
        "PREFECT_API_URL": "http://127.0.0.1:9/api",
        "IRFORGE_HOME": str(tmp_path),
    }
    done = subprocess.run(
        ["bash", str(REPO / "infra" / "worker.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"worker: no environment in {tmp_path}/.venv: run 'bash scripts/setup.sh' there once first"
    )
    assert list(tmp_path.iterdir()) == []


def _flow_name(node: ast.FunctionDef) -> str | None:
    for dec in node.decorator_list:
        if isinstance(dec, ast.Call) and isinstance(dec.func, ast.Name) and dec.func.id == "flow":
            names = [k.value for k in dec.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)]
            return str(names[0].value) if names else node.name
    return None


def _flow_parameters(tree: ast.Module, func: str) -> set[str]:
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    return {a.arg for a in node.args.args}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A child in its own process group, so that stopping it stops what it started."""
    with log.open("wb") as out:
        return subprocess.Popen(
            args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run(args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(
        args, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _tail(path: Path, n: int = 4000) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-n:] if path.exists() else ""


@dataclass(frozen=True)
class Server:
    env: dict[str, str]  # what every command of the test runs with: PREFECT_API_URL, PREFECT_HOME
    client: httpx.Client  # the server's REST API
    log: Path

    def check_scheduler(self) -> None:
        """Fail at once when a scheduler pass failed (SQLAlchemy 2.1 with prefect 3.8)."""
        log = _tail(self.log, 10**7)
        assert "Can't evaluate bulk DML" not in log, "the scheduler failed:\n" + log[-4000:]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "IRFORGE_"))}
    env |= {
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "1",  # default 60
        "PREFECT_WORKER_QUERY_SECONDS": "1",  # default 10
        "HF_HUB_OFFLINE": "1",
    }
    log = tmp_path / "server.log"
    proc = _start(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env, log
    )
    client = httpx.Client(base_url=api, timeout=30)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, f"prefect server exited {proc.returncode}:\n{_tail(log)}"
            assert time.monotonic() < deadline, f"prefect server not healthy in 90 s:\n{_tail(log)}"
            try:
                if client.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        yield Server(env, client, log)
    finally:
        client.close()
        _stop(proc)


def _flow_runs(client: httpx.Client, deployment_id: str) -> list[dict[str, Any]]:
    body = {"deployments": {"id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC", "limit": 50}
    response = client.post("/flow_runs/filter", json=body)
    response.raise_for_status()
    runs: list[dict[str, Any]] = response.json()
    return runs


def _wait_for_scheduled_run(
    server: Server, deployment_id: str, worker: subprocess.Popen[bytes], worker_log: Path
) -> dict[str, Any]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        server.check_scheduler()
        assert worker.poll() is None, f"the worker exited {worker.returncode}:\n{_tail(worker_log)}"
        for run in _flow_runs(server.client, deployment_id):
            state = run["state"]["type"]
            if run["auto_scheduled"] and state in ("FAILED", "CRASHED", "CANCELLED"):
                pytest.fail(f"scheduled run {run['name']} {state}:\n{_tail(worker_log)}")
            if run["auto_scheduled"] and state == "COMPLETED":
                return run
        time.sleep(1)
    pytest.fail(
        f"no scheduled run completed in 300 s: {_flow_runs(server.client, deployment_id)}\n{_tail(worker_log)}"
    )


def _artifact_files(root: Path) -> dict[str, bytes]:
    """Every Parquet file of every published artifact, by ``stage/fingerprint/name``."""
    found = {}
    for path in sorted((root / "cure").glob("*/*/*.parquet")):
        stage_dir, fp_dir = path.parent.parent, path.parent
        if not fp_dir.name.startswith(".") and stage_dir.name != "runs":
            found[f"{stage_dir.name}/{fp_dir.name}/{path.name}"] = path.read_bytes()
    return found


def _prefect_artifacts(client: httpx.Client, flow_run_id: str) -> dict[str, dict[str, Any]]:
    response = client.post("/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}})
    response.raise_for_status()
    return {a["type"]: a for a in response.json()}


def _task_logs(client: httpx.Client, flow_run_id: str) -> list[str]:
    body = {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200, "sort": "TIMESTAMP_ASC"}
    response = client.post("/logs/filter", json=body)
    response.raise_for_status()
    return [log["message"] for log in response.json() if log["task_run_id"]]


def _check_published(client: httpx.Client, flow_run_id: str, state: str, root: Path) -> None:
    """The stage table and the report link on the flow run, each stage's line in its task's logs."""
    artifacts = _prefect_artifacts(client, flow_run_id)
    assert {"table", "markdown"} <= set(artifacts), artifacts  # a link artifact is markdown
    rows = json.loads(artifacts["table"]["data"])
    assert [(r["stage"], r["state"]) for r in rows] == [(s, state) for s in STAGES]
    assert all(isinstance(r["kept"], int) and r["fingerprint"] for r in rows)
    assert artifacts["table"]["key"] == "cure-stages"
    # Each stage's task run: a reused artifact shows as Prefect's own cache hits do (issue 29 §1).
    body = {
        "flow_runs": {"id": {"any_": [flow_run_id]}},
        "task_runs": {"name": {"any_": [f"cure.{s}" for s in STAGES]}},
    }
    stage_runs = client.post("/task_runs/filter", json=body).json()
    expected = "Cached" if state == "reused" else "Completed"
    assert {r["name"]: r["state"]["name"] for r in stage_runs} == {f"cure.{s}": expected for s in STAGES}
    report = root.resolve() / "cure" / "reports"
    assert f"({report.as_uri()}/" in artifacts["markdown"]["data"], artifacts["markdown"]["data"]
    # Prefect sends logs in batches, after the run's state may already say COMPLETED.
    deadline = time.monotonic() + 30
    while True:
        logs = _task_logs(client, flow_run_id)
        missing = [s for s in STAGES if not any(m.startswith(f"{state.upper()} cure/{s} ") for m in logs)]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert missing == [], logs


def _check_ray_deployment(
    server: Server, worker_env: dict[str, str], worker_log: Path, root: Path, direct: dict[str, bytes]
) -> None:
    """The Ray-runner deployment, run on demand on the worker: its chunks are task runs on a
    local Ray (chunk_rows 20: several per stage), its artifacts the same bytes as the direct run's."""
    prefect = str(BIN / "prefect")
    params = ["--param", "until=filter", "--param", "chunk_rows=20", "--param", f"artifacts={root}"]
    worker = _start(["bash", str(REPO / "infra" / "worker.sh")], worker_env, worker_log)
    try:
        _run([prefect, "deployment", "run", RAY_DEPLOYMENT, *params], server.env, timeout=120)
        deployment = server.client.get(f"/deployments/name/{RAY_DEPLOYMENT}").json()
        deadline = time.monotonic() + 300
        state = None
        while time.monotonic() < deadline and state != "COMPLETED":
            runs = _flow_runs(server.client, deployment["id"])
            state = runs[0]["state"]["type"] if runs else None
            assert state not in ("FAILED", "CRASHED", "CANCELLED"), _tail(worker_log)
            time.sleep(1)
        assert state == "COMPLETED", _tail(worker_log)
    finally:
        _stop(worker)
    body = {"task_runs": {"name": {"like_": "cure.segment["}}, "flow_runs": {"id": {"any_": [runs[0]["id"]]}}}
    chunk_runs = server.client.post("/task_runs/filter", json=body).json()
    assert len(chunk_runs) >= 2 and {r["state"]["type"] for r in chunk_runs} == {"COMPLETED"}
    assert _artifact_files(root) == direct


@pytest.mark.slow
def test_schedule_fires_on_a_real_server(server: Server, tmp_path: Path) -> None:
    env, client = server.env, server.client
    started = time.monotonic()
    prefect = str(BIN / "prefect")
    _run([prefect, "work-pool", "create", "gpu", "--type", "process"], env)
    _run([prefect, "--no-prompt", "deploy", "--all", "--prefect-file", str(PREFECT_FILE)], env, timeout=180)
    assert "cure-weekly" in _run([prefect, "deployment", "ls"], env)
    assert "gpu" in _run([prefect, "work-pool", "ls"], env)

    scheduled_root, direct_root = tmp_path / "scheduled", tmp_path / "direct"
    worker_env = env | {"IRFORGE_ARTIFACTS": str(scheduled_root)}
    worker_log = tmp_path / "worker.log"
    worker = _start(["bash", str(REPO / "infra" / "worker.sh")], worker_env, worker_log)
    try:
        deployment = client.get(f"/deployments/name/{DEPLOYMENT}").json()
        assert deployment["parameters"] == {"flow": "cure", "config": "flows/configs/cure.yaml"}
        # One more schedule, 15 s ahead (the next CLI call may take seconds under load), with
        # parameters of its own (README step 5).
        anchor = (datetime.now(UTC) + timedelta(seconds=15)).strftime("%Y-%m-%dT%H:%M:%SZ")
        schedule = [
            {
                "schedule": {"interval": 604800, "anchor_date": anchor},
                "parameters": {"until": "filter"},
                "active": True,
            }
        ]
        _run(
            [
                prefect,
                "api",
                "POST",
                f"/deployments/{deployment['id']}/schedules",
                "--data",
                json.dumps(schedule),
            ],
            env,
        )
        # Meanwhile, the same config straight from the CLI into another artifact root.
        irforge = [str(BIN / "irforge"), "run", "cure", "--until", "filter"]
        _run([*irforge, "-a", str(direct_root)], env, timeout=300)
        run = _wait_for_scheduled_run(server, deployment["id"], worker, worker_log)
        print(f"scheduled run completed {time.monotonic() - started:.1f} s after the pool was created")
        # Before the worker stops: its flow-run process may still be sending the run's logs.
        _check_published(client, run["id"], "computed", scheduled_root)
    finally:
        _stop(worker)

    assert run["parameters"] == {"flow": "cure", "config": "flows/configs/cure.yaml", "until": "filter"}
    assert run["name"].startswith("cure-"), run["name"]
    scheduled, direct = _artifact_files(scheduled_root), _artifact_files(direct_root)
    assert {k.split("/")[0] for k in scheduled} == set(STAGES)
    assert scheduled.keys() == direct.keys()  # same stages, same fingerprints, same files
    assert [k for k in scheduled if scheduled[k] != direct[k]] == []

    _check_ray_deployment(server, worker_env, worker_log, tmp_path / "ray", direct)

    # Run again from the CLI: every stage reused, and Prefect shows it.
    _run([*irforge, "-a", str(direct_root)], env, timeout=300)
    direct_runs = {"flow_runs": {"deployment_id": {"is_null_": True}}, "sort": "START_TIME_DESC", "limit": 1}
    latest = client.post("/flow_runs/filter", json=direct_runs).json()[0]
    _check_published(client, latest["id"], "reused", direct_root)
    assert latest["name"].startswith("cure-"), latest["name"]
    _run([prefect, "flow-run", "ls"], env)
