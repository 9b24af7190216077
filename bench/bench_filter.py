"""Benchmark: our Gopher passage filter against datatrove's, on real sample passages.

    .venv/bin/python bench/bench_filter.py [--n 0] [--rounds 3]

Passages: every distinct real passage at hand (``bench.samples.distinct_passages``: the
``<p>`` of ../shared/samples and data/, MEDLINE and Cohen abstracts; ~4,800, no passage
twice: a cache keyed on text cannot meet a copy), at most ``--n`` of them. Interleaved
(``bench.common.interleaved``: a cold call each, then ``--rounds`` rounds, order rotated),
one thread each side:

* datatrove 0.10.1: ``GopherQualityFilter.filter`` then, for passages it keeps,
  ``GopherRepetitionFilter.filter`` (as in a datatrove pipeline), one ``Document`` at a
  time, with spaCy's tokenizer loaded and warmed up before the clock starts;
* ours: ``check_many`` over the whole list with the default rules (the headline), with
  ``GopherRules.datatrove_compatible()`` and with CURE's filter stage defaults (the
  scientific-passage profile, docs/decisions/passage-quality.md), each call starting with
  an empty token cache; and, labelled **warm-cache**, the default rules with the token
  cache left filled by the previous call (what a corpus of repeated passages gets).

Same thresholds on both sides. It prints passages/s, datatrove/ours per round as median
(min–max), warm and cold, how often the keep/drop decisions agree, and the disagreements by
(our rule, datatrove's reason); the numbers also go to ``bench/results/filter.json``.
"""

from __future__ import annotations

import platform
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from datatrove.data import Document
from datatrove.pipeline.filters.gopher_quality_filter import GopherQualityFilter
from datatrove.pipeline.filters.gopher_repetition_filter import GopherRepetitionFilter
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.samples import SAMPLES, distinct_passages
from tasks.common.text.gopher import DATATROVE_REASONS, GopherRules, check_many
from tasks.common.text.gopher_base import RuleFailure, clear_token_cache
from tasks.cure.stages.filter import FilterConfig


def datatrove_decider(rules: GopherRules) -> Callable[[str], str]:
    """datatrove's Gopher filters with our thresholds: text → "keep" or datatrove's reason."""
    if rules.max_hash_ratio != rules.max_ellipsis_ratio:
        raise ValueError("datatrove has one threshold for both the hash and the ellipsis ratio")
    quality = GopherQualityFilter(
        min_doc_words=rules.min_words,
        max_doc_words=rules.max_words,
        min_avg_word_length=rules.min_mean_word_length,
        max_avg_word_length=rules.max_mean_word_length,
        max_symbol_word_ratio=rules.max_hash_ratio,
        max_bullet_lines_ratio=rules.max_bullet_line_ratio,
        max_ellipsis_lines_ratio=rules.max_ellipsis_line_ratio,
        max_non_alpha_words_ratio=rules.min_alpha_word_ratio,
        min_stop_words=rules.min_stop_words,
        stop_words=list(rules.stop_words),
    )
    repetition = GopherRepetitionFilter(
        dup_line_frac=rules.dup_line_frac,
        dup_para_frac=rules.dup_para_frac,
        dup_line_char_frac=rules.dup_line_char_frac,
        dup_para_char_frac=rules.dup_para_char_frac,
        top_n_grams=tuple(sorted((n, t) for n, t in rules.top_ngram_char_frac.items() if t is not None)),
        dup_n_grams=tuple(sorted((n, t) for n, t in rules.dup_ngram_char_frac.items() if t is not None)),
    )

    def decide(text: str) -> str:
        doc = Document(text=text, id="bench")
        for step in (quality, repetition):
            verdict = step.filter(doc)
            if verdict is not True:
                return str(verdict[1])
        return "keep"

    return decide


# The measurement choices where our defaults differ from datatrove
# (docs/decisions/gopher-on-passages.md, differences 1-3), each as the override that switches it back.
SWITCHES: dict[str, dict[str, Any]] = {
    "ratio_basis": {"ratio_basis": "tokens"},
    "top_ngram_min_count": {"top_ngram_min_count": 1},
    "stop_word_ignore_case": {"stop_word_ignore_case": False},
}


def explain(texts: Sequence[str], theirs: Sequence[str], rules: GopherRules) -> list[str]:
    """For each text: which documented switch, set back to datatrove's, gives datatrove's decision."""
    base = rules.model_dump()
    agrees = {
        name: [
            (f is None) == (d == "keep")
            for f, d in zip(check_many(texts, GopherRules(**(base | override))), theirs, strict=True)
        ]
        for name, override in SWITCHES.items()
    }
    combined = GopherRules(**(base | {k: v for o in SWITCHES.values() for k, v in o.items()}))
    all_back = [
        (f is None) == (d == "keep") for f, d in zip(check_many(texts, combined), theirs, strict=True)
    ]
    labels = []
    for i in range(len(texts)):
        hits = [name for name in SWITCHES if agrees[name][i]]
        labels.append(" | ".join(hits) if hits else ("all three together" if all_back[i] else "unexplained"))
    return labels


def compare(
    texts: Sequence[str], ours: Sequence[RuleFailure | None], theirs: Sequence[str], rules: GopherRules
) -> dict[str, Any]:
    """Decision agreement; disagreements by (our rule, datatrove reason, switch that explains it)."""
    differ = [i for i, (f, d) in enumerate(zip(ours, theirs, strict=True)) if (f is None) != (d == "keep")]
    labels = explain([texts[i] for i in differ], [theirs[i] for i in differ], rules) if differ else []
    disagreements: Counter[tuple[str, str, str]] = Counter()
    for i, label in zip(differ, labels, strict=True):
        f = ours[i]
        disagreements[("keep" if f is None else f.rule, theirs[i], label)] += 1
    same_reason = both_drop = 0
    for f, d in zip(ours, theirs, strict=True):
        if f is not None and d != "keep":
            both_drop += 1
            same_reason += DATATROVE_REASONS[f.rule] == d
    return {
        "agreement": 1 - len(differ) / len(ours),
        "disagreements": len(differ),
        "kept_ours": sum(f is None for f in ours),
        "kept_datatrove": sum(d == "keep" for d in theirs),
        "same_reason_when_both_drop": same_reason / both_drop if both_drop else 1.0,
        "by_rule_and_reason": [
            {"ours": o, "datatrove": d, "explained_by": e, "count": c}
            for (o, d, e), c in disagreements.most_common()
        ],
    }


def measure(texts: Sequence[str], rounds: int) -> dict[str, Any]:
    """Time datatrove and our filter on the distinct ``texts``, interleaved over ``rounds``
    (module docstring); the timings, ratios and decisions compared."""
    default_rules = GopherRules()
    compat_rules = GopherRules.datatrove_compatible()
    decide = datatrove_decider(default_rules)  # thresholds are the same in both rule sets
    for text in texts[:200]:  # load spaCy and warm it up
        decide(text)

    def ours(rules: GopherRules | FilterConfig, *, keep_cache: bool = False) -> Callable[[], Any]:
        def run() -> list[RuleFailure | None]:
            if not keep_cache:
                clear_token_cache()
            return check_many(texts, rules)

        return run

    with common.same_threads(1):  # both are single-threaded Python; pinned all the same
        timings = common.interleaved(
            {
                "datatrove": lambda: [decide(t) for t in texts],
                "ours_default": ours(default_rules),
                "ours_datatrove_compatible": ours(compat_rules),
                "ours_cure_scientific_profile": ours(FilterConfig()),
                "ours_default_warm_cache": ours(default_rules, keep_cache=True),
            },
            rounds,
        )
    theirs = timings.results["datatrove"]
    size = f"{len(texts):,} distinct real passages"
    peer = timings.warm["datatrove"]
    return {
        "what": "Gopher passage filter",
        "size": size,
        "passages": len(texts),
        "threads": 1,
        "rounds": rounds,
        "timings": timings.summary(),
        "passages_per_s": {name: len(texts) / timings.median(name) for name in timings.warm},
        "ratio": {
            name: common.ratio_summary(peer, timings.warm[name])
            for name in timings.warm
            if name != "datatrove"
        },
        "ratio_cold": {
            name: common.ratio_summary([timings.cold["datatrove"]], [timings.cold[name]])
            for name in timings.cold
            if name != "datatrove"
        },
        "table": [
            common.table_row(
                "Gopher passage filter",
                size,
                "1",
                timings,
                ("ours, default rules", "ours_default"),
                ("datatrove 0.10.1", "datatrove"),
            ),
            common.table_row(
                "Gopher passage filter, warm-cache (token cache kept)",
                size,
                "1",
                timings,
                ("ours, default rules", "ours_default_warm_cache"),
                ("datatrove 0.10.1", "datatrove"),
            ),
        ],
        "rules": {
            "default": compare(texts, timings.results["ours_default"], theirs, default_rules),
            "datatrove_compatible": compare(
                texts, timings.results["ours_datatrove_compatible"], theirs, compat_rules
            ),
        },
        "rule_config": {
            "default": default_rules.model_dump(),
            "datatrove_compatible": compat_rules.model_dump(),
        },
        "environment": common.environment(python=platform.python_version()),
    }


def report(console: Console, results: dict[str, Any]) -> None:
    """The throughput table, then each rule set's agreement and disagreements."""
    speed, ratio, cold = results["passages_per_s"], results["ratio"], results["ratio_cold"]
    speed_table = common.figures_table(
        f"Throughput on {results['size']}, 1 thread each, {results['rounds']} interleaved rounds",
        ("filter", "passages/s (warm median)", "datatrove / ours warm", "cold"),
    )
    for name, value in speed.items():
        label = name + (
            " (token cache kept from the last round: warm-cache, not the headline)"
            if "warm_cache" in name
            else ""
        )
        row = (ratio[name]["text"], cold[name]["text"]) if name in ratio else ("", "")
        speed_table.add_row(label, f"{value:,.0f}", *row)
    console.print(speed_table)

    for name, summary in results["rules"].items():
        console.print(
            f"[bold]{name}[/bold] rules: decisions agree on {summary['agreement']:.2%} "
            f"({summary['disagreements']} of {results['passages']} differ); kept: ours {summary['kept_ours']}, "
            f"datatrove {summary['kept_datatrove']}; same reason where both drop: "
            f"{summary['same_reason_when_both_drop']:.2%}"
        )
        if summary["by_rule_and_reason"]:
            columns = ("our rule", "datatrove reason", "gone when switched back to datatrove's", "passages")
            table = common.figures_table(f"Disagreements, {name} rules", columns, left=3)
            for row in summary["by_rule_and_reason"]:
                table.add_row(row["ours"], row["datatrove"], row["explained_by"], str(row["count"]))
            console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.bench_parser(__doc__, full_doc=True)
    parser.add_argument(
        "--n", type=int, default=0, help="at most this many distinct passages (default 0: all)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved warm rounds (default 3)")
    args = common.parse_with_out(parser, argv, common.results_file("filter"))
    console = Console(width=max(Console().width, 120))  # the disagreement table is wide

    texts = distinct_passages()
    if not texts:
        console.print(f"[red]no sample passages under {SAMPLES} nor {common.REPO / 'data'}[/red]")
        return 1
    texts = texts[: args.n] if args.n > 0 else texts
    console.print(f"{len(texts):,} distinct real passages")
    results = measure(texts, args.rounds)
    report(console, results)
    common.write_results(args.out, results, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
