"""The crossgenre release's dataset card (``README.md``): YAML ``datasets`` reads, then prose.

Front matter: one ``configs`` entry per config with a ``data_files`` entry per split
written (:mod:`tasks.crossgenre.dataset`), ``corpus`` the default, and each config's
features under ``dataset_info``, so ``datasets.load_dataset(folder, config, split=...)``
guesses nothing. Body: the funnel from pages to claims (paper 003 §2), the collection and
split sizes, the top news sites (the paper's Fig. 1), first-stage recall (Table 2), why
the splits are grouped, how to load it with ``datasets`` and evaluate it with MTEB,
licences and provenance. Deterministic: no dates, no absolute paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.common.release.card import card_text, citation, provenance
from tasks.crossgenre.dataset import CONFIGS, CORPUS_SPLIT, SPLITS, data_path, features

FUNNEL: tuple[tuple[str, str], ...] = (
    ("ingest", "news pages read"),
    ("extract", "headline and text extracted"),
    ("journal_links", "cite a research publication"),
    ("single_study", "report on one study"),
    ("resolve", "cited study found in PubMed"),
    ("claims", "claims (syndicated copies merged)"),
)
"""The flow's filters from pages to claims (paper 003 §2): stage and what its kept units are."""
PAPER_BIBTEX = """@inproceedings{zuo2020querying,
  title = {Querying Across Genres for Medical Claims in News},
  author = {Zuo, Chaoyuan and Acharya, Narayan and Banerjee, Ritwik},
  booktitle = {Proceedings of the 2020 Conference on Empirical Methods in Natural Language Processing (EMNLP)},
  year = {2020},
  url = {https://github.com/chzuo/emnlp2020-cross-genre-IR}
}"""
"""The paper whose construction the crossgenre flow follows (paper 003), for the card's citation."""
PAPER = "https://github.com/chzuo/emnlp2020-cross-genre-IR"
"""Zuo et al., "Querying Across Genres for Medical Claims in News", EMNLP 2020: the authors' repository."""


@dataclass(frozen=True)
class FunnelStep:
    stage: str
    label: str
    units_in: int | None  # None: the stage's counts are unknown (not in the run)
    kept: int | None
    excluded: Mapping[str, int]  # reason → units


@dataclass(frozen=True)
class CardInfo:
    name: str
    pretty_name: str
    license: str  # of the release as a whole (``other`` when a source's licence is unknown)
    pages_license: str | None
    license_name: str | None = None  # why ``other``
    own_license: str | None = None  # of irforge's part: queries, judgements, candidates, pairs
    models: Sequence[str] = ()  # the models that answered, as provenance lines
    revision: str = "main"
    files: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (config, split) → rows
    pairs_text: bool = False
    variant: str = "plus_pre"
    funnel: Sequence[FunnelStep] = ()
    cited: int = 0
    distractors: int = 0
    sites: Sequence[tuple[str, int]] = ()  # queries per news site, most first
    pair_kinds: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (split, kind) → rows
    recall: Sequence[Mapping[str, Any]] = ()  # candidates' recall rows: variant, k, recall, queries
    dates: tuple[str, str] | None = None  # first and last publication date of the queries
    fingerprints: Mapping[str, str] = field(default_factory=dict)

    def splits(self, config: str) -> list[str]:
        order = [CORPUS_SPLIT, *SPLITS]
        return sorted((s for c, s in self.files if c == config), key=order.index)

    def rows(self, config: str, split: str) -> int:
        return self.files.get((config, split), 0)


def _front_matter(info: CardInfo) -> dict[str, Any]:
    configs = [c for c in CONFIGS if info.splits(c)]
    return {
        "pretty_name": info.pretty_name,
        "license": info.license,
        **({"license_name": info.license_name} if info.license_name else {}),
        "language": ["en"],
        "task_categories": ["text-retrieval", "text-ranking"],
        "task_ids": ["document-retrieval", "fact-checking-retrieval"],
        "tags": ["biomedical", "health-news", "claims", "pubmed", "cross-genre"],
        "configs": [
            {
                "config_name": c,
                **({"default": True} if c == "corpus" else {}),
                "data_files": [{"split": s, "path": data_path(c, s)} for s in info.splits(c)],
            }
            for c in configs
        ],
        "dataset_info": [
            {"config_name": c, "features": [{"name": n, "dtype": t} for n, t in features(c, info.pairs_text)]}
            for c in configs
        ],
    }


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(v) for v in row) + " |" for row in rows),
        "",
    ]


def _statistics(info: CardInfo) -> list[str]:
    lines = ["## Statistics", "", "### From pages to claims", ""]
    lines += _table(
        ["stage", "step", "in", "kept", "excluded (reason: count)"],
        [
            (
                f"`{s.stage}`",
                s.label,
                "–" if s.units_in is None else s.units_in,
                "–" if s.kept is None else s.kept,
                ", ".join(f"{r}: {n}" for r, n in s.excluded.items()) or "–",
            )
            for s in info.funnel
        ],
    )
    queries = sum(info.rows("queries", s) for s in SPLITS)
    lines += ["### Collection", ""]
    lines += _table(
        ["queries (headlines)", "cited abstracts", "distractor abstracts", "corpus"],
        [(queries, info.cited, info.distractors, info.rows("corpus", CORPUS_SPLIT))],
    )
    kinds = ("cited", "added_back", "negative", "augmented")
    lines += ["### Splits", ""]
    lines += _table(
        ["split", "queries", "judgements", "candidates", *(f"pairs: {k}" for k in kinds)],
        [
            (
                s,
                info.rows("queries", s),
                info.rows("qrels", s),
                info.rows("candidates", s),
                *(info.pair_kinds.get((s, k), 0) for k in kinds),
            )
            for s in SPLITS
        ],
    )
    lines += ["### News sites (queries per site, top 10)", ""]
    shown = list(info.sites[:10])
    others = sum(n for _s, n in info.sites[10:])
    lines += _table(["site", "queries"], [*shown, *([("others", others)] if others else [])])
    if info.recall:
        ks = sorted({int(r["k"]) for r in info.recall})
        variants = list(dict.fromkeys(str(r["variant"]) for r in info.recall))
        value = {(str(r["variant"]), int(r["k"])): float(r["recall"]) for r in info.recall}
        lines += ["### First-stage recall (paper 003 Table 2)", ""]
        lines += _table(
            ["variant", *(f"R@{k}" for k in ks)],
            [(v, *(f"{value[v, k]:.3f}" if (v, k) in value else "–" for k in ks)) for v in variants],
        )
    return lines


def _about(info: CardInfo) -> list[str]:
    return [
        f"# {info.pretty_name}",
        "",
        "Health-news headlines (queries) and the PubMed abstracts of the studies the articles cite "
        f"(relevant documents), hidden among distractor abstracts: the task of Zuo et al., EMNLP 2020 "
        f'("Querying Across Genres for Medical Claims in News", {PAPER}), '
        "rebuilt by the irforge `crossgenre` flow. Each query is one article reporting on one study; "
        "syndicated copies of a story are kept once. `candidates` holds each query's BM25+ top list "
        f"(variant `{info.variant}`: lower-case, stop words removed, Porter stems, medical abbreviations "
        "expanded) and `pairs` the reranker's training and evaluation pairs (label 1 cited, 0 other "
        "candidates; `added_back` and `augmented` rows in train only).",
        "",
    ]


def _grouping() -> list[str]:
    return [
        "## Why the splits are grouped",
        "",
        "Queries that cite a common abstract, or are copies of one syndicated story, are in the same "
        "split (connected components of the query–abstract–story graph). Otherwise a model could see a "
        "test query's abstract as the answer of a training query and be rewarded for remembering it, "
        "not for matching a headline to an unseen study. Split sizes follow the paper's "
        "3,000 / 1,000 / 1,034 proportions within one group.",
        "",
    ]


def mteb_snippet(info: CardInfo) -> str:
    """Python defining an MTEB retrieval task on this release and evaluating ``model`` on it."""
    splits = [s for s in ("test", "dev", "train") if info.splits("qrels").count(s)][:1] or info.splits(
        "qrels"
    )
    date = f"    date={info.dates!r},\n" if info.dates else ""
    return (
        "import mteb\n"
        "from mteb.abstasks.retrieval import AbsTaskRetrieval\n"
        "from mteb.abstasks.task_metadata import TaskMetadata\n\n\n"
        "class CrossGenreClaims(AbsTaskRetrieval):\n"
        "    metadata = TaskMetadata(\n"
        f'        name="{_task_name(info)}",\n'
        '        description="Health-news headline -> PubMed abstract of the cited study (Zuo et al. 2020).",\n'
        f'        reference="{PAPER}",\n'
        f'        dataset={{"path": "{info.name}", "revision": "{info.revision}"}},\n'
        '        type="Retrieval",\n'
        '        category="t2t",\n'
        '        modalities=["text"],\n'
        f"        eval_splits={splits!r},\n"
        '        eval_langs=["eng-Latn"],\n'
        '        main_score="mrr_at_10",\n'
        f"{date}"
        "    )\n\n\n"
        "task = CrossGenreClaims()\n"
        'model = mteb.get_model("sentence-transformers/all-MiniLM-L6-v2")  # or any model\n'
        "results = mteb.evaluate(model, task)\n"
    )


def _task_name(info: CardInfo) -> str:
    return "".join(w.capitalize() for w in info.name.replace("/", "-").replace("_", "-").split("-") if w)


def _usage(info: CardInfo) -> list[str]:
    split = "test" if "test" in info.splits("queries") else (info.splits("queries") or ["train"])[0]
    return [
        "## How to load",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'corpus = load_dataset("{info.name}", "corpus", split="corpus")  # _id, title, text',
        f'queries = load_dataset("{info.name}", "queries", split="{split}")  # _id, text, url, site, date',
        f'qrels = load_dataset("{info.name}", "qrels", split="{split}")  # query-id, corpus-id, score',
        f'candidates = load_dataset("{info.name}", "candidates", split="{split}")  # BM25+ top list',
        f'pairs = load_dataset("{info.name}", "pairs", split="train")  # reranker pairs',
        "```",
        "",
        "`pairs` rows name the abstract by `corpus-id`"
        + ("; `document` holds its text." if info.pairs_text else " (join with `corpus` for its text)."),
        "",
        "## Evaluate with MTEB",
        "",
        "The layout is MTEB's retrieval layout (configs `corpus`, `queries`, `qrels`). With `mteb` 2.x, "
        "define the task on this release (a local copy works too: give its folder as `path`):",
        "",
        "```python",
        mteb_snippet(info).rstrip("\n"),
        "```",
        "",
    ]


def _licences(info: CardInfo) -> list[str]:
    pages = f" The news pages of this build are {info.pages_license}." if info.pages_license else ""
    return [
        "## Licences",
        "",
        f"- This collection (queries, judgements, candidates, pairs): `{info.own_license or info.license}`."
        + (f" The release as a whole: `{info.license}` ({info.license_name})." if info.license_name else ""),
        "- News articles: only each headline and its URL are released; the articles' text is not "
        f"redistributed (it belongs to its publishers).{pages}",
        "- Abstracts: from MEDLINE/PubMed, courtesy of the U.S. National Library of Medicine, under NLM's "
        "terms (https://www.nlm.nih.gov/databases/download/terms_and_conditions.html): NLM does not endorse "
        "this product and the records may not reflect the most current data; abstract texts may be "
        "copyrighted by their publishers.",
        "",
    ]


def render_card(info: CardInfo) -> str:
    body = [
        *_about(info),
        *_statistics(info),
        *_grouping(),
        *_usage(info),
        *_licences(info),
        *provenance(info.fingerprints, info.models),
        *citation(PAPER_BIBTEX, info.name, info.fingerprints),
    ]
    return card_text(_front_matter(info), body)
