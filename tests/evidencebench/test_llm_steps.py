"""EvidenceBench's LLM steps: prompts, strict reply parsers, and the sliding-window alignment.

The alignment runs end to end through the OpenAI adapter against tests/fakes/llm_server.py's
FakeChat, whose scripted answers depend on what each window shows, with injected faults.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from irforge.errors import ConfigError
from tasks.common.llm.cache import ReplyCache
from tasks.common.llm.openai_chat import OpenAIChatModel
from tasks.common.llm.port import ChatRequest, ReplyInvalid
from tasks.evidencebench.alignment import (
    Alignment,
    align,
    alignment_cost,
    alignment_requests,
    design_costs,
    parse_selection,
    render_elements,
    windows,
)
from tasks.evidencebench.llm_steps import (
    PLACEHOLDERS,
    aspects_request,
    decompose_request,
    load_prompt,
    recover_hypothesis_request,
    refine_request,
    suitability_request,
    trim_hypothesis_request,
)
from tasks.evidencebench.parsers import (
    SUITABLE,
    labels_validator,
    parse_aspects,
    parse_hypothesis,
    parse_leak_check,
    parse_suitability,
    refine_validator,
)
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, last_user_text

PARAGRAPH = (
    "Aristolochic acid is a known carcinogen. Hoang et al. (2016) found that ingesting more than "
    "250 mg of AA raised the risk of ccRCC (OR 1.25). A distinctive AA signature was seen in 6 of "
    "10 exomes. [The working group noted the small sample.]"
)
CITATION = "Hoang et al. (2016)"


def content(request: ChatRequest) -> str:
    assert len(request.messages) == 1 and request.messages[0]["role"] == "user"
    return request.messages[0]["content"]


# -- prompts ---------------------------------------------------------------------------


@pytest.mark.parametrize("step", sorted(PLACEHOLDERS))
def test_every_prompt_file_loads_with_exactly_its_placeholders_and_loses_its_header(step: Any) -> None:
    prompt = load_prompt(step)
    assert (prompt.path.parent.name, prompt.path.name) == ("evidencebench", f"{step}.md")
    assert set(prompt.template.get_identifiers()) == PLACEHOLDERS[step]
    values = {name: f"<{name.upper()}>" for name in PLACEHOLDERS[step]}
    text = prompt.render(**values)
    assert "<!--" not in text and "-->" not in text
    assert all(value in text for value in values.values())
    with pytest.raises(ValueError, match="values missing for"):
        prompt.render(**dict(list(values.items())[1:]))
    with pytest.raises(ValueError, match=r"unknown values \['extra'\]"):
        prompt.render(**values, extra="x")


def test_a_prompt_file_with_a_wrong_placeholder_or_a_stray_dollar_is_a_config_error(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.md"
    wrong.write_text("<!-- doc -->\nSummary: $summary, cost $colour\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"placeholders \['\$colour', '\$summary'\] but the step fills"):
        load_prompt("suitability", wrong)
    stray = tmp_path / "stray.md"
    stray.write_text("$summary costs 5 $\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="write \\$\\$ for a dollar sign"):
        load_prompt("suitability", stray)
    with pytest.raises(ConfigError, match="cannot read it"):
        load_prompt("suitability", tmp_path / "missing.md")
    mine = tmp_path / "mine.md"
    mine.write_text("Classify: $summary", encoding="utf-8")
    request = suitability_request("s1", "Mice gained weight.", prompt=load_prompt("suitability", mine))
    assert content(request) == "Classify: Mice gained weight."


# -- refine (App. H.2) -------------------------------------------------------------------


def test_refine_round_trip_keeps_verbatim_sentences_with_the_citation() -> None:
    request = refine_request("r1", PARAGRAPH, CITATION)
    assert request.custom_id == "r1" and request.json_schema is None
    assert PARAGRAPH in content(request) and CITATION in content(request)
    validate = refine_validator(PARAGRAPH, CITATION)
    reply = (
        "The first sentence is background and the last a limitation.\n"
        "HINT: Hoang et al. (2016) found that ingesting more than 250 mg of AA raised the risk of ccRCC "
        "(OR 1.25).\nA distinctive AA signature was seen in 6 of 10 exomes.\n"
    )
    assert validate(reply) == (
        "Hoang et al. (2016) found that ingesting more than 250 mg of AA raised the risk of ccRCC (OR 1.25).",
        "A distinctive AA signature was seen in 6 of 10 exomes.",
    )


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("The answer is the second sentence.", "no line starts with the keyword HINT:"),
        ("HINT:\n\n", "no sentence after the keyword HINT:"),
        (
            "HINT: A distinctive AA signature was seen in 6 of 10 exomes.",
            "no selected sentence contains the citation",
        ),
        ("HINT: Hoang et al. (2016) found that AA is bad.", "sentence 1 .* is not copied verbatim"),
        ("HINT: x\nHINT: y", "the keyword HINT: starts 2 lines"),
        (
            "HINT: A distinctive AA signature was seen in 6 of 10 exomes.\n"
            "A distinctive AA signature was seen in 6 of 10 exomes.",
            "sentence 2 .* is given twice",
        ),
    ],
)
def test_refine_replies_that_break_the_rules_are_invalid(reply: str, reason: str) -> None:
    with pytest.raises(ReplyInvalid, match=reason):
        refine_validator(PARAGRAPH, CITATION)(reply)


def test_refine_request_refuses_a_citation_that_is_not_in_the_paragraph() -> None:
    with pytest.raises(ValueError, match="does not occur in the paragraph"):
        refine_request("r1", PARAGRAPH, "Smith et al. (2020)")
    with pytest.raises(ValueError, match="paragraph is empty"):
        refine_request("r1", "  ", CITATION)


# -- suitability (App. H.3) ---------------------------------------------------------------


def test_suitability_round_trip_and_the_kept_labels() -> None:
    request = suitability_request("s1", "Mice fed AA developed tumours in 12 weeks.")
    assert "Mice fed AA developed tumours in 12 weeks." in content(request)
    assert parse_suitability("It reports an outcome.\nDECISION: results") == "results"
    assert parse_suitability("**DECISION:** Both\n") == "both"
    assert parse_suitability("DECISION: experiment") == "experiment"
    assert parse_suitability("DECISION:neither") == "neither"
    assert {"results", "both"} == SUITABLE


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("results", "no line starts with the keyword DECISION:"),
        ("DECISION: results.", "'results.' is not one of experiment, results, both, neither"),
        ("DECISION: results and both", "is not one of"),
        ("DECISION: both\nbecause it has methods", "2 lines after the keyword DECISION:"),
        ("DECISION:", "nothing after the keyword DECISION:"),
        ("DECISION: both\nDECISION: results", "starts 2 lines"),
    ],
)
def test_suitability_rejects_anything_but_one_label(reply: str, reason: str) -> None:
    with pytest.raises(ReplyInvalid, match=reason):
        parse_suitability(reply)


# -- hypothesis (App. G) ---------------------------------------------------------------


def test_hypothesis_recover_and_trim_round_trip() -> None:
    recover = recover_hypothesis_request("h1", "Review context about AA and kidney cancer.", PARAGRAPH)
    assert "Review context about AA and kidney cancer." in content(recover) and PARAGRAPH in content(recover)
    long = "AA exposure causes ccRCC, as shown by an OR of 1.25 and a mutational signature."
    trim = trim_hypothesis_request("h1", "Review context.", long)
    assert long in content(trim) and "Review context." in content(trim)
    assert parse_hypothesis(f"Step 1: ...\nStep 2: ...\nHYPOTHESIS: {long}\n") == long
    assert (
        parse_hypothesis("HYPOTHESIS: AA-induced mutations cause RCC.") == "AA-induced mutations cause RCC."
    )


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("AA causes RCC.", "no line starts with the keyword HYPOTHESIS:"),
        ("HYPOTHESIS:   \n", "nothing after the keyword HYPOTHESIS:"),
        ("HYPOTHESIS: AA causes RCC.\nI hope this helps.", "2 lines after the keyword HYPOTHESIS:"),
        ("HYPOTHESIS: " + "very " * 300 + "long", "more than 1000"),
    ],
)
def test_hypothesis_parser_rejects_missing_multiline_or_overlong_answers(reply: str, reason: str) -> None:
    with pytest.raises(ReplyInvalid, match=reason):
        parse_hypothesis(reply)


# -- decompose and leak check (App. C.1) -----------------------------------------------


def test_decompose_round_trip_shows_each_pool_sentence_on_its_own_line() -> None:
    sentences = ["We enrolled 92 patients.", "The odds ratio was\n1.25 for ccRCC."]
    request = decompose_request("d1", "pmc_1280405", PARAGRAPH, sentences)
    text = content(request)
    assert "pmc_1280405" in text and PARAGRAPH in text
    assert "We enrolled 92 patients.\nThe odds ratio was 1.25 for ccRCC." in text
    reply = (
        "ASPECTS:\n1. Ingesting more than 250 mg of AA raised the risk of ccRCC (OR 1.25).\n\n"
        "2) A distinctive AA signature was seen in 6 of 10 exomes.\n"
    )
    assert parse_aspects(reply) == (
        "Ingesting more than 250 mg of AA raised the risk of ccRCC (OR 1.25).",
        "A distinctive AA signature was seen in 6 of 10 exomes.",
    )
    with pytest.raises(ValueError, match="sentence #1 is empty"):
        decompose_request("d1", "pmc_1", PARAGRAPH, ["ok", " "])


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("1. one\n2. two", "no line starts with the keyword ASPECTS:"),
        ("ASPECTS:", "no aspect after the keyword ASPECTS:"),
        ("ASPECTS:\n1. one\n3. three", "item numbered 3 where 2 was due"),
        ("ASPECTS:\n1. one\n- two", "line '- two' after ASPECTS: is not numbered like '2.'"),
        ("ASPECTS:\n1. One aspect.\n2. one  aspect.", "aspects 1 and 2 are the same"),
        ("ASPECTS:\n1. one\nThese are all the aspects.", "is not numbered"),
    ],
)
def test_aspect_parser_rejects_bad_lists(reply: str, reason: str) -> None:
    with pytest.raises(ReplyInvalid, match=reason):
        parse_aspects(reply)


def test_leak_check_round_trip() -> None:
    aspects = ["AA raised the risk of ccRCC.", "The OR was 1.25."]
    text = content(aspects_request("leak_check", "l1", PARAGRAPH, aspects))
    assert "1. AA raised the risk of ccRCC.\n2. The OR was 1.25." in text and PARAGRAPH in text
    assert parse_leak_check("Aspect 2 adds a p-value.\nDECISION: yes") is True
    assert parse_leak_check("All from the statement.\nDECISION: No") is False
    with pytest.raises(ReplyInvalid, match="'true' is neither yes nor no"):
        parse_leak_check("DECISION: True")
    with pytest.raises(ReplyInvalid, match="no line starts with the keyword DECISION:"):
        parse_leak_check("Judgment: True")
    with pytest.raises(ValueError, match="no aspect given"):
        aspects_request("leak_check", "l1", PARAGRAPH, [])


# -- labels ------------------------------------------------------------------------------


def test_label_round_trip_gives_one_label_per_aspect_in_order() -> None:
    aspects = ["92 patients were enrolled.", "The OR was 1.25.", "AA is a known carcinogen."]
    text = content(aspects_request("label", "b1", PARAGRAPH, aspects))
    assert "1. 92 patients were enrolled.\n2. The OR was 1.25.\n3. AA is a known carcinogen." in text
    validate = labels_validator(3)
    assert validate("LABELS:\n1: methods\n2: Results\n3: background") == ("methods", "results", "background")


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("LABELS:\n1: methods\n2: results", "2 labels for 3 aspects"),
        ("LABELS:\n1: methods\n2: results\n3: results\n4: methods", "4 labels for 3 aspects"),
        ("LABELS:\n1: methods\n2: findings\n3: results", "aspect 2: 'findings' is not one of"),
        ("LABELS:\n1: methods\n3: results\n2: results", "item numbered 3 where 2 was due"),
        ("1: methods\n2: results\n3: results", "no line starts with the keyword LABELS:"),
    ],
)
def test_label_parser_rejects_wrong_counts_labels_and_order(reply: str, reason: str) -> None:
    with pytest.raises(ReplyInvalid, match=reason):
        labels_validator(3)(reply)


# -- windows and the selection parser ---------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, []),
        (1, [(0, 1)]),
        (10, [(0, 10)]),
        (11, [(0, 10), (5, 11)]),
        (23, [(0, 10), (5, 15), (10, 20), (15, 23)]),
    ],
)
def test_windows_hand_checked(n: int, expected: list[tuple[int, int]]) -> None:
    assert [(w.start, w.stop) for w in windows(n)] == expected


@pytest.mark.parametrize("n", range(0, 60))
def test_windows_cover_every_element_and_overlap_by_five(n: int) -> None:
    spans = windows(n)
    assert sorted({i for w in spans for i in w}) == list(range(n))
    assert all(1 <= len(w) <= 10 for w in spans)
    for before, after in itertools.pairwise(spans):
        assert after.start - before.start == 5 and len(set(before) & set(after)) == min(5, len(after))
        assert after.stop > before.stop  # no window inside the one before it


def test_windows_refuse_nonsense_sizes() -> None:
    with pytest.raises(ValueError, match="1 <= stride <= size"):
        windows(5, size=3, stride=4)
    with pytest.raises(ValueError, match="negative"):
        windows(-1)


def test_selection_parser_reads_lists_and_sorts_them() -> None:
    assert parse_selection("REASON: none fits.\nDECISION: []", 10) == ()
    assert parse_selection("REASON: 3 and 0 state it.\nDECISION: [3, 0]", 10) == (0, 3)
    assert parse_selection("DECISION: [ 9 ]", 10) == (9,)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("REASON: fits.", "no line starts with the keyword DECISION:"),
        ("DECISION: [10]", "index 10 is outside the window, whose elements are numbered 0 to 9"),
        ("DECISION: [1, 1]", "index 1 is given twice"),
        ("DECISION: [-1]", "'-1' is not a non-negative integer index"),
        ("DECISION: [1.5]", "'1.5' is not a non-negative integer"),
        ("DECISION: ['2']", "is not a non-negative integer"),
        ("DECISION: [1,]", "'' is not a non-negative integer"),
        ("DECISION: 1, 2", "is not a list of indices"),
        ("DECISION: [1] because it fits", "is not a list of indices"),
    ],
)
def test_selection_parser_rejects_malformed_and_out_of_range_replies(reply: str, reason: str) -> None:
    with pytest.raises(ReplyInvalid, match=reason):
        parse_selection(reply, 10)


def test_alignment_requests_show_window_elements_numbered_from_zero() -> None:
    pool = [f"Sentence {i} text." for i in range(12)]
    planned = alignment_requests({"a1": "Aspect one."}, "The summary.", pool)
    assert [(p.request.custom_id, p.aspect_id, p.window) for p in planned] == [
        ("a1@0-10", "a1", range(0, 10)),
        ("a1@5-12", "a1", range(5, 12)),
    ]
    text = content(planned[1].request)
    assert render_elements(pool[5:12]) in text
    assert "0: Sentence 5 text. [End of text element 0]\n" in text
    assert "6: Sentence 11 text. [End of text element 6]" in text
    assert "Sentence 4 text." not in text
    assert "Aspect one." in text and "The summary." in text
    with pytest.raises(ValueError, match="pool element 1 is empty"):
        alignment_requests({"a1": "x"}, "s", ["ok", ""])
    with pytest.raises(ValueError, match="aspect 'a1' is empty"):
        alignment_requests({"a1": " "}, "s", ["ok"])


# -- alignment end to end against FakeChat -----------------------------------------------

ASPECTS = {"A": "Aspect about alpha", "B": "Aspect about beta", "C": "Aspect about gamma"}
KEYWORDS = {"alpha": {3, 12, 21}, "beta": {7, 8, 16}, "gamma": set()}
_STATEMENT = re.compile(r"Statement:\n(.*)\n")
_ELEMENT = re.compile(r"^(\d+): (.*) \[End of text element \1\]$", re.MULTILINE)


def pool_of(n: int) -> list[str]:
    def words(i: int) -> str:
        return " ".join(k for k, where in KEYWORDS.items() if i in where) or "nothing"

    return [f"Sentence {i} mentions {words(i)}." for i in range(n)]


def keyword_answer(body: dict[str, Any]) -> str:
    """Select the window's elements that name the aspect's keyword (window-local indices)."""
    text = last_user_text(body)
    statement = _STATEMENT.search(text)
    assert statement is not None
    keyword = statement.group(1).split()[-1]
    chosen = [int(m.group(1)) for m in _ELEMENT.finditer(text) if keyword in m.group(2).split()[-1]]
    return f"REASON: these name {keyword}.\nDECISION: {chosen}"


def scripted(body: dict[str, Any]) -> str:
    """:func:`keyword_answer`, except that beta's window 10-20 always answers an index outside the
    window (a model that keeps counting from the paper's start)."""
    text = last_user_text(body)
    if "Aspect about beta" in text and "0: Sentence 10 " in text:
        return "REASON: sentence 16 states it.\nDECISION: [16]"
    return keyword_answer(body)


@pytest.fixture
def fake() -> Iterator[FakeChat]:
    with FakeChat(answer=scripted) as server:
        yield server


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[ReplyCache]:
    with ReplyCache(tmp_path / "replies.sqlite") as replies:
        yield replies


def chat_model(fake: FakeChat) -> OpenAIChatModel:
    return OpenAIChatModel(
        base_url=fake.base_url,
        model=DEFAULT_MODEL,
        timeout_s=5.0,
        max_attempts=3,
        max_invalid_retries=1,
        backoff_base_s=0.001,
        backoff_max_s=0.01,
    )


def asked_ids(fake: FakeChat) -> set[str]:
    """Which (aspect, window) each request received was about, as ``custom_id``s."""
    ids = set()
    for text in fake.asked():
        statement = _STATEMENT.search(text)
        first = _ELEMENT.search(text)
        assert statement is not None and first is not None
        aspect = next(k for k, v in ASPECTS.items() if v == statement.group(1))
        start = int(first.group(2).split()[1])
        n_elements = len(_ELEMENT.findall(text))
        ids.add(f"{aspect}@{start}-{start + n_elements}")
    return ids


def test_alignment_merges_windows_and_a_second_run_sends_nothing(cache: ReplyCache) -> None:
    pool = pool_of(23)
    summary = "Summary: alpha, beta and gamma."
    with FakeChat(answer=keyword_answer) as server:
        first = align(chat_model(server), cache, ASPECTS, summary, pool)

        assert first.failures == {} and first.failed_windows == {} and first.incomplete_aspects == frozenset()
        # 7, 8 and 12 are seen by two windows, 21 only by window 15-23; gamma is named nowhere.
        assert first.selected == {"A": (3, 12, 21), "B": (7, 8, 16), "C": ()}
        assert first.stats.sent == 12 and first.stats.hits == 0 and first.stats.replies == 12
        assert len(server.chats()) == 12

        server.clear()
        again = align(chat_model(server), cache, ASPECTS, summary, pool)
        assert server.chats() == []
        assert again.selected == first.selected and again.stats.hits == 12 and again.stats.sent == 0


def test_alignment_with_faults_ends_every_request_selected_or_quarantined(
    fake: FakeChat, cache: ReplyCache
) -> None:
    pool = pool_of(23)  # windows 0-10, 5-15, 10-20, 15-23
    fake.inject("bad_json", 1, when="Sentence 1 ")  # one request of window 0-10: retried, then fine
    fake.inject(500, 1, when="Sentence 13 ")  # one request of window 5-15 or 10-20: retried
    fake.inject(500, 100, when="Sentence 22 ")  # window 15-23 always fails: request_failed
    summary = "Summary: alpha, beta and gamma."

    result = align(chat_model(fake), cache, ASPECTS, summary, pool)

    assert set(result.failures) == {"A@15-23", "B@10-20", "B@15-23", "C@15-23"}
    assert result.failures["B@10-20"].reason == "invalid_reply"
    assert "index 16 is outside the window" in result.failures["B@10-20"].detail
    assert result.failures["B@10-20"].raw_text == "REASON: sentence 16 states it.\nDECISION: [16]"
    assert {result.failures[f"{a}@15-23"].reason for a in "ABC"} == {"request_failed"}
    assert result.failed_windows["B@10-20"] == ("B", range(10, 20))
    assert result.incomplete_aspects == {"A", "B", "C"}
    # A: 3 (window 0-10) and 12 (5-15, 10-20); 21 was only in the failed window 15-23.
    # B: 7 and 8 (0-10, 5-15); 16 was only in the two failed windows.
    assert result.selected == {"A": (3, 12), "B": (7, 8), "C": ()}
    assert result.stats.replies == 8 and result.stats.failures == {"request_failed": 3, "invalid_reply": 1}
    faults = [r.fault for r in fake.chats()]
    assert faults.count("bad_json") == 1 and faults.count(500) == 1 + 3 * 3  # 3 sends per failing request

    fake.clear()
    rerun = align(chat_model(fake), cache, ASPECTS, summary, pool)
    assert asked_ids(fake) == set(result.failures)  # only what failed is asked again
    assert rerun.selected == result.selected and rerun.stats.hits == 8


def test_alignment_selects_by_window_content_and_unions_overlapping_windows(cache: ReplyCache) -> None:
    def first_half_only(body: dict[str, Any]) -> str:
        """A model that only notices the first five elements of a window."""
        text = last_user_text(body)
        chosen = [
            int(m.group(1)) for m in _ELEMENT.finditer(text) if int(m.group(1)) < 5 and "alpha" in m.group(2)
        ]
        return f"REASON: seen.\nDECISION: {chosen}"

    pool = pool_of(23)
    with FakeChat(answer=first_half_only) as server:
        result = align(chat_model(server), cache, {"A": ASPECTS["A"]}, "Summary.", pool)
    # 3: window 0-10 (local 3); 12: window 10-20 (local 2) though 5-15 (local 7) misses it;
    # 21 is local 6 of the last window 15-23 and local >= 5 everywhere: never selected.
    assert result.selected == {"A": (3, 12)}
    assert isinstance(result, Alignment) and result.failures == {}


# -- cost of the designs --------------------------------------------------------------------


def test_design_costs_count_requests_and_whitespace_tokens() -> None:
    pool = pool_of(23)
    aspects = {"A": "Aspect about alpha", "B": "Aspect about beta"}
    summary = "Summary with five words."
    costs = design_costs(aspects, summary, pool)
    assert costs["sliding_window"].requests == 2 * 4
    assert costs["per_sentence"].requests == 2 * 23
    base = len(load_prompt("align").render(aspect="", summary="", elements="").split())
    # each element line adds "i:", "[End", "of", "text", "element", "i]" to the sentence's words
    per_sentence = sum(
        base + len(aspect.split()) + len(summary.split()) + 6 + len(sentence.split())
        for aspect in aspects.values()
        for sentence in pool
    )
    assert costs["per_sentence"].prompt_tokens == per_sentence
    window_tokens = sum(
        base + len(aspect.split()) + len(summary.split()) + sum(6 + len(pool[i].split()) for i in span)
        for aspect in aspects.values()
        for span in windows(23)
    )
    assert costs["sliding_window"].prompt_tokens == window_tokens
    assert costs["sliding_window"].tokens_per_request == window_tokens / 8
    assert alignment_cost(aspects, summary, []).requests == 0
    assert alignment_cost(aspects, summary, []).tokens_per_request == 0.0
