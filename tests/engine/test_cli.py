"""The `irforge` command end to end: Prefect (ephemeral mode) runs the CURE flow on the demo corpus."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.slow
STAGES = ["ingest", "parse", "segment", "filter"]
ALL = [
    *STAGES,
    "annotations",
    "dedup",
    "translate",
    "embed",
    "index",
    "mine",
    "corpus",
    "pool",
    "judge",
    "qrels",
    "release",
    "evaluate",
]  # the whole demo flow


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("prefect-home")
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith("DEEPL_")
    }  # no paid calls from tests
    return {
        **inherited,
        "PREFECT_HOME": str(home),
        "IRFORGE_ARTIFACTS": str(tmp_path_factory.mktemp("artifacts")),
        "PYTHONUNBUFFERED": "1",
    }


def irforge(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("irforge")
    return subprocess.run(
        [str(exe), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


def last_run(env: dict[str, str]) -> dict[str, Any]:
    runs = sorted((Path(env["IRFORGE_ARTIFACTS"]) / "cure" / "runs").glob("*.json"))
    record: dict[str, Any] = json.loads(runs[-1].read_text())
    return record


@pytest.fixture(scope="module")
def first_run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return irforge(env, "run", "cure", "--until", "filter")


def test_run_produces_the_four_artifacts_and_a_summary(env: dict[str, str], first_run: Any) -> None:
    assert first_run.returncode == 0, first_run.stderr[-3000:]
    for stage in STAGES:
        assert stage in first_run.stdout
        (artifact,) = [
            p for p in (Path(env["IRFORGE_ARTIFACTS"]) / "cure" / stage).iterdir() if p.name[0] != "."
        ]
        assert (artifact / "manifest.json").is_file() and (artifact / "excluded.parquet").is_file()
    record = last_run(env)
    assert record["status"] == "completed"
    assert [record["stages"][s]["state"] for s in STAGES] == ["computed"] * 4


def test_status_json_reports_every_stage_fresh(env: dict[str, str], first_run: Any) -> None:
    result = irforge(env, "status", "cure", "--json")
    assert result.returncode == 0, result.stderr
    stages = {s["stage"]: s for s in json.loads(result.stdout)["stages"]}
    assert list(stages) == ALL
    # The first run stopped at filter: what follows has never run.
    assert [stages[s]["state"] for s in ALL] == ["fresh"] * 4 + ["missing"] * (len(ALL) - 4)
    ingest = stages["ingest"]
    # The demo's broken/ folder: 4 files excluded at ingest, nav_only.html later at parse.
    assert ingest["excluded_by_reason"] == {
        "binary_content": 1,
        "empty_file": 1,
        "malformed_xml": 1,
        "undecodable": 1,
    }
    assert stages["parse"]["excluded_by_reason"] == {"no_text": 1}
    assert stages["filter"]["rows_kept"] > 50 and Path(stages["filter"]["artifact"]).is_dir()


def test_second_run_reuses_and_from_recomputes_downstream(env: dict[str, str], first_run: Any) -> None:
    again = irforge(env, "run", "cure", timeout=900)  # the whole demo: ~4 min on 2 idle cores
    assert again.returncode == 0, again.stderr[-3000:]
    assert [last_run(env)["stages"][s]["state"] for s in STAGES] == ["reused"] * 4
    assert "REUSED" in again.stderr
    # --from recomputes the stage and what follows (here up to filter: the demo's later stages
    # already ran once above, and twice would cost minutes of CI).
    partial = irforge(env, "run", "cure", "--from", "segment", "--until", "filter")
    assert partial.returncode == 0, partial.stderr[-3000:]
    assert [last_run(env)["stages"][s]["state"] for s in STAGES] == [
        "reused",
        "reused",
        "computed",
        "computed",
    ]


def test_show_prints_excluded_rows_with_reasons(env: dict[str, str], first_run: Any) -> None:
    result = irforge(env, "show", "cure", "ingest", "--excluded", "--jsonl")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {Path(r["source_path"]).name: r["reason"] for r in rows} == {
        "empty.xml": "empty_file",
        "figure.html": "binary_content",
        "latin1_declared_utf8.xml": "undecodable",
        "truncated.xml": "malformed_xml",
    }
    table = irforge(env, "show", "cure", "filter", "-n", "2", "--columns", "passage_id,text")
    assert table.returncode == 0 and "2 of" in table.stdout


def test_config_edit_makes_only_filter_stale_naming_the_key(env: dict[str, str], tmp_path: Path) -> None:
    articles = REPO / "data" / "demo" / "articles"
    config: dict[str, Any] = {"stages": {"ingest": {"sources": [str(articles)]}, "filter": {"min_words": 10}}}
    path = tmp_path / "flow.yaml"
    path.write_text(yaml.safe_dump(config))
    assert irforge(env, "run", "cure", "--config", str(path)).returncode == 0
    config["stages"]["filter"]["min_words"] = 20
    path.write_text(yaml.safe_dump(config))
    result = irforge(env, "status", "cure", "--config", str(path), "--json")
    assert result.returncode == 0, result.stderr
    stages = {s["stage"]: s for s in json.loads(result.stdout)["stages"]}
    assert [stages[s]["state"] for s in STAGES] == ["fresh", "fresh", "fresh", "stale"]
    assert stages["filter"]["changed"] == ["config min_words: 10 -> 20"]
    human = irforge(env, "status", "cure", "--config", str(path))
    assert "stale" in human.stdout and "min_words: 10 -> 20" in human.stdout


def test_errors_are_one_line_with_nonzero_exit(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages:\n  ingest: {sources: [x]}\n  filter: {min_wrods: 3}\n")
    result = irforge(env, "run", "cure", "--config", str(bad))
    assert result.returncode == 2  # a user error (1: anything else; see flows/cli.py)
    (line,) = result.stderr.strip().splitlines()
    assert "stages.filter.min_wrods: Extra inputs are not permitted" in line
    unknown = irforge(env, "show", "cure", "nope")
    assert unknown.returncode == 2 and "no stage 'nope'" in unknown.stderr


def test_version(env: dict[str, str]) -> None:
    result = irforge(env, "--version")
    assert result.returncode == 0 and result.stdout.startswith("irforge ")


def _flow_config(tmp_path: Path, **stages: Any) -> Path:
    path = tmp_path / "flow.yaml"
    path.write_text(yaml.safe_dump({"stages": stages}))
    return path


def test_user_error_inside_a_stage_is_one_line_without_prefect_tracebacks(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    articles = str(REPO / "data" / "demo" / "articles")
    config = _flow_config(tmp_path, ingest={"sources": [articles]}, annotations={"sources": ["empty.jsonl"]})
    run_env = {**env, "IRFORGE_ARTIFACTS": str(tmp_path / "artifacts")}
    result = irforge(run_env, "run", "cure", "--config", str(config), "--until", "annotations")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: empty.jsonl: empty file (0 bytes): no annotation records"]
    # --debug: the same exit status, with the traceback.
    nothing = _flow_config(tmp_path, ingest={"sources": [str(tmp_path / "no_such_folder")]})
    debug = irforge(run_env, "--debug", "run", "cure", "--config", str(nothing))
    assert debug.returncode == 2
    assert (
        "Traceback" in debug.stderr and "irforge.errors.ConfigError: stages.ingest.sources[0]" in debug.stderr
    )


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields and fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    todo = [pid]
    while todo:
        pid = todo.pop()
        kids = {child for child, parent in parents.items() if parent == pid}
        found |= kids
        todo.extend(kids)
    return found


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_sigterm_to_the_installed_command_stops_the_run_and_its_servers(
    env: dict[str, str], tmp_path: Path
) -> None:
    pytest.importorskip("llama_cpp", reason="the demo's translate stage needs the embedded LLM server")
    artifacts = tmp_path / "artifacts"
    log = (tmp_path / "irforge.log").open("wb")  # not a pipe: a child server would hold it open
    exe = Path(sys.executable).with_name("irforge")
    run = subprocess.Popen(
        [str(exe), "run", "cure", "--until", "translate"],
        env={**env, "IRFORGE_ARTIFACTS": str(artifacts)},
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while not any("llama_cpp.server" in _cmdline(p) for p in seen):  # translate is running
            assert run.poll() is None and time.monotonic() < deadline, (tmp_path / "irforge.log").read_text()
            seen |= _children(run.pid)
            time.sleep(0.2)
        time.sleep(1)
        seen |= _children(run.pid)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 128 + signal.SIGTERM, (tmp_path / "irforge.log").read_text()[-3000:]
        deadline = time.monotonic() + 15  # a zombie or a gone process has no command line
        while any(_cmdline(p) for p in seen) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not {p: _cmdline(p) for p in seen if _cmdline(p)}  # no server outlives the run
    finally:
        if run.poll() is None:  # a failed assertion: still end it through its cleanup
            seen |= _children(run.pid)
            run.terminate()
            try:
                run.wait(timeout=30)
            except subprocess.TimeoutExpired:
                run.kill()
        for pid in seen:
            if _cmdline(pid):
                os.kill(pid, signal.SIGKILL)
    (record,) = (artifacts / "cure" / "runs").glob("*.json")
    assert json.loads(record.read_text())["status"] == "failed"  # the run's except/finally ran
    translate = artifacts / "cure" / "translate"
    assert not [p for p in translate.iterdir() if not p.name.startswith(".")]  # nothing published
    for stage in (artifacts / "cure").iterdir():
        for artifact in stage.iterdir() if stage.is_dir() else ():
            if not artifact.name.startswith(".") and artifact.is_dir():
                assert (artifact / "manifest.json").is_file()  # only whole artifacts are visible


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_a_sigkilled_run_takes_prefects_temporary_server_with_it(env: dict[str, str], tmp_path: Path) -> None:
    # SIGKILL runs no handler at all: only the watchdog beside the server (flows/watchdog.py) can stop it.
    exe = Path(sys.executable).with_name("irforge")
    run = subprocess.Popen(
        [str(exe), "run", "cure", "--until", "filter"],
        env={**env, "IRFORGE_ARTIFACTS": str(tmp_path / "artifacts")},
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    servers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while not servers:
            assert run.poll() is None and time.monotonic() < deadline, (
                "the run ended before its server started"
            )
            servers = {p for p in _children(run.pid) if "prefect.server.api.server" in _cmdline(p)}
            time.sleep(0.1)
        run.kill()
        run.wait(timeout=30)
        deadline = time.monotonic() + 15
        while any(_cmdline(p) for p in servers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not {p: _cmdline(p) for p in servers if _cmdline(p)}  # the temporary server is gone
    finally:
        if run.poll() is None:
            run.kill()
        for pid in servers:
            if _cmdline(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_runs_the_cleanup_handlers(tmp_path: Path) -> None:
    # What `irforge` does on SIGTERM: atexit handlers (close_local_servers) run and the exit
    # status says which signal ended it.
    code = (
        "import atexit, os, signal, time\n"
        "from flows.cli import exit_on_sigterm\n"
        "exit_on_sigterm()\n"
        "atexit.register(lambda: print('cleaned up', flush=True))\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "finally:\n"
        "    print('finally ran', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 128 + signal.SIGTERM
    assert done.stdout.splitlines() == ["finally ran", "cleaned up"]


def _sigterm_after_running(code: str) -> tuple[int, float, list[str]]:
    """Run ``code`` until it prints ``running``, SIGTERM it: (exit status, seconds from the
    signal to the exit, the lines it printed after)."""
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert run.stdout is not None and run.stdout.readline().strip() == "running"
    sent = time.monotonic()
    run.send_signal(signal.SIGTERM)
    status = run.wait(timeout=60)
    return status, time.monotonic() - sent, run.stdout.read().splitlines()


def test_sigterm_ends_a_run_whose_stage_thread_does_not_stop_within_the_grace(tmp_path: Path) -> None:
    """Issue 30 §1: a run whose stage thread never looks up (Prefect's task runner waits for
    it after the signal) and whose cleanup hangs still exits TERM_GRACE_S after SIGTERM, the
    quick atexit handlers run."""
    from flows.sigterm import TERM_GRACE_S

    code = (
        "import atexit, os, signal, threading, time\n"
        "from flows.cli import exit_on_sigterm\n"
        "exit_on_sigterm()\n"
        "atexit.register(time.sleep, 60)\n"  # runs last: a server that will not stop
        "atexit.register(lambda: print('cleaned up', flush=True))\n"
        "stage = threading.Thread(target=time.sleep, args=(60,))\n"
        "stage.start()\n"
        "print('running', flush=True)\n"
        "try:\n"
        "    stage.join()\n"
        "except BaseException:\n"
        "    stage.join()\n"  # what Prefect's task runner does with a stage still running
    )
    status, took, printed = _sigterm_after_running(code)
    assert status == 128 + signal.SIGTERM and "cleaned up" in printed
    assert took < TERM_GRACE_S + 1.0, f"exit {took:.1f} s after SIGTERM"


def test_sigterm_keeps_its_deadline_when_the_main_thread_unwinds_first(tmp_path: Path) -> None:
    """The command's own exit after unwinding (``flows.cli.main``) gets what is left of the
    5 s, not 5 s more: a slow ``finally`` and a hanging atexit handler end within the grace."""
    from flows.sigterm import TERM_GRACE_S

    code = (
        "import atexit, time\n"
        "from flows.sigterm import Terminated, exit_on_sigterm, leave\n"
        "exit_on_sigterm()\n"
        "atexit.register(time.sleep, 60)\n"
        "try:\n"
        "    try:\n"
        "        print('running', flush=True)\n"
        "        time.sleep(60)\n"
        "    finally:\n"
        "        time.sleep(2)\n"  # the run's own cleanup
        "except Terminated as stop:\n"
        "    leave(stop.code)\n"
    )
    status, took, _printed = _sigterm_after_running(code)
    assert status == 128 + signal.SIGTERM
    assert took < TERM_GRACE_S + 1.0, f"exit {took:.1f} s after SIGTERM"


def test_an_edit_that_changes_no_output_recomputes_only_its_stage(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 29 §1 (early cut-off) through the command and Prefect: ``html_default_language``
    only matters to HTML pages, and these are JATS articles, so parse recomputes to the same
    bytes and segment and filter stay as they were."""
    articles = REPO / "data" / "demo" / "articles"
    config: dict[str, Any] = {"stages": {"ingest": {"sources": [str(articles)]}, "parse": {}}}
    path = tmp_path / "flow.yaml"
    path.write_text(yaml.safe_dump(config))
    assert irforge(env, "run", "cure", "--config", str(path)).returncode == 0
    before = last_run(env)["stages"]
    config["stages"]["parse"]["html_default_language"] = "fr"
    path.write_text(yaml.safe_dump(config))
    status = irforge(env, "status", "cure", "--config", str(path), "--json")
    stages = {s["stage"]: s for s in json.loads(status.stdout)["stages"]}
    assert [stages[s]["state"] for s in STAGES] == ["fresh", "stale", "stale", "stale"]  # before the rerun
    rerun = irforge(env, "run", "cure", "--config", str(path))
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    after = last_run(env)["stages"]
    assert [after[s]["state"] for s in STAGES] == ["reused", "computed", "reused", "reused"]
    assert [after[s]["fingerprint"] for s in ("segment", "filter")] == [
        before[s]["fingerprint"] for s in ("segment", "filter")
    ]
    status = irforge(env, "status", "cure", "--config", str(path), "--json")
    stages = {s["stage"]: s for s in json.loads(status.stdout)["stages"]}
    assert [stages[s]["state"] for s in STAGES] == ["fresh"] * 4
    assert stages["segment"]["changed"][0].startswith("upstream parse recomputed, output unchanged")
