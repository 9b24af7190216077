"""Stage ``release``: the collection as a Hugging Face dataset folder in CUREv1's layout.

Configs ``corpus`` (``_id, title, text``), ``queries-en`` / ``queries-es`` / ``queries-fr``
(``_id, text``) and ``qrels`` (``query-id, corpus-id, score``); one split per domain
present (``split="all"`` loads their union); files ``<split>/<config>.jsonl`` and a generated dataset card
(``README.md``: YAML configs, CURE Table 6 statistics per split, provenance — each stage's
config, fingerprints, prompts and models —, source licences, machine-translation and LLM
label notes, and a warning when the demo's tiny models made the pools and labels).
Written deterministically, so the same inputs give byte-identical files; it lands in the
artifact's ``files/release/``. ``irforge release`` copies it out or pushes it to the Hub.

The release is complete by construction (``tasks.cure.dataset.layout``): the languages are those
of the ``translate`` stage's config, and a query without a text in one of them (a failed
translation) is left out of every language's file, its judgements out of ``qrels``; a
domain left without a judged query has no split. So every split has every config, which is
what MTEB's ``CUREv1`` task loads (the card carries the snippet; tests/cure/test_release_mteb.py).

Units: one file per (config, split). Excluded: ``no_complete_query`` (the domain's every
judged query lacks a translation, or none was judged: the detail says which; all its files).
Side table ``omissions``: one row per query left out and language it lacks, reason
``missing_translation``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml
from pydantic import Field

from irforge.artifacts import Artifact, lineage
from irforge.config import StrictModel
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, rows_to_table
from tasks.common.release.files import FILES_SCHEMA
from tasks.common.text.licences import release_licence
from tasks.cure.dataset.card import CardInfo, ModelInfo, PromptInfo
from tasks.cure.dataset.layout import write_release
from tasks.cure.dataset.schema import LANGUAGES, release_configs


class ReleaseConfig(StrictModel):
    name: str = Field("irforge/cure-demo", description="Hub repository id (used in the card's examples).")
    pretty_name: str = "CURE-style clinical retrieval collection"
    license: str = Field("cc-by-nc-4.0", description="Hub licence id of the release (CUREv1: cc-by-nc-4.0).")
    license_name: str | None = None
    license_link: str | None = None


SCHEMA = FILES_SCHEMA
EXCLUDED_SCHEMA = exclusion_schema(
    pa.field("config", pa.string(), nullable=False), pa.field("split", pa.string(), nullable=False)
)
OMISSIONS_SCHEMA = pa.schema(
    [
        pa.field("domain", pa.string(), nullable=False),
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("language", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
    ]
)
_UNITS_SCHEMA = pa.schema([pa.field("config", pa.string()), pa.field("split", pa.string())])


def _units(ctx: StageContext[ReleaseConfig], _inputs: dict[str, Any]) -> TableSource:
    domains = sorted(set(ctx.upstream["corpus"].read(columns=["domain"]).column("domain").to_pylist()))
    # No ``all`` folder: datasets reserves that split name and builds it as the union of
    # the others (``load_dataset(folder, config, split="all")``), as MTEB's CUREv1 does.
    configs = release_configs(_languages(ctx))
    rows = [{"config": c, "split": s} for s in domains for c in configs]
    return TableSource(pa.Table.from_pylist(rows, schema=_UNITS_SCHEMA))


def _languages(ctx: StageContext[ReleaseConfig]) -> tuple[str, ...]:
    """The translate stage's configured languages (its ``translate_info`` side table; all
    three when it has none: no query was translated)."""
    info = ctx.upstream["translate"].read(table="translate_info").to_pylist()
    return tuple(info[0]["languages"] if info else ()) or LANGUAGES


def _column(artifact: Artifact, name: str) -> list[Any]:
    """``name``'s values in ``artifact`` (none when it has no such column)."""
    if name not in artifact.schema().names:
        return []
    return list(artifact.read(columns=[name]).column(name).to_pylist())


def card_info(ctx: StageContext[ReleaseConfig]) -> CardInfo:
    stages = lineage(dict(ctx.upstream))
    materials = {name: a.manifest["material"] for name, a in stages.items()}
    config_text = yaml.safe_dump(
        {name: m["config"] for name, m in materials.items()}, sort_keys=True, allow_unicode=True
    )
    models: dict[str, ModelInfo] = {}
    prompts: list[PromptInfo] = []
    demo = False
    if "embed" in materials:
        encoder = materials["embed"]["config"]["encoder"]
        models["encoder"] = ModelInfo(id=encoder["model"], description=f"{encoder['engine']} (mining kNN)")
        demo |= str(encoder["model"]).startswith("builtin:")
    if "pool" in materials:
        reranker = materials["pool"]["config"]["reranker"]
        models["cross-encoder"] = ModelInfo(id=reranker["model"], description=f"{reranker['engine']} (pools)")
        demo |= str(reranker["model"]).startswith("builtin:")
    judge_model = None
    if "judge" in materials:
        llm = materials["judge"]["inputs"]["llm"]
        # The models that answered (the judge's ``model`` column), not only the configured one.
        answered = set(_column(stages["judge"], "model"))
        judge_model = ", ".join(sorted(answered)) or str(llm["model"])
        models["judge"] = ModelInfo(
            id=judge_model, description=f"{llm['engine']}, sampling {llm['sampling']}"
        )
        demo |= llm["engine"] == "llama-cpp"
        for name, digest in sorted(materials["judge"]["inputs"]["prompt"].items()):
            prompts.append(PromptInfo(name=f"judge/{name}", sha256=digest))
    translation = None
    if "translate" in materials:
        # The engines that translated (``auto`` resolved): the card names what ran, or none.
        engines = set(_column(stages["translate"], "engine"))
        translation = ", ".join(sorted(engines - {"original"})) or None
        if "llm" in engines:  # tasks.common.translate.config.describe
            llm = materials["translate"]["inputs"]["llm"]
            models["translator"] = ModelInfo(
                id=str(llm["llm"]["model"]), description=f"{llm['llm']['engine']} (query translation)"
            )
            prompts.append(PromptInfo(name="translate/template", sha256=llm["prompt_sha256"]))
            demo |= llm["llm"]["engine"] == "llama-cpp"
    licences: Counter[str] = Counter()
    if "ingest" in stages and "corpus" in stages:
        in_corpus = set(stages["corpus"].read(columns=["article_id"]).column("article_id").to_pylist())
        for row in stages["ingest"].read(columns=["article_id", "license"]).to_pylist():
            if row["article_id"] in in_corpus:
                licences[row["license"]] += 1
    settings = ctx.config.model_dump()  # name, pretty_name, license, license_name, license_link
    licence, reason = release_licence(settings["license"], dict(licences))
    if licence != settings["license"]:  # a source is more restrictive: the card says what holds
        settings.update(license=licence, license_name=reason or settings["license_name"])
    return CardInfo(
        **settings,
        languages=_languages(ctx),
        source_licences=dict(sorted(licences.items())),
        flow_config=config_text,
        prompts=tuple(prompts),
        models=models,
        stage_fingerprints={name: a.fingerprint for name, a in stages.items()},
        translation_engine=translation,
        judge_model=judge_model,
        demo_models=demo,
    )


def process(chunk: pa.Table, ctx: StageContext[ReleaseConfig]) -> ChunkResult:
    assert ctx.files_dir is not None, "release: run through the stage engine"
    corpus = ctx.upstream["corpus"].read(columns=["passage_id", "article_id", "domain", "title", "text"])
    # An article without a title (an annotator's passage from an unknown article) gets "",
    # as in CUREv1 and BEIR corpora.
    corpus = corpus.set_column(
        corpus.schema.get_field_index("title"), "title", pc.fill_null(corpus.column("title"), "")
    )
    translations = ctx.upstream["translate"].read(columns=["query_id", "domain", "language", "text"])
    qrels = ctx.upstream["qrels"].read(columns=["query_id", "passage_id", "domain", "score"])
    # Only queries with judgements are released: a query with none cannot be evaluated.
    judged = qrels.column("query_id").unique()
    queries = translations.filter(pc.is_in(translations.column("query_id"), judged))
    written = write_release(ctx.files_dir / "release", corpus, queries, qrels, card_info(ctx), overwrite=True)
    files = {(f.config, f.split): f for f in written.files}
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for unit in chunk.to_pylist():
        f = files.get((unit["config"], unit["split"]))
        if f is None:
            why = written.dropped.get(unit["split"], "no file was written for this split")
            excluded.append(
                {**unit, "reason": "no_complete_query", "detail": f"the domain has no split: {why}"}
            )
        else:
            kept.append({"config": f.config, "split": f.split, "path": f.path, "rows": f.rows,
                         "bytes": f.bytes, "sha256": f.sha256})  # fmt: skip
    omitted = [
        {"domain": o.domain, "query_id": o.query_id, "language": o.language, "reason": "missing_translation"}
        for o in written.omissions
    ]
    return ChunkResult(
        rows_to_table(kept, SCHEMA),
        rows_to_table(excluded, EXCLUDED_SCHEMA),
        tables={"omissions": rows_to_table(omitted, OMISSIONS_SCHEMA)},
    )


SPEC: StageSpec[ReleaseConfig] = StageSpec(
    name="release",
    version=4,  # 3: the card's licence never more permissive than its sources'; 4: the models and engines that ran (issue 29)
    config_type=ReleaseConfig,
    upstream=("corpus", "translate", "qrels"),
    schema=SCHEMA,
    excluded_schema=EXCLUDED_SCHEMA,
    key=("config", "split"),
    source=_units,
    process=process,
    tables={"omissions": OMISSIONS_SCHEMA},
    whole_input=True,
    description="A Hugging Face dataset folder in CUREv1's layout with a generated card.",
)
