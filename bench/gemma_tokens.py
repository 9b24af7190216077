"""Prompt tokens as the local llama.cpp server would feed Gemma 3 270M, for
``bench/bench_evidence_align_cost.py``: the GGUF's vocabulary (``vocab_only=True``) after the
``gemma`` chat format, counted by parts and checked against whole-prompt tokenization."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from tasks.common.llm.port import ChatRequest
from tasks.evidencebench.alignment import render_elements
from tasks.evidencebench.llm_steps import one_line


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence llama.cpp's C-level log lines (written to file descriptor 2) while loading."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with Path(os.devnull).open("w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class GemmaTokens:
    """Prompt tokens of a chat request as the local llama.cpp server would feed Gemma 3 270M.

    The messages go through llama-cpp-python's ``gemma`` chat format (the server's
    ``chat_format="gemma"``), then the GGUF's tokenizer with BOS and special tokens.

    Tokenizing every prompt whole costs about 7 us a token here (some 25 s for the dev set),
    so :meth:`window` counts a prompt by its parts: the text before the window's element
    block, each element line, the newlines between them and the text after; each part is
    tokenized once and cached (an element line once per sentence: the window-local number
    is one digit, one token, whatever its value). Gemma's tokenizer splits digits and
    newlines into their own tokens, so the parts add up to the whole; :meth:`exact` counts
    a prompt whole, and the benchmark checks the sum against it on a sample of prompts.
    """

    def __init__(self) -> None:
        # here, not at the top: without llama-cpp-python the benchmark still runs, on words
        import llama_cpp  # noqa: PLC0415
        from llama_cpp import llama_chat_format  # noqa: PLC0415

        from tasks.common.llm.llama_server import gemma_model_path  # noqa: PLC0415

        self.path = gemma_model_path()
        with _quiet_stderr():
            self._llama = llama_cpp.Llama(model_path=str(self.path), vocab_only=True, verbose=False)
        self._format = llama_chat_format.format_gemma
        self._tokenize = llama_cpp.llama_tokenize
        model = getattr(self._llama, "_model", None)
        self._vocab = getattr(model, "vocab", None)
        self._parts: dict[tuple[bool, str], int] = {}
        self._lines: dict[str, int] = {}

    def prompt(self, request: ChatRequest) -> str:
        """The text the server tokenizes: the messages in the ``gemma`` chat format."""
        messages: Any = [dict(message) for message in request.messages]
        return str(self._format(messages=messages).prompt)

    def _count(self, text: str, bos: bool) -> int:
        data = text.encode("utf-8")
        if self._vocab is None:
            return len(self._llama.tokenize(data, add_bos=bos, special=True))
        # Llama.tokenize sizes its buffer by n_ctx_train, 0 for a vocab-only load, so it
        # tokenizes every text twice; llama_tokenize with no buffer returns minus the count.
        n = int(self._tokenize(self._vocab, data, len(data), None, 0, bos, True))
        return -n if n < 0 else n

    def _part(self, text: str, bos: bool) -> int:
        key = (bos, text)
        count = self._parts.get(key)
        if count is None:
            count = self._parts[key] = self._count(text, bos)
        return count

    def exact(self, request: ChatRequest) -> int:
        """The request's prompt tokenized whole."""
        return self._count(self.prompt(request), True)

    def window(self, request: ChatRequest, texts: Sequence[str]) -> int:
        """The request's prompt tokens, counted by parts; ``texts`` are its window's elements."""
        prompt = self.prompt(request)
        block = render_elements(texts)
        at = prompt.find(block)
        if at < 0:  # the prompt does not show the block as rendered: count it whole
            return self._count(prompt, True)
        total = self._part(prompt[:at], True) + self._part(prompt[at + len(block) :], False)
        total += (len(texts) - 1) * self._part("\n", False)
        for text in texts:
            line = one_line(text)
            count = self._lines.get(line)
            if count is None:
                count = self._lines[line] = self._count(render_elements([line]), False)
            total += count
        return total


def load_tokenizer(console: Console) -> tuple[GemmaTokens | None, str]:
    """The Gemma tokenizer and a line saying how tokens are counted (words when it fails)."""
    try:
        tokens = GemmaTokens()
    except Exception as exc:  # any failure to load means: fall back to words, and say so
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        console.print(
            f"[yellow]Gemma tokenizer unavailable ({reason}); token columns are whitespace words[/yellow]"
        )
        return None, f"whitespace words (Gemma tokenizer unavailable: {reason})"
    return tokens, (
        f"Gemma 3 tokenizer of {tokens.path.name} (vocab only), on the 'gemma' chat template "
        "(<start_of_turn>user ... <end_of_turn> <start_of_turn>model) with BOS"
    )


def check_parts(
    tokenizer: GemmaTokens, samples: Mapping[str, Sequence[tuple[ChatRequest, int]]], per_design: int = 40
) -> dict[str, Any]:
    """Count ``per_design`` evenly spaced prompts of each design whole; compare with the sums of parts."""
    out: dict[str, Any] = {}
    for design, pairs in samples.items():
        step = max(1, len(pairs) // per_design)
        picked = pairs[::step][:per_design]
        diffs = [abs(tokenizer.exact(request) - count) for request, count in picked]
        out[design] = {
            "prompts": len(picked),
            "max_abs_diff": max(diffs, default=0),
            "differing": sum(d > 0 for d in diffs),
        }
    return out
