"""Stage ``release``: the collection as a Hugging Face dataset folder with its card (contract §12).

Configs ``corpus`` (claims' cited abstracts ∪ distractors: ``_id, title, text``),
``queries`` (``_id, text`` = headline, ``url, site, date`` — "" when unknown), ``qrels`` (``query-id,
corpus-id, score``), ``candidates`` (the ``variant`` top list: ``rank, score``) and
``pairs`` (the ``pairs`` stage's rows by ``corpus-id``; with ``pairs_text`` their abstract
too); splits train / dev / test from the ``splits`` stage (layout:
:mod:`tasks.crossgenre.dataset`). News text is never released: headline and URL only.

The card (:mod:`tasks.crossgenre.card`) counts the funnel from the manifests of the
stages before (``ingest`` … ``claims``), which are declared upstream so their
fingerprints are this artifact's inputs. It lands in ``files/release/``;
``irforge release`` copies it out or pushes it (:mod:`tasks.common.release.hub`). It
loads with ``datasets.load_dataset(folder, config, split=...)`` and as an MTEB retrieval
task (the card's snippet; ``tests/crossgenre/test_release.py`` runs both).

Units: one file per (config, split). Excluded: ``empty_split`` (no row of that config in
that split: ``datasets`` cannot load an empty split, so the card does not declare it).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pyarrow as pa
from pydantic import Field

from irforge.artifacts import Artifact, lineage
from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource
from tasks.common.release.files import FILE_EXCLUDED_SCHEMA, FILE_UNITS, FILES_SCHEMA, file_outcome
from tasks.common.text.licences import release_licence
from tasks.crossgenre.card import FUNNEL, CardInfo, FunnelStep, render_card
from tasks.crossgenre.dataset import CONFIGS, CORPUS_SPLIT, SPLITS, write_release
from tasks.crossgenre.documents import read_documents

DATA_STAGES = ("claims", "distractors", "candidates", "splits", "pairs")


class ReleaseConfig(StrictModel):
    name: str = Field("irforge/crossgenre-demo", description="Hub repository id (used in the card).")
    pretty_name: str = "Cross-genre health claims: news headlines to PubMed abstracts"
    license: str = Field("cc-by-4.0", description="Hub licence id of the collection (not of the sources).")
    pages_license: str | None = Field(
        None, description="Licence of the news pages, said on the card (demo pages: CC0-1.0)."
    )
    variant: str = Field("plus_pre", description="Candidates variant released (BM25+†).")
    pairs_text: bool = Field(False, description="Put each pair's abstract text in the pairs files.")


SCHEMA = FILES_SCHEMA
EXCLUDED_SCHEMA = FILE_EXCLUDED_SCHEMA
_UNITS = FILE_UNITS

Rows = dict[tuple[str, str], list[tuple[Any, ...]]]


def _units(_ctx: StageContext[ReleaseConfig], _inputs: dict[str, Any]) -> TableSource:
    rows = [{"config": "corpus", "split": CORPUS_SPLIT}]
    rows += [{"config": c, "split": s} for c in CONFIGS if c != "corpus" for s in SPLITS]
    return TableSource(pa.Table.from_pylist(rows, _UNITS))


def _split_of(ctx: StageContext[ReleaseConfig]) -> dict[str, str]:
    table = ctx.upstream["splits"].read(columns=["query_id", "split"])
    found = dict(zip(table.column("query_id").to_pylist(), table.column("split").to_pylist(), strict=True))
    unknown = sorted(set(found.values()) - set(SPLITS))
    if unknown:
        raise IrforgeError(f"release: splits {unknown} are not among {list(SPLITS)}")
    return found


def collect(ctx: StageContext[ReleaseConfig]) -> Rows:
    """Every file's rows, sorted, keyed by (config, split)."""
    up = ctx.upstream
    split = _split_of(ctx)
    out: Rows = {}
    docs = read_documents(up["claims"], up["distractors"], ["title", "abstract"]).to_pylist()
    out["corpus", CORPUS_SPLIT] = [(d["doc_id"], d["title"], d["abstract"]) for d in docs]
    twice = sorted(k for k, n in Counter(d["doc_id"] for d in docs).items() if n > 1)
    if twice:
        raise IrforgeError(
            f"release: doc id(s) {twice[:5]} occur twice in the distractors: ids must be unique"
        )
    claims = up["claims"].read(columns=["query_id", "headline", "url", "site", "published"]).to_pylist()
    for q in sorted(claims, key=lambda r: r["query_id"]):
        if q["query_id"] in split:
            # "" for an unknown date: MTEB's collator refuses None in a string field.
            row = (q["query_id"], q["headline"], q["url"], q["site"], q["published"] or "")
            out.setdefault(("queries", split[q["query_id"]]), []).append(row)
    for r in up["claims"].read(columns=["query_id", "doc_id", "relevance"], table="qrels").to_pylist():
        if r["query_id"] in split:
            out.setdefault(("qrels", split[r["query_id"]]), []).append(
                (r["query_id"], r["doc_id"], r["relevance"])
            )
    candidates = up["candidates"].read(
        columns=["query_id", "doc_id", "rank", "score"], filters=[("variant", "=", ctx.config.variant)]
    )
    for r in candidates.sort_by([("query_id", "ascending"), ("rank", "ascending")]).to_pylist():
        if r["query_id"] in split:
            out.setdefault(("candidates", split[r["query_id"]]), []).append(
                (r["query_id"], r["doc_id"], r["rank"], r["score"])
            )
    columns = [
        "query_id",
        "split",
        "doc_id",
        "query",
        "label",
        "kind",
        *(["document"] * ctx.config.pairs_text),
    ]
    for r in up["pairs"].read(columns=columns).to_pylist():
        extra = (r["document"],) if ctx.config.pairs_text else ()
        row = (r["query_id"], r["doc_id"], r["query"], r["label"], r["kind"], *extra)
        out.setdefault(("pairs", r["split"]), []).append(row)
    for key in out:
        if key[0] == "qrels":
            out[key].sort()
    return out


def _funnel(ctx: StageContext[ReleaseConfig]) -> list[FunnelStep]:
    steps = []
    for stage, label in FUNNEL:
        counts = ctx.upstream[stage].manifest["counts"]
        steps.append(
            FunnelStep(stage, label, int(counts["units_in"]), int(counts["units_kept"]),
                       dict(sorted(counts["excluded_by_reason"].items())))
        )  # fmt: skip
    return steps


def card_info(ctx: StageContext[ReleaseConfig], files: Rows) -> CardInfo:
    up = ctx.upstream
    sites = Counter(up["claims"].read(columns=["site"]).column("site").to_pylist())
    published = [p for p in up["claims"].read(columns=["published"]).column("published").to_pylist() if p]
    kinds = Counter((r["split"], r["kind"]) for r in up["pairs"].read(columns=["split", "kind"]).to_pylist())
    recall = (
        up["candidates"].read(table="recall").to_pylist() if "recall" in up["candidates"].table_names else []
    )
    stages = lineage(dict(up))
    abstracts = up["claims"].count_rows("corpus") + up["distractors"].num_rows
    licence, why = release_licence(ctx.config.license, {ABSTRACTS_LICENCE: abstracts} if abstracts else {})
    return CardInfo(
        name=ctx.config.name,
        pretty_name=ctx.config.pretty_name,
        license=licence,
        license_name=why,
        own_license=ctx.config.license,
        pages_license=ctx.config.pages_license,
        models=llm_decisions(stages.get("single_study")),
        files={key: len(rows) for key, rows in files.items()},
        pairs_text=ctx.config.pairs_text,
        variant=ctx.config.variant,
        funnel=_funnel(ctx),
        cited=up["claims"].count_rows("corpus"),
        distractors=up["distractors"].num_rows,
        sites=sorted(sites.items(), key=lambda kv: (-kv[1], kv[0])),
        pair_kinds=dict(kinds),
        recall=recall,
        dates=(min(published), max(published)) if published else None,
        fingerprints={name: a.fingerprint for name, a in stages.items()},
    )


ABSTRACTS_LICENCE = "MEDLINE/PubMed abstracts (NLM terms; texts may be copyrighted by their publishers)"


def llm_decisions(single_study: Artifact | None) -> tuple[str, ...]:
    """What the LLM of ``single_study`` decided, as the card's provenance says it: the models
    named in the decisions (``LLM (<model>): …``), the engine and the prompt's digest."""
    llm = single_study.manifest["material"]["inputs"].get("llm") if single_study else None
    if single_study is None or not llm:
        return ()
    texts = [row["decision"] for row in single_study.read(columns=["decided_by", "decision"]).to_pylist()] + [
        row["detail"] or "" for row in single_study.excluded().to_pylist() if row["decided_by"] == "llm"
    ]
    models = Counter(m.group(1) for t in texts if (m := re.match(r"LLM \(([^)]+)\): ", t)))
    prompt = single_study.manifest["material"]["inputs"].get("prompt_sha256", "")
    return tuple(
        f"`single_study`: {n} page(s) the rules left undecided decided by `{model}` ({llm['engine']}), "
        f"prompt sha256 `{prompt[:16]}`"
        for model, n in sorted(models.items())
    )


def process(chunk: pa.Table, ctx: StageContext[ReleaseConfig]) -> ChunkResult:
    assert ctx.files_dir is not None, "release: run through the stage engine"
    files = {key: rows for key, rows in collect(ctx).items() if rows}
    if not any(c == "queries" for c, _s in files):
        raise IrforgeError(
            "release: no query in any split: nothing to release (see the splits and claims stages)"
        )
    written = {(f.config, f.split): f for f in write_release(
        ctx.files_dir / "release", files, render_card(card_info(ctx, files)), pairs_text=ctx.config.pairs_text
    )}  # fmt: skip
    kept, excluded = file_outcome(chunk, written.values())
    return ChunkResult(kept, excluded)


SPEC: StageSpec[ReleaseConfig] = StageSpec(
    name="release",
    version=2,  # 2: an unknown query date is "" (MTEB refuses None)
    config_type=ReleaseConfig,
    upstream=tuple(dict.fromkeys([s for s, _label in FUNNEL] + list(DATA_STAGES))),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("config", "split"),
    source=_units,
    process=process,
    whole_input=True,
    description="A Hugging Face dataset folder (corpus, queries, qrels, candidates, pairs) with its card.",
)
