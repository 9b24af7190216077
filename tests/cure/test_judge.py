"""The end of CURE on the demo corpus: pool → judge → qrels → release → evaluate.

The cross-encoder is the real small builtin model; the LLM (judge and translator) is the
OpenAI-protocol fake of tests/fakes/llm_server.py, which injects 429, 500, timeouts, invalid
JSON, out-of-range scores and truncated replies on chosen passages. ``irforge release
--push`` runs as the installed command against the fake Hub of tests/fakes/fake_hub.py.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import USER_ERROR, app
from flows.registry import get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.engine import StageOutcome
from irforge.pipeline import Selection, execute_step, select_steps
from tasks.common.llm.port import ReplyInvalid
from tasks.cure.judgement import validate_judgement
from tasks.cure.stages.pool import PoolCutoff, pool_view, stored_floor
from tests.conftest import REPO, fake_key
from tests.fakes.fake_hub import HUB_TOKEN, FakeHub
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, last_user_text

DEMO = REPO / "flows" / "configs" / "cure.yaml"
SECRET = "sk-irforge-test-7f3a9c"  # the LLM key: it must reach the server and nothing else


Given = dict[tuple[str, str], tuple[int, str]]
"""(question, passage) as the judge prompt showed them -> (grade, explanation) the server gave."""


def _question_and_passage(prompt: str) -> tuple[str, str]:
    """The pair a judge prompt asks about (prompts/cure/judge.md ends with Question / Article title / Passage)."""
    head, passage = prompt.rsplit("\n\nPassage: ", 1)
    question = head.rsplit("Question: ", 1)[1].split("\n\nArticle title: ", 1)[0]
    return question.strip(), passage.strip()


def _answer(given: Given, body: dict[str, Any]) -> dict[str, Any]:
    text = last_user_text(body)
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
    if "translation" in schema.get("properties", {}):
        return {"translation": "[translated] " + text.rsplit("\n", 1)[-1][:120]}
    # A grade that depends on the pair, and an explanation naming the pair: a judgement stored
    # under another pair (a swap) cannot match what the server gave for that pair.
    pair = _question_and_passage(text)
    digest = hashlib.sha256("\x00".join(pair).encode()).hexdigest()
    grade = int(digest, 16) % 3
    explanation = f"pair {digest[:16]}: grade {grade} for this passage"
    assert given.setdefault(pair, (grade, explanation)) == (grade, explanation)
    return {"explanation": explanation, "score": grade}


def _config(server: FakeChat, root: Path) -> tuple[Path, ArtifactStore]:
    """The demo config pointed at the fake LLM, written where its relative paths still hold
    (``<root>/flows/configs/``, with ``<root>/data`` linking to the repo's data) so the CLI
    can be run on it too."""
    data = yaml.safe_load(DEMO.read_text())
    llm = {
        "engine": "openai",
        "base_url": server.base_url,
        "model": DEFAULT_MODEL,
        "api_key_env": "IRFORGE_TEST_LLM_KEY",
        "max_attempts": 3,
        "max_invalid_retries": 1,
        "timeout_s": 1.0,
        "max_concurrency": 4,
    }
    data["stages"]["translate"]["llm"] = {**llm, "sampling": {"max_tokens": 64}}
    data["stages"]["judge"]["llm"] = copy.deepcopy(llm)
    data["stages"]["judge"]["pool"] = {"threshold": 0.05, "max_per_query": 4}
    data["stages"]["evaluate"]["human_labels"] = None
    path = root / "flows" / "configs" / "cure-fake-llm.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data))
    (root / "data").symlink_to(REPO / "data")
    return path, ArtifactStore(root / "artifacts")


def _run(path: Path, store: ArtifactStore, selection: Selection) -> dict[str, StageOutcome]:
    pipeline = get_pipeline("cure")
    config, base_dir = pipeline.load(path)
    steps = select_steps(pipeline, pipeline.plan(config, base_dir), selection, store)
    return {s.name: execute_step(s, store, "cure", config.execution) for s in steps}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    os.environ.pop("DEEPL_AUTH_KEY", None)
    os.environ["IRFORGE_TEST_LLM_KEY"] = SECRET
    given: Given = {}
    with FakeChat(answer=functools.partial(_answer, given), slow_s=2.5) as server:
        path, store = _config(server, tmp_path_factory.mktemp("fake-llm"))
        # Every fault the judge must survive, on judge requests only (a phrase of its template).
        # The first two kinds are retried by the client; out-of-range scores on 10 requests
        # use up some pairs' re-asks, which must end quarantined with the raw reply.
        judge = "Rate how well the passage"
        for fault, times in ((429, 2), (500, 1), ("slow", 1), ("bad_json", 1), ("truncated", 1)):
            server.inject(fault, times, when=judge)  # type: ignore[arg-type]
        server.inject("out_of_range", 10, when=judge)
        outcomes = _run(path, store, Selection(until="evaluate"))
        config, _ = get_pipeline("cure").load(path)
        yield {
            "outcomes": outcomes,
            "server": server,
            "config": config,
            "store": store,
            "path": path,
            "given": given,
        }


def test_pool_scores_every_query_against_its_whole_domain(run: Any) -> None:
    outcomes = run["outcomes"]
    corpus = outcomes["corpus"].artifact.read()
    sizes: dict[str, int] = {}
    for domain in corpus.column("domain").to_pylist():
        sizes[domain] = sizes.get(domain, 0) + 1
    pool = outcomes["pool"].artifact
    stats = pool.read(table="query_stats").to_pylist()
    assert stats, "no query was scored"
    for row in stats:
        assert row["pairs_scored"] == sizes[row["domain"]]
    histogram = pool.read(table="score_histogram").to_pylist()
    assert sum(r["pairs"] for r in histogram) == sum(r["pairs_scored"] for r in stats)
    assert outcomes["pool"].manifest["cost"]["pairs_scored"] == sum(r["pairs_scored"] for r in stats)
    rows = pool.read().to_pylist()
    for r in rows:
        assert r["probability"] == pytest.approx(1 / (1 + math.exp(-r["logit"])))
    by_query: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_query.setdefault(r["query_id"], []).append(r)
    for pairs in by_query.values():
        pairs.sort(key=lambda r: r["rank"])
        probabilities = [r["probability"] for r in pairs]
        assert probabilities == sorted(probabilities, reverse=True)


def test_pool_view_applies_the_cutoff_at_read_time(run: Any) -> None:
    pool = run["outcomes"]["pool"].artifact
    every = pool_view(pool, PoolCutoff(threshold=0.05))
    high = pool_view(pool, PoolCutoff(threshold=0.6))
    top2 = pool_view(pool, PoolCutoff(threshold=0.05, max_per_query=2))
    assert all(p >= 0.6 for p in high.column("probability").to_pylist())
    assert high.num_rows <= every.num_rows
    counts: dict[str, int] = {}
    for q in top2.column("query_id").to_pylist():
        counts[q] = counts.get(q, 0) + 1
    assert max(counts.values()) <= 2
    with pytest.raises(Exception, match="store_floor"):
        pool_view(pool, PoolCutoff(threshold=0.01))
    floor = stored_floor(pool)
    assert floor is not None
    logit_floor = stored_floor(pool, "logit")
    assert logit_floor == pytest.approx(math.log(floor / (1 - floor)))
    # a logit cut-off is checked against the floor too, on its own scale
    with pytest.raises(Exception, match="store_floor"):
        pool_view(pool, PoolCutoff(threshold=logit_floor - 0.5, scale="logit"))
    at_floor = pool_view(pool, PoolCutoff(threshold=floor))
    assert pool_view(pool, PoolCutoff(threshold=logit_floor, scale="logit")).num_rows == at_floor.num_rows


def test_every_pooled_pair_is_judged_or_quarantined_with_a_reason(run: Any) -> None:
    outcomes = run["outcomes"]
    judge = outcomes["judge"]
    pairs = pool_view(outcomes["pool"].artifact, run["config"].stages.judge.pool)
    judged = judge.artifact.read()
    excluded = judge.artifact.excluded()
    wanted = set(
        zip(pairs.column("query_id").to_pylist(), pairs.column("passage_id").to_pylist(), strict=True)
    )
    got_kept = set(
        zip(judged.column("query_id").to_pylist(), judged.column("passage_id").to_pylist(), strict=True)
    )
    got_out = set(
        zip(excluded.column("query_id").to_pylist(), excluded.column("passage_id").to_pylist(), strict=True)
    )
    assert got_kept | got_out == wanted and not got_kept & got_out
    # Each stored grade (and explanation) is the one the server gave for that very pair.
    # The judge shows the English text (else the original; tasks/cure/queries.py) and the passage.
    originals = outcomes["annotations"].artifact.read(table="queries", columns=["query_id", "text"])
    english = {r["query_id"]: r["text"] for r in originals.to_pylist()}
    for r in outcomes["translate"].artifact.read(columns=["query_id", "language", "text"]).to_pylist():
        if r["language"] == "en":
            english[r["query_id"]] = r["text"]
    passages = {
        r["passage_id"]: r["text"]
        for r in outcomes["corpus"].artifact.read(columns=["passage_id", "text"]).to_pylist()
    }
    given: Given = run["given"]
    for row in judged.to_pylist():
        pair = (english[row["query_id"]].strip(), passages[row["passage_id"]].strip())
        assert pair in given, (row["query_id"], row["passage_id"])
        assert (row["score"], row["explanation"]) == given[pair], (row["query_id"], row["passage_id"])
    assert set(judged.column("score").to_pylist()) == {0, 1, 2}  # grades differ between pairs
    assert all(judged.column("explanation").to_pylist())
    assert set(judged.column("model").to_pylist()) == {DEFAULT_MODEL}
    # out-of-range scores on every try: quarantined with the raw reply, never a 0
    reasons = set(excluded.column("reason").to_pylist())
    assert reasons <= {"invalid_reply", "truncated", "request_failed"}
    assert excluded.num_rows > 0
    for row in excluded.to_pylist():
        assert row["raw_reply"] and ('"score": 7' in row["raw_reply"] or row["reason"] == "truncated")
    # transient faults were retried: 429 / 500 / timeout / bad JSON ended as judgements
    cost = judge.manifest["cost"]
    assert cost["requests_sent"] > 0 and cost["prompt_tokens"] > 0 and cost["completion_tokens"] > 0


def test_a_rerun_sends_only_what_was_never_answered(run: Any) -> None:
    server: FakeChat = run["server"]
    outcomes = run["outcomes"]
    quarantined = outcomes["judge"].artifact.excluded().num_rows
    judged = outcomes["judge"].artifact.read()  # before the forced rerun replaces it
    before = len(server.chats())
    rerun = _run(run["path"], run["store"], Selection(only="judge", force=True))
    sent = server.chats()[before:]
    # Answered pairs come from the reply cache; only the quarantined pairs are asked again,
    # once each (the fault that broke them is used up, so they now validate).
    assert len(sent) == quarantined > 0
    assert rerun["judge"].manifest["cost"]["cache_hits"] == judged.num_rows
    again = rerun["judge"].artifact.read()
    assert again.num_rows == judged.num_rows + quarantined
    assert rerun["judge"].artifact.excluded().num_rows == 0
    cached = again.filter(pc.equal(again.column("cached"), True))
    assert sorted(cached.column("explanation").to_pylist()) == sorted(
        judged.column("explanation").to_pylist()
    )


def test_qrels_keep_human_labels_over_llm_ones(run: Any) -> None:
    outcomes = run["outcomes"]
    qrels = outcomes["qrels"].artifact.read().to_pylist()
    assert {r["source"] for r in qrels} >= {"human", "llm"}
    human = [r for r in qrels if r["source"] == "human"]
    assert all(r["score"] == 2 for r in human)
    pairs = [(r["query_id"], r["passage_id"]) for r in qrels]
    assert len(pairs) == len(set(pairs))
    for r in qrels:
        if r["source"] == "llm":
            assert r["model"] == DEFAULT_MODEL and r["explanation"] and len(r["prompt_sha256"]) == 64
    superseded = [r for r in outcomes["qrels"].artifact.excluded().to_pylist() if r["reason"] == "superseded"]
    for r in superseded:
        assert r["source"] in {"containment", "llm"} and r["detail"].startswith(("human", "containment"))


def test_release_loads_back_with_datasets_and_matches_the_qrels(run: Any, tmp_path: Path) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import datasets

    outcomes = run["outcomes"]
    folder = outcomes["release"].artifact.files / "release"
    files = outcomes["release"].artifact.read().to_pylist()
    splits = sorted({f["split"] for f in files})
    assert len(splits) >= 2 and "all" not in splits  # datasets builds "all" from the domains
    qrels = outcomes["qrels"].artifact.read().to_pylist()
    for f in files:
        rows = list(
            datasets.load_dataset(str(folder), f["config"], split=f["split"], cache_dir=str(tmp_path))
        )
        assert len(rows) == f["rows"]
        if f["config"] == "qrels":
            expected = {
                (r["query_id"], r["passage_id"], r["score"]) for r in qrels if r["domain"] == f["split"]
            }
            assert {(r["query-id"], r["corpus-id"], r["score"]) for r in rows} == expected
        if f["config"] == "corpus":
            assert set(rows[0]) == {"_id", "title", "text"}
    every = list(datasets.load_dataset(str(folder), "qrels", split="all", cache_dir=str(tmp_path)))
    assert {(r["query-id"], r["corpus-id"], r["score"]) for r in every} == {
        (r["query_id"], r["passage_id"], r["score"]) for r in qrels
    }


def test_the_api_key_reaches_the_server_and_no_file(run: Any) -> None:
    server: FakeChat = run["server"]
    assert any(r.headers.get("authorization") == f"Bearer {SECRET}" for r in server.chats())
    for path in run["store"].root.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_evaluate_reports_both_baselines_per_condition_and_split(run: Any) -> None:
    outcomes = run["outcomes"]
    rows = outcomes["evaluate"].artifact.read().to_pylist()
    assert {r["model"] for r in rows} == {"bm25", "dense"}
    assert {r["condition"] for r in rows} == {"en-en", "fr-en", "es-en"}
    for r in rows:
        assert 0.0 <= r["ndcg_at_10"] <= 1.0 and 0.0 <= r["recall_at_100"] <= 1.0 and r["queries"] > 0
    # The dense baseline ranks every passage, and every split has fewer than 100: recall is 1.
    # (BM25 returns only passages sharing a term with the query.)
    assert all(r["recall_at_100"] == pytest.approx(1.0) for r in rows if r["model"] == "dense")
    assert {r["split"] for r in rows} >= {"all"}


def test_cli_release_calibrate_and_report(run: Any, tmp_path: Path) -> None:
    outcomes = run["outcomes"]
    common = ["-c", str(run["path"]), "-a", str(run["store"].root)]
    out = tmp_path / "release"
    result = CliRunner().invoke(app, ["release", "cure", "--out", str(out), *common])
    assert result.exit_code == 0, result.output
    copied = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.jsonl"))
    assert copied == sorted(f["path"] for f in outcomes["release"].artifact.read().to_pylist())
    card = (out / "README.md").read_text()
    assert card.startswith("---")
    # Provenance from what ran (issue 29 §4): the engine ``auto`` resolved to, the model that answered.
    assert "machine translations made with llm." in card and "made with auto" not in card
    assert f"assigned by an LLM judge: `{DEFAULT_MODEL}`" in card
    again = CliRunner().invoke(app, ["release", "cure", "--out", str(out), *common])
    assert again.exit_code == USER_ERROR and "not empty" in again.output

    # Label the two best pairs of each query relevant and the rest not.
    pool = outcomes["pool"].artifact.read().to_pylist()
    labels = tmp_path / "labels.csv"
    grade = {(r["query_id"], r["passage_id"]): 2 if r["rank"] <= 2 else 0 for r in pool}
    lines = ["query_id,passage_id,label"] + [f"{q},{p},{g}" for (q, p), g in grade.items()]
    labels.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(
        app, ["calibrate", "cure", "--labels", str(labels), "--out", str(tmp_path), *common]
    )
    assert result.exit_code == 0, result.output
    best = float(result.output.split("best threshold ")[1].split()[0])

    def criterion(t: float) -> float:  # CURE's: share of relevant pairs kept minus irrelevant ones
        kept = {k: r["probability"] >= t for r in pool for k in [(r["query_id"], r["passage_id"])]}
        relevant = [kept[k] for k, g in grade.items() if g]
        irrelevant = [kept[k] for k, g in grade.items() if not g]
        return sum(relevant) / len(relevant) - sum(irrelevant) / len(irrelevant)

    probabilities = sorted({r["probability"] for r in pool})
    assert criterion(best - 1e-4) >= max(criterion(p) for p in probabilities) - 0.05
    assert (tmp_path / "calibration.png").stat().st_size > 10_000
    sweep = (tmp_path / "calibration.csv").read_text().splitlines()
    assert sweep[0].startswith('"threshold"') and len(sweep) == 102


def _irforge(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The installed ``irforge`` console script (beside this interpreter), as a user runs it."""
    command = Path(sys.executable).with_name("irforge")
    return subprocess.run(
        [str(command), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow
def test_cli_release_push_sends_the_release_to_the_hub_in_one_commit(run: Any) -> None:
    release = run["outcomes"]["release"].artifact
    folder = release.files / "release"
    common = ["-c", str(run["path"]), "-a", str(run["store"].root)]
    with FakeHub(HUB_TOKEN) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env |= {"HF_ENDPOINT": hub.url, "HF_TOKEN": HUB_TOKEN, "HF_HOME": str(run["store"].root / "hf")}
        pushed = _irforge("release", "cure", "--push", "acme/cure-demo", "--private", *common, env=env)
        assert pushed.returncode == 0, pushed.stderr
        assert f"pushed to acme/cure-demo: {hub.url}/datasets/acme/cure-demo/commit/{1:040x}" in pushed.stdout
        assert hub.private == {"acme/cure-demo": True}
        assert len(hub.commits) == 1 and hub.commits[0]["branch"] == "main"
        local = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        assert hub.commits[0]["added"] == local  # the whole release, byte for byte, in one commit
        assert {f["path"] for f in release.read().to_pylist()} | {"README.md"} == set(local)

        # A token the Hub refuses (and echoes back in its error): one line, a user error, token masked.
        wrong = fake_key("hf_", "refused cli token")
        refused = _irforge(
            "release", "cure", "--push", "acme/cure-demo", *common, env={**env, "HF_TOKEN": wrong}
        )
        assert refused.returncode == USER_ERROR and "HTTP 401" in refused.stdout + refused.stderr
        assert "Traceback" not in refused.stderr and len(hub.commits) == 1
    for result in (pushed, refused):
        for token in (HUB_TOKEN, wrong):
            assert token not in result.stdout + result.stderr


def test_validate_judgement_accepts_only_the_schema() -> None:
    assert validate_judgement('{"explanation": "ok", "score": 2}') == (2, "ok")
    assert validate_judgement('```json\n{"explanation": "ok", "score": "1"}\n```') == (1, "ok")
    assert validate_judgement('{"explanation": "two\nlines", "score": 0}') == (0, "two\nlines")
    for bad in (
        '{"explanation": "ok", "score": 3}',
        '{"score": 1}',
        "[1]",
        "score: 2",
        '{"explanation": "x", "score": true}',
    ):
        with pytest.raises(ReplyInvalid):
            validate_judgement(bad)
