"""The EvidenceBench LLM steps on the embedded model (Gemma 3 270M behind llama-cpp-python's server).

One server for the module (``LLMConfig(engine="llama-cpp")``), short pools and small
``max_tokens``: the replies prove the plumbing (prompt → grammar → server → validator →
cache), not their quality. Skipped, saying why, when ``llama_cpp`` or the model package is
not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tasks.common.llm.cache import ReplyCache, cached_chat
from tasks.common.llm.config import LLMConfig, chat_model, close_local_servers
from tasks.common.llm.port import ChatFailure, ChatModel, ChatReply, Sampling
from tasks.evidencebench.alignment import align
from tasks.evidencebench.grammars import aspects_grammar, choice_grammar, labels_grammar
from tasks.evidencebench.llm_steps import aspects_request, decompose_request
from tasks.evidencebench.parsers import labels_validator, parse_aspects, parse_leak_check
from tests.common.test_llama_server import needs_gemma, needs_llama
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, needs_llama, needs_gemma]

SUMMARY = (
    "In a cohort of 120 workers exposed to benzene, leukaemia incidence was twice that of "
    "unexposed controls. Exposure was measured with personal air samplers."
)
ASPECTS = {
    "a0": "Leukaemia incidence in exposed workers was twice that of unexposed controls.",
    "a1": "Benzene exposure was measured with personal air samplers.",
}
POOL = [
    "Methods",
    "We followed 120 workers exposed to benzene for ten years.",
    "Exposure was measured with personal air samplers worn during each shift.",
    "Unexposed office staff served as controls.",
    "Results",
    "Leukaemia incidence among exposed workers was twice that of controls.",
    "No difference in lymphoma incidence was seen.",
    "The study was funded by a public grant.",
]
THREE_ASPECTS = [
    "The cohort comprised 120 benzene-exposed workers.",
    "Exposure was measured with personal air samplers.",
    "Leukaemia incidence was twice that of controls.",
]


def sampling(max_tokens: int) -> Sampling:
    return Sampling(temperature=0.0, top_p=1.0, max_tokens=max_tokens, seed=0)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChatModel]:
    work = tmp_path_factory.mktemp("llama")
    # No re-ask: grammar-bound replies validate first time, and at temperature 0 with a fixed
    # seed a re-ask repeats the reply (only decompose may repeat an aspect).
    config = LLMConfig(engine="llama-cpp", max_invalid_retries=0, timeout_s=60.0)
    try:
        yield chat_model(config, REPO, work)
    finally:
        close_local_servers()


@pytest.fixture
def cache(tmp_path: Path) -> ReplyCache:
    return ReplyCache(tmp_path / "c.sqlite")


def test_alignment_with_grammar_answers_every_window_then_comes_from_the_cache(
    model: ChatModel, cache: ReplyCache
) -> None:
    first = align(model, cache, ASPECTS, SUMMARY, POOL, constrain=True, sampling=sampling(40))
    assert first.failures == {} and first.failed_windows == {}
    assert (
        first.stats.sent == 2 and first.stats.replies == 2 and first.stats.hits == 0
    )  # 2 aspects x 1 window
    assert set(first.selected) == set(ASPECTS)
    for selection in first.selected.values():
        assert isinstance(selection, tuple)
        assert all(isinstance(i, int) and 0 <= i < len(POOL) for i in selection)
        assert list(selection) == sorted(set(selection))

    again = align(model, cache, ASPECTS, SUMMARY, POOL, constrain=True, sampling=sampling(40))
    assert again.stats.sent == 0 and again.stats.hits == 2
    assert again.selected == first.selected and again.failures == {}


def test_label_step_gives_three_labels(model: ChatModel, cache: ReplyCache) -> None:
    request = replace(
        aspects_request("label", "label-1", SUMMARY, THREE_ASPECTS, sampling=sampling(40)),
        grammar=labels_grammar(3),
    )
    outcomes, stats = cached_chat(model, cache, [request], labels_validator(3))
    (outcome,) = outcomes
    assert isinstance(outcome, ChatReply), outcome
    assert outcome.custom_id == "label-1" and not outcome.cached
    assert len(outcome.value) == 3
    assert set(outcome.value) <= {"results", "background", "methods"}
    assert stats.sent == 1 and stats.replies == 1


def test_decompose_and_leak_check_replies_parse(model: ChatModel, cache: ReplyCache) -> None:
    decompose = replace(
        # Up to 3 lines of 200 characters: 200 tokens leave room, so the reply is not cut.
        decompose_request("decompose-1", "pmc_1", SUMMARY, POOL[:4], sampling=sampling(200)),
        grammar=aspects_grammar(3),
    )
    (outcome,), _ = cached_chat(model, cache, [decompose], parse_aspects)
    if isinstance(outcome, ChatReply):
        aspects = outcome.value
        assert 1 <= len(aspects) <= 3
        assert len({a.casefold() for a in aspects}) == len(aspects)
    else:
        # The grammar cannot rule out two equal aspects; the parser refuses them.
        assert isinstance(outcome, ChatFailure)
        assert outcome.reason == "invalid_reply" and "same" in outcome.detail, outcome
        aspects = tuple(THREE_ASPECTS)

    leak = replace(
        aspects_request("leak_check", "leak-1", SUMMARY, list(aspects), sampling=sampling(16)),
        grammar=choice_grammar("DECISION", ("yes", "no")),
    )
    (verdict,), stats = cached_chat(model, cache, [leak], parse_leak_check)
    assert isinstance(verdict, ChatReply), verdict
    assert verdict.value in (True, False)
    assert verdict.text.strip() in ("DECISION: yes", "DECISION: no")
    assert stats.failures == {}
