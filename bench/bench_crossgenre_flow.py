"""Benchmark: the whole crossgenre flow (paper 003) at the paper's size on this machine: how long, how much memory.

    .venv/bin/python bench/bench_crossgenre_flow.py [--quick] [--rerank-queries 4] [--root DIR]

The flow's real stage specs run one after the other in this process through the real engine
(:func:`irforge.engine.run_stage`, ``chunk_rows`` 500), as a flow run schedules them.

Front stages on volume (5,034 pages): ``ingest`` → ``extract`` → ``journal_links`` →
``single_study`` → ``resolve`` over copies of the 15 pages of ``data/crossgenre/news``, each
copy stating its own URL (syndicated copies of 11 stories: fine for timing); PubMed = the
bundled ``data/crossgenre/medline``.

Back stages at the paper's size (§2–3: 5,034 headlines, 4,566 cited abstracts, 217,665
distractors, top 500, splits 3,000/1,000/1,034, pairs (m, n) = (20, 50)): gzip NLM
PubmedArticleSet files (30,000 records each) of 222,231 records, texts resampled from the real
records by :func:`bench.bench_crossgenre_bm25.synthesise`, structure (labelled sections or not,
MeSH, publication types, journal, year) copied from a random real record, new PMIDs and DOIs,
read by the real ``distractors``. ``claims`` is published here: 4,566 headlines citing their
synthetic abstract plus 468 second headlines of cited studies (one of those headlines' words
reshuffled), with ``corpus`` and ``qrels``. Then the real ``candidates`` (okapi, plus,
plus_pre), ``splits``, ``pairs`` (50 negatives, 20 augmented, embeddings engine), ``evaluate``
(BM25+† on every split) and ``release``. The reranker (``builtin:minilm-l6-cross-encoder``,
max length 256) is timed on ``--rerank-queries`` test queries x 500 candidates (``evaluate`` on
a splits artifact of only them, minus the same run without reranker) and extrapolated to the
test split: an extrapolation (on a GPU a different job).

``--quick``: every size / 10. Peak RSS per stage: ``VmHWM`` reset before the stage
(``/proc/self/clear_refs``), so it includes what earlier stages left in memory (caches).
Results: ``bench/results/crossgenre_flow.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import math
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import lxml.html
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.bench_crossgenre_bm25 import DICTIONARY, MEDLINE, synthesise
from irforge.artifacts import Artifact, ArtifactStore
from irforge.config import ExecutionConfig, StrictModel
from irforge.engine import StagePlan, run_stage
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema
from tasks.common.pubmed.config import PubmedConfig
from tasks.common.pubmed.local import scan_medline
from tasks.common.pubmed.port import PubmedRecord
from tasks.common.rerank.config import RerankerConfig
from tasks.crossgenre import news
from tasks.crossgenre.augment import AugmentConfig
from tasks.crossgenre.corpus import CORPUS_SCHEMA
from tasks.crossgenre.stages import (
    candidates,
    claims,
    distractors,
    evaluate,
    extract,
    ingest,
    journal_links,
    pairs,
    release,
    resolve,
    single_study,
    splits,
)

NEWS = common.REPO / "data" / "crossgenre" / "news"
PAPER = {"claims": 5034, "cited": 4566, "distractors": 217_665, "pages": 5034}
PER_FILE = 30_000  # records per MEDLINE file, as NLM's baseline files
FIRST_PMID = 60_000_000
RERANKER = "builtin:minilm-l6-cross-encoder"


class _Label(StrictModel):
    label: str = ""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.bench_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="every size / 10")
    parser.add_argument("--rerank-queries", type=int, default=4, help="test queries the reranker is timed on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--root", type=Path, default=None, help="work folder (default: a temporary one, removed)"
    )
    return common.parse_with_out(parser, argv, common.results_file("crossgenre_flow"))


def rss_reset() -> None:
    """Reset the process's peak RSS (Linux ``clear_refs`` 5); without it the peak is the process's."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def rss_peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Runner:
    """Runs stage specs through the engine into one store, a table row per stage."""

    root: Path
    rows: list[dict[str, Any]]

    def run(
        self,
        spec: StageSpec[Any],
        config: BaseModel,
        upstream: Mapping[str, Artifact],
        base_dir: Path,
        label: str | None = None,
    ) -> Artifact:
        store = ArtifactStore(self.root / "store")
        plan = StagePlan.make(
            spec, StageContext(config, base_dir, {}, None), {n: a.fingerprint for n, a in upstream.items()}
        )
        plan = plan.with_upstream(dict(upstream), cache_dir=self.root / "cache")
        (self.root / "cache").mkdir(parents=True, exist_ok=True)
        rss_reset()
        outcome = run_stage(plan, store, "crossgenre", ExecutionConfig(chunk_rows=500))
        counts = outcome.manifest["counts"]
        self.rows.append(
            {"stage": label or spec.name, "rows_in": counts["rows_in"], "kept": counts["rows_out"],
             "excluded": counts["rows_excluded"], "reasons": counts["excluded_by_reason"],
             "wall_s": outcome.wall_s, "peak_rss_mb": rss_peak_mb(), "state": outcome.state}
        )  # fmt: skip
        return outcome.artifact

    def publish(self, name: str, table: pa.Table, tables: Mapping[str, pa.Table], key: str) -> Artifact:
        """``table`` (and side ``tables``) as the artifact of a stage called ``name`` (no row in the table)."""
        excluded = exclusion_schema(table.schema.field(key))

        def process(chunk: pa.Table, _ctx: StageContext[Any]) -> ChunkResult:
            return ChunkResult(chunk, excluded.empty_table(), tables=dict(tables))

        spec: StageSpec[Any] = StageSpec(
            name=name, version=1, config_type=_Label, upstream=(), schema=table.schema,
            excluded_schema=excluded, key=(key,), source=lambda _c, _i: TableSource(table),
            process=process, tables={n: t.schema for n, t in tables.items()}, whole_input=True,
        )  # fmt: skip
        digest = hashlib.sha256(table.to_string(preview_cols=0).encode() + str(table.num_rows).encode())
        label = f"{name}:{table.num_rows}:{digest.hexdigest()}:{sorted(tables)}"
        artifact = self.run(spec, _Label(label=label), {}, self.root)
        self.rows.pop()
        return artifact


def copy_pages(dest: Path, pages: int) -> None:
    """``pages`` copies of the demo pages (cycled), each stating a URL of its own."""
    originals = sorted(NEWS.glob("*.html"))
    dest.mkdir(parents=True)
    for n in range(pages):
        path = originals[n % len(originals)]
        html = path.read_text(encoding="utf-8")
        url = news.stated_url(lxml.html.fromstring(html), html)
        copy = n // len(originals)
        if url is not None:
            trail = "/" if url.endswith("/") else ""
            html = html.replace(url, f"{url.rstrip('/')}-copy{copy}{trail}")
        html += f"\n<!-- bench copy {copy} -->\n"  # distinct bytes also where the URL is file: + path
        (dest / f"c{copy:04d}_{path.name}").write_text(html, encoding="utf-8")


def front(runner: Runner, pages: int) -> dict[str, Artifact]:
    copy_pages(runner.root / "news", pages)
    pubmed = PubmedConfig(engine="local", medline=[str(MEDLINE)])
    steps: list[tuple[StageSpec[Any], BaseModel]] = [
        (ingest.SPEC, ingest.IngestConfig(pages=["news"])),
        (extract.SPEC, extract.ExtractConfig(min_main_chars=100)),
        (journal_links.SPEC, journal_links.JournalLinksConfig()),
        (single_study.SPEC, single_study.SingleStudyConfig(pubmed=pubmed, max_works=3)),
        (resolve.SPEC, resolve.ResolveConfig(pubmed=pubmed)),
    ]
    out: dict[str, Artifact] = {}
    for spec, config in steps:
        out[spec.name] = runner.run(spec, config, {n: out[n] for n in spec.upstream}, runner.root)
    return out


def real_records() -> list[PubmedRecord]:
    files = sorted(MEDLINE.rglob("*.xml.gz"))
    return [r for _, r in sorted(scan_medline([(f, f.name) for f in files])[1].items()) if r.abstract]


def synthetic_record(i: int, text: str, template: PubmedRecord) -> dict[str, Any]:
    """Corpus row of synthetic record ``i``: ``text`` cut into ``template``'s sections (by their share of words)."""
    words = text.split()
    shares = np.cumsum([len(s.text.split()) for s in template.sections], dtype=float)
    cuts = [0, *(round(len(words) * c / shares[-1]) for c in shares)]
    sections = [
        {"label": s.label, "text": " ".join(words[a:b])}
        for s, a, b in zip(template.sections, cuts, cuts[1:], strict=False)
        if b > a
    ]
    head = words[: 8 + i % 9]
    return {
        "doc_id": str(FIRST_PMID + i), "title": " ".join(head).capitalize() + ".",
        "abstract": "\n\n".join(s["text"] for s in sections), "sections": sections,
        "labelled": template.labelled, "mesh": list(template.mesh),
        "publication_types": list(template.publication_types) or ["Journal Article"],
        "journal": template.journal or "Journal of Synthetic Studies", "year": template.year or 2019,
    }  # fmt: skip


def article_xml(row: dict[str, Any]) -> str:
    """One PubmedArticle element (NLM's PubmedArticleSet DTD) of a synthetic corpus row."""
    pmid, doi = row["doc_id"], f"10.99999/bench.{row['doc_id']}"
    parts = "".join(
        f"<AbstractText Label={quoteattr(s['label'])}>{escape(s['text'])}</AbstractText>"
        if s["label"] else f"<AbstractText>{escape(s['text'])}</AbstractText>"
        for s in row["sections"]
    )  # fmt: skip
    types = "".join(f"<PublicationType>{escape(t)}</PublicationType>" for t in row["publication_types"])
    mesh = "".join(
        f"<MeshHeading><DescriptorName>{escape(m)}</DescriptorName></MeshHeading>" for m in row["mesh"]
    )
    return (
        f'<PubmedArticle><MedlineCitation Status="MEDLINE" Owner="NLM"><PMID Version="1">{pmid}</PMID>'
        f'<Article PubModel="Print"><Journal><JournalIssue CitedMedium="Internet"><PubDate><Year>{row["year"]}'
        f"</Year></PubDate></JournalIssue><Title>{escape(row['journal'])}</Title></Journal>"
        f"<ArticleTitle>{escape(row['title'])}</ArticleTitle>"
        f'<ELocationID EIdType="doi" ValidYN="Y">{doi}</ELocationID><Abstract>{parts}</Abstract>'
        f"<PublicationTypeList>{types}</PublicationTypeList></Article><MeshHeadingList>{mesh}</MeshHeadingList>"
        f'</MedlineCitation><PubmedData><ArticleIdList><ArticleId IdType="pubmed">{pmid}</ArticleId>'
        f'<ArticleId IdType="doi">{doi}</ArticleId></ArticleIdList></PubmedData></PubmedArticle>\n'
    )


def write_medline(folder: Path, texts: list[str], cited: set[int], seed: int) -> dict[int, dict[str, Any]]:
    """The synthetic records as gzip PubmedArticleSet files; the corpus rows of the ``cited`` ones."""
    templates = real_records()
    pick = np.random.default_rng(seed + 1).integers(0, len(templates), size=len(texts))
    folder.mkdir(parents=True)
    kept: dict[int, dict[str, Any]] = {}
    for start in range(0, len(texts), PER_FILE):
        path = folder / f"bench26n{start // PER_FILE + 1:04d}.xml.gz"
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as out:
            out.write('<?xml version="1.0" encoding="UTF-8"?>\n<PubmedArticleSet>\n')
            for i in range(start, min(start + PER_FILE, len(texts))):
                row = synthetic_record(i, texts[i], templates[pick[i]])
                out.write(article_xml(row))
                if i in cited:
                    kept[i] = row
            out.write("</PubmedArticleSet>\n")
    return kept


def claims_tables(
    headlines: list[str], cited: list[int], rows: dict[int, dict[str, Any]], queries_wanted: int, seed: int
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(claims, corpus, qrels): one headline per cited study, then second headlines of cited studies."""
    studies = list(zip(headlines, cited, strict=True))
    pick = random.Random(seed)
    extra = queries_wanted - len(studies)
    for q in range(extra):
        words, study = studies[q * len(cited) // extra]
        shuffled = words.lower().split()
        pick.shuffle(shuffled)
        studies.append((" ".join(shuffled).capitalize(), study))
    queries, qrels = [], []
    for q, (headline, study) in enumerate(studies):
        page = hashlib.sha256(f"bench-page-{q}".encode()).hexdigest()[:16]
        pmid = rows[study]["doc_id"]
        queries.append(
            {"query_id": page, "page_id": page, "headline": headline, "url": f"https://news{q % 97}.example/s/{q}",
             "site": f"news{q % 97}.example", "published": f"2019-{q % 12 + 1:02d}-{q % 28 + 1:02d}",
             "pmids": [pmid], "cluster_id": page, "cluster_size": 1}
        )  # fmt: skip
        qrels.append({"query_id": page, "doc_id": pmid, "relevance": 1})
    corpus = pa.Table.from_pylist([rows[i] for i in sorted(rows)], CORPUS_SCHEMA).sort_by("doc_id")
    return (
        pa.Table.from_pylist(queries, claims.SCHEMA),
        corpus,
        pa.Table.from_pylist(qrels, claims.QRELS_SCHEMA),
    )


def synthetic_claims(runner: Runner, sizes: dict[str, int], seed: int) -> Artifact:
    """Write the MEDLINE files (cited + distractors) and publish the claims artifact (module doc)."""
    total = sizes["cited"] + sizes["distractors"]
    (texts, headlines, cited), seconds = common.timed(lambda: synthesise(total, sizes["cited"], seed))
    rows = write_medline(runner.root / "medline", texts, set(cited), seed)
    del texts
    head, corpus, qrels = claims_tables(headlines, cited, rows, sizes["claims"], seed)
    runner.rows.append({"stage": "(synthesis, not a stage)", "wall_s": seconds, "peak_rss_mb": rss_peak_mb()})
    return runner.publish("claims", head, {"corpus": corpus, "qrels": qrels}, "page_id")


def rerank_sample(runner: Runner, up: dict[str, Artifact], n: int, test_size: int) -> dict[str, Any]:
    """evaluate on ``n`` test queries with and without the reranker; the difference extrapolated."""
    table = up["splits"].read()
    test = table.filter(pc.equal(table["split"], "test")).sort_by("query_id")
    sample = test.take(sorted(random.Random(0).sample(range(test.num_rows), min(n, test.num_rows))))
    few = {**up, "splits": runner.publish("splits", sample, {}, "query_id")}
    with_reranker = evaluate.EvaluateConfig(splits=("test",), reranker=RerankerConfig(model=RERANKER, max_length=256), rerank_k=500)  # fmt: skip
    runner.run(evaluate.SPEC, with_reranker, few, common.REPO, label=f"evaluate: reranker on {sample.num_rows} test")  # fmt: skip
    runner.run(evaluate.SPEC, with_reranker.model_copy(update={"reranker": None}), few, common.REPO,
               label=f"evaluate: same {sample.num_rows} test, no reranker")  # fmt: skip
    seconds = runner.rows[-2]["wall_s"] - runner.rows[-1]["wall_s"]
    extrapolated = seconds / max(1, sample.num_rows) * test_size
    runner.rows.append({"stage": f"reranker: {test_size} test x 500 (EXTRAPOLATED, CPU)", "wall_s": extrapolated})  # fmt: skip
    return {"queries": sample.num_rows, "pairs_per_s": sample.num_rows * 500 / max(seconds, 1e-9),
            "seconds": seconds, "test_queries": test_size, "extrapolated_s": extrapolated}  # fmt: skip


def back(runner: Runner, sizes: dict[str, int], front_out: dict[str, Artifact], args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    up: dict[str, Artifact] = {"claims": synthetic_claims(runner, sizes, args.seed)}
    pubmed = PubmedConfig(engine="local", medline=["medline"])
    up["distractors"] = runner.run(distractors.SPEC, distractors.DistractorsConfig(pubmed=pubmed), up, runner.root)  # fmt: skip
    if up["distractors"].count_rows() != sizes["distractors"]:
        raise SystemExit(f"distractors kept {up['distractors'].count_rows():,}: the synthesis is wrong")
    bm25 = candidates.CandidatesConfig(variants=["okapi", "plus", "plus_pre"], top_k=500, abbreviations=str(DICTIONARY))  # fmt: skip
    up["candidates"] = runner.run(candidates.SPEC, bm25, up, runner.root)
    up["splits"] = runner.run(splits.SPEC, splits.SplitsConfig(seed=42), {"claims": up["claims"]}, runner.root)  # fmt: skip
    pair_config = pairs.PairsConfig(negatives=50, augmented=20, augment=AugmentConfig(engine="embeddings"), seed=42)  # fmt: skip
    up["pairs"] = runner.run(pairs.SPEC, pair_config, {k: up[k] for k in pairs.SPEC.upstream}, runner.root)
    score_in = {k: up[k] for k in evaluate.SPEC.upstream}
    runner.run(evaluate.SPEC, evaluate.EvaluateConfig(reranker=None), score_in, common.REPO, label="evaluate: BM25+† all splits")  # fmt: skip
    test_size = pc.sum(pc.equal(up["splits"].read(columns=["split"])["split"], "test")).as_py()
    rerank = rerank_sample(runner, score_in, args.rerank_queries, test_size)
    card = release.ReleaseConfig(name="irforge/crossgenre-bench", pages_license="CC0-1.0 (demo pages, copied)")  # fmt: skip
    runner.run(release.SPEC, card, {**front_out, **up}, runner.root)
    return rerank


def report(console: Console, result: dict[str, Any]) -> None:
    table = common.figures_table(
        result["title"], ("stage", "rows in", "kept", "excluded", "wall s", "peak RSS MB")
    )
    for r in result["stages"]:
        count = [f"{r[k]:,}" if k in r else "" for k in ("rows_in", "kept", "excluded")]
        rss = f"{r['peak_rss_mb']:,.0f}" if "peak_rss_mb" in r else ""
        table.add_row(r["stage"], *count, f"{r['wall_s']:,.1f}", rss)
    console.print(table)
    console.print(
        f"total: stages {result['stages_s']:,.0f} s; with the extrapolated reranker {result['with_reranker_s']:,.0f} s;"
        f" whole run (synthesis included) {result['run_s']:,.0f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=150)
    sizes = {k: math.ceil(v / 10) if args.quick else v for k, v in PAPER.items()}
    root = args.root or Path(tempfile.mkdtemp(prefix="crossgenre-flow-bench-"))
    runner = Runner(root, [])
    load = os.getloadavg()
    try:
        rerank, run_s = common.timed(lambda: back(runner, sizes, front(runner, sizes["pages"]), args))
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    staged = [r for r in runner.rows if "rows_in" in r]
    stages_s = sum(
        r["wall_s"] for r in staged if not r["stage"].startswith("evaluate: ") or "BM25" in r["stage"]
    )
    result: dict[str, Any] = {
        "title": f"crossgenre flow: {sizes['pages']:,} pages; {sizes['claims']:,} claims, {sizes['cited']:,} cited, "
        f"{sizes['distractors']:,} distractors; {os.cpu_count()} CPUs",
        "sizes": sizes, "quick": args.quick, "stages": runner.rows, "rerank": rerank, "run_s": run_s,
        "stages_s": stages_s, "with_reranker_s": stages_s + rerank["extrapolated_s"],
        "load_average_start": load, "load_average_end": os.getloadavg(), "cpus": os.cpu_count(),
        "environment": common.environment(numpy=np.__version__, pyarrow=pa.__version__),
    }  # fmt: skip
    report(console, result)
    common.write_results(args.out, result, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
