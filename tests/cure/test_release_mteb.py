"""The release loads as MTEB's stock ``CUREv1`` task and scores what the ``evaluate`` stage says.

Small handmade upstream artifacts (corpus, translations, qrels, the embed stage's config)
go through the real ``release`` and ``evaluate`` stages. Among them: a query whose Spanish
translation failed, a domain whose only query lacks its French text, and seven CUREv1
domains with no rows at all. The card's MTEB snippet is then run as written (mteb 2.x, its
``CUREv1`` task and retrieval loader), with only the dataset path swapped for the release
folder and ``mteb.get_model`` answering with the evaluate stage's encoder: the builtin
all-MiniLM-L6-v2, through MTEB's own SentenceTransformer wrapper.

nDCG@10 must agree to 1e-5: MTEB rounds each mean to 5 decimals
(``mteb/_evaluators/retrieval_metrics.py``, ``parse_metrics_from_scores``), both use
pytrec_eval's ``ndcg_cut`` over the same queries, and the texts are distinct so no score ties.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from irforge.artifacts import Artifact, ArtifactStore
from irforge.config import ExecutionConfig, StrictModel
from irforge.engine import StageOutcome, StagePlan, run_stage
from irforge.fingerprint import canonical_json, fingerprint_view
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema
from tasks.common.embed.config import EncoderConfig
from tasks.common.embed.local import BUILTIN_MINILM, builtin_model_path
from tasks.cure.dataset.schema import LANGUAGES
from tasks.cure.stages import embed as embed_stage
from tasks.cure.stages import evaluate as evaluate_stage
from tasks.cure.stages import release as release_stage
from tasks.cure.stages import translate as translate_stage
from tasks.cure.stages.embed import EmbedConfig
from tasks.cure.stages.evaluate import EvaluateConfig
from tasks.cure.stages.release import ReleaseConfig

pytestmark = pytest.mark.slow  # imports mteb and encodes with MiniLM twice (~20 s)

NAME = "irforge/cure-mteb-test"
FLOW = "cure"

PASSAGES = {
    "dermatology": [
        ("d01", "Psoriasis", "Narrowband UVB phototherapy clears plaque psoriasis in most adults."),
        ("d02", "Psoriasis", "Topical corticosteroids reduce scaling of psoriatic plaques."),
        ("d03", "Acne", "Oral isotretinoin is reserved for severe nodular acne."),
        ("d04", "Acne", "Benzoyl peroxide gel lowers bacterial counts in mild acne."),
        ("d05", "Eczema", "Emollients restore the skin barrier in atopic dermatitis."),
        ("d06", "Eczema", "Dupilumab blocks interleukin-4 signalling in moderate eczema."),
        ("d07", "", "Melanoma risk rises with childhood sunburns."),
        ("d08", "Urticaria", "Second-generation antihistamines control chronic hives."),
    ],
    "genetics": [
        ("g01", "BRCA", "BRCA1 carriers face a high lifetime risk of breast cancer."),
        ("g02", "BRCA", "Risk-reducing salpingo-oophorectomy lowers ovarian cancer risk in BRCA2 carriers."),
        ("g03", "Trisomy", "Trisomy 21 results from nondisjunction during meiosis."),
        ("g04", "Screening", "Cell-free DNA screening detects fetal aneuploidy from maternal blood."),
        ("g05", "Cystic fibrosis", "CFTR modulators improve lung function in cystic fibrosis."),
        ("g06", "", "Huntington disease is caused by CAG repeat expansion."),
        ("g07", "Pharmacogenomics", "CYP2C19 poor metabolisers respond weakly to clopidogrel."),
    ],
    "pulmonology": [
        ("p01", "COPD", "Home spirometry tracks lung function decline in COPD."),
        ("p02", "Asthma", "Inhaled corticosteroids prevent asthma exacerbations."),
    ],
}
QUERIES = {  # query id -> (domain, {language: text}); a missing language is a failed translation
    "qd1": (
        "dermatology",
        {
            "en": "light therapy for psoriasis plaques",
            "es": "fototerapia para placas de psoriasis",
            "fr": "photothérapie des plaques de psoriasis",
        },
    ),
    "qd2": (
        "dermatology",
        {
            "en": "treatment of severe acne",
            "es": "tratamiento del acné grave",
            "fr": "traitement de l'acné sévère",
        },
    ),
    "qd3": ("dermatology", {"en": "itchy hives medication", "fr": "médicament contre l'urticaire"}),  # no es
    "qd4": (
        "dermatology",
        {
            "en": "skin barrier repair in eczema",
            "es": "barrera cutánea en eccema",
            "fr": "barrière cutanée eczéma",
        },
    ),
    "qg1": (
        "genetics",
        {
            "en": "hereditary breast cancer genes",
            "es": "genes del cáncer de mama hereditario",
            "fr": "gènes du cancer du sein héréditaire",
        },
    ),
    "qg2": (
        "genetics",
        {
            "en": "prenatal test for Down syndrome",
            "es": "prueba prenatal del síndrome de Down",
            "fr": "test prénatal de la trisomie 21",
        },
    ),
    "qp1": ("pulmonology", {"en": "monitoring COPD at home", "es": "EPOC en casa"}),  # no fr: the domain goes
}
QRELS = [  # graded so that the ideal order is not what MiniLM returns everywhere
    ("qd1", "d01", 2), ("qd1", "d02", 1), ("qd1", "d05", 0),
    ("qd2", "d03", 2), ("qd2", "d04", 1), ("qd2", "d07", 1),
    ("qd3", "d08", 2),
    ("qd4", "d05", 2), ("qd4", "d06", 1), ("qd4", "d02", 0),
    ("qg1", "g01", 2), ("qg1", "g02", 2), ("qg1", "g07", 0),
    ("qg2", "g04", 2), ("qg2", "g03", 1), ("qg2", "g06", 0),
    ("qp1", "p01", 2),
]  # fmt: skip


class Handmade(StrictModel):
    what: str = "handmade"


def _publish(
    root: Path, name: str, config: StrictModel, rows: list[dict[str, Any]], key: str, **tables: pa.Table
) -> Artifact:
    """Publish ``rows`` (and side ``tables``) as stage ``name`` with ``config`` through the engine."""
    kept = pa.Table.from_pylist(rows)
    excluded = pa.Table.from_pylist([], exclusion_schema(kept.schema.field(key)))
    spec: StageSpec[Any] = StageSpec(
        name=name,
        version=1,
        config_type=type(config),
        upstream=(),
        schema=kept.schema,
        excluded_schema=excluded.schema,
        key=(key,),
        source=lambda _ctx, _inputs: TableSource(kept.select([key])),
        process=lambda _chunk, _ctx: ChunkResult(kept, excluded, tables),
        tables={n: t.schema for n, t in tables.items()},
        whole_input=True,
    )
    return run_stage(
        StagePlan.make(spec, StageContext(config, root), {}), ArtifactStore(root), FLOW, ExecutionConfig()
    ).artifact


def _run(
    root: Path, spec: StageSpec[Any], config: StrictModel, upstream: dict[str, Artifact]
) -> StageOutcome:
    context = StageContext(config, root, upstream, root / "cache")
    plan = StagePlan.make(spec, context, {n: a.fingerprint for n, a in upstream.items()})
    return run_stage(plan, ArtifactStore(root), FLOW, ExecutionConfig())


@pytest.fixture(scope="module")
def stages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, StageOutcome]:
    root = tmp_path_factory.mktemp("mteb")
    corpus = [
        {"passage_id": pid, "article_id": f"A-{pid}", "domain": domain, "title": title or None, "text": text}
        for domain, rows in PASSAGES.items()
        for pid, title, text in rows
    ]
    translations = [
        {"query_id": qid, "domain": domain, "language": lang, "text": text}
        for qid, (domain, texts) in QUERIES.items()
        for lang, text in texts.items()
    ]
    qrels = [
        {"query_id": q, "passage_id": p, "domain": QUERIES[q][0], "score": s, "llm_score": s}
        for q, p, s in QRELS
    ]
    languages = pa.table({"languages": [list(LANGUAGES)]}, schema=translate_stage.INFO_SCHEMA)
    upstream = {
        "corpus": _publish(root, "corpus", Handmade(), corpus, "passage_id"),
        "translate": _publish(
            root, "translate", Handmade(), translations, "query_id", translate_info=languages
        ),
        "qrels": _publish(root, "qrels", Handmade(), qrels, "query_id"),
    }
    release = _run(root, release_stage.SPEC, ReleaseConfig(name=NAME), upstream)
    encoder = EncoderConfig(model=BUILTIN_MINILM)
    settings = {
        "settings": canonical_json(fingerprint_view(encoder)),
        "model_id": "all-MiniLM-L6-v2",
        "dims": 384,
    }
    info = pa.Table.from_pylist([settings], schema=embed_stage.ENCODER_SCHEMA)
    embed = _publish(
        root, "embed", EmbedConfig(encoder=encoder), [{"passage_id": "x"}], "passage_id", encoder=info
    )
    evaluate = _run(
        root,
        evaluate_stage.SPEC,
        EvaluateConfig(baselines=("dense",)),
        {"release": release.artifact, "embed": embed, "qrels": upstream["qrels"]},
    )
    return {"release": release, "evaluate": evaluate}


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing may be looked up on the Hub: the release is a local folder, the model a builtin."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    yield


def _card_snippet(card: str) -> str:
    assert "## Evaluate with MTEB" in card, "the card has no MTEB section"
    section = card.split("## Evaluate with MTEB", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the card has no MTEB snippet"
    return found[1]


def test_the_release_is_complete_and_says_what_it_left_out(stages: dict[str, StageOutcome]) -> None:
    release = stages["release"].artifact
    folder = release.files / "release"
    files = release.read().to_pylist()
    assert {f["split"] for f in files} == {"dermatology", "genetics"}
    for split in ("dermatology", "genetics"):
        ids = {
            lang: [
                json.loads(line)["_id"]
                for line in (folder / split / f"queries-{lang}.jsonl").read_text().splitlines()
            ]
            for lang in ("en", "es", "fr")
        }
        assert ids["en"] == ids["es"] == ids["fr"], split  # every language has the same queries
    assert "qd3" not in (folder / "dermatology" / "qrels.jsonl").read_text()
    omissions = release.read(table="omissions").to_pylist()
    assert omissions == [
        {"domain": "dermatology", "query_id": "qd3", "language": "es", "reason": "missing_translation"},
        {"domain": "pulmonology", "query_id": "qp1", "language": "fr", "reason": "missing_translation"},
    ]
    excluded = release.excluded().to_pylist()
    assert {(r["config"], r["split"], r["reason"]) for r in excluded} == {
        (c, "pulmonology", "no_complete_query")
        for c in ("corpus", "queries-en", "queries-es", "queries-fr", "qrels")
    }
    card = (folder / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert [c["config_name"] for c in front["configs"] if c.get("default")] == ["corpus"]
    assert (
        "- `qd3` (dermatology): no `es` text" in card and "- `pulmonology`: every judged query lacks" in card
    )


def test_the_card_snippet_loads_the_release_as_mtebs_cure_task_with_the_evaluate_figures(
    stages: dict[str, StageOutcome], monkeypatch: pytest.MonkeyPatch, offline: None
) -> None:
    import mteb
    from sentence_transformers import SentenceTransformer

    folder = stages["release"].artifact.files / "release"
    snippet = _card_snippet((folder / "README.md").read_text())
    assert f'"path": "{NAME}"' in snippet and '"revision": "main"' in snippet
    model = SentenceTransformer(str(builtin_model_path(BUILTIN_MINILM)), device="cpu")
    monkeypatch.setattr(mteb, "get_model", lambda name: model)
    monkeypatch.setattr(
        mteb, "evaluate", functools.partial(mteb.evaluate, cache=None, show_progress_bar=False)
    )
    scope: dict[str, Any] = {}
    exec(snippet.replace(f'"{NAME}"', repr(str(folder))), scope)  # the card's code, as a user runs it

    task = scope["task"]
    assert type(task).__name__ == "CUREv1Retrieval"  # the stock task, not a copy of its code
    result = scope["results"].task_results[0]
    mteb_ndcg = {
        (split, score["hf_subset"]): score["ndcg_at_10"]
        for split, scores in result.scores.items()
        for score in scores
    }
    ours = {
        (r["split"], r["condition"].split("-")[0]): r["ndcg_at_10"]
        for r in stages["evaluate"].artifact.read().to_pylist()
        if r["model"] == "dense"
    }
    assert (
        set(mteb_ndcg)
        == set(ours)
        == {(s, lang) for s in ("dermatology", "genetics", "all") for lang in ("en", "es", "fr")}
    )
    for key, value in sorted(ours.items()):
        print(f"nDCG@10 {key}: evaluate {value:.6f}, MTEB {mteb_ndcg[key]:.5f}")
        assert mteb_ndcg[key] == pytest.approx(value, abs=1e-5), key
    assert len({round(v, 4) for v in ours.values()}) > 3  # the figures differ: the check has teeth


def test_a_release_without_french_runs_as_the_cure_task_on_its_languages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: None
) -> None:
    import mteb
    from sentence_transformers import SentenceTransformer

    from tasks.cure.dataset.layout import write_release
    from tests.cure.test_release_layout import CARD, corpus_table, qrels_table, queries_table

    folder = tmp_path / "release"
    write_release(
        folder,
        corpus_table(),
        queries_table(),
        qrels_table(),
        CARD.model_copy(update={"languages": ("en", "fr")}),
    )
    snippet = _card_snippet((folder / "README.md").read_text())
    model = SentenceTransformer(str(builtin_model_path(BUILTIN_MINILM)), device="cpu")
    monkeypatch.setattr(mteb, "get_model", lambda name: model)
    monkeypatch.setattr(
        mteb, "evaluate", functools.partial(mteb.evaluate, cache=None, show_progress_bar=False)
    )
    scope: dict[str, Any] = {}
    exec(snippet.replace(f'"{CARD.name}"', repr(str(folder))), scope)
    scores = scope["results"].task_results[0].scores
    assert {(split, s["hf_subset"]) for split, rows in scores.items() for s in rows} == {
        (split, lang) for split in ("dermatology", "genetics", "all") for lang in ("en", "fr")
    }
