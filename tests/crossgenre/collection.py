"""A small crossgenre collection for the tests of pairs, evaluate, release and report.

Documents are real PubMed records (``data/crossgenre/medline``, read here with lxml, only
to make test data); queries are headlines written from their cited titles, with sites,
dates and splits given by each test. The upstream artifacts (claims with its ``corpus`` and
``qrels``, distractors, candidates with its ``recall``, splits) go through the real engine
(:func:`tests.crossgenre.conftest.artifact_of`) in those stages' own schemas.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from lxml import etree

from irforge.artifacts import Artifact
from irforge.engine import StageOutcome
from tasks.crossgenre.corpus import CORPUS_SCHEMA
from tasks.crossgenre.stages import candidates as candidates_stage
from tasks.crossgenre.stages import claims as claims_stage
from tasks.crossgenre.stages import splits as splits_stage
from tests.common.test_report import publish
from tests.crossgenre.conftest import MEDLINE, artifact_of

SAMPLES = sorted((MEDLINE / "pubmed_sample" / "baseline").glob("*.xml.gz"))


def _text(node: Any) -> str:
    return " ".join("".join(node.itertext()).split())


@functools.cache
def medline_docs(count: int) -> tuple[dict[str, Any], ...]:
    """The first ``count`` records with an abstract of :data:`SAMPLES`, as corpus rows."""
    rows: list[dict[str, Any]] = []
    for path in SAMPLES:
        rows += _records(path, count - len(rows), {r["doc_id"] for r in rows})  # a PMID once
    assert len(rows) == count, f"{MEDLINE} has only {len(rows)} distinct records with an abstract"
    return tuple(rows)


def _records(path: Path, count: int, seen: set[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with gzip.open(path) as fh:
        for _event, article in etree.iterparse(fh, tag="PubmedArticle"):
            parts = article.findall(".//Abstract/AbstractText")
            pmid = article.findtext(".//MedlineCitation/PMID")
            if parts and len(rows) < count and pmid not in seen:
                seen.add(pmid)
                sections = [{"label": p.get("Label") or "", "text": _text(p)} for p in parts]
                year = article.findtext(".//JournalIssue/PubDate/Year")
                rows.append(
                    {
                        "doc_id": pmid,
                        "title": _text(article.find(".//ArticleTitle")),
                        "abstract": "\n\n".join(s["text"] for s in sections),
                        "sections": sections,
                        "labelled": any(s["label"] for s in sections),
                        "mesh": [_text(d) for d in article.findall(".//MeshHeading/DescriptorName")],
                        "publication_types": [_text(t) for t in article.findall(".//PublicationType")],
                        "journal": article.findtext(".//Journal/Title") or "",
                        "year": int(year) if year else None,
                    }
                )
            article.clear()
    return rows


@dataclass(frozen=True)
class Query:
    query_id: str
    split: str
    cited: tuple[str, ...]  # doc ids
    headline: str
    site: str = "www.dailypulse.example"
    published: str | None = "2024-05-01"
    group_id: str | None = None


@dataclass
class Collection:
    docs: Sequence[dict[str, Any]]
    queries: Sequence[Query]
    # query id -> [(doc id, score)] best first, per variant
    rankings: dict[str, dict[str, list[tuple[str, float]]]] = field(default_factory=dict)
    recall: list[dict[str, Any]] = field(default_factory=list)
    extra_splits: list[dict[str, Any]] = field(default_factory=list)  # split rows of no claim

    def claims_table(self) -> pa.Table:
        rows = [
            {
                "query_id": q.query_id, "page_id": q.query_id, "headline": q.headline,
                "url": f"https://{q.site}/news/{q.query_id}", "site": q.site, "published": q.published,
                "pmids": sorted(q.cited), "cluster_id": q.query_id, "cluster_size": 1,
            }
            for q in sorted(self.queries, key=lambda q: q.query_id)
        ]  # fmt: skip
        return pa.Table.from_pylist(rows, claims_stage.SCHEMA)

    def cited_ids(self) -> set[str]:
        return {d for q in self.queries for d in q.cited}

    def publish(self, root: Path) -> dict[str, Artifact]:
        cited = self.cited_ids()
        corpus = [d for d in self.docs if d["doc_id"] in cited]
        qrels = [
            {"query_id": q.query_id, "doc_id": d, "relevance": 1}
            for q in sorted(self.queries, key=lambda q: q.query_id)
            for d in sorted(q.cited)
        ]
        claims = artifact_of(
            root,
            "claims",
            self.claims_table(),
            {
                "corpus": pa.Table.from_pylist(sorted(corpus, key=lambda d: d["doc_id"]), CORPUS_SCHEMA),
                "qrels": pa.Table.from_pylist(qrels, claims_stage.QRELS_SCHEMA),
            },
        )
        negatives = [d for d in self.docs if d["doc_id"] not in cited]
        distractors = artifact_of(root, "distractors", pa.Table.from_pylist(negatives, CORPUS_SCHEMA))
        candidates = artifact_of(
            root,
            "candidates",
            self.candidates_table(),
            {"recall": pa.Table.from_pylist(self.recall, candidates_stage.RECALL_SCHEMA)},
        )
        split_rows = [
            {"query_id": q.query_id, "split": q.split, "group_id": q.group_id or q.query_id}
            for q in self.queries
        ] + self.extra_splits
        splits = artifact_of(root, "splits", pa.Table.from_pylist(split_rows, splits_stage.SCHEMA))
        return {"claims": claims, "distractors": distractors, "candidates": candidates, "splits": splits}

    def candidates_table(self) -> pa.Table:
        cited = {q.query_id: set(q.cited) for q in self.queries}
        rows = [
            {"query_id": qid, "variant": variant, "doc_id": doc, "rank": rank, "score": score,
             "relevant": doc in cited.get(qid, set())}
            for qid, variants in sorted(self.rankings.items())
            for variant, ranked in sorted(variants.items())
            for rank, (doc, score) in enumerate(ranked, start=1)
        ]  # fmt: skip
        return pa.Table.from_pylist(rows, candidates_stage.SCHEMA)


def headline_of(title: str, words: int = 9) -> str:
    """A news-like headline from a study title: its first words, the final stop dropped."""
    return "Study: " + " ".join(title.rstrip(".").split()[:words])


def changed_tokens(before: str, after: str) -> int:
    """Tokens an augmentation changed: positions that differ for a substitution (same length),
    the tokens added for an insertion (``before`` must then be a subsequence of ``after``)."""
    old, new = before.split(), after.split()
    if len(old) == len(new):
        return sum(a != b for a, b in zip(old, new, strict=True))
    rest = iter(new)
    assert len(new) > len(old) and all(token in rest for token in old), (before, after)
    return len(new) - len(old)


FUNNEL: dict[str, tuple[int, dict[str, int]]] = {
    # stage -> (units kept, {reason: units excluded}); units in = kept + excluded
    "ingest": (12, {"duplicate_page": 1, "unreadable": 1}),
    "extract": (11, {"no_main_text": 1}),
    "journal_links": (10, {"no_study_link": 1}),
    "single_study": (9, {"roundup": 1}),
    "resolve": (8, {"unresolved_link": 1}),
}


def publish_funnel(root: Path) -> dict[str, StageOutcome]:
    """Artifacts of the stages before claims with the :data:`FUNNEL` counts (their rows are page ids)."""
    out = {}
    for stage, (kept, reasons) in FUNNEL.items():
        ids = [f"{stage}-{i:02d}" for i in range(kept)]
        excluded = [
            {"page_id": f"{stage}-x-{reason}-{i}", "reason": reason, "detail": f"page {i}"}
            for reason, n in reasons.items()
            for i in range(n)
        ]
        table = pa.table({"page_id": pa.array(ids, pa.string())})
        if stage == "single_study":  # the rule that kept each page (the report's decisions table)
            rules = ["one_work"] * (kept - 2) + ["reported_work", "llm"]
            table = table.append_column("decided_by", pa.array(rules, pa.string()))
        out[stage] = publish(root, stage, table, ("page_id",), excluded=excluded, flow="crossgenre")
    return out
