"""The card's "How to load" and "Evaluate with MTEB" sections (layout: :mod:`tasks.cure.dataset.layout`).

The MTEB snippet runs the stock ``CUREv1`` task of ``mteb`` 2.x on the release: it copies the
task's metadata with ``dataset`` pointed at the release (a Hub id or a local folder; the
revision is a branch, tag or commit and is ignored for a folder), ``eval_splits`` set to the
release's domains plus ``all``, and ``eval_langs`` (with ``hf_subsets`` in ``get_task``)
narrowed to the released languages when one is missing. Both are needed because ``CUREv1Retrieval.load_data``
(``mteb/tasks/retrieval/multilingual/cur_ev1_retrieval.py``) loads every split of
``metadata.eval_splits`` in every language of ``metadata.eval_langs`` (``get_task(...,
eval_splits=...)`` does not narrow what it loads), and ``datasets`` cannot load a split
without rows (``arrow_reader.make_file_instructions``: "corresponds to no data"), so a
domain without rows has no split and must not be asked for. ``tests/cure/test_release_mteb.py``
runs this snippet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from tasks.cure.dataset.card import CardInfo

MTEB_TASK: Final = "CUREv1"
MTEB_LANGUAGES: Final = {
    "en": ("eng-Latn", "eng-Latn"),
    "es": ("spa-Latn", "eng-Latn"),
    "fr": ("fra-Latn", "eng-Latn"),
}
"""CUREv1's ``eval_langs``: query language, then corpus language (always English)."""

PAPER_BIBTEX = """@inproceedings{sheikh2025cure,
  title = {CURE: A Dataset for Clinical Understanding \\& Retrieval Evaluation},
  author = {Sheikh, Nadia Athar and Buades Marcos, Daniel and Jousse, Anne-Laure and Oladipo, Akintunde and Rousseau, Olivier and Lin, Jimmy},
  booktitle = {Proceedings of the 31st ACM SIGKDD Conference on Knowledge Discovery and Data Mining V.2 (KDD '25)},
  year = {2025},
  doi = {10.1145/3711896.3737435}
}"""
"""The paper whose construction the CURE flow follows (papers 000/001), for the card's citation."""


def mteb_snippet(name: str, revision: str, splits: Sequence[str], languages: Sequence[str]) -> str:
    """Python that builds ``task``, the stock CUREv1 task reading this release, and evaluates ``model``."""
    update = [
        f'        "dataset": {{"path": "{name}", "revision": "{revision}"}},',
        f'        "eval_splits": {[*splits, "all"]!r},',
    ]
    subsets = ""
    if tuple(languages) != tuple(MTEB_LANGUAGES):
        # hf_subsets: what is evaluated; eval_langs: what load_data reads.
        subsets = f", hf_subsets={list(languages)!r}"
        langs = {lang: list(MTEB_LANGUAGES[lang]) for lang in languages}
        update.append(f'        "eval_langs": {langs!r},')
    return "\n".join(
        [
            "import mteb",
            "",
            f'task = mteb.get_task("{MTEB_TASK}"{subsets})',
            "task.metadata = task.metadata.model_copy(",
            "    update={",
            *update,
            "    }",
            ")",
            'model = mteb.get_model("sentence-transformers/all-MiniLM-L6-v2")  # or any model',
            "results = mteb.evaluate(model, task)",
        ]
    )


def loading_section(info: CardInfo, splits: Sequence[str], configs: Sequence[str]) -> list[str]:
    """Markdown: the configs and splits, a ``datasets`` example and the MTEB snippet."""
    example = splits[0]
    return [
        "## How to load",
        "",
        'One config per file kind and one split per medical domain; `split="all"` loads the union of '
        "the domains (a `datasets` keyword, as MTEB's `all` split):",
        "",
        f"- configs: {', '.join(f'`{c}`' for c in configs)} (default: `corpus`)",
        f"- splits: {', '.join(f'`{s}`' for s in splits)}, `all`",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'corpus = load_dataset("{info.name}", "corpus", split="{example}")  # _id, title, text',
        f'queries = load_dataset("{info.name}", "queries-en", split="{example}")  # _id, text',
        f'qrels = load_dataset("{info.name}", "qrels", split="{example}")  # query-id, corpus-id, score',
        "```",
        "",
        "## Evaluate with MTEB",
        "",
        f"The layout is the one MTEB's `{MTEB_TASK}` retrieval task reads (queries in "
        f"{'/'.join(info.languages)} against the English corpus, main score nDCG@10). With `mteb` 2.x, "
        "point the stock task at this release (a local copy works too: give its folder as `path`; "
        "`revision` is the Hub branch, tag or commit to read). Only the domains listed have a split, "
        "so the task is told to evaluate those and `all`:",
        "",
        "```python",
        mteb_snippet(info.name, info.revision, splits, info.languages),
        "```",
        "",
    ]


__all__ = ["MTEB_LANGUAGES", "MTEB_TASK", "loading_section", "mteb_snippet"]
