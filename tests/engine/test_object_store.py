"""An artifact root on an object store (issue 19): publish by version prefix + manifest last,
read through a local mirror, against a real S3 protocol server (moto's, on a loopback port)."""

from __future__ import annotations

import json
import logging
import pickle
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from moto.server import ThreadedMotoServer

from irforge.artifacts import MANIFEST, Artifact, ArtifactStore
from irforge.engine import StageOutcome
from irforge.errors import ArtifactError
from irforge.object_store import ObjectArtifactStore
from irforge.pipeline import Selection, execute_step, select_steps
from irforge.runs import RunRecorder, latest_fingerprints
from irforge.status import flow_status
from tests.conftest import fake_key
from tests.engine.toy_pipeline import TOY, NumbersConfig, SquareConfig, ToyConfig, ToyStages

BUCKET = "irforge-test"
FLOW, STAGE, FP = "toy", "numbers", "0123456789abcdef"
SECRET = fake_key("moto-secret-", "object store")
OPTIONS_SECRET = fake_key("options-secret-", "object store")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A moto S3 server on a free loopback port, found through the environment as a real one is."""
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    patch = pytest.MonkeyPatch()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        patch.delenv(name, raising=False)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": "/nonexistent/aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    for name, value in env.items():
        patch.setenv(name, value)
    patch.delenv("IRFORGE_STORAGE_OPTIONS", raising=False)
    s3fs.S3FileSystem.clear_instance_cache()
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
    yield endpoint
    s3fs.S3FileSystem.clear_instance_cache()
    patch.undo()
    moto.stop()


@pytest.fixture
def url(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix of the bucket; default mirrors under this test's own cache folder."""
    monkeypatch.setenv("IRFORGE_CACHE", str(tmp_path / "cache"))
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"


def _keys(server: str, prefix: str = "") -> list[str]:
    client = boto3.client("s3", endpoint_url=server)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _objects(server: str, prefix: str = "") -> dict[str, bytes]:
    client = boto3.client("s3", endpoint_url=server)
    return {k: client.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in _keys(server, prefix)}


def _tmp(store: ArtifactStore, number: int, fp: str = FP) -> Path:
    tmp = store.new_tmp_dir(FLOW, STAGE, fp)
    pq.write_table(pa.table({"version": [number] * 100}), tmp / "part-00000.parquet")
    pq.write_table(pa.table({"reason": ["x"]}), tmp / "excluded.parquet")
    (tmp / "files" / "index").mkdir(parents=True)
    (tmp / "files" / "index" / "terms.txt").write_text(f"terms {number}\n")
    (tmp / MANIFEST).write_text(json.dumps({"number": number}), encoding="utf-8")
    return tmp


def _tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _versions(server: str, url: str, fp: str = FP) -> set[str]:
    prefix = f"{url.split('/', 3)[3]}/{FLOW}/{STAGE}/{fp}/"
    return {
        k[len(prefix) :].split("/")[0] for k in _keys(server, prefix) if k[len(prefix) :].startswith("v-")
    }


def test_open_picks_the_store_for_the_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRFORGE_CACHE", str(tmp_path / "cache"))
    local = ArtifactStore.open(str(tmp_path / "a"))
    assert type(local) is ArtifactStore and local.root == tmp_path / "a"
    assert ArtifactStore.open(f"file://{tmp_path}/b").root == tmp_path / "b"
    memory = ArtifactStore.open("memory://bucket/x/", mirror=tmp_path / "m")
    assert isinstance(memory, ObjectArtifactStore) and memory.url == "memory://bucket/x"
    assert memory.root == tmp_path / "m"
    default = ArtifactStore.open("memory://bucket/x")
    assert default.root.parent == tmp_path / "cache" / "artifacts"
    with pytest.raises(ArtifactError, match=r"needs the package gcsfs: pip install irforge\[gcs\]"):
        ArtifactStore.open("gs://bucket/artifacts")
    with pytest.raises(ArtifactError, match="lost a '/': pass it as str"):
        ArtifactStore.open(Path("s3://bucket/x"))
    with pytest.raises(ArtifactError, match="carries no credentials") as err:
        ArtifactStore.open(f"s3://AKIDEXAMPLE:{SECRET}@bucket/x")
    assert SECRET not in str(err.value)
    monkeypatch.setenv("IRFORGE_STORAGE_OPTIONS", f'{{"secret": "{SECRET}"')  # not valid JSON
    with pytest.raises(ArtifactError, match="must be a JSON object") as err:
        ArtifactStore.open("memory://bucket/y")
    assert SECRET not in str(err.value)


def test_memory_store_round_trip_and_pickles_as_its_url(tmp_path: Path) -> None:
    url = f"memory://bucket/{uuid.uuid4().hex[:8]}"
    store = ObjectArtifactStore(url, tmp_path / "one")
    published = store.publish(_tmp(store, 1), FLOW, STAGE, FP)
    assert published.manifest["number"] == 1 and published.manifest["data"].startswith("v-")
    other = ObjectArtifactStore(url, tmp_path / "two")
    found = other.get(FLOW, STAGE, FP)
    assert _tree(found.path) == _tree(published.path)
    again = pickle.loads(pickle.dumps(other))
    assert isinstance(again, ObjectArtifactStore) and again.url == url and again.root == other.root
    assert other.manifest(FLOW, STAGE, FP) == published.manifest
    assert other.manifest(FLOW, "nothing", FP) is None and other.find(FLOW, "nothing", FP) is None


def test_publish_then_find_from_an_empty_mirror_gives_identical_bytes(
    server: str, url: str, tmp_path: Path
) -> None:
    writer = ArtifactStore.open(url, mirror=tmp_path / "host-a")
    published = writer.publish(_tmp(writer, 7), FLOW, STAGE, FP)
    reader = ArtifactStore.open(url, mirror=tmp_path / "host-b")
    assert not (tmp_path / "host-b").exists() or not any((tmp_path / "host-b").rglob("*.parquet"))
    found = reader.get(FLOW, STAGE, FP)
    assert found.path == tmp_path / "host-b" / FLOW / STAGE / FP
    assert _tree(found.path) == _tree(published.path)
    assert set(_tree(found.path)) == {
        "excluded.parquet",
        "files/index/terms.txt",
        MANIFEST,
        "part-00000.parquet",
    }
    assert found.read().column("version").to_pylist() == [7] * 100
    assert found.fingerprint == FP and found.origin == published.origin == (url, found.manifest["data"])


def test_a_crash_before_the_manifest_leaves_nothing_visible(
    server: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ObjectArtifactStore(url, tmp_path / "host-a")

    def killed(_marker: str, _raw: bytes) -> None:
        raise KeyboardInterrupt  # the process dies between the data upload and the marker

    with monkeypatch.context() as patch:
        patch.setattr(store, "_commit", killed)
        with pytest.raises(KeyboardInterrupt):
            store.publish(_tmp(store, 1), FLOW, STAGE, FP)
    (orphan,) = _versions(server, url)  # the data went up ...
    fresh = ObjectArtifactStore(url, tmp_path / "host-b")
    assert fresh.find(FLOW, STAGE, FP) is None and store.find(FLOW, STAGE, FP) is None  # ... unseen
    assert fresh.fingerprints(FLOW, STAGE) == []
    published = store.publish(_tmp(store, 2), FLOW, STAGE, FP)
    assert published.manifest["data"] != orphan
    found = ObjectArtifactStore(url, tmp_path / "host-c").get(FLOW, STAGE, FP)
    assert found.read().column("version")[0].as_py() == 2  # the leftover version is ignored
    assert store.gc(grace_s=3600) == []  # too young: it might be a live upload
    assert store.gc(grace_s=0) == [f"{BUCKET}/{url.split('/', 3)[3]}/{FLOW}/{STAGE}/{FP}/{orphan}"]
    assert _versions(server, url) == {published.manifest["data"]}


def test_a_forced_rerun_replaces_the_artifact_atomically(server: str, url: str, tmp_path: Path) -> None:
    writer = ObjectArtifactStore(url, tmp_path / "host-a", grace_s=3.0)
    first = writer.publish(_tmp(writer, 1), FLOW, STAGE, FP)
    old = first.manifest["data"]
    reader = ObjectArtifactStore(url, tmp_path / "host-b")
    held = reader.get(FLOW, STAGE, FP)
    second = writer.publish(_tmp(writer, 2), FLOW, STAGE, FP)  # a forced rerun on host a
    new = second.manifest["data"]
    assert writer.get(FLOW, STAGE, FP).read().column("version")[0].as_py() == 2
    # Host b's copy is its own: it keeps reading version 1 until it looks the artifact up again.
    assert held.read().column("version")[0].as_py() == 1
    # Within the grace period the old version can still be fetched by a host that read the old marker.
    late = ObjectArtifactStore(url, tmp_path / "host-c")
    assert _versions(server, url) == {old, new}
    fetched = late.download(FLOW, STAGE, FP, old)
    assert fetched is not None and fetched.read().column("version")[0].as_py() == 1
    assert reader.get(FLOW, STAGE, FP).read().column("version")[0].as_py() == 2
    deadline = time.monotonic() + 15
    while _versions(server, url) != {new} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _versions(server, url) == {new}  # deleted after the grace period
    assert late.download(FLOW, STAGE, FP, old) is None


def test_fingerprints_lists_only_committed_artifacts(
    server: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ObjectArtifactStore(url, tmp_path / "host-a")
    for fp in ("aaaa", "bbbb"):
        store.publish(_tmp(store, 1, fp), FLOW, STAGE, fp)
    monkeypatch.setattr(store, "_commit", lambda _m, _r: (_ for _ in ()).throw(RuntimeError("killed")))
    with pytest.raises(RuntimeError):
        store.publish(_tmp(store, 1, "cccc"), FLOW, STAGE, "cccc")
    other = ObjectArtifactStore(url, tmp_path / "host-b")
    assert other.fingerprints(FLOW, STAGE) == ["aaaa", "bbbb"]
    assert other.fingerprints(FLOW, "square") == []


def _run(store: ArtifactStore, base: Path, recorder: RunRecorder | None = None) -> dict[str, StageOutcome]:
    """The toy pipeline as a flow runs it (tests/engine/toy_pipeline.py), recording the run."""
    config = ToyConfig(stages=ToyStages(numbers=NumbersConfig(count=60)))
    config = config.model_copy(update={"execution": config.execution.model_copy(update={"chunk_rows": 10})})
    steps = select_steps(TOY, TOY.plan(config, base), Selection(), store)
    out = {}
    for step in steps:
        out[step.name] = execute_step(step, store, "toy", config.execution)
        if recorder is not None:
            recorder.stage_done(step.name, out[step.name])
    if recorder is not None:
        recorder.finish("completed")
    return out


def test_a_pipeline_on_s3_is_reused_from_another_host(server: str, url: str, tmp_path: Path) -> None:
    started = time.monotonic()
    first_store = ArtifactStore.open(url, mirror=tmp_path / "host-a")
    first = _run(first_store, tmp_path, RunRecorder(first_store, "toy", "run-1", tmp_path / "toy.yaml"))
    assert {k: o.state for k, o in first.items()} == {"numbers": "computed", "square": "computed"}
    second_store = ArtifactStore.open(url, mirror=tmp_path / "host-b")
    second = _run(second_store, tmp_path)
    assert {k: o.state for k, o in second.items()} == {"numbers": "reused", "square": "reused"}
    for name, outcome in second.items():
        assert _tree(outcome.artifact.path) == _tree(first[name].artifact.path)
        assert outcome.artifact.path.is_relative_to(tmp_path / "host-b")
    # The run records went up too: the other host's status sees what ran.
    assert latest_fingerprints(second_store, "toy") == {k: o.artifact.fingerprint for k, o in first.items()}
    assert second_store.read_record("toy/runs/run-1.json")["status"] == "completed"
    config = ToyConfig(stages=ToyStages(numbers=NumbersConfig(count=60)))
    assert {s.stage: s.state for s in flow_status(TOY, config, tmp_path, second_store)} == {
        "numbers": "fresh",
        "square": "fresh",
    }
    assert time.monotonic() - started < 20


def test_an_unpickled_artifact_is_downloaded_on_a_host_without_it(
    server: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ArtifactStore.open(url)  # the default mirror, under $IRFORGE_CACHE
    out = _run(store, tmp_path)
    square = out["square"].artifact
    expected = _tree(square.path)
    payload = pickle.dumps(square)
    shutil.rmtree(store.root)  # another host: not this mirror ...
    monkeypatch.setenv("IRFORGE_CACHE", str(tmp_path / "worker-cache"))  # ... but its own
    again = pickle.loads(payload)
    assert isinstance(again, Artifact) and again.path.is_relative_to(tmp_path / "worker-cache")
    assert _tree(again.path) == expected and again.origin == square.origin
    # Its lineage (a release's provenance) is fetched the same way.
    from irforge.artifacts import lineage

    assert sorted(lineage({"square": again})) == ["numbers", "square"]
    assert pickle.loads(pickle.dumps(Artifact(tmp_path / "plain"))) == Artifact(tmp_path / "plain")


def test_secrets_never_reach_files_logs_or_pickles(
    server: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("IRFORGE_STORAGE_OPTIONS", json.dumps({"key": "testing", "secret": OPTIONS_SECRET}))
    caplog.set_level(logging.DEBUG, logger="irforge")
    store = ArtifactStore.open(url, mirror=tmp_path / "host-a")
    recorder = RunRecorder(store, "toy", "run-1", tmp_path / "toy.yaml")
    out = _run(store, tmp_path, recorder)
    _run(ArtifactStore.open(url, mirror=tmp_path / "host-b"), tmp_path)
    texts = [caplog.text, repr(store), str(store.url), *(repr(o.artifact) for o in out.values())]
    blobs = [pickle.dumps(store), *(pickle.dumps(o.artifact) for o in out.values())]
    blobs += [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()]
    blobs += list(_objects(server, url.split("/", 3)[3]).values())
    assert len(blobs) > 10 and "published" in caplog.text
    for secret in (SECRET, OPTIONS_SECRET):
        assert not any(secret in text for text in texts)
        assert not any(secret.encode() in blob for blob in blobs)


def test_status_on_s3_reads_manifests_only(
    server: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = ArtifactStore.open(url, mirror=tmp_path / "host-a")
    ran = _run(writer, tmp_path, RunRecorder(writer, "toy", "run-1", tmp_path / "toy.yaml"))
    reader = ArtifactStore.open(url, mirror=tmp_path / "host-b")
    fetched: list[str] = []
    monkeypatch.setattr(ObjectArtifactStore, "download", lambda _s, *a, **_k: fetched.append(a[2]))
    stale = ToyConfig(stages=ToyStages(numbers=NumbersConfig(count=60), square=SquareConfig(limit=100)))
    statuses = {s.stage: s for s in flow_status(TOY, stale, tmp_path, reader)}
    numbers, square = ran["numbers"].artifact, ran["square"].artifact
    assert statuses["numbers"].state == "fresh" and statuses["square"].state == "stale"
    assert statuses["square"].changed == ["config limit: 5000 -> 100"]
    assert statuses["numbers"].rows_kept == 51 and statuses["numbers"].rows_excluded == 9
    assert statuses["numbers"].excluded_by_reason == {"multiple_of_7": 9}
    assert statuses["square"].rows_kept == square.manifest["counts"]["rows_out"]
    assert statuses["numbers"].artifact == f"{url}/toy/numbers/{numbers.fingerprint}"
    assert statuses["square"].artifact_fingerprint == square.fingerprint != statuses["square"].fingerprint
    assert statuses["numbers"].created_at == numbers.manifest["created_at"]
    elsewhere = ArtifactStore.open(f"{url}-none", mirror=tmp_path / "host-c")
    assert {s.state for s in flow_status(TOY, stale, tmp_path, elsewhere)} == {"missing"}
    assert fetched == [] and not list((tmp_path / "host-b").rglob("*.parquet"))
    # The local store says where its artifact is as it did: the folder.
    local = ArtifactStore(tmp_path / "local")
    (done,) = [o.artifact for o in _run(local, tmp_path).values() if o.artifact.stage == "numbers"]
    (first, _) = flow_status(TOY, stale, tmp_path, local)
    assert first.artifact == str(done.path) and first.state == "fresh"


def _orphan(server: str, store: ObjectArtifactStore, fp: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Upload a version of ``fp`` and die before its marker (a killed publisher): its URL."""
    before = _versions(server, store.url, fp)
    with monkeypatch.context() as patch:
        patch.setattr(store, "_commit", lambda _m, _r: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            store.publish(_tmp(store, 0, fp), FLOW, STAGE, fp)
    (version,) = _versions(server, store.url, fp) - before
    return f"{store.url}/{FLOW}/{STAGE}/{fp}/{version}"


def test_gc_on_s3_deletes_old_orphans_only_and_the_cli_lists_them(
    server: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    store = ObjectArtifactStore(url, tmp_path / "host-a")
    kept = {
        fp: store.publish(_tmp(store, 1, fp), FLOW, STAGE, fp).manifest["data"] for fp in ("aaaa", "bbbb")
    }
    old = _orphan(server, store, "cccc", monkeypatch)
    time.sleep(3.0)  # S3 stamps objects to the second
    young = _orphan(server, store, "aaaa", monkeypatch)  # beside a committed version
    runner = CliRunner()
    dry = runner.invoke(app, ["gc", "--artifacts", url, "--grace-s", "2.5", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert old in dry.output and young not in dry.output and "would delete 1 leftover(s)" in dry.output
    assert _versions(server, url, "cccc") == {old.rsplit("/", 1)[1]}  # a dry run deletes nothing
    done = runner.invoke(app, ["gc", "--artifacts", url, "--grace-s", "2.5"])
    assert done.exit_code == 0 and old in done.output and "deleted 1 leftover(s)" in done.output
    assert _versions(server, url, "cccc") == set()
    assert _versions(server, url, "aaaa") == {kept["aaaa"], young.rsplit("/", 1)[1]}
    assert _versions(server, url, "bbbb") == {kept["bbbb"]}
    reader = ObjectArtifactStore(url, tmp_path / "host-b")
    assert [reader.get(FLOW, STAGE, fp).manifest["data"] for fp in ("aaaa", "bbbb")] == list(kept.values())
    assert store.gc(grace_s=3600) == []  # the young orphan waits out the default grace too
    missing = runner.invoke(app, ["gc", "--artifacts", "s3://no-such-bucket-irforge/x"])
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    assert missing.output.count("\n") == 1 and "cannot clean s3://no-such-bucket-irforge/x" in missing.output
