"""LLM evidence-retrieval baselines (App. E): strategies, strict parsing, regeneration, cache, ER@K scores.

Every strategy runs end to end through the OpenAI adapter against tests/fakes/llm_server.py's
FakeChat, whose scripted answers read the prompt (which step, hypothesis, K, focus, the
elements shown) and answer from a table of "true" selections.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tasks.common.llm.cache import ReplyCache
from tasks.common.llm.openai_chat import OpenAIChatModel
from tasks.common.llm.port import ReplyInvalid
from tasks.evidencebench.baselines import evaluate, negated_set, task_sizes
from tasks.evidencebench.llm_retrieval import LLMRetriever, RetrievalFailed
from tasks.evidencebench.llm_steps import load_prompt
from tasks.evidencebench.negation import negate, negation_request
from tasks.evidencebench.retrieval_format import (
    FOCUS,
    RetrievalValidator,
    parse_retrieval,
    render_pool_elements,
    sections,
)
from tasks.evidencebench.selection import TASK_K, AspectGroup, Task, task_recall
from tests.conftest import SAMPLES
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, RecordedRequest

DEV = SAMPLES / "evidencebench" / "evidencebench_dev_set.json"
needs_dev = pytest.mark.skipif(
    not DEV.is_file(), reason=f"the released EvidenceBench dev set is not at {DEV}"
)
RELEASED: dict[Task, str] = {
    "ER@optimal": "evidence_retrieval_at_optimal_evaluation",
    "ER@10": "evidence_retrieval_at_10_evaluation",
    "Result-ER@optimal": "results_evidence_retrieval_at_optimal_evaluation",
    "Result-ER@5": "results_evidence_retrieval_at_5_evaluation",
}
DEV_NAMES = ("evidencebench_dev_id_0", "evidencebench_dev_id_1", "evidencebench_dev_id_2")

_ELEMENT = re.compile(r"^(\d+): (.*) \[End of text element \1\]$", re.MULTILINE)
_HYPOTHESIS = re.compile(r"^Hypothesis:\n(.*)$", re.MULTILINE)
_K = re.compile(r"at most (\d+)")
REGENERATION_PHRASE = "answer again in the same format"


@cache
def dev_set() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DEV.read_text())
    return data


def dev(*names: str) -> dict[str, Any]:
    return {name: dev_set()[name] for name in names}


def toy(hypothesis: str = "Drug D lowers marker M in mice.") -> dict[str, Any]:
    """12 elements in 4 sections (abstract 0-2, 3-6, 7-11 with a title and a subtitle); aspects
    a0..a3 covered by sentences 1, 5, 10, 11; a2 and a3 are results. Optimal: 4, results: 2."""
    types = ["abstract"] * 3 + ["section_name"] + ["normal_paragraph"] * 3
    types += ["section_name", "section_name"] + ["normal_paragraph"] * 3
    ids = ["a0", "a1", "a2", "a3"]
    return {
        "hypothesis": hypothesis,
        "paper_as_candidate_pool": [f"Sentence {i} of the toy paper." for i in range(12)],
        "sentence_types_in_candidate_pool": types,
        "aspect_list_ids": ids,
        "results_aspect_list_ids": ["a2", "a3"],
        "aspect2sentence_indices": {"a0": [1], "a1": [5], "a2": [10], "a3": [11]},
    }


TOY_TRUTH: dict[AspectGroup, list[int]] = {"all": [1, 5, 10, 11], "results": [10, 11]}


# -- the scripted model -------------------------------------------------------------------


def first_user(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def step_of(text: str) -> str:
    if "Section of the paper:" in text:
        return "section"
    if "Elements picked earlier:" in text:
        return "select"
    assert "Paper:" in text, text[:200]
    return "paper"


def about(body: dict[str, Any]) -> tuple[str, str, AspectGroup, int, list[int]]:
    """(step, hypothesis, group, K, shown indices) of the conversation's first prompt."""
    text = first_user(body)
    hypothesis = _HYPOTHESIS.search(text)
    k = _K.search(text)
    assert hypothesis is not None and k is not None, text[:300]
    group: AspectGroup = "results" if FOCUS["results"] in text else "all"
    shown = [int(m.group(1)) for m in _ELEMENT.finditer(text)]
    return step_of(text), hypothesis.group(1), group, int(k.group(1)), shown


def decision(indices: list[int]) -> str:
    return f"REASON: these elements describe the experiment.\nDECISION: {indices}"


def truthful(
    truth: Callable[[str, AspectGroup, int], list[int]], *, padding: bool = False
) -> Callable[[dict[str, Any]], str]:
    """Answers ``truth(hypothesis, group, K)`` restricted to what the request shows; with
    ``padding`` step 1 adds the section's first unchosen element while under K (so the union
    usually exceeds K and step 2 is asked)."""

    def answer(body: dict[str, Any]) -> str:
        step, hypothesis, group, k, shown = about(body)
        chosen = [i for i in truth(hypothesis, group, k) if i in shown]
        if padding and step == "section" and len(chosen) < k:
            chosen += [i for i in shown if i not in chosen][:1]
        return decision(chosen)

    return answer


def toy_truth(hypothesis: str, group: AspectGroup, k: int) -> list[int]:
    return TOY_TRUTH[group]


def released_truth(data: dict[str, Any]) -> Callable[[str, AspectGroup, int], list[int]]:
    """The released selection of the task with this hypothesis, group and K."""
    table: dict[tuple[str, AspectGroup, int], list[int]] = {}
    for name, instance in data.items():
        for task, k in task_sizes(instance, name).items():
            key = (instance["hypothesis"].strip(), TASK_K[task][0], k)
            table.setdefault(key, list(instance[RELEASED[task]]["one_selection_of_sentences"]))

    def truth(hypothesis: str, group: AspectGroup, k: int) -> list[int]:
        return table[(hypothesis, group, k)]

    return truth


@pytest.fixture
def replies(tmp_path: Path) -> Iterator[ReplyCache]:
    with ReplyCache(tmp_path / "replies.sqlite") as stored:
        yield stored


def chat_model(fake: FakeChat) -> OpenAIChatModel:
    return OpenAIChatModel(
        base_url=fake.base_url,
        model=DEFAULT_MODEL,
        timeout_s=5.0,
        max_attempts=2,
        max_invalid_retries=1,
        backoff_base_s=0.001,
        backoff_max_s=0.01,
    )


def expected_recalls(data: dict[str, Any]) -> dict[Task, dict[str, float]]:
    out: dict[Task, dict[str, float]] = {task: {} for task in TASK_K}
    for name, instance in data.items():
        for task in task_sizes(instance, name):
            selection = instance[RELEASED[task]]["one_selection_of_sentences"]
            out[task][name] = task_recall(selection, instance, task, name)
    return out


def steps_asked(fake: FakeChat) -> list[str]:
    return [step_of(first_user(r.body)) for r in fake.chats()]


# -- parsing and sections -------------------------------------------------------------------


def test_parse_retrieval_keeps_the_reply_order_and_accepts_more_than_k() -> None:
    assert parse_retrieval("Because.\nDECISION: [17, 3, 42]", range(50)) == (17, 3, 42)
    assert parse_retrieval("**DECISION:** []", range(5)) == ()
    assert parse_retrieval("DECISION: [ 4 ,7 ]", frozenset({4, 7, 9})) == (4, 7)
    assert RetrievalValidator(range(3, 6))("DECISION: [5, 3]") == (5, 3)


@pytest.mark.parametrize(
    ("reply", "allowed", "reason"),
    [
        ("I pick [1, 2].", range(5), "no line starts with the keyword DECISION"),
        ("DECISION: 1, 2", range(5), "is not a list of indices"),
        ("DECISION: [1, 2]\nThat is all.", range(5), "is not a list of indices"),
        ("DECISION: [1, two]", range(5), "'two' is not a non-negative integer"),
        ("DECISION: [-1]", range(5), "'-1' is not a non-negative integer"),
        ("DECISION: [5]", range(5), r"index 5 is not one of the text elements shown \(0 to 4\)"),
        ("DECISION: [2]", range(3, 6), r"index 2 is not one of the text elements shown \(3 to 5\)"),
        ("DECISION: [8]", frozenset({3, 9}), r"index 8 is not one of the text elements shown \(3, 9\)"),
        ("DECISION: [1, 1]", range(5), "index 1 is given twice"),
        ("DECISION: [1]\nDECISION: [2]", range(5), "starts 2 lines"),
    ],
)
def test_parse_retrieval_refuses_anything_else(reply: str, allowed: Any, reason: str) -> None:
    with pytest.raises(ReplyInvalid, match=reason):
        parse_retrieval(reply, allowed)


def test_sections_start_at_titles_and_keep_the_abstract_apart() -> None:
    assert sections(toy()["sentence_types_in_candidate_pool"]) == [range(0, 3), range(3, 7), range(7, 12)]
    # Paragraphs before the first title are a section; so is what follows the abstract.
    types = [
        "normal_paragraph",
        "abstract",
        "abstract",
        "normal_paragraph",
        "section_name",
        "normal_paragraph",
    ]
    assert sections(types) == [range(0, 1), range(1, 3), range(3, 4), range(4, 6)]
    assert sections([]) == []
    with pytest.raises(ValueError, match="unknown sentence types \\['figure'\\]"):
        sections(["abstract", "figure"], "x")


@needs_dev
def test_sections_of_a_released_instance_cover_its_pool_in_order() -> None:
    instance = dev_set()[DEV_NAMES[0]]
    types = instance["sentence_types_in_candidate_pool"]
    spans = sections(types)
    assert spans[0] == range(0, 12) and all(types[i] == "abstract" for i in spans[0])
    assert [i for span in spans for i in span] == list(range(len(types)))
    assert all(types[span.start] == "section_name" for span in spans[2:])


def test_the_default_prompt_shows_pool_indices_k_and_the_focus() -> None:
    pool = toy()["paper_as_candidate_pool"]
    text = load_prompt("retrieve").render(
        hypothesis="H.", elements=render_pool_elements(pool, range(3, 5)), k="4", focus=FOCUS["results"]
    )
    assert "3: Sentence 3 of the toy paper. [End of text element 3]\n4: Sentence 4" in text
    assert "at most 4 text elements" in text and FOCUS["results"] in text and "DECISION:" in text
    assert "$" not in text


# -- strategies end to end ------------------------------------------------------------------


@needs_dev
@pytest.mark.parametrize("strategy", ["default", "regenerate", "section"])
def test_released_selections_score_their_recall_and_a_rerun_sends_nothing(
    strategy: Any, replies: ReplyCache
) -> None:
    data = dev(*DEV_NAMES)
    with FakeChat(answer=truthful(released_truth(data), padding=strategy == "section")) as fake:
        retriever = LLMRetriever(chat_model(fake), replies, strategy=strategy)
        run = retriever.select_all(data)
        assert run.failures == {}
        for name, instance in data.items():
            sizes = task_sizes(instance, name)
            assert set(run.selections[name]) == set(sizes)
            for task, chosen in run.selections[name].items():
                released = instance[RELEASED[task]]["one_selection_of_sentences"]
                # Section strategy: a skipped step 2 keeps step 1's padding when it fits in K.
                assert set(released) <= set(chosen) and len(chosen) <= sizes[task]
        n_tasks = sum(len(task_sizes(i, n)) for n, i in data.items())
        assert run.stats.truncated == () and run.stats.regenerations == 0
        asked = steps_asked(fake)
        assert len(asked) == run.stats.sent == run.stats.replies
        if strategy == "section":
            n_sections = {n: len(sections(i["sentence_types_in_candidate_pool"])) for n, i in data.items()}
            assert asked.count("section") == sum(
                len(task_sizes(i, n)) * n_sections[n] for n, i in data.items()
            )
            assert asked.count("select") == n_tasks - run.stats.skipped_select > 0
        else:
            assert asked == ["paper"] * n_tasks

        fake.clear()
        scores = evaluate(data, retriever)
        assert fake.chats() == []  # every round, step 2 included, comes from the cache
    expected = expected_recalls(data)
    for task, score in scores.items():
        assert score.per_instance == pytest.approx(expected[task])
    assert scores["ER@optimal"].mean == 1.0 and scores["Result-ER@optimal"].mean == 1.0


def test_section_strategy_asks_each_section_then_chooses_k_from_the_union(replies: ReplyCache) -> None:
    data = {"toy": toy()}
    with FakeChat(answer=truthful(toy_truth, padding=True)) as fake:
        run = LLMRetriever(chat_model(fake), replies, strategy="section").select_all(data)
        chats = fake.chats()
    assert run.failures == {}
    assert run.selections["toy"] == {
        "ER@optimal": [1, 5, 10, 11],
        "ER@10": [0, 1, 3, 5, 7, 10, 11],  # the padded union has 7 <= 10 elements: no step 2
        "Result-ER@optimal": [10, 11],
        "Result-ER@5": [0, 3, 7, 10, 11],  # union of 5 <= 5: no step 2
    }
    assert run.stats.skipped_select == 2
    by_step: dict[str, list[RecordedRequest]] = {}
    for request in chats:
        by_step.setdefault(step_of(first_user(request.body)), []).append(request)
    assert len(by_step["section"]) == 4 * 3  # every task asks every section
    for request in by_step["section"]:
        shown = about(request.body)[4]
        assert shown in ([0, 1, 2], [3, 4, 5, 6], [7, 8, 9, 10, 11])
    selects = sorted((about(r.body)[3], about(r.body)[4]) for r in by_step["select"])
    assert selects == [(2, [0, 3, 10, 11]), (4, [0, 1, 3, 5, 7, 10, 11])]
    ids = sorted(json.dumps(r.body["messages"]) for r in chats)
    assert len(ids) == len(set(ids))


def test_default_strategy_cuts_a_reply_over_k_to_its_first_k_and_records_it(replies: ReplyCache) -> None:
    def too_many(body: dict[str, Any]) -> str:
        _, _, group, k, _ = about(body)
        return decision([11, 10, 5, 1, 0, 2, 3, 4, 6, 7, 8][: k + 1] if group == "all" else [11, 2, 10])

    with FakeChat(answer=too_many) as fake:
        run = LLMRetriever(chat_model(fake), replies, strategy="default").select_all({"toy": toy()})
        assert len(fake.chats()) == 4 and not any(REGENERATION_PHRASE in t for t in fake.asked())
    assert run.selections["toy"] == {
        "ER@optimal": [11, 10, 5, 1],
        "ER@10": [11, 10, 5, 1, 0, 2, 3, 4, 6, 7],
        "Result-ER@optimal": [11, 2],
        "Result-ER@5": [11, 2, 10],
    }
    assert run.stats.truncated == ("toy/ER@10/paper", "toy/ER@optimal/paper", "toy/Result-ER@optimal/paper")
    assert run.stats.regenerations == 0


def test_regeneration_appends_the_reply_and_a_note_and_ends_within_k(replies: ReplyCache) -> None:
    def stubborn(body: dict[str, Any]) -> str:
        """Over K on the first ask; on the second regeneration of Result-ER@optimal, within K."""
        _, _, group, k, _ = about(body)
        turns = len(body["messages"])
        if group == "results" and k == 2 and turns == 5:
            return decision([11, 10])
        if group == "results" and k == 5:
            return decision([10, 11])
        return decision([11, 10, 5, 1, 0, 2, 3, 4, 6, 7, 8][: k + 1])

    with FakeChat(answer=stubborn) as fake:
        retriever = LLMRetriever(chat_model(fake), replies, strategy="regenerate", max_regenerations=2)
        run = retriever.select_all({"toy": toy()})
        chats = fake.chats()
        fake.clear()
        again = retriever.select_all({"toy": toy()})
        assert fake.chats() == []
    # ER@optimal and ER@10: 1 + 2 regenerations, then cut; Result-ER@optimal: answered at the 2nd
    # regeneration; Result-ER@5: within K at once.
    assert len(chats) == 3 + 3 + 3 + 1
    assert run.stats.regenerations == 6 and run.stats.calls == 3
    assert run.selections["toy"] == {
        "ER@optimal": [11, 10, 5, 1],
        "ER@10": [11, 10, 5, 1, 0, 2, 3, 4, 6, 7],
        "Result-ER@optimal": [11, 10],
        "Result-ER@5": [10, 11],
    }
    assert run.stats.truncated == ("toy/ER@10/paper#regen2", "toy/ER@optimal/paper#regen2")
    assert again.selections == run.selections and again.stats.hits == 10 and again.stats.sent == 0
    regenerated = [r for r in chats if len(r.body["messages"]) > 1]
    for request in regenerated:
        roles = [m["role"] for m in request.body["messages"]]
        assert roles in (["user", "assistant", "user"], ["user", "assistant", "user", "assistant", "user"])
        assert REGENERATION_PHRASE in request.user_text
        k = about(request.body)[3]
        assert f"more than {k} text elements" in request.user_text
        assert request.body["messages"][1]["content"].startswith("REASON:")


def test_malformed_replies_end_in_failures_and_never_in_selections(replies: ReplyCache) -> None:
    good, bad = toy(), toy("Drug B raises marker M in rats.")

    def answer(body: dict[str, Any]) -> str:
        step, hypothesis, group, _, shown = about(body)
        if "Drug B" in hypothesis and group == "results":
            return "I would pick elements 10 and 11."
        if "Drug B" in hypothesis and step == "section" and shown[0] == 3:
            return decision([1])  # outside the section shown
        return decision([i for i in TOY_TRUTH[group] if i in shown])

    with FakeChat(answer=answer) as fake:
        model = chat_model(fake)
        flat = LLMRetriever(model, replies, strategy="default").select_all({"good": good, "bad": bad})
        by_section = LLMRetriever(model, replies, strategy="section").select_all({"good": good, "bad": bad})
        with pytest.raises(RetrievalFailed, match="bad: Result-ER@optimal got no valid reply"):
            LLMRetriever(model, replies, strategy="default")("bad", bad)
    assert set(flat.failures) == {"bad"} and set(flat.failures["bad"]) == {"Result-ER@optimal", "Result-ER@5"}
    assert set(flat.selections["bad"]) == {"ER@optimal", "ER@10"} and len(flat.selections["good"]) == 4
    failure = flat.failures["bad"]["Result-ER@5"]
    assert failure.reason == "invalid_reply" and failure.custom_id == "bad/Result-ER@5/paper"
    assert set(by_section.failures["bad"]) == set(TASK_K)  # results: prose; all: index outside section 3-7
    assert "not one of the text elements shown (3 to 6)" in by_section.failures["bad"]["ER@10"].detail
    assert by_section.selections["bad"] == {} and by_section.selections["good"]["ER@optimal"] == [
        1,
        5,
        10,
        11,
    ]
    assert flat.stats.failures == {"invalid_reply": 2}


def test_the_retriever_is_a_system_scored_by_evaluate(replies: ReplyCache) -> None:
    with FakeChat(answer=truthful(toy_truth)) as fake:
        scores = evaluate({"toy": toy()}, LLMRetriever(chat_model(fake), replies))
    assert {task: score.mean for task, score in scores.items()} == dict.fromkeys(TASK_K, 1.0)


def test_bad_instances_and_settings_are_refused_before_anything_is_sent(replies: ReplyCache) -> None:
    with FakeChat(answer=truthful(toy_truth)) as fake:
        model = chat_model(fake)
        with pytest.raises(ValueError, match="the hypothesis is missing or blank"):
            LLMRetriever(model, replies).select_all({"ok": toy(), "x": {**toy(), "hypothesis": " "}})
        short = {**toy(), "sentence_types_in_candidate_pool": ["abstract"]}
        with pytest.raises(ValueError, match="one type per pool sentence \\(12\\), got 1"):
            LLMRetriever(model, replies, strategy="section").select_all({"x": short})
        with pytest.raises(ValueError, match="unknown strategy"):
            LLMRetriever(model, replies, strategy="icl")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_regenerations"):
            LLMRetriever(model, replies, max_regenerations=-1)
        assert fake.chats() == []


# -- negation (App. E.8) ---------------------------------------------------------------------


def test_negation_rewrites_each_hypothesis_and_refuses_a_repeat(replies: ReplyCache) -> None:
    hypotheses = {"a": "Drug D lowers marker M in mice.", "b": "Smoking raises risk R.", "c": "X causes Y."}

    def answer(body: dict[str, Any]) -> str:
        text = first_user(body)
        if "Drug D" in text:
            return "It is the opposite.\nHYPOTHESIS: Drug D raises marker M in mice."
        if "Smoking" in text:
            return "HYPOTHESIS: smoking   raises risk R."  # the same claim
        return "The opposite is that X does not cause Y."  # no keyword

    with FakeChat(answer=answer) as fake:
        negations, failures, stats = negate(chat_model(fake), replies, hypotheses)
    assert negations == {"a": "Drug D raises marker M in mice."}
    assert failures["b"].detail == "the negated hypothesis repeats the original"
    assert failures["c"].reason == "invalid_reply" and stats.sent == 3
    assert "Drug D lowers marker M in mice." in negation_request("n", hypotheses["a"]).messages[0]["content"]
    negated = negated_set({"a": toy()}, negations)
    assert negated["a"]["hypothesis"] == "Drug D raises marker M in mice."
