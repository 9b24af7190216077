"""The shipped config whose questions an LLM writes (flows/configs/spanish_sr-llm-questions.yaml,
issue 29 §2), run as a user runs it: ``irforge run`` with the embedded Gemma 3 270M behind
llama.cpp's server, real requests. Its inputs are narrowed to 6 real CT-EBM-SP records (the
whole demo asks 300 questions, minutes on 2 cores); everything else is the shipped file.

Then the prompt's comment is edited, as a user documenting it would: ``questions`` reruns, its
requests are those of the first run (valid replies come from the cache) and so are its rows,
so ``bm25`` after it is not recomputed (early cut-off). (An edit that changes the requests
changes their cache keys: tests/common/test_llm_chat.py, test_request_key_*.)"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.engine.test_cli import irforge

SHIPPED = REPO / "flows" / "configs" / "spanish_sr-llm-questions.yaml"
RECORDS = sorted((REPO / "data" / "spanish_sr" / "ct-ebm-sp").glob("*.txt"))[:6]
pytestmark = pytest.mark.slow


def _config(tmp: Path) -> Path:
    """The shipped config, its ingest narrowed to a folder of 6 records, its prompt a copy beside it."""
    config = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    records = tmp / "records"
    records.mkdir()
    for path in RECORDS:
        shutil.copy(path, records / path.name)
    (source,) = config["stages"]["ingest"]["sources"]
    config["stages"]["ingest"]["sources"] = [{**source, "path": "records"}]
    config["stages"]["reviews"]["files"] = [
        str((SHIPPED.parent / f).resolve()) for f in config["stages"]["reviews"]["files"]
    ]
    shutil.copy(REPO / "prompts" / "spanish_sr" / "question.md", tmp / "question.md")
    config["stages"]["questions"]["prompt"] = "question.md"
    path = tmp / "spanish_sr-llm-questions.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def _run(env: dict[str, str], config: Path) -> dict[str, Any]:
    done = irforge(env, "run", "spanish_sr", "-c", str(config), "--until", "bm25", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = sorted((Path(env["IRFORGE_ARTIFACTS"]) / "spanish_sr" / "runs").glob("*.json"))
    record: dict[str, Any] = json.loads(runs[-1].read_text(encoding="utf-8"))
    return record


def _states(record: dict[str, Any]) -> dict[str, str]:
    return {name: stage["state"] for name, stage in record["stages"].items()}


def _questions(env: dict[str, str], record: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import pyarrow.parquet as pq

    fingerprint = record["stages"]["questions"]["fingerprint"]
    folder = Path(env["IRFORGE_ARTIFACTS"]) / "spanish_sr" / "questions" / fingerprint
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    rows = [r for p in sorted(folder.glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]
    return rows, manifest


def test_the_llm_config_writes_questions_and_a_comment_edit_reruns_only_questions(tmp_path: Path) -> None:
    config = _config(tmp_path)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEEPL_")},
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "IRFORGE_ARTIFACTS": str(tmp_path / "artifacts"),
    }
    first = _run(env, config)
    assert _states(first) == dict.fromkeys(("ingest", "clean", "questions", "bm25"), "computed")
    rows, manifest = _questions(env, first)
    excluded = manifest["counts"]["rows_excluded"]
    assert len(rows) + excluded == 6  # rows in = questions + excluded (the small model may fail a reply)
    assert len(rows) >= 4
    for row in rows:
        assert (row["mode"], row["model"]) == ("llm", "gemma-3-270m-q4_k_m")
        assert row["question"].strip() and row["question"] != row["title"]
    assert manifest["cost"]["requests_sent"] == 6

    prompt = tmp_path / "question.md"
    text = prompt.read_text(encoding="utf-8")
    prompt.write_text(text.replace("<!--", "<!-- edited by the test.\n", 1), encoding="utf-8")
    comment = _run(env, config)  # questions reruns from the cache to the same rows: bm25 is cut off
    assert _states(comment) == {
        "ingest": "reused",
        "clean": "reused",
        "questions": "computed",
        "bm25": "reused",
    }
    # the same requests: valid replies come from the cache; failures (never cached) are asked again
    assert _questions(env, comment)[1]["cost"]["requests_sent"] == excluded
