"""What a run costs beyond its stages (issue 26): a run with nothing to compute starts no
Prefect; one local server serves many commands; a temporary server that does not start in
time is one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows import local_server
from tests.conftest import REPO

pytestmark = pytest.mark.slow

PROBE = """
import json, sys
from flows.cli import app
sys.argv = ["irforge", *json.loads(sys.argv[1])]
code = 0
try:
    app()
except SystemExit as stop:
    code = stop.code or 0
print("\\nPROBE:" + json.dumps({"prefect": "prefect" in sys.modules, "code": code}))
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("DEEPL_", "PREFECT_API_URL"))}
    return {
        **inherited,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "IRFORGE_ARTIFACTS": str(tmp_path / "artifacts"),
        "PYTHONUNBUFFERED": "1",
    }


def probe(env: dict[str, str], *args: str) -> tuple[dict[str, object], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE:")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, object] = json.loads(lines[-1].removeprefix("PROBE:"))
    return result, done.stdout + done.stderr


def runs(env: dict[str, str]) -> list[dict[str, object]]:
    return [
        json.loads(p.read_text())
        for p in sorted(Path(env["IRFORGE_ARTIFACTS"], "cure", "runs").glob("*.json"))
    ]


def test_a_run_with_nothing_to_compute_starts_no_prefect_and_is_recorded(env: dict[str, str]) -> None:
    first, output = probe(env, "run", "cure", "--until", "filter")
    assert first == {"prefect": True, "code": 0}, output
    again, output = probe(env, "run", "cure", "--until", "filter")
    assert again == {"prefect": False, "code": 0}, output
    records = runs(env)
    assert len(records) == 2 and records[-1]["status"] == "completed"
    assert {s["state"] for s in records[-1]["stages"].values()} == {"reused"}  # type: ignore[attr-defined]
    # A forced stage is work again: Prefect runs it.
    forced, output = probe(env, "run", "cure", "--only", "filter")
    assert forced == {"prefect": True, "code": 0}, output


def test_one_local_server_serves_the_runs_and_stops(env: dict[str, str]) -> None:
    os.environ["PREFECT_HOME"], saved = env["PREFECT_HOME"], os.environ.get("PREFECT_HOME")
    try:
        server = local_server.start(timeout_s=300)
        try:
            assert local_server.healthy(server.url)
            status, output = probe(env, "server", "status")
            assert status["code"] == 0 and server.url in output
            result, output = probe(env, "run", "cure", "--until", "filter")
            assert result["code"] == 0, output
            assert "Starting temporary server" not in output  # the run used the local server
            flow_runs = _flow_runs(server.url)
            assert any(r.startswith("cure-") for r in flow_runs), flow_runs
        finally:
            assert local_server.stop() is not None
        assert not local_server.healthy(server.url) and local_server.running() is None
        stopped, _ = probe(env, "server", "status")
        assert stopped["code"] == 1
    finally:
        if saved is None:
            os.environ.pop("PREFECT_HOME", None)
        else:
            os.environ["PREFECT_HOME"] = saved


def _flow_runs(url: str) -> list[str]:
    import urllib.request

    request = urllib.request.Request(
        f"{url}/flow_runs/filter", data=b"{}", headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return [str(r["name"]) for r in json.loads(reply.read())]


def test_a_temporary_server_that_does_not_start_in_time_is_one_line(env: dict[str, str]) -> None:
    env = {**env, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "1"}
    result, output = probe(env, "run", "cure", "--until", "filter")
    assert result["code"] == 2, output
    error = [line for line in output.splitlines() if line.startswith("error:")]
    assert (
        len(error) == 1 and "did not answer within 1 s" in error[0] and "irforge server start" in error[0]
    ), output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("ours", "variable", "expected"),
    [(True, None, None), (True, "60", 60), (False, None, 180)],
)
def test_heartbeats_are_off_on_a_server_of_our_own_unless_asked_for(
    monkeypatch: pytest.MonkeyPatch, ours: bool, variable: str | None, expected: int | None
) -> None:
    """Prefect's flow-run heartbeat costs a run up to 1 s at its end; on our own server no
    automation watches it, so it is off there; a named server keeps Prefect's setting."""
    from prefect.settings import get_current_settings, temporary_settings

    if variable is None:
        monkeypatch.delenv(local_server.HEARTBEAT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(local_server.HEARTBEAT_VARIABLE, variable)
    with temporary_settings(set_defaults={}), local_server.heartbeat_settings(ours=ours):
        assert get_current_settings().flows.heartbeat_frequency == expected
