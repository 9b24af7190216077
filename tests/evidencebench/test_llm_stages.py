"""harvest → papers → refine → hypothesis of the evidencebench flow on the demo pair.

The LLM is tests/fakes/llm_server.py's FakeChat behind the ``openai`` engine. Its scripted answer
recognises each step from the prompt's wording and answers for the demo summary the prompt
is about (citations [3], [4], [5]); faults are injected on chosen summaries' requests.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows.registry import get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.config import validate_config
from irforge.pipeline import Selection, execute_step, select_steps
from tasks.common.llm.config import LLMConfig, grammar_field
from tasks.evidencebench.stages.refine import citation_marker
from tests.conftest import REPO
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, RecordedRequest, last_user_text, words

DEMO = REPO / "data" / "evidence_demo"
DEMO_CONFIG = REPO / "flows" / "configs" / "evidencebench.yaml"
UNIT = {"[3]": "PMC0091100:1:0", "[4]": "PMC0091100:2:0", "[5]": "PMC0091100:5:0"}

# A phrase of each prompt, to tell the steps apart (prompts/evidence_*.md).
REFINE, SUITABILITY = "Pick out the sentence or sentences", "Classify what this evidence describes"
RECOVER, TRIM = "Your job is to recover that hypothesis", "Reduce the claim to its central hypothesis"
LLM_STEPS = {REFINE: "refine", SUITABILITY: "suitability", RECOVER: "recover", TRIM: "trim"}
_CITATION = re.compile(r"\[\d\]")


def step_of(text: str) -> str:
    [step] = [name for phrase, name in LLM_STEPS.items() if phrase in text]
    return step


def _citation(text: str, after: str) -> str:
    """The first demo citation marker in ``text`` after the phrase ``after``."""
    found = _CITATION.search(text, text.index(after))
    assert found is not None, text
    return found.group()


def _sentences(paragraph: str) -> list[str]:
    return re.split(r"(?<=\.)\s+(?=[A-Z])", paragraph)


Labels = dict[str, str]


def scripted(labels: Labels, non_verbatim: frozenset[str] = frozenset()) -> Callable[[dict[str, Any]], str]:
    """Replies per step: refine keeps the whole paragraph ([4]: only the citing sentence; a
    marker in ``non_verbatim``: a paraphrase), suitability answers ``labels[marker]``,
    recover and trim write a hypothesis naming the marker."""

    def answer(body: dict[str, Any]) -> str:
        text = last_user_text(body)
        step = step_of(text)
        if step == "refine":
            marker = _citation(text, "It cites the research paper")
            paragraph = text.split("Paragraph:\n", 1)[1].split("\n\nPick out", 1)[0]
            chosen = _sentences(paragraph)
            if marker == "[4]":
                chosen = [s for s in chosen if marker in s]
            if marker in non_verbatim:
                chosen = [f"The trial halved falls {marker}."]
            return "These sentences report the trial itself.\nHINT: " + "\n".join(chosen)
        if step == "suitability":
            return f"DECISION: {labels[_citation(text, 'Statement:')]}"
        if step == "recover":
            marker = _citation(text, "Highlighted excerpt:")
            return f"The excerpt supports home exercise.\nHYPOTHESIS: Home exercise prevents falls, as {marker} argues."
        marker = _citation(text, "And here is a claim")
        return (
            f"The central claim is the effect on falls.\nHYPOTHESIS: Home exercise prevents falls {marker}."
        )

    return answer


def _config(server: FakeChat) -> dict[str, Any]:
    llm = {
        "engine": "openai",
        "base_url": server.base_url,
        "model": DEFAULT_MODEL,
        "max_attempts": 2,
        "max_invalid_retries": 1,
        "timeout_s": 5.0,
        "max_concurrency": 4,
        "sampling": {"temperature": 0, "max_tokens": 200},
    }
    return {
        "execution": {"chunk_rows": 500},
        "stages": {
            "harvest": {"reviews": ["review.xml"]},
            "papers": {"papers": ["papers"]},
            "refine": {"llm": llm},
            "hypothesis": {"llm": llm},
        },
    }


@dataclass(frozen=True)
class Ran:
    """What a stage left (read at once: a forced rerun replaces the artifact of the same fingerprint)."""

    manifest: dict[str, Any]
    kept: list[dict[str, Any]]
    excluded: list[dict[str, Any]]

    @property
    def cost(self) -> dict[str, Any]:
        return dict(self.manifest["cost"])

    @property
    def counts(self) -> dict[str, Any]:
        counts: dict[str, Any] = self.manifest["counts"]
        assert counts["units_in"] == counts["units_kept"] + counts["units_excluded"]
        assert counts["rows_excluded"] == sum(counts["excluded_by_reason"].values())
        return counts


def run_flow(server: FakeChat, root: Path, *, force: bool = False) -> dict[str, Ran]:
    """The four stages, run the way the Prefect tasks run them (same engine calls)."""
    pipeline = get_pipeline("evidencebench")
    config = validate_config(pipeline.config_type, _config(server), "test config")
    store = ArtifactStore(root)
    steps = select_steps(pipeline, pipeline.plan(config, DEMO), Selection(force=force), store)
    ran: dict[str, Ran] = {}
    for step in steps:
        artifact = execute_step(step, store, "evidencebench", config.execution).artifact
        ran[step.name] = Ran(artifact.manifest, artifact.read().to_pylist(), artifact.excluded().to_pylist())
    return ran


def _by_unit(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["unit_id"]: r for r in rows}


def _answered(requests: list[RecordedRequest], steps: set[str]) -> list[RecordedRequest]:
    """Requests of ``steps`` that got a (valid or not) 200 reply: the ones whose tokens are billed."""
    return [r for r in requests if r.status == 200 and step_of(r.user_text) in steps]


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A run with faults, then a forced rerun with the faults used up."""
    answer = scripted({"[3]": "both", "[4]": "results", "[5]": "results"})
    with FakeChat(answer=answer) as server:
        server.inject(500, 1, when="It cites the research paper [4].")  # retried by the client
        server.inject("bad_json", 2, when="It cites the research paper [5].")  # asked, re-asked, malformed
        server.inject(500, 2, when="Highlighted excerpt:\nTablet-guided")  # [4]'s recover: past max_attempts
        root = tmp_path_factory.mktemp("evidence-llm")
        first = run_flow(server, root)
        first_requests = server.chats()
        server.clear()
        rerun = run_flow(server, root, force=True)
        yield {
            "first": first,
            "first_requests": first_requests,
            "rerun": rerun,
            "rerun_requests": server.chats(),
        }


def test_refine_keeps_suitable_summaries_and_quarantines_the_malformed_reply(faulty: dict[str, Any]) -> None:
    outcome = faulty["first"]["refine"]
    counts = outcome.counts
    assert (counts["units_in"], counts["units_kept"], counts["units_excluded"]) == (3, 2, 1)
    kept = _by_unit(outcome.kept)
    assert sorted(kept) == [UNIT["[3]"], UNIT["[4]"]]
    trial = kept[UNIT["[3]"]]
    assert trial["citation"] == "[3]"
    # Both sentences of the paragraph; the second describes the same trial without citing it.
    assert trial["refined_sentences"] == _sentences(trial["paragraph"])
    assert trial["summary"] == trial["paragraph"]
    assert (trial["suitability"], trial["engine"], trial["model"]) == ("both", "openai", DEFAULT_MODEL)
    assert (trial["attempts"], trial["cached"]) == (2, False)
    pilot = kept[UNIT["[4]"]]
    assert pilot["refined_sentences"] == [pilot["sentence"]]
    assert pilot["suitability"] == "results"
    assert pilot["attempts"] == 3  # the refine request met a 500 and was sent again
    [malformed] = outcome.excluded
    assert (malformed["unit_id"], malformed["reason"], malformed["step"]) == (
        UNIT["[5]"],
        "invalid_reply",
        "refine",
    )
    assert malformed["raw_reply"] == "Sure! The passage is relevant, score 2."
    assert malformed["attempts"] == 2  # max_invalid_retries: 1
    assert "HINT" in malformed["detail"]


def test_hypothesis_recovers_and_trims_and_quarantines_the_failed_request(faulty: dict[str, Any]) -> None:
    outcome = faulty["first"]["hypothesis"]
    counts = outcome.counts
    assert (counts["units_in"], counts["units_kept"], counts["units_excluded"]) == (2, 1, 1)
    [kept] = outcome.kept
    assert kept["unit_id"] == UNIT["[3]"]
    assert kept["recovered_hypothesis"] == "Home exercise prevents falls, as [3] argues."
    assert kept["hypothesis"] == "Home exercise prevents falls [3]."
    assert kept["suitability"] == "both"
    assert kept["summary"].startswith("In a randomised trial of 212 adults")
    [failed] = outcome.excluded
    assert (failed["unit_id"], failed["reason"], failed["step"]) == (
        UNIT["[4]"],
        "request_failed",
        "hypothesis_recover",
    )
    assert (failed["raw_reply"], failed["attempts"]) == (None, 2)
    # The trim request saw the summary's paragraph and the recovered hypothesis.
    [trim] = [r.user_text for r in faulty["first_requests"] if step_of(r.user_text) == "trim"]
    assert "Home exercise prevents falls, as [3] argues." in trim
    assert "The benefit was largest among people who had fallen" in trim
    # The recover request saw the context paragraph after the summary's.
    recover = [r.user_text for r in faulty["first_requests"] if step_of(r.user_text) == "recover"]
    assert any(
        "Highlighted excerpt:\nIn a randomised" in t and "Tablet-guided exercise" in t for t in recover
    )


@pytest.mark.parametrize(
    ("stage", "steps"), [("refine", {"refine", "suitability"}), ("hypothesis", {"recover", "trim"})]
)
def test_the_manifest_cost_counts_requests_and_tokens(
    faulty: dict[str, Any], stage: str, steps: set[str]
) -> None:
    cost = faulty["first"][stage].cost
    billed = _answered(faulty["first_requests"], steps)
    assert cost["cache_hits"] == 0
    # Distinct requests: refine 3 + suitability 2; recover 2 + trim 1.
    assert cost["requests_sent"] == {"refine": 5, "hypothesis": 3}[stage]
    # FakeChat counts words: every answered attempt is billed, malformed replies included.
    assert cost["prompt_tokens"] == sum(words(r.user_text) for r in billed)
    assert cost["completion_tokens"] > 0
    kept = faulty["first"][stage].kept
    assert 0 < sum(r["prompt_tokens"] for r in kept) <= cost["prompt_tokens"]
    assert cost["usd"] == 0.0  # no prices configured


def test_a_forced_rerun_sends_only_what_was_never_answered(faulty: dict[str, Any]) -> None:
    answered = {r.user_text for r in faulty["first_requests"] if r.status == 200 and r.fault is None}
    asked = [r.user_text for r in faulty["rerun_requests"]]
    assert asked and not answered & set(asked)
    assert sorted(step_of(t) for t in asked) == [
        "recover",
        "recover",
        "refine",
        "suitability",
        "trim",
        "trim",
    ]
    rerun = faulty["rerun"]
    assert rerun["refine"].cost["cache_hits"] == 4
    assert rerun["refine"].cost["requests_sent"] == 2
    assert rerun["hypothesis"].cost["cache_hits"] == 2
    assert rerun["hypothesis"].cost["requests_sent"] == 4
    # The faults are used up: this time every summary gets through.
    for stage in ("refine", "hypothesis"):
        assert rerun[stage].counts["units_kept"] == 3
    kept = _by_unit(rerun["hypothesis"].kept)
    assert kept[UNIT["[3]"]]["cached"] is True
    assert kept[UNIT["[3]"]]["attempts"] == 0
    assert kept[UNIT["[5]"]]["hypothesis"] == "Home exercise prevents falls [5]."


def test_unsuitable_and_non_verbatim_summaries_are_excluded_with_label_and_reply(tmp_path: Path) -> None:
    answer = scripted({"[3]": "both", "[4]": "experiment", "[5]": "neither"}, non_verbatim=frozenset({"[3]"}))
    with FakeChat(answer=answer) as server:
        outcomes = run_flow(server, tmp_path)
        refine = outcomes["refine"]
        assert refine.counts["units_excluded"] == 3
        excluded = _by_unit(refine.excluded)
        paraphrase = excluded[UNIT["[3]"]]
        assert (paraphrase["reason"], paraphrase["step"]) == ("invalid_reply", "refine")
        assert "not copied verbatim" in paraphrase["detail"]
        assert paraphrase["raw_reply"].endswith("HINT: The trial halved falls [3].")
        labels = {u: (r["reason"], r["suitability"]) for u, r in excluded.items() if u != UNIT["[3]"]}
        assert labels == {
            UNIT["[4]"]: ("not_suitable", "experiment"),
            UNIT["[5]"]: ("not_suitable", "neither"),
        }
        assert "experiment" in excluded[UNIT["[4]"]]["detail"]
        hypothesis = outcomes["hypothesis"]
        assert hypothesis.counts["units_in"] == 0
        assert hypothesis.cost.get("requests_sent", 0) == 0  # no chunk, nothing asked
        # Every reply was well-formed, so all are cached: a rerun asks nothing, and ends the same way.
        server.clear()
        rerun = run_flow(server, tmp_path, force=True)
        assert server.chats() == []
        again = _by_unit(rerun["refine"].excluded)
        assert {u: r["attempts"] for u, r in again.items()} == dict.fromkeys(excluded, 0)  # from the cache
        assert [{**r, "attempts": 0} for r in again.values()] == [
            {**r, "attempts": 0} for r in excluded.values()
        ]


def test_the_demo_config_plans_the_llm_stages_on_the_embedded_model(tmp_path: Path) -> None:
    pipeline = get_pipeline("evidencebench")
    config, base_dir = pipeline.load(DEMO_CONFIG)
    plans = pipeline.plan(config, base_dir)
    assert list(plans) == [
        *("harvest", "papers", "refine", "hypothesis", "decompose"),
        *("align", "label", "select", "export", "evaluate"),
    ]
    for stage in ("refine", "hypothesis", "decompose", "align", "label"):
        stage_config = pipeline.stage_config(config, stage)
        llm = getattr(stage_config, "llm", None)
        assert isinstance(llm, LLMConfig)
        assert llm.engine == "llama-cpp"
        assert grammar_field(llm) == "grammar"  # the embedded server constrains the replies' form
    # Another refine prompt changes refine and what follows, nothing upstream.
    prompt = tmp_path / "my_refine.md"
    prompt.write_text((REPO / "prompts" / "evidencebench/refine.md").read_text() + "\nBe brief.\n")
    data = yaml.safe_load(DEMO_CONFIG.read_text())
    data["stages"]["refine"]["refine_prompt"] = str(prompt)
    changed = pipeline.plan(validate_config(pipeline.config_type, data, "test config"), base_dir)
    assert changed["papers"].fingerprint == plans["papers"].fingerprint
    assert changed["refine"].fingerprint != plans["refine"].fingerprint
    assert changed["hypothesis"].fingerprint != plans["hypothesis"].fingerprint


def test_citation_marker_takes_the_brackets_around_the_citation() -> None:
    text = "Falls fell [3]. Balance improved (Doe et al., 2020). See ref 7 and table 2."

    def span(inner: str) -> list[dict[str, int]]:
        start = text.index(inner)
        return [{"start": start, "end": start + len(inner)}]

    assert citation_marker(text, span("3")) == "[3]"
    assert citation_marker(text, span("Doe et al., 2020")) == "(Doe et al., 2020)"
    assert citation_marker(text, span("7")) == "7"
    with pytest.raises(ValueError, match="without citation spans"):
        citation_marker(text, [])
