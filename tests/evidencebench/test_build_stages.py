"""decompose → align → label → select → export → evaluate of the evidencebench flow on the demo pair.

The LLM is tests/fakes/llm_server.py's FakeChat behind the ``openai`` engine; the stages run
through the real stage engine (``select_steps`` / ``execute_step``), from a config file in
the test's folder. The scripted answer recognises each step from its prompt's wording
(prompts/evidence_*.md) and the summary from its citation marker ([3] cites the paper
PMC0091003, 39 pool elements; [4] cites pmid:91000004, 19 elements; [5]'s paper is not in
the demo, so it never reaches align). Aspects are chosen so that each names a keyword found
in known pool elements: the align answer selects, in each window, the elements that contain
the aspect's keyword, which makes the expected alignment computable from the pool.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from flows.registry import get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.pipeline import Selection, execute_step, select_steps
from tasks.evidencebench.alignment import windows
from tasks.evidencebench.baselines import BM25Ranker, RankingBaseline
from tasks.evidencebench.baselines import evaluate as evaluate_system
from tasks.evidencebench.grammars import selection_grammar
from tasks.evidencebench.instance import RELEASED_FIELDS
from tasks.evidencebench.llm_steps import one_line
from tasks.evidencebench.pools import PaperPool, paper_pools
from tasks.evidencebench.selection import evaluations
from tests.conftest import REPO, SAMPLES
from tests.evidencebench.test_llm_stages import DEMO, UNIT, Ran, _config, scripted
from tests.fakes.llm_server import FakeChat, RecordedRequest, last_user_text

DEV_SET = SAMPLES / "evidencebench" / "evidencebench_dev_set.json"
needs_dev_set = pytest.mark.skipif(
    not DEV_SET.is_file(), reason=f"the EvidenceBench dev set is not at {DEV_SET}"
)

PAPER = {"[3]": "PMC0091003", "[4]": "pmid:91000004"}
PREFIX = "evidencebench_irforge_"
INSTANCE = {m: PREFIX + re.sub(r"[^A-Za-z0-9]+", "_", UNIT[m]) for m in ("[3]", "[4]")}
# Per summary: (aspect, the keyword an element must contain to state it).
ASPECTS: dict[str, list[tuple[str, str]]] = {
    "[3]": [
        ("The trial randomised 212 adults aged 70 years or older.", "212"),
        ("Falls fell to 1.2 falls per person-year from 1.9 with usual care.", "1.2 falls"),
        ("78% of participants completed at least two thirds of the sessions.", "78%"),
    ],
    "[4]": [
        ("The pilot trial had 64 participants.", "64"),
        ("The Timed Up and Go test improved by 2.1 seconds.", "2.1 seconds"),
        ("The Berg Balance Scale score improved by 4 points.", "4 points"),
    ],
}
KEYWORD = {text: keyword for aspects in ASPECTS.values() for text, keyword in aspects}
LABELS = ["methods", "results", "results"]

# A phrase of each prompt, to tell the steps apart, and the phrase the summary follows.
STEPS = {
    "Break the statement down into study aspects": ("decompose", "Statement:"),
    "Check every aspect against the statement": ("leak_check", "Statement:"),
    "Decide, for each text element on its own": ("align", "Context of the statement:"),
    "Label each aspect with one of three categories": ("label", "Evidence summary:"),
}
_MARKER = re.compile(r"\[\d\]")
_ELEMENT = re.compile(r"^(\d+): (.*) \[End of text element \1\]$", re.MULTILINE)

# A hook may replace the reply of (step, marker, prompt text); None keeps the scripted one.
Hook = Callable[[str, str, str], str | None]


def build_step(text: str) -> tuple[str, str] | None:
    """(step, citation marker) of a build-step prompt; None for refine and hypothesis prompts."""
    for phrase, (step, after) in STEPS.items():
        if phrase in text:
            found = _MARKER.search(text, text.index(after))
            assert found is not None, text
            return step, found.group()
    return None


def align_parts(text: str) -> tuple[str, list[str]]:
    """The aspect and the window's elements (window-local order) of an align prompt."""
    aspect = text.split("Statement:\n", 1)[1].split("\n\nContext of the statement:", 1)[0]
    elements = dict((int(i), t) for i, t in _ELEMENT.findall(text))
    return aspect, [elements[i] for i in range(len(elements))]


def chosen(text: str) -> list[int]:
    """The window-local indices of the elements containing the aspect's keyword (none: unknown aspect)."""
    aspect, elements = align_parts(text)
    keyword = KEYWORD.get(aspect)
    return [i for i, element in enumerate(elements) if keyword is not None and keyword in element]


def answer_with(hook: Hook | None = None) -> Callable[[dict[str, Any]], str]:
    earlier = scripted({"[3]": "both", "[4]": "results", "[5]": "results"})

    def answer(body: dict[str, Any]) -> str:
        text = last_user_text(body)
        found = build_step(text)
        if found is None:
            return earlier(body)
        step, marker = found
        replaced = hook(step, marker, text) if hook is not None else None
        if replaced is not None:
            return replaced
        if step == "decompose":
            return "ASPECTS:\n" + "\n".join(f"{j}. {a}" for j, (a, _) in enumerate(ASPECTS[marker], start=1))
        if step == "leak_check":
            return "Every aspect restates the statement.\nDECISION: no"
        if step == "align":
            return f"REASON: these elements state it.\nDECISION: [{', '.join(map(str, chosen(text)))}]"
        return "LABELS:\n" + "\n".join(f"{j}: {label}" for j, label in enumerate(LABELS, start=1))

    return answer


def write_config(
    server: FakeChat, folder: Path, name: str = "evidencebench.yaml", **stages: dict[str, Any]
) -> Path:
    """The flow's config file ``folder/name`` (absolute paths to the demo); ``stages`` add or
    replace keys. Input files are fingerprinted by their path relative to the config's folder:
    configs meant to share artifacts live in the same folder."""
    data = _config(server)
    llm = data["stages"]["refine"]["llm"]
    data["stages"]["harvest"]["reviews"] = [str(DEMO / "review.xml")]
    data["stages"]["papers"]["papers"] = [str(DEMO / "papers")]
    data["stages"].update(
        {
            "decompose": {"llm": llm},
            "align": {"llm": llm},
            "label": {"llm": llm},
            "select": {},
            "export": {"name": "EvidenceBench test build"},
            "evaluate": {"bm25": True, "embedding_models": [], "oracle": True},
        }
    )
    for stage, values in stages.items():
        data["stages"][stage] = {**data["stages"][stage], **values}
    data["flow"] = "evidencebench"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass(frozen=True)
class Stage:
    """A stage's outcome: its rows (read at once), its state and side tables."""

    ran: Ran
    state: str
    fingerprint: str
    tables: dict[str, list[dict[str, Any]]]


SIDE_TABLES = {"align": "failed_windows", "export": "files", "evaluate": "per_instance"}


def run_flow(config: Path, root: Path, *, force: bool = False, until: str | None = None) -> dict[str, Stage]:
    """The flow's stages from ``config``, run the way the Prefect tasks run them (same engine calls)."""
    pipeline = get_pipeline("evidencebench")
    flow_config, base_dir = pipeline.load(config)
    store = ArtifactStore(root)
    plans = pipeline.plan(flow_config, base_dir)
    steps = select_steps(pipeline, plans, Selection(force=force, until=until), store)
    out: dict[str, Stage] = {}
    for step in steps:
        outcome = execute_step(step, store, "evidencebench", flow_config.execution)
        artifact = outcome.artifact
        ran = Ran(artifact.manifest, artifact.read().to_pylist(), artifact.excluded().to_pylist())
        tables = {t: artifact.read(table=t).to_pylist() for t in [SIDE_TABLES.get(step.name)] if t}
        out[step.name] = Stage(ran, outcome.state, artifact.fingerprint, tables)
    return out


def pools(root: Path, run: dict[str, Stage]) -> dict[str, PaperPool]:
    papers = ArtifactStore(root).get("evidencebench", "papers", run["papers"].fingerprint)
    return paper_pools(papers, PAPER.values())


def expected_alignment(pool: PaperPool, marker: str) -> list[list[int]]:
    return [
        [i for i, text in enumerate(pool.texts) if keyword in one_line(text)]
        for _, keyword in ASPECTS[marker]
    ]


def of_step(requests: list[RecordedRequest], step: str) -> list[RecordedRequest]:
    return [r for r in requests if (found := build_step(r.user_text)) is not None and found[0] == step]


def by_unit(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["unit_id"]: r for r in rows}


def release_folder(root: Path, run: dict[str, Stage]) -> Path:
    artifact = ArtifactStore(root).get("evidencebench", "export", run["export"].fingerprint)
    return artifact.files / "release"


# -- the happy path, run once for the module ----------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A whole run, then a forced rerun (all from the reply cache), then a run with another align prompt."""
    with FakeChat(answer=answer_with()) as server:
        folder = tmp_path_factory.mktemp("evidence-build")
        root = folder / "artifacts"
        config = write_config(server, folder)
        first = run_flow(config, root)
        first_requests = server.chats()
        pool = pools(root, first)
        release = {p.relative_to(release_folder(root, first)).as_posix(): p.read_bytes()
                   for p in release_folder(root, first).rglob("*") if p.is_file()}  # fmt: skip
        server.clear()
        rerun = run_flow(config, root, force=True)
        rerun_requests = server.chats()
        server.clear()
        prompt = folder / "my_align.md"
        prompt.write_text((REPO / "prompts" / "evidencebench/align.md").read_text() + "\nBe brief.\n")
        changed_config = write_config(server, folder, "changed.yaml", align={"prompt": str(prompt)})
        changed = run_flow(changed_config, root)
        yield {
            "server": server,
            "folder": folder,
            "root": root,
            "config": config,
            "first": first,
            "first_requests": first_requests,
            "pool": pool,
            "release": release,
            "rerun": rerun,
            "rerun_requests": rerun_requests,
            "changed": changed,
            "changed_requests": server.chats(),
        }


def test_align_finds_the_keyword_elements_across_overlapping_windows(built: dict[str, Any]) -> None:
    pool = built["pool"]
    assert {p: len(pool[p].texts) for p in PAPER.values()} == {"PMC0091003": 39, "pmid:91000004": 19}
    align = built["first"]["align"]
    kept = by_unit(align.ran.kept)
    assert sorted(kept) == [UNIT["[3]"], UNIT["[4]"]]
    got = {m: kept[UNIT[m]]["aspect_sentences"] for m in PAPER}
    assert got == {m: expected_alignment(pool[PAPER[m]], m) for m in PAPER}
    # Window-local answers mapped back to pool indices (union over windows of 10, stride 5).
    assert got == {"[3]": [[4, 19, 29], [7, 31], [8, 32]], "[4]": [[0, 7], [1, 13], [1, 13]]}
    for m, n_windows in (("[3]", 7), ("[4]", 3)):
        row = kept[UNIT[m]]
        assert len(windows(len(pool[PAPER[m]].texts))) == n_windows
        assert (row["windows"], row["requests"]) == (n_windows, 3 * n_windows)
        assert row["aspects"] == [a for a, _ in ASPECTS[m]]
        assert row["cached"] is False and row["attempts"] == 3 * n_windows
    requests = of_step(built["first_requests"], "align")
    assert len(requests) == 3 * 7 + 3 * 3
    assert align.ran.cost["requests_sent"] == 30
    assert align.tables["failed_windows"] == []
    # Element 12 of [3]'s paper sits in two windows: local 7 of window 5-15, local 2 of 10-20.
    shown = [align_parts(r.user_text)[1] for r in requests if "[3]" in r.user_text]
    assert sum(1 for window in shown if pool["PMC0091003"].texts[12] in window) == 2 * 3


def test_decompose_and_label_keep_the_aspects_and_their_labels(built: dict[str, Any]) -> None:
    decompose = built["first"]["decompose"]
    kept = by_unit(decompose.ran.kept)
    assert {u: (r["paper_id"], r["aspects"], r["leak"]) for u, r in kept.items()} == {
        UNIT[m]: (PAPER[m], [a for a, _ in ASPECTS[m]], False) for m in PAPER
    }
    [missing] = decompose.ran.excluded
    assert (missing["unit_id"], missing["reason"], missing["step"]) == (
        UNIT["[5]"],
        "paper_not_in_pool",
        "decompose",
    )
    # Two requests per decomposed summary: the aspects, then the leak check.
    assert len(of_step(built["first_requests"], "decompose")) == 2
    assert len(of_step(built["first_requests"], "leak_check")) == 2
    [leak] = [r.user_text for r in of_step(built["first_requests"], "leak_check") if "[4]" in r.user_text]
    assert "1. The pilot trial had 64 participants.\n2. The Timed Up" in leak
    label = by_unit(built["first"]["label"].ran.kept)
    assert {u: r["aspect_labels"] for u, r in label.items()} == {UNIT[m]: LABELS for m in PAPER}
    assert label[UNIT["[3]"]]["aspect_sentences"] == [[4, 19, 29], [7, 31], [8, 32]]


def test_select_builds_the_released_instance_with_exact_optimal_sets(built: dict[str, Any]) -> None:
    select = built["first"]["select"]
    assert select.ran.excluded == []
    kept = {r["instance_id"]: r for r in select.ran.kept}
    assert sorted(kept) == sorted(INSTANCE.values())
    summary = {
        m: {k: kept[INSTANCE[m]][k] for k in ("n_aspects", "covered_aspects", "pool_size", "optimal",
                                               "at_10_covered", "results_optimal", "results_at_5_covered")}
        for m in PAPER
    }  # fmt: skip
    assert summary == {
        "[3]": {"n_aspects": 3, "covered_aspects": 3, "pool_size": 39, "optimal": 3, "at_10_covered": 3,
                "results_optimal": 2, "results_at_5_covered": 2},
        "[4]": {"n_aspects": 3, "covered_aspects": 3, "pool_size": 19, "optimal": 2, "at_10_covered": 3,
                "results_optimal": 1, "results_at_5_covered": 2},
    }  # fmt: skip
    name = INSTANCE["[3]"]
    instance = json.loads(kept[name]["instance"])
    assert list(instance) == list(RELEASED_FIELDS)
    ids = [f"{name}_aspect_{j}" for j in range(3)]
    assert instance["aspect_list_ids"] == ids
    assert instance["results_aspect_list_ids"] == ids[1:]
    assert instance["aspect2sentence_indices"] == dict(zip(ids, [[4, 19, 29], [7, 31], [8, 32]], strict=True))
    assert instance["sentence_index2aspects"]["19"] == [ids[0]]
    assert instance["sentence_index2aspects"]["0"] == []
    assert len(instance["sentence_index2aspects"]) == 39
    assert instance["paper_id"] == "PMC0091003"
    assert instance["hypothesis"] == "Home exercise prevents falls [3]."
    assert instance["sentence_types_in_candidate_pool"][:2] == ["abstract", "abstract"]
    optimal = instance["evidence_retrieval_at_optimal_evaluation"]
    assert optimal == {"optimal": 3, "one_selection_of_sentences": [4, 7, 8], "covered_aspects": ids}
    # @10: the three covering sentences, padded with the lowest unused indices to 10.
    at_10 = instance["evidence_retrieval_at_10_evaluation"]["one_selection_of_sentences"]
    assert at_10 == [4, 7, 8, 0, 1, 2, 3, 5, 6, 9]
    results_optimal = instance["results_evidence_retrieval_at_optimal_evaluation"]
    assert results_optimal == {"optimal": 2, "one_selection_of_sentences": [7, 8], "covered_aspects": ids[1:]}
    at_5 = instance["results_evidence_retrieval_at_5_evaluation"]
    assert at_5 == {"one_selection_of_sentences": [7, 8, 0, 1, 2], "covered_aspects": ids[1:]}
    small = json.loads(kept[INSTANCE["[4]"]]["instance"])
    assert small["evidence_retrieval_at_optimal_evaluation"]["one_selection_of_sentences"] == [0, 1]
    assert small["results_evidence_retrieval_at_optimal_evaluation"]["one_selection_of_sentences"] == [1]


@needs_dev_set
def test_export_writes_the_released_json_parquet_and_card(built: dict[str, Any]) -> None:
    folder = release_folder(built["root"], built["first"])
    export = built["first"]["export"]
    files = {f["path"]: f for f in export.tables["files"]}
    assert sorted(files) == ["README.md", "data/test.parquet", "evidencebench.json"]
    for path, entry in files.items():
        assert (folder / path).stat().st_size == entry["bytes"]
    assert (files["evidencebench.json"]["rows"], files["data/test.parquet"]["rows"]) == (2, 2)
    assert sorted((r["instance_id"], r["n_aspects"], r["optimal"]) for r in export.ran.kept) == [
        (INSTANCE["[3]"], 3, 3),
        (INSTANCE["[4]"], 3, 2),
    ]

    released = json.loads((folder / "evidencebench.json").read_text())
    dev = json.loads(DEV_SET.read_text())
    dev_keys = list(next(iter(dev.values())))
    assert list(released) == sorted(INSTANCE.values())
    for name, instance in released.items():
        assert list(instance) == dev_keys
        again = evaluations(instance, name)
        for key in (
            "evidence_retrieval_at_optimal_evaluation",
            "results_evidence_retrieval_at_optimal_evaluation",
        ):
            assert instance[key] == again[key]
        for key, k in (
            ("evidence_retrieval_at_10_evaluation", 10),
            ("results_evidence_retrieval_at_5_evaluation", 5),
        ):
            found, exact = instance[key], again[key]
            assert exact is not None and found["covered_aspects"] == exact["covered_aspects"]
            selection = found["one_selection_of_sentences"]
            assert (
                selection[: len(exact["one_selection_of_sentences"])] == exact["one_selection_of_sentences"]
            )
            assert len(selection) == len(set(selection)) == min(k, len(instance["paper_as_candidate_pool"]))

    table = pq.read_table(folder / "data" / "test.parquet").to_pylist()
    assert [r["instance_id"] for r in table] == sorted(INSTANCE.values())
    rows = {r["instance_id"]: r for r in table}
    for m, paper in PAPER.items():
        row = rows[INSTANCE[m]]
        assert row["aspect_texts"] == [a for a, _ in ASPECTS[m]]
        assert row["aspect_labels"] == LABELS
        assert row["aspect2sentence_indices"] == expected_alignment(built["pool"][paper], m)
        assert row["paper_id"] == paper and row["review_id"] == "PMC0091100"
    assert rows[INSTANCE["[4]"]]["at_10_selection"] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]

    card = (folder / "README.md").read_text()
    assert card.startswith("---\n")
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["configs"][0]["data_files"] == [{"split": "test", "path": "data/test.parquet"}]
    assert front["pretty_name"] == "EvidenceBench test build"
    assert "- align LLM: `judge-7b (openai)`" in card
    assert f"stage `align`: fingerprint `{built['first']['align'].fingerprint[:16]}`" in card
    assert "## Citation" in card and "@misc{wang2025evidencebench," in card and "@software{irforge," in card
    # The card's loading snippet, run as written on the release folder (issue 29 §4).
    snippet = card.split("## How to load")[1].split("```python\n")[1].split("```")[0]
    assert "load_dataset(" in snippet
    scope: dict[str, Any] = {}
    exec(re.sub(r'load_dataset\("[^"]+"', f"load_dataset({str(folder)!r}", snippet), scope)
    assert scope["instances"].num_rows == 2


def test_evaluate_scores_the_oracle_at_full_recall(built: dict[str, Any]) -> None:
    evaluate = built["first"]["evaluate"]
    rows = {(r["system"], r["task"]): r for r in evaluate.ran.kept}
    assert sorted({s for s, _ in rows}) == ["bm25", "oracle"]
    for task in ("ER@optimal", "ER@10", "Result-ER@optimal", "Result-ER@5"):
        oracle = rows[("oracle", task)]
        assert (oracle["mean_recall"], oracle["instances"], oracle["skipped"], oracle["failed"]) == (
            1.0,
            2,
            0,
            0,
        )
        assert 0.0 <= rows[("bm25", task)]["mean_recall"] <= 1.0
    assert {r["k"] for r in evaluate.ran.kept if r["task"] == "ER@10"} == {"10"}
    per_instance = evaluate.tables["per_instance"]
    assert len(per_instance) == 2 * 4 * 2


def test_every_stage_accounts_for_each_row(built: dict[str, Any]) -> None:
    first = built["first"]
    order = ["hypothesis", "decompose", "align", "label", "select", "export"]
    for stage in [*order, "evaluate"]:
        counts = first[stage].ran.counts  # asserts units_in = kept + excluded
        assert counts["rows_in"] == counts["rows_out"] + counts["rows_excluded"], stage
        assert counts["rows_out"] == len(first[stage].ran.kept), stage
        assert counts["rows_excluded"] == len(first[stage].ran.excluded), stage
    for upstream, stage in itertools.pairwise(order):
        assert first[stage].ran.counts["units_in"] == first[upstream].ran.counts["units_kept"], stage
    assert first["decompose"].ran.counts["excluded_by_reason"] == {"paper_not_in_pool": 1}
    assert first["evaluate"].ran.counts["units_in"] == 2 * 4  # (system, task)


def test_a_forced_rerun_asks_nothing_and_ends_the_same(built: dict[str, Any]) -> None:
    assert built["rerun_requests"] == []
    first, rerun = built["first"], built["rerun"]
    for stage in ("decompose", "align", "label", "select", "export", "evaluate"):
        assert rerun[stage].state == "computed" and rerun[stage].fingerprint == first[stage].fingerprint
    costless = ("prompt_tokens", "completion_tokens", "attempts", "cached")
    for stage in ("decompose", "align", "label"):
        assert rerun[stage].ran.cost["requests_sent"] == 0
        assert rerun[stage].ran.cost["cache_hits"] == first[stage].ran.cost["requests_sent"]
        strip = [[{k: v for k, v in r.items() if k not in costless} for r in run[stage].ran.kept]
                 for run in (first, rerun)]  # fmt: skip
        assert strip[0] == strip[1]
        assert all(r["cached"] and r["attempts"] == 0 for r in rerun[stage].ran.kept)
    for stage in ("select", "export", "evaluate"):
        assert rerun[stage].ran.kept == first[stage].ran.kept
    folder = release_folder(built["root"], rerun)
    assert {p: (folder / p).read_bytes() for p in built["release"]} == built["release"]


def test_another_align_prompt_reruns_align_and_what_follows_only(built: dict[str, Any]) -> None:
    first, changed = built["first"], built["changed"]
    for stage in ("harvest", "papers", "refine", "hypothesis", "decompose"):
        assert (changed[stage].state, changed[stage].fingerprint) == ("reused", first[stage].fingerprint), (
            stage
        )
    for stage in ("align", "label", "select", "export", "evaluate"):
        assert changed[stage].state == "computed", stage
        assert changed[stage].fingerprint != first[stage].fingerprint, stage
    # Only the align requests are new (their prompt changed); label's are the same, from the cache.
    asked = built["changed_requests"]
    assert len(asked) == len(of_step(asked, "align")) == 30
    assert all(r.user_text.rstrip().endswith("Be brief.") for r in asked)
    assert changed["label"].ran.cost["cache_hits"] == 2
    assert changed["select"].ran.kept == first["select"].ran.kept


def test_cli_release_copies_the_export_folder(built: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "release"
    common = ["--config", str(built["config"]), "--artifacts", str(built["root"])]
    result = CliRunner().invoke(app, ["release", "evidencebench", "--out", str(out), *common])
    assert result.exit_code == 0, result.output
    copied = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert copied == built["release"]
    again = CliRunner().invoke(app, ["release", "evidencebench", "--out", str(out), *common])
    assert again.exit_code == 2 and "not empty" in again.output  # a user error (flows/cli.py)


# -- evaluate on other systems and data ---------------------------------------------------


def _evaluate(built: dict[str, Any], folder: Path, **values: Any) -> Stage:
    """evaluate alone, under another evaluate config (the upstream stages are reused)."""
    config = write_config(built["server"], built["folder"], f"{folder.name}.yaml", evaluate=values)
    run = run_flow(config, built["root"])
    assert all(run[s].state == "reused" for s in ("select", "export"))
    return run["evaluate"]


def test_evaluate_scores_a_selections_file_and_excludes_a_bad_one(
    built: dict[str, Any], tmp_path: Path
) -> None:
    good, bad = tmp_path / "mine.json", tmp_path / "broken.json"
    good.write_text(
        json.dumps(
            {
                INSTANCE["[3]"]: {"ER@optimal": [4], "ER@10": [4, 7], "Result-ER@optimal": [7],
                                  "Result-ER@5": [7, 8]},
                INSTANCE["[4]"]: {"ER@optimal": [13], "ER@10": [0, 13], "Result-ER@optimal": [1],
                                  "Result-ER@5": []},
            }
        )
    )  # fmt: skip
    bad.write_text(json.dumps({name: {"ER@optimal": [99]} for name in INSTANCE.values()}))
    evaluate = _evaluate(built, tmp_path, oracle=False, bm25=False, selections=[str(good), str(bad)])
    means = {(r["system"], r["task"]): r["mean_recall"] for r in evaluate.ran.kept}
    # [3]: 1 of 3 aspects, 2 of 3, 1 of 2 results, 2 of 2; [4]: 2 of 3, 3 of 3, 2 of 2, 0 of 2.
    assert means == pytest.approx(
        {
            ("file:mine", "ER@optimal"): (1 / 3 + 2 / 3) / 2,
            ("file:mine", "ER@10"): (2 / 3 + 1) / 2,
            ("file:mine", "Result-ER@optimal"): (1 / 2 + 1) / 2,
            ("file:mine", "Result-ER@5"): (1 + 0) / 2,
        }
    )
    per = {(r["instance_id"], r["task"]): r["recall"] for r in evaluate.tables["per_instance"]}
    assert per[(INSTANCE["[4]"], "Result-ER@5")] == 0.0
    assert per[(INSTANCE["[3]"], "ER@optimal")] == pytest.approx(1 / 3)
    excluded = evaluate.ran.excluded
    assert sorted((r["system"], r["task"], r["reason"]) for r in excluded) == [
        ("file:broken", t, "bad_selections")
        for t in sorted(["ER@optimal", "ER@10", "Result-ER@optimal", "Result-ER@5"])
    ]
    assert all("0..18" in r["detail"] or "0..38" in r["detail"] for r in excluded)
    assert evaluate.ran.counts["units_in"] == 8


@needs_dev_set
def test_evaluate_on_the_released_dev_set(built: dict[str, Any], tmp_path: Path) -> None:
    dataset = tmp_path / "dev.json"
    shutil.copy(DEV_SET, dataset)
    evaluate = _evaluate(built, tmp_path, dataset=str(dataset))
    rows = {(r["system"], r["task"]): r for r in evaluate.ran.kept}
    for task in ("ER@optimal", "Result-ER@optimal"):
        oracle = rows[("oracle", task)]
        assert oracle["mean_recall"] == 1.0
        assert oracle["instances"] + oracle["skipped"] == 37
    assert rows[("oracle", "ER@optimal")]["instances"] == 37
    data = json.loads(dataset.read_text())
    direct = evaluate_system(data, RankingBaseline(BM25Ranker()))
    for task, score in direct.items():
        assert rows[("bm25", task)]["mean_recall"] == pytest.approx(score.mean)
        assert rows[("bm25", task)]["instances"] == len(score.per_instance)
    assert 0.0 < rows[("bm25", "ER@10")]["mean_recall"] < 1.0


# -- grammars -----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["grammar", "auto"])
def test_align_sends_a_grammar_only_where_the_config_asks(field: str, tmp_path: Path) -> None:
    with FakeChat(answer=answer_with()) as server:
        llm = {**_config(server)["stages"]["refine"]["llm"], "grammar_field": field}
        config = write_config(
            server, tmp_path, decompose={"llm": llm}, align={"llm": llm}, label={"llm": llm}
        )
        run = run_flow(config, tmp_path / "artifacts", until="label")
        align = of_step(server.chats(), "align")
        assert len(align) == 30
        assert run["label"].ran.counts["units_kept"] == 2
        if field == "auto":  # openai: no grammar field at all
            assert not any("grammar" in r.body for r in server.chats())
            return
        grammars = [r.body["grammar"] for r in align]
        assert all(g.startswith("root ::= ") for g in grammars)
        # Full windows of 10, and the last windows of 9 ([3]: 30-39; [4]: 10-19).
        last = [r.body["grammar"] for r in align if len(align_parts(r.user_text)[1]) == 9]
        assert len(last) == 6 and set(last) == {selection_grammar(9)}
        assert set(grammars) == {selection_grammar(10), selection_grammar(9)}
        [decompose] = {r.body["grammar"] for r in of_step(server.chats(), "decompose")}
        assert decompose.startswith('root ::= "ASPECTS:" a1')


# -- faults -------------------------------------------------------------------------------


def _faulty(tmp_path: Path, hook: Hook, **stages: dict[str, Any]) -> tuple[dict[str, Stage], FakeChat]:
    with FakeChat(answer=answer_with(hook)) as server:
        config = write_config(server, tmp_path, **stages)
        return run_flow(config, tmp_path / "artifacts", until="select"), server


def test_duplicate_aspects_are_an_invalid_decompose_reply(tmp_path: Path) -> None:
    duplicate = "ASPECTS:\n1. The pilot trial had 64 participants.\n2. The pilot trial had 64 participants."

    def hook(step: str, marker: str, _text: str) -> str | None:
        return duplicate if (step, marker) == ("decompose", "[4]") else None

    run, server = _faulty(tmp_path, hook)
    decompose = run["decompose"].ran
    excluded = by_unit(decompose.excluded)
    failed = excluded[UNIT["[4]"]]
    assert (failed["reason"], failed["step"], failed["raw_reply"], failed["attempts"]) == (
        "invalid_reply",
        "decompose",
        duplicate,
        2,  # max_invalid_retries: 1
    )
    assert "are the same" in failed["detail"]
    assert [r["unit_id"] for r in decompose.kept] == [UNIT["[3]"]]
    assert [r["unit_id"] for r in run["select"].ran.kept] == [UNIT["[3]"]]
    assert len(of_step(server.chats(), "leak_check")) == 1  # no leak check for a failed decomposition


@pytest.mark.parametrize("exclude_leaks", [True, False])
def test_a_leak_excludes_the_instance_unless_only_recorded(exclude_leaks: bool, tmp_path: Path) -> None:
    def hook(step: str, marker: str, _text: str) -> str | None:
        return "Aspect 2 adds a number.\nDECISION: yes" if (step, marker) == ("leak_check", "[3]") else None

    run, _ = _faulty(tmp_path, hook, decompose={"exclude_leaks": exclude_leaks})
    decompose = run["decompose"].ran
    if exclude_leaks:
        leak = by_unit(decompose.excluded)[UNIT["[3]"]]
        assert (leak["reason"], leak["step"], leak["aspects"]) == (
            "aspect_leak",
            "leak_check",
            [a for a, _ in ASPECTS["[3]"]],
        )
        assert leak["raw_reply"].endswith("DECISION: yes")
        assert sorted(r["unit_id"] for r in run["select"].ran.kept) == [UNIT["[4]"]]
    else:
        assert {r["unit_id"]: r["leak"] for r in decompose.kept} == {UNIT["[3]"]: True, UNIT["[4]"]: False}
        assert decompose.counts["excluded_by_reason"] == {"paper_not_in_pool": 1}
        assert len(run["select"].ran.kept) == 2


def test_a_window_without_a_valid_reply_fails_the_instance(tmp_path: Path) -> None:
    aspect = ASPECTS["[4]"][1][0]

    def hook(step: str, marker: str, text: str) -> str | None:
        if step == "align" and marker == "[4]":
            shown, elements = align_parts(text)
            if shown == aspect and elements[0].startswith("A tablet that shows"):  # window 5-15
                return "REASON: element 12.\nDECISION: [12]"
        return None

    run, server = _faulty(tmp_path, hook)
    align = run["align"]
    [failed] = align.ran.excluded
    assert (failed["unit_id"], failed["reason"], failed["failed_requests"], failed["requests"]) == (
        UNIT["[4]"],
        "alignment_failed",
        1,
        9,
    )
    assert "index 12 is outside the window" in failed["detail"]
    [window] = align.tables["failed_windows"]
    assert window == {
        "unit_id": UNIT["[4]"],
        "custom_id": f"{UNIT['[4]']}#aspect1@5-15",
        "aspect_index": 1,
        "window_start": 5,
        "window_stop": 15,
        "reason": "invalid_reply",
        "detail": window["detail"],
        "raw_reply": "REASON: element 12.\nDECISION: [12]",
        "attempts": 2,
    }
    asked = [r for r in of_step(server.chats(), "align") if "A tablet that shows" in r.user_text]
    assert sum(1 for r in asked if align_parts(r.user_text)[0] == aspect and
               align_parts(r.user_text)[1][0].startswith("A tablet")) == 2  # fmt: skip
    assert [r["unit_id"] for r in align.ran.kept] == [UNIT["[3]"]]
    assert run["label"].ran.counts["units_in"] == 1


def test_a_label_reply_with_the_wrong_count_is_excluded(tmp_path: Path) -> None:
    def hook(step: str, marker: str, _text: str) -> str | None:
        return "LABELS:\n1: methods\n2: results" if (step, marker) == ("label", "[4]") else None

    run, _ = _faulty(tmp_path, hook)
    [failed] = run["label"].ran.excluded
    assert (failed["unit_id"], failed["reason"], failed["step"], failed["attempts"]) == (
        UNIT["[4]"],
        "invalid_reply",
        "label",
        2,
    )
    assert "2 labels for 3 aspects" in failed["detail"]
    assert failed["raw_reply"] == "LABELS:\n1: methods\n2: results"
    assert [r["unit_id"] for r in run["select"].ran.kept] == [UNIT["[3]"]]


def test_an_instance_with_too_few_aligned_aspects_is_excluded_for_low_coverage(tmp_path: Path) -> None:
    unaligned = (
        "ASPECTS:\n1. The pilot trial had 64 participants.\n2. Participants liked it.\n3. Costs were low."
    )

    def hook(step: str, marker: str, _text: str) -> str | None:
        return unaligned if (step, marker) == ("decompose", "[4]") else None

    run, server = _faulty(tmp_path, hook)
    assert by_unit(run["align"].ran.kept)[UNIT["[4]"]]["aspect_sentences"] == [[0, 7], [], []]
    # Dropped before its labels are paid for (the coverage filter comes before the labels).
    label = run["label"].ran
    [low] = label.excluded
    assert (low["unit_id"], low["reason"], low["step"], low["attempts"]) == (
        UNIT["[4]"],
        "low_coverage",
        "coverage",
        0,
    )
    assert low["detail"] == "1 of 3 aspects have a sentence (33% < 70%)"
    assert len(of_step(server.chats(), "label")) == 1  # [3] only
    select = run["select"].ran
    assert select.excluded == []
    assert [r["instance_id"] for r in select.kept] == [INSTANCE["[3]"]]


def test_a_run_that_keeps_no_instance_releases_nothing_and_scores_nothing(tmp_path: Path) -> None:
    # Every summary leaks: decompose keeps none, and the stages after it end without error.
    def hook(step: str, _marker: str, _text: str) -> str | None:
        return "DECISION: yes" if step == "leak_check" else None

    with FakeChat(answer=answer_with(hook)) as server:
        config = write_config(server, tmp_path)
        run = run_flow(config, tmp_path / "artifacts")
    assert {r["reason"] for r in run["decompose"].ran.excluded} == {"aspect_leak", "paper_not_in_pool"}
    assert run["select"].ran.kept == [] and run["export"].ran.kept == []
    release = ArtifactStore(tmp_path / "artifacts").get("evidencebench", "export", run["export"].fingerprint)
    assert not (release.files / "release").exists()  # a stage with no input row writes no file
    result = CliRunner().invoke(
        app, ["release", "evidencebench", "--config", str(config), "--artifacts", str(tmp_path / "artifacts")]
    )
    assert result.exit_code != 0 and "wrote no release: it kept no rows" in result.output
    evaluate = run["evaluate"].ran
    assert evaluate.kept == []
    assert {(r["system"], r["reason"]) for r in evaluate.excluded} == {
        ("oracle", "no_instances"),
        ("bm25", "no_instances"),
    }
    assert len(evaluate.excluded) == 8  # every (system, task) is accounted for
