"""The chat-model port: what a stage needs from an LLM (judge, translator, generators).

A stage builds :class:`ChatRequest` objects (messages, sampling, an optional JSON schema
or GBNF grammar the reply must follow) and hands them to a :class:`ChatModel` adapter together with a
*validator*: a function that parses a reply's text and raises :class:`ReplyInvalid` when
the reply is not acceptable. Adapters request structured output where the server
supports it **and** always run the validator (servers ignore fields they do not know:
vLLM answers an outdated ``guided_json`` with unconstrained text). An invalid reply is
retried; when the retries are used up the request ends as a :class:`ChatFailure` carrying
the raw text — never as a made-up value.

Adapters: :mod:`tasks.common.llm.openai_chat` (any OpenAI-compatible server: vLLM, OpenAI,
llama.cpp), :mod:`tasks.common.llm.vllm_batch` (``vllm run-batch`` files on the GPU worker).
Requests go through :func:`tasks.common.llm.cache.cached_chat` so nothing answered is paid twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import IrforgeError


class Sampling(StrictModel):
    """Sampling parameters sent with every request; all of them enter fingerprints."""

    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(
        512, ge=1, description="Completion tokens per reply; a reply cut here is invalid."
    )
    seed: int | None = Field(0, description="Sent when set; servers that honour it make replies repeatable.")


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to obtain. ``custom_id`` is the caller's id (unique per call)."""

    custom_id: str
    messages: tuple[Mapping[str, str], ...]  # {"role": ..., "content": ...}
    sampling: Sampling = field(default_factory=Sampling)
    json_schema: Mapping[str, Any] | None = None  # the reply must be a JSON document of this schema
    schema_name: str = "reply"
    # A GBNF grammar (root rule ``root``) the reply must follow: how small local models are
    # held to the plain-text keyword formats (tasks.evidencebench.grammars). Sent only where the
    # adapter's ``grammar_field`` names a server field; the validator runs whatever is sent.
    grammar: str | None = None

    def __post_init__(self) -> None:
        # Servers apply one constraint per request (llama.cpp turns the schema into a grammar
        # itself); asking both would leave it to the server which one wins.
        if self.json_schema is not None and self.grammar is not None:
            raise ValueError(
                f"request {self.custom_id!r} carries both a JSON schema and a grammar: give one of them"
            )
        if self.grammar is not None and not self.grammar.strip():
            raise ValueError(f"request {self.custom_id!r} has an empty grammar: give None for no grammar")


@dataclass(frozen=True)
class ChatReply:
    """A reply that passed validation. ``value`` is what the validator returned."""

    custom_id: str
    text: str
    value: Any
    model: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    attempts: int  # requests sent for it in this call (0: answered from the cache)
    cached: bool = False


FailureReason = Literal["invalid_reply", "truncated", "request_failed"]


@dataclass(frozen=True)
class ChatFailure:
    """A request that ended without a valid reply.

    ``invalid_reply``: every attempt answered, none validated (``raw_text`` is the last);
    ``truncated``: the last reply stopped at ``max_tokens``; ``request_failed``: the server
    kept failing (HTTP 5xx / 429 / timeouts / refused connections) past the retries.
    Tokens count every attempt (they were paid for).
    """

    custom_id: str
    reason: FailureReason
    detail: str
    raw_text: str | None
    attempts: int
    prompt_tokens: int = 0
    completion_tokens: int = 0


ChatOutcome = ChatReply | ChatFailure


class ReplyInvalid(ValueError):
    """Raised by a validator: the reply's text is not acceptable (the message says why)."""


Validator = Callable[[str], Any]
OnOutcome = Callable[[ChatOutcome], None]


class ChatModelError(IrforgeError):
    """The model cannot be used at all (no server, bad credentials, bad config). Never contains a key."""


@runtime_checkable
class ChatModel(Protocol):
    """A chat model behind some protocol.

    ``engine`` names the adapter (``openai``, ``vllm-batch``); ``model`` the model id sent
    to the server; ``options()`` everything else that changes replies (structured-output
    mode, server kind), JSON-serialisable and free of secrets.

    ``run`` answers every request exactly once, as a :class:`ChatReply` or a
    :class:`ChatFailure`, in the order of ``requests``. ``on_outcome`` is called as each
    request ends (in completion order, from the calling thread), so a caller can persist
    answers while the rest are still in flight.
    """

    engine: str
    model: str

    def options(self) -> dict[str, Any]: ...

    def run(
        self,
        requests: Sequence[ChatRequest],
        validate: Validator,
        on_outcome: OnOutcome | None = None,
    ) -> list[ChatOutcome]: ...
