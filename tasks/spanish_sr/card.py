"""The spanish_sr release's dataset card (``README.md``): YAML ``datasets`` reads, then prose.

Front matter: one ``configs`` entry per config with a ``data_files`` entry per split written
(:mod:`tasks.spanish_sr.dataset`), ``corpus`` the default, each config's features under
``dataset_info``. Body: what the collection is (paper 004), the note on the review sets, the
cleaning funnel and the per-year table (paper 004 Table 1; :mod:`tasks.spanish_sr.release_stats`),
the question pairs, BM25 parameters, models, retrieval results (mean ± std over seeds) and the
question-vs-expert tests (paper 004 Table 5), how to load, licences, provenance.
Deterministic: no dates, no absolute paths, nothing read from the environment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tasks.common.release.card import card_text, citation, provenance
from tasks.spanish_sr.dataset import CONFIGS, FEATURES, SPLITS, TEST_SPLIT, data_path, feature_yaml
from tasks.spanish_sr.release_stats import FunnelStep, YearRange

PAPER: Final = (
    'Ofori-Boateng, Aceves-Martins, Wiratunga and Moreno-Garcia, "A zero-shot monolingual dual stage '
    'information retrieval system for Spanish biomedical systematic literature reviews", NAACL 2024, '
    "https://aclanthology.org/2024.naacl-long.206"
)
ALL: Final = "all"


PAPER_BIBTEX = """@inproceedings{oforiboateng2024zeroshot,
  title = {A zero-shot monolingual dual stage information retrieval system for {S}panish biomedical systematic literature reviews},
  author = {Ofori-Boateng, R. and Aceves-Martins, M. and Wiratunga, N. and Moreno-Garcia, C.},
  booktitle = {Proceedings of the 2024 Conference of the North American Chapter of the Association for Computational Linguistics: Human Language Technologies (Volume 1: Long Papers)},
  pages = {3725--3736},
  year = {2024},
  url = {https://aclanthology.org/2024.naacl-long.206}
}"""
"""The paper whose construction the spanish_sr flow follows (paper 004), for the card's citation."""


@dataclass(frozen=True)
class CardInfo:
    name: str
    pretty_name: str
    license: str
    source_license: str
    review_note: str
    corpus_note: str | None = None
    languages: Sequence[str] = ()
    files: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (config, split) → rows
    funnel: Sequence[FunnelStep] = ()
    repaired: int = 0  # corpus records with a field repaired by clean
    years: Sequence[YearRange] = ()
    question_modes: Mapping[str, int] = field(default_factory=dict)
    split_seed: int | None = None
    bm25: Mapping[str, Any] = field(default_factory=dict)
    models: Sequence[Mapping[str, Any]] = ()  # the models config's rows
    answered: Sequence[str] = ()  # the LLMs that wrote questions, as provenance lines
    reviews: Sequence[Mapping[str, Any]] = ()  # reviews' side table rows, with queries per kind
    summary: Sequence[Mapping[str, Any]] = ()  # evaluate's summary rows
    significance: Sequence[Mapping[str, Any]] = ()
    fingerprints: Mapping[str, str] = field(default_factory=dict)

    def splits(self, config: str) -> list[str]:
        return [s for s in SPLITS[config] if (config, s) in self.files]

    def rows(self, config: str, split: str) -> int:
        return self.files.get((config, split), 0)


def _front_matter(info: CardInfo) -> dict[str, Any]:
    configs = [c for c in CONFIGS if info.splits(c)]
    return {
        "pretty_name": info.pretty_name,
        "license": info.license,
        "language": list(info.languages),
        "task_categories": ["text-retrieval"],
        "task_ids": ["document-retrieval"],
        "tags": ["biomedical", "systematic-reviews", "question-generation", "hybrid-retrieval"],
        "configs": [
            {
                "config_name": c,
                **({"default": True} if c == "corpus" else {}),
                "data_files": [{"split": s, "path": data_path(c, s)} for s in info.splits(c)],
            }
            for c in configs
        ],
        "dataset_info": [
            {"config_name": c, "features": [feature_yaml(n, t) for n, t in FEATURES[c]]} for c in configs
        ],
    }


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(v) for v in row) + " |" for row in rows),
        "",
    ]


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _about(info: CardInfo) -> list[str]:
    corpus = f" The corpus: {info.corpus_note}." if info.corpus_note else ""
    return [
        f"# {info.pretty_name}",
        "",
        "Cleaned biomedical abstracts, title-derived question pairs for training retrievers, and "
        "systematic-review query sets with their relevance judgements, built by the irforge `spanish_sr` "
        f"flow after the recipe of {PAPER} (paper 004): the titles of the abstracts become queries, a dual "
        "encoder and a cross-encoder reranker are trained on the pairs, and BM25, dense and hybrid first "
        f"stages (with and without the reranker) are evaluated on the review queries.{corpus}",
        "",
        "## About the review sets",
        "",
        info.review_note,
        "",
    ]


def _funnel(info: CardInfo) -> list[str]:
    rows: list[tuple[str, str, Any]] = []
    for step in info.funnel:
        rows.append((f"`{step.stage}`", step.entering, step.units_in))
        rows += [(f"`{step.stage}`", f"excluded: `{r}`", n) for r, n in step.excluded.items()]
        rows.append((f"`{step.stage}`", step.kept_label, step.kept))
        if step.stage == "clean":
            rows.append(("`clean`", "of which with a repaired field (mojibake)", info.repaired))
    lines = ["## Statistics", "", "### Cleaning funnel", ""]
    lines += ["Counts from the manifests of the stages that built this release.", ""]
    return lines + _table(["stage", "step", "records"], rows)


def _years(info: CardInfo) -> list[str]:
    lines = ["### Records per year of publication (as paper 004 Table 1)", ""]
    lines += ["Lengths are means in whitespace-separated words.", ""]
    return lines + _table(
        ["statistic", *(y.label for y in info.years)],
        [
            ("records", *(y.records for y in info.years)),
            ("mean abstract length", *(_num(y.abstract_words, 2) for y in info.years)),
            ("mean title length", *(_num(y.title_words, 2) for y in info.years)),
        ],
    )


def _training(info: CardInfo) -> list[str]:
    modes = ", ".join(f"`{m}` ({n})" for m, n in info.question_modes.items()) or "–"
    lines = ["## Question pairs and trained models", ""]
    lines += [
        f"Questions from titles, mode {modes} (`title`: the title itself, paper 004's setting; `rule`: "
        "templates by title shape; `llm`: rewritten by a language model). The split is the "
        f"train/validation split of seed {info.split_seed}: "
        f"{info.rows('questions', 'train')} train, {info.rows('questions', 'validation')} validation pairs. "
        "A pair is a question and the abstract of its `corpus-id` in `corpus`.",
        "",
    ]
    if info.bm25:
        b = info.bm25
        lines += [
            "BM25 parameters chosen by grid search on the pairs (self-retrieval MRR of held-out questions):",
            "",
        ]
        lines += _table(
            ["k1", "b", "MRR", "variant", "accents folded", "language"],
            [(b["k1"], b["b"], _num(b["mrr"]), b["variant"], b["fold_accents"], b["language"])],
        )
    lines += [
        "Models (weights are not in this dataset; `path` is relative to the irforge artifact root of the run):",
        "",
    ]
    lines += _table(
        ["model", "seed", "base model", "best epoch", "val loss", "val MRR", "train / val", "path"],
        [
            (m["kind"], m["seed"], f"`{m['base_model']}`" if m["base_model"] else "–", m["best_epoch"],
             _num(m["val_loss"]), _num(m["val_mrr"]), f"{m['train_examples']} / {m['val_examples']}",
             f"`{m['path']}`")
            for m in info.models
        ],
    )  # fmt: skip
    return lines


def _reviews(info: CardInfo) -> list[str]:
    lines = ["## Review query sets", ""]
    return lines + _table(
        ["review", "language", "question queries", "expert queries", "included (in the corpus / listed)"],
        [
            (f"`{r['review_id']}`", r["language"], r["question_queries"], r["expert_queries"],
             f"{r['included_known']} / {r['included']}")
            for r in info.reviews
        ],
    )  # fmt: skip


def _mean_std(row: Mapping[str, Any]) -> str:
    std = row["std"]
    return _num(row["mean"]) if std is None else f"{_num(row['mean'])} ± {_num(std)}"


def _results(info: CardInfo) -> list[str]:
    rows = [r for r in info.summary if r["review_id"] == ALL and r["query_kind"] == ALL]
    if not rows:
        return ["## Retrieval results", "", "No evaluation summary was produced.", ""]
    systems = list(dict.fromkeys(str(r["system"]) for r in rows))
    measures = list(dict.fromkeys(str(r["measure"]) for r in rows))
    cell = {(r["system"], r["measure"]): r for r in rows}
    seeds = sorted({int(r["seeds"]) for r in rows})
    lines = ["## Retrieval results", ""]
    lines += [
        f"All reviews and query kinds; mean ± standard deviation over {'/'.join(map(str, seeds))} seed(s) "
        "(no spread with one seed). Per review and query kind: the `results` config.",
        "",
    ]
    lines += _table(
        ["system", *measures],
        [(s, *(_mean_std(cell[s, m]) if (s, m) in cell else "–" for m in measures)) for s in systems],
    )
    return lines + _tests(info)


def _tests(info: CardInfo) -> list[str]:
    lines = ["### Question vs expert queries (as paper 004 Table 5)", ""]
    if not info.significance:
        return [*lines, "No test was run (no review has both kinds of query).", ""]
    return lines + _table(
        ["review", "metric", "pairs", "mean question", "mean expert", "test", "statistic", "p", "decision"],
        [
            (r["review"], r["metric"], r["n"], _num(r["mean_question"]), _num(r["mean_expert"]), r["test"],
             _num(r["statistic"]), "–" if r["p_value"] is None else f"{r['p_value']:.3g}", r["decision"])
            for r in info.significance
        ],
    )  # fmt: skip


def _usage(info: CardInfo) -> list[str]:
    return [
        "## How to load",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'corpus = load_dataset("{info.name}", "corpus", split="corpus")  # _id, title, text, year, ...',
        f'pairs = load_dataset("{info.name}", "questions", split="train")  # corpus-id, question, mode',
        f'queries = load_dataset("{info.name}", "queries", split="{TEST_SPLIT}")  # review queries',
        f'qrels = load_dataset("{info.name}", "qrels", split="{TEST_SPLIT}")  # query-id, corpus-id, score',
        f'models = load_dataset("{info.name}", "models", split="models")',
        "```",
        "",
        "`corpus`, `queries` and `qrels` are in BEIR's layout (MTEB's retrieval loader reads it). Every "
        "query of a review has the review's included records as relevant (score 1).",
        "",
    ]


def _licences(info: CardInfo) -> list[str]:
    return [
        "## Licences",
        "",
        f"- This collection (question pairs, review query sets, judgements, results): `{info.license}`.",
        f"- Source records: {info.source_license}. The corpus texts keep their source licence; "
        "the collection's licence must not be more permissive than it.",
        "",
    ]


def render_card(info: CardInfo) -> str:
    body = [
        *_about(info),
        *_funnel(info),
        *_years(info),
        *_training(info),
        *_reviews(info),
        *_results(info),
        *_usage(info),
        *_licences(info),
        *provenance(info.fingerprints, info.answered),
        *citation(PAPER_BIBTEX, info.name, info.fingerprints),
    ]
    return card_text(_front_matter(info), body)
