"""CURE Table 6's statistics per split of a release (arXiv 2412.06954, Table 6)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tasks.cure.dataset.schema import ALL_SPLIT, LANGUAGES, SCORES, ReleaseError, release_splits


@dataclass(frozen=True)
class SplitStats:
    """CURE Table 6's columns for one split, plus the judgements per score."""

    passages: int
    articles: int
    queries: int  # distinct query ids
    judgements: int  # qrels rows
    judgements_by_score: dict[int, int]
    queries_by_language: dict[str, int]  # language -> queries with a text in it
    query_tokens: dict[str, float | None]  # language -> mean whitespace tokens; None: no query in it
    passage_tokens: float | None  # mean whitespace tokens of title-less passage text


def split_statistics(corpus: pa.Table, queries: pa.Table, qrels: pa.Table) -> dict[str, SplitStats]:
    """Per domain (sorted), then for ``all`` (the union), the statistics of CURE's Table 6.

    Inputs are the tables :func:`tasks.cure.dataset.layout.write_release` takes: corpus
    (``passage_id, article_id, domain, text``), queries (``query_id, domain, language,
    text``), qrels (``domain, score``). Lengths count whitespace-delimited tokens
    (``str.split()``), as the paper does; passage length is over the passage text without
    its title. A score outside 0/1/2 is counted under its own value.
    """
    passage_domains = _column(corpus, "corpus", "domain")
    articles = _column(corpus, "corpus", "article_id")
    passage_texts = _column(corpus, "corpus", "text")
    query_ids = _column(queries, "queries", "query_id")
    query_domains = _column(queries, "queries", "domain")
    languages = _column(queries, "queries", "language")
    query_texts = _column(queries, "queries", "text")
    qrel_domains = _column(qrels, "qrels", "domain")
    scores = _column(qrels, "qrels", "score")

    splits = [*release_splits(passage_domains, query_domains, qrel_domains), ALL_SPLIT]
    passage_rows, query_rows, qrel_rows = (
        _rows_by_split(c) for c in (passage_domains, query_domains, qrel_domains)
    )
    stats: dict[str, SplitStats] = {}
    for split in splits:
        rows = passage_rows.get(split, [])
        by_language: dict[str, list[int]] = defaultdict(list)
        for i in query_rows.get(split, []):
            by_language[languages[i]].append(len(str(query_texts[i]).split()))
        by_score = Counter(scores[i] for i in qrel_rows.get(split, []))
        stats[split] = SplitStats(
            passages=len(rows),
            articles=len({articles[i] for i in rows}),
            queries=len({query_ids[i] for i in query_rows.get(split, [])}),
            judgements=len(qrel_rows.get(split, [])),
            judgements_by_score={s: by_score.get(s, 0) for s in sorted({*SCORES, *by_score})},
            queries_by_language={lang: len(by_language.get(lang, [])) for lang in LANGUAGES},
            query_tokens={lang: _mean(by_language.get(lang, [])) for lang in LANGUAGES},
            passage_tokens=_mean([len(str(passage_texts[i]).split()) for i in rows]),
        )
    return stats


def _rows_by_split(domains: list[Any]) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = defaultdict(list)
    for i, domain in enumerate(domains):
        rows[domain].append(i)
    rows[ALL_SPLIT] = list(range(len(domains)))
    return rows


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


def _column(table: pa.Table, what: str, name: str) -> list[Any]:
    if name not in table.column_names:
        raise ReleaseError(f"{what} table has no column {name!r} (it has {table.column_names})")
    values: list[Any] = table.column(name).to_pylist()
    return values


__all__ = ["SplitStats", "split_statistics"]
