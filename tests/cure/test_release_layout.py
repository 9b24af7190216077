"""The release folder: every config x split loads with ``datasets``, writes are byte-stable,
bad input is refused naming the row, and the card lists every file and holds no secret."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

from tasks.cure.dataset.card import CardInfo, ModelInfo, PromptInfo, render_card
from tasks.cure.dataset.layout import write_release
from tasks.cure.dataset.schema import Omission, ReleaseError
from tasks.cure.dataset.stats import split_statistics
from tests.conftest import fake_key
from tests.fakes.fake_hub import HUB_TOKEN, FakeHub

DOMAINS = ("dermatology", "genetics")
SPLITS = (*DOMAINS, "all")  # "all": datasets' keyword for the union of the domain splits
CONFIGS = ("corpus", "queries-en", "queries-es", "queries-fr", "qrels")

CORPUS_ROWS = [
    # passage_id, article_id, domain, title, text
    ("d2", "A1", "dermatology", "Psoriasis", "Topical steroids treat plaque psoriasis."),
    ("d1", "A1", "dermatology", "", "Eczema flares with dry\nwinter air — émollients help."),
    ("d3", "A2", "dermatology", "Acné", "Isotretinoin for severe acne ✓ 🙂"),
    ("g1", "B1", "genetics", "BRCA", "BRCA1 variants raise breast cancer risk."),
    ("g2", "B2", "genetics", "Trisomy", "Trisomy 21 causes Down syndrome."),
]
QUERY_ROWS = [
    # query_id, domain, language, text
    ("qd1", "dermatology", "en", "How to treat psoriasis plaques?"),
    ("qd1", "dermatology", "fr", "Comment traiter les plaques de psoriasis ?"),
    ("qd1", "dermatology", "es", "¿Cómo tratar las placas de psoriasis?"),
    ("qd2", "dermatology", "en", "acne drug"),
    ("qd2", "dermatology", "fr", "médicament contre l'acné"),  # no Spanish text: an omission
    ("qg1", "genetics", "es", "riesgo de cáncer BRCA1"),
    ("qg1", "genetics", "en", "BRCA1 cancer risk"),
    ("qg1", "genetics", "fr", "risque de cancer BRCA1"),
]
QREL_ROWS = [
    # query_id, passage_id, domain, score
    ("qd1", "d2", "dermatology", 2),
    ("qd1", "d1", "dermatology", 0),
    ("qd2", "d3", "dermatology", 1),
    ("qg1", "g1", "genetics", 2),
    ("qg1", "g2", "genetics", 0),
]


def corpus_table(rows: list[tuple[Any, ...]] = CORPUS_ROWS) -> pa.Table:
    names = ["passage_id", "article_id", "domain", "title", "text"]
    return pa.table({n: pa.array([r[i] for r in rows], pa.string()) for i, n in enumerate(names)})


def queries_table(rows: list[tuple[Any, ...]] = QUERY_ROWS) -> pa.Table:
    names = ["query_id", "domain", "language", "text"]
    return pa.table({n: pa.array([r[i] for r in rows], pa.string()) for i, n in enumerate(names)})


def qrels_table(rows: list[tuple[Any, ...]] = QREL_ROWS, score_type: pa.DataType | None = None) -> pa.Table:
    return pa.table(
        {
            "query_id": pa.array([r[0] for r in rows], pa.string()),
            "passage_id": pa.array([r[1] for r in rows], pa.string()),
            "domain": pa.array([r[2] for r in rows], pa.string()),
            "score": pa.array([r[3] for r in rows], score_type or pa.int64()),
        }
    )


CARD = CardInfo(
    name="irforge/cure-mini",
    pretty_name="CURE mini",
    license="cc-by-nc-4.0",
    source_licences={"CC-BY-4.0": 3, "CC0-1.0": 1},
    flow_config="flow: cure\nstages:\n  pool:\n    threshold: 0.42\n",
    prompts=(PromptInfo(name="judge", sha256="a" * 64),),
    models={"judge": ModelInfo(id="Qwen/Qwen2.5-72B-Instruct", description="relevance | judge")},
    stage_fingerprints={"ingest": "0123456789abcdef"},
    translation_engine="DeepL",
    judge_model="Qwen/Qwen2.5-72B-Instruct",
)


# A query is released only with a text in every language: qd2 (no Spanish) is in no file.
COMPLETE = {q for q, *_ in QUERY_ROWS if {lg for q2, _, lg, _ in QUERY_ROWS if q2 == q} == {"en", "es", "fr"}}


def expected_rows(config: str, split: str) -> list[dict[str, Any]]:
    """What a config's split must hold, derived from the input rows independently of the writer;
    ``all`` is the domains' rows one domain after the other."""
    if split == "all":
        return [row for domain in DOMAINS for row in expected_rows(config, domain)]

    def keep(domain: str) -> bool:
        return domain == split

    if config == "corpus":
        rows = [{"_id": p, "title": t, "text": x} for p, _, d, t, x in CORPUS_ROWS if keep(d)]
        return sorted(rows, key=lambda r: r["_id"])
    if config == "qrels":
        qrels = [
            {"query-id": q, "corpus-id": p, "score": s}
            for q, p, d, s in QREL_ROWS
            if keep(d) and q in COMPLETE
        ]
        return sorted(qrels, key=lambda r: (r["query-id"], r["corpus-id"]))
    lang = config.removeprefix("queries-")
    queries = [
        {"_id": q, "text": x} for q, d, lg, x in QUERY_ROWS if lg == lang and keep(d) and q in COMPLETE
    ]
    return sorted(queries, key=lambda r: r["_id"])


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """datasets and huggingface_hub must not look anything up: the Hub is unreachable here."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    yield


def write(folder: Path, **changes: Any) -> Any:
    tables = {"corpus": corpus_table(), "queries": queries_table(), "qrels": qrels_table(), "card": CARD}
    tables.update(changes)
    return write_release(folder, tables["corpus"], tables["queries"], tables["qrels"], tables["card"])


def front_matter(card: str) -> dict[str, Any]:
    assert card.startswith("---\n")
    loaded: dict[str, Any] = yaml.safe_load(card.split("---\n")[1])
    return loaded


def test_every_config_and_split_loads_with_datasets(tmp_path: Path, offline: None) -> None:
    import datasets

    folder = tmp_path / "release"
    release = write(folder)
    assert [(f.config, f.split) for f in release.files] == [(c, s) for s in DOMAINS for c in CONFIGS]
    assert not (folder / "all").exists()
    for config in CONFIGS:
        for split in SPLITS:
            loaded = datasets.load_dataset(
                str(folder), config, split=split, cache_dir=str(tmp_path / "cache")
            )
            assert loaded.to_list() == expected_rows(config, split), (config, split)
    qrels = datasets.load_dataset(str(folder), "qrels", split="all", cache_dir=str(tmp_path / "cache"))
    assert qrels.features["score"].dtype == "int64"  # MTEB casts scores to int; never floats


def test_a_query_missing_a_translation_is_left_out_of_every_file(tmp_path: Path) -> None:
    folder = tmp_path / "release"
    _, omissions, dropped = write(folder)
    assert omissions == [Omission(domain="dermatology", query_id="qd2", language="es")]
    assert dropped == {}
    for name in ("queries-en", "queries-es", "queries-fr", "qrels"):
        text = (folder / "dermatology" / f"{name}.jsonl").read_text(encoding="utf-8")
        assert "qd2" not in text and "qd1" in text, name
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "`qd2` (dermatology): no `es` text" in card


def test_a_domain_left_without_a_complete_query_has_no_split(tmp_path: Path, offline: None) -> None:
    import datasets

    folder = tmp_path / "release"
    queries = queries_table([r for r in QUERY_ROWS if not (r[1] == "genetics" and r[2] == "fr")])
    files, omissions, dropped = write(folder, queries=queries)
    assert {f.split for f in files} == {"dermatology"} and not (folder / "genetics").exists()
    assert Omission(domain="genetics", query_id="qg1", language="fr") in omissions
    assert dropped == {
        "genetics": "every judged query lacks a text in some language (see the left-out queries)"
    }
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert all(
        [d["split"] for d in c["data_files"]] == ["dermatology"] for c in front_matter(card)["configs"]
    )
    assert "- `genetics`: every judged query lacks a text" in card
    loaded = datasets.load_dataset(str(folder), "queries-fr", split="all", cache_dir=str(tmp_path / "cache"))
    assert loaded["_id"] == ["qd1"]
    # A release of two languages: no French config at all.
    write_release(
        tmp_path / "no-fr",
        corpus_table(),
        queries,
        qrels_table(),
        CARD.model_copy(update={"languages": ("en", "es")}),
    )
    names = [
        c["config_name"] for c in front_matter((tmp_path / "no-fr" / "README.md").read_text())["configs"]
    ]
    assert names == ["corpus", "queries-en", "queries-es", "qrels"]
    # Nothing complete anywhere: nothing to release, said in one line.
    with pytest.raises(
        ReleaseError, match=r"nothing to release: no domain has a judged query with a text in every"
    ):
        write(tmp_path / "none", queries=queries_table([r for r in QUERY_ROWS if r[2] != "fr"]))


def test_two_writes_are_byte_identical_and_digests_match(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    first = write(one)
    # The same rows in another order must give the same bytes.
    second = write(
        two,
        corpus=corpus_table(CORPUS_ROWS[::-1]),
        queries=queries_table(QUERY_ROWS[::-1]),
        qrels=qrels_table(QREL_ROWS[::-1]),
    )
    names = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    assert len(names) == len(CONFIGS) * len(DOMAINS) + 1  # + README.md
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    assert first == second
    for f in first.files:
        data = (one / f.path).read_bytes()
        assert (f.bytes, f.sha256, f.rows) == (len(data), hashlib.sha256(data).hexdigest(), data.count(b"\n"))
    # One JSON object per line, non-ASCII kept as is.
    corpus = (one / "dermatology" / "corpus.jsonl").read_text(encoding="utf-8")
    assert corpus.splitlines()[0] == (
        '{"_id": "d1", "title": "", "text": "Eczema flares with dry\\nwinter air — émollients help."}'
    )


def test_overwrite_replaces_a_release_and_nothing_else(tmp_path: Path) -> None:
    folder = tmp_path / "release"
    first = write(folder)
    with pytest.raises(ReleaseError, match="exists: pass overwrite=True"):
        write(folder)
    again = write_release(folder, corpus_table(), queries_table(), qrels_table(), CARD, overwrite=True)
    assert again.files == first.files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release"]  # no temporary folder left behind
    (folder / ".git").mkdir()
    with pytest.raises(ReleaseError, match=r"refusing to replace .*\.git"):
        write_release(folder, corpus_table(), queries_table(), qrels_table(), CARD, overwrite=True)
    assert (folder / ".git").is_dir()


def test_card_yaml_lists_every_file_and_the_statistics(tmp_path: Path) -> None:
    folder = tmp_path / "release"
    release = write(folder)
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "## Citation" in card and "@inproceedings{sheikh2025cure," in card and "@software{irforge," in card
    front = front_matter(card)
    assert front["license"] == "cc-by-nc-4.0"
    assert front["language"] == ["en", "es", "fr"]
    assert front["task_categories"] == ["text-retrieval"]
    assert front["pretty_name"] == "CURE mini"
    defaults = [c["config_name"] for c in front["configs"] if c.get("default")]
    assert defaults == ["corpus"]  # what load_dataset(repo) reads without a config name
    listed = {(c["config_name"], d["split"], d["path"]) for c in front["configs"] for d in c["data_files"]}
    written = {(f.config, f.split, f.path) for f in release.files}
    assert listed == written
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*.jsonl")}
    assert on_disk == {path for _, _, path in listed}
    features = {c["config_name"]: [f["name"] for f in c["features"]] for c in front["dataset_info"]}
    assert features["qrels"] == ["query-id", "corpus-id", "score"]
    # Table 6 row of dermatology, without qd2 (no Spanish): 3 passages, 2 articles, 1 query,
    # 2 judgements (0:1, 2:1), en "How to treat psoriasis plaques?" 5; es "¿Cómo tratar las
    # placas de psoriasis?" 6; fr 7; passages 5, 9 ("—" is a token) and 6 -> 6.7.
    assert "| dermatology | 3 | 2 | 1 | 2 | 1 | 0 | 1 | 5.0 | 6.0 | 7.0 | 6.7 |" in card
    # all: en 5, 3 -> 4.0; es 6, 4 -> 5.0; fr 7, 4 -> 5.5; passages 5, 9, 6, 6, 5 -> 6.2.
    assert "| all | 5 | 4 | 2 | 4 | 2 | 0 | 2 | 4.0 | 5.0 | 5.5 | 6.2 |" in card
    assert all(d["split"] != "all" for c in front["configs"] for d in c["data_files"])
    assert "relevance \\| judge" in card  # a pipe in a value does not break its table
    assert "threshold: 0.42" in card and "a" * 64 in card and "0123456789abcdef" in card
    assert "| CC-BY-4.0 | 3 |" in card


def test_split_statistics_by_hand() -> None:
    stats = split_statistics(corpus_table(), queries_table(), qrels_table())
    assert list(stats) == ["dermatology", "genetics", "all"]
    genetics = stats["genetics"]
    assert (genetics.passages, genetics.articles, genetics.queries, genetics.judgements) == (2, 2, 1, 2)
    assert genetics.judgements_by_score == {0: 1, 1: 0, 2: 1}
    assert genetics.query_tokens == {"en": 3.0, "es": 4.0, "fr": 4.0}
    assert genetics.passage_tokens == pytest.approx((6 + 5) / 2)


BAD_CASES = [
    pytest.param(
        {"qrels": qrels_table([*QREL_ROWS, ("qd1", "g1", "dermatology", 1)])},
        r"qrels row 5 \(query 'qd1', passage 'g1'\): passage 'g1' is not in the 'dermatology' corpus "
        r"\(it is in 'genetics'\)",
        id="passage-of-another-split",
    ),
    pytest.param(
        {"qrels": qrels_table([*QREL_ROWS, ("qd1", "zz", "dermatology", 1)])},
        r"passage 'zz' is not in the 'dermatology' corpus \(it is in no split\)",
        id="passage-absent",
    ),
    pytest.param(
        {"qrels": qrels_table([*QREL_ROWS, ("qx", "d1", "dermatology", 1)])},
        r"qrels row 5 .*query 'qx' is not in the 'dermatology' queries \(it is in no split\)",
        id="query-absent",
    ),
    pytest.param(
        {"corpus": corpus_table([*CORPUS_ROWS, ("d1", "A9", "dermatology", "", "again")])},
        r"corpus row 5: passage_id 'd1' occurs twice",
        id="duplicate-passage",
    ),
    pytest.param(
        {"queries": queries_table([*QUERY_ROWS, ("qd1", "dermatology", "en", "again")])},
        r"queries row 8 \(query 'qd1', en\): the query has two en rows",
        id="duplicate-query",
    ),
    pytest.param(
        {"queries": queries_table([*QUERY_ROWS, ("qd2", "genetics", "es", "otra")])},
        r"queries row 8 .*domain 'genetics', but another row puts it in 'dermatology'",
        id="query-in-two-domains",
    ),
    pytest.param(
        {"qrels": qrels_table([*QREL_ROWS, ("qd1", "d2", "dermatology", 1)])},
        r"qrels row 5 \(query 'qd1', passage 'd2'\): the pair is judged twice",
        id="duplicate-judgement",
    ),
    pytest.param(
        {"qrels": qrels_table([*QREL_ROWS[:-1], ("qg1", "g2", "genetics", 3)])},
        r"qrels row 4 \(query 'qg1', passage 'g2'\): score 3 is not one of \[0, 1, 2\]",
        id="score-out-of-range",
    ),
    pytest.param(
        {"qrels": qrels_table([(q, p, d, float(s)) for q, p, d, s in QREL_ROWS], pa.float64())},
        r"qrels column 'score' is double, expected integers",
        id="score-not-integer",
    ),
    pytest.param(
        {"queries": queries_table([*QUERY_ROWS, ("qd2", "dermatology", "de", "Akne")])},
        r"queries row 8 \(query 'qd2', de\): language 'de' is not one of",
        id="unknown-language",
    ),
    pytest.param(
        {
            "corpus": corpus_table(
                [(*r[:2], "plastic-surgery", *r[3:]) if r[0] == "g2" else r for r in CORPUS_ROWS]
            )
        },
        r"domain 'plastic-surgery' cannot be a split name",
        id="hyphen-in-domain",
    ),
    pytest.param(
        {"corpus": corpus_table([(*r[:2], "all", *r[3:]) if r[0] == "g2" else r for r in CORPUS_ROWS])},
        r"domain 'all' is reserved",
        id="domain-all",
    ),
    pytest.param(
        {"corpus": corpus_table([(*r[:3], None, r[4]) if r[0] == "g1" else r for r in CORPUS_ROWS])},
        r"corpus row 3 \(passage_id 'g1'\): title is missing \(null\)",
        id="null-title",
    ),
    pytest.param(
        {"corpus": corpus_table([(*r[:4], "  ") if r[0] == "g1" else r for r in CORPUS_ROWS])},
        r"corpus row 3 \(passage 'g1'\): text is empty",
        id="empty-passage",
    ),
    pytest.param(
        {"queries": queries_table([*QUERY_ROWS, ("qg9", "pulmonology", "en", "asthma")])},
        r"split 'pulmonology' would have an empty corpus file",
        id="split-without-passages",
    ),
    pytest.param(
        {"corpus": corpus_table([(" ", *r[1:]) if r[0] == "g2" else r for r in CORPUS_ROWS])},
        r"corpus row 4: passage_id is empty",
        id="blank-passage-id",
    ),
    pytest.param(
        {"corpus": corpus_table().drop_columns(["article_id"])},
        r"corpus table lacks column\(s\) \['article_id'\]",
        id="missing-column",
    ),
]


@pytest.mark.parametrize(("changes", "message"), BAD_CASES)
def test_bad_input_is_refused_naming_the_row(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ReleaseError, match=message):
        write(tmp_path / "release", **changes)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a partial folder


def test_a_failure_while_writing_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.cure.dataset import layout

    folder = tmp_path / "release"
    first = write(folder)
    real = layout._write_jsonl
    calls = 0

    def disk_full_at_the_fourth_file(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 4:
            raise OSError(28, "No space left on device")
        return real(*args)

    monkeypatch.setattr(layout, "_write_jsonl", disk_full_at_the_fourth_file)
    with pytest.raises(OSError, match="No space left"):
        write_release(
            folder,
            corpus_table(CORPUS_ROWS[:-1]),
            queries_table(),
            qrels_table(QREL_ROWS[:-1]),
            CARD,
            overwrite=True,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release"]  # no partial folder left
    monkeypatch.undo()
    assert write(tmp_path / "again") == first  # the old release is intact: same files as a fresh write
    for f in first.files:
        assert (folder / f.path).read_bytes() == (tmp_path / "again" / f.path).read_bytes()


def test_card_never_takes_secrets_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "HF_TOKEN": fake_key("hf_", "environment token"),
        "DEEPL_AUTH_KEY": "0f0e0d0c-0b0a-0908-0706-050403020100:fx",
        "OPENAI_API_KEY": fake_key("sk-", "environment key"),
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    stats = split_statistics(corpus_table(), queries_table(), qrels_table())
    card = render_card(CARD, stats)
    for name, value in secrets.items():
        assert value not in card, name
    # The card says only what CardInfo holds: there is no field or argument that reads the environment.
    assert set(CardInfo.model_fields) >= {"flow_config", "models"}
    assert not any("env" in field for field in CardInfo.model_fields)


@pytest.mark.parametrize(
    "config_text",
    [
        f"hub:\n  hf_token: {fake_key('hf_', 'card token')}\n",
        "deepl:\n  auth_key: 0f0e0d0c-0b0a-0908-0706-050403020100:fx\n",
        "llm:\n  headers: {Authorization: Bearer abcdefghijklmnop1234}\n",
        "llm:\n  api_key: not-an-env-reference-123\n",
    ],
)
def test_card_refuses_a_credential_put_into_its_info(config_text: str) -> None:
    stats = split_statistics(corpus_table(), queries_table(), qrels_table())
    info = CARD.model_copy(update={"flow_config": config_text})
    with pytest.raises(ReleaseError, match=r"looks like .* on line \d+") as caught:
        render_card(info, stats)
    secret = config_text.split(":", 2)[-1].strip().split()[-1]
    assert secret not in str(caught.value)


def test_card_keeps_harmless_config_entries() -> None:
    stats = split_statistics(corpus_table(), queries_table(), qrels_table())
    text = "llm:\n  max_tokens: 512\n  api_key_env: OPENAI_API_KEY\n  token_budget: 100000\n"
    card = render_card(CARD.model_copy(update={"flow_config": text}), stats)
    assert "api_key_env: OPENAI_API_KEY" in card


def test_demo_models_card_warns_that_labels_are_meaningless() -> None:
    stats = split_statistics(corpus_table(), queries_table(), qrels_table())
    card = render_card(CARD.model_copy(update={"demo_models": True}), stats)
    body = card.split("---\n", 2)[2]
    assert "**Warning: the candidate pools and relevance labels" in body.split("## How to load")[0]
    assert "meaningless" in body
    assert "meaningless" not in render_card(CARD, stats)


def test_card_info_is_validated() -> None:
    with pytest.raises(ValueError, match="license 'other' needs a license_name"):
        CardInfo(name="x", pretty_name="X", license="other")
    with pytest.raises(ValueError, match="languages must be"):
        CardInfo(name="x", pretty_name="X", license="cc-by-4.0", languages=("en", "de"))
    with pytest.raises(ValueError, match="sha256"):
        PromptInfo(name="judge", sha256="not-a-digest")


# ----------------------------------------------------------------------------- Hub push


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    import huggingface_hub.constants

    # The fake Hub is on loopback: let huggingface_hub make requests even if the shell set offline mode.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with FakeHub(HUB_TOKEN) as fake:
        yield fake


def test_push_sends_the_release_in_one_commit_and_removes_stale_splits(tmp_path: Path, hub: FakeHub) -> None:
    from tasks.common.release.hub import push_release

    folder = tmp_path / "release"
    write(folder)
    url = push_release(
        folder, "irforge/cure-mini", token=HUB_TOKEN, private=True, endpoint=hub.url, commit_message="v1"
    )
    assert hub.private == {"irforge/cure-mini": True}
    assert len(hub.commits) == 1 and url.endswith(f"/commit/{1:040x}")
    pushed = hub.commits[0]["added"]
    local = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert pushed == local  # every file, byte for byte, in one commit

    # The next release has no genetics split: its files go, in the same single commit.
    only = [r for r in CORPUS_ROWS if r[2] == "dermatology"]
    write_release(
        folder,
        corpus_table(only),
        queries_table([r for r in QUERY_ROWS if r[1] == "dermatology"]),
        qrels_table([r for r in QREL_ROWS if r[2] == "dermatology"]),
        CARD,
        overwrite=True,
    )
    push_release(
        folder, "irforge/cure-mini", token=HUB_TOKEN, private=True, endpoint=hub.url, commit_message="v2"
    )
    assert len(hub.commits) == 2
    assert sorted(hub.commits[1]["deleted"]) == sorted(f"genetics/{c}.jsonl" for c in CONFIGS)
    remote = hub.branches["irforge/cure-mini"]["main"]
    assert set(remote) == {".gitattributes"} | {
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
    }


def test_push_to_a_branch(tmp_path: Path, hub: FakeHub) -> None:
    from tasks.common.release.hub import push_release

    folder = tmp_path / "release"
    write(folder)
    push_release(
        folder, "irforge/cure-mini", token=HUB_TOKEN, private=False, revision="v1.0", endpoint=hub.url
    )
    assert [c["branch"] for c in hub.commits] == ["v1.0"]
    assert "README.md" in hub.branches["irforge/cure-mini"]["v1.0"]
    assert "README.md" not in hub.branches["irforge/cure-mini"]["main"]
    assert hub.private == {"irforge/cure-mini": False}


def test_push_retries_server_errors_and_rate_limits(tmp_path: Path, hub: FakeHub) -> None:
    from tasks.common.release.hub import push_release

    folder = tmp_path / "release"
    write(folder)
    hub.faults = {
        "/api/repos/create": [(503, {}), (502, {})],
        "/commit/": [(429, {"Retry-After": "7"}), (500, {})],
    }
    waits: list[float] = []
    push_release(
        folder,
        "irforge/cure-mini",
        token=HUB_TOKEN,
        private=True,
        endpoint=hub.url,
        backoff=0.5,
        sleep=waits.append,
    )
    assert waits == [0.5, 1.0, 7.0, 1.0]  # backoff x 2^n per step; a 429's Retry-After wins
    assert len(hub.commits) == 1


def test_push_gives_up_after_max_attempts(tmp_path: Path, hub: FakeHub) -> None:
    from tasks.common.release.hub import HubError, push_release

    folder = tmp_path / "release"
    write(folder)
    hub.faults = {"/api/repos/create": [(503, {})] * 10}
    waits: list[float] = []
    with pytest.raises(
        HubError, match=r"could not create the repository irforge/cure-mini after 3 attempt\(s\).*HTTP 503"
    ):
        push_release(
            folder, "irforge/cure-mini", token=HUB_TOKEN, private=True, endpoint=hub.url, max_attempts=3,
            backoff=1.0, max_backoff=1.5, sleep=waits.append,
        )  # fmt: skip
    assert waits == [1.0, 1.5]  # capped at max_backoff
    assert hub.requests == [("POST", "/api/repos/create")] * 3


def test_push_with_a_bad_token_fails_at_once_without_showing_it(tmp_path: Path, hub: FakeHub) -> None:
    from tasks.common.release.hub import HubAuthError, push_release

    folder = tmp_path / "release"
    write(folder)
    wrong = fake_key("hf_", "wrong token")
    waits: list[float] = []
    with pytest.raises(HubAuthError, match=r"HTTP 401.*HF_TOKEN") as caught:
        push_release(
            folder, "irforge/cure-mini", token=wrong, private=True, endpoint=hub.url, sleep=waits.append
        )
    assert wrong not in str(caught.value) and "***" in str(caught.value)  # the server echoed it; we masked it
    # Not retried (huggingface_hub itself looks the repository up once after a refused create).
    assert waits == [] and hub.requests.count(("POST", "/api/repos/create")) == 1
    assert hub.commits == []


def test_push_retries_when_the_connection_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import huggingface_hub.constants

    from tasks.common.release.hub import HubError, push_release

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    folder = tmp_path / "release"
    write(folder)
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    waits: list[float] = []
    with pytest.raises(HubError, match=r"after 2 attempt\(s\); last error: ConnectError"):
        push_release(
            folder, "me/x", token=HUB_TOKEN, private=True, endpoint=f"http://127.0.0.1:{port}", max_attempts=2,
            sleep=waits.append,
        )  # fmt: skip
    assert waits == [2.0]


def _http_error(kind: type[Exception], status: int) -> Exception:
    import httpx2

    response = httpx2.Response(
        status, request=httpx2.Request("POST", "https://huggingface.co/api/repos/create")
    )
    return kind(f"{status} error for url https://huggingface.co/api/repos/create", response=response)


@pytest.mark.parametrize(
    ("error", "retried", "raised"),
    [
        pytest.param(lambda: _http_error(HfHubHTTPError, 504), True, None, id="504"),
        pytest.param(lambda: __import__("httpx2").ReadTimeout("read timed out"), True, None, id="timeout"),
        pytest.param(lambda: _http_error(RepositoryNotFoundError, 404), False, "HubAuthError", id="404"),
        pytest.param(lambda: _http_error(HfHubHTTPError, 403), False, "HubAuthError", id="403"),
        pytest.param(lambda: _http_error(HfHubHTTPError, 422), False, "HubError", id="422"),
        pytest.param(lambda: OfflineModeIsEnabled("offline"), False, "HubError", id="offline"),
    ],
)
def test_push_classifies_the_library_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Any, retried: bool, raised: str | None
) -> None:
    """The same decisions against HfApi methods raising huggingface_hub's own exception types."""
    from huggingface_hub import CommitInfo, HfApi

    from tasks.common.release import hub

    folder = tmp_path / "release"
    write(folder)
    calls: list[str] = []

    def create_repo(self: HfApi, *args: Any, **kwargs: Any) -> None:
        calls.append("create_repo")
        if len(calls) == 1:
            raise error()

    def list_repo_files(self: HfApi, *args: Any, **kwargs: Any) -> list[str]:
        return []

    def create_commit(self: HfApi, repo_id: str, operations: Any, **kwargs: Any) -> CommitInfo:
        paths = sorted(op.path_in_repo for op in operations)
        assert paths == sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        return CommitInfo(
            commit_url="https://huggingface.co/datasets/me/x/commit/1",
            commit_message="m",
            commit_description="",
            oid="1" * 40,
        )

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "list_repo_files", list_repo_files)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    waits: list[float] = []
    if raised is None:
        assert (
            hub.push_release(folder, "me/x", token="t", private=True, sleep=waits.append)
            == "https://huggingface.co/datasets/me/x/commit/1"
        )
        assert calls == ["create_repo", "create_repo"] and waits == [2.0]
    else:
        with pytest.raises(getattr(hub, raised)) as caught:
            hub.push_release(folder, "me/x", token="t", private=True, sleep=waits.append)
        assert type(caught.value).__name__ == raised
        assert calls == ["create_repo"] and waits == []
    assert retried == (raised is None)


def test_push_refuses_a_folder_that_is_not_a_release(tmp_path: Path) -> None:
    from tasks.common.release.hub import HubError, push_release

    with pytest.raises(HubError, match=r"has no README\.md"):
        push_release(tmp_path, "me/x", token=None, private=True)
    (tmp_path / "README.md").write_text("hi")
    with pytest.raises(HubError, match=r"holds no <split>/<config>\.jsonl"):
        push_release(tmp_path, "me/x", token=None, private=True)


def test_card_mteb_snippet_names_the_release_splits_and_languages() -> None:
    from tasks.cure.dataset.usage import mteb_snippet

    full = mteb_snippet("me/cure", "v1.0", ["dermatology", "genetics"], ("en", "es", "fr"))
    compile(full, "<card snippet>", "exec")  # valid Python
    assert 'mteb.get_task("CUREv1")' in full
    assert '"dataset": {"path": "me/cure", "revision": "v1.0"}' in full
    assert "\"eval_splits\": ['dermatology', 'genetics', 'all']" in full and "eval_langs" not in full
    # Without French, MTEB must not ask for queries-fr: the task's languages are narrowed too.
    two = mteb_snippet("me/cure", "main", ["genetics"], ("en", "es"))
    assert "\"eval_langs\": {'en': ['eng-Latn', 'eng-Latn'], 'es': ['spa-Latn', 'eng-Latn']}" in two
    assert "mteb.get_task(\"CUREv1\", hf_subsets=['en', 'es'])" in two
    stats = split_statistics(corpus_table(), queries_table(), qrels_table())
    card = render_card(CARD.model_copy(update={"revision": "v2"}), stats)
    assert mteb_snippet(CARD.name, "v2", list(DOMAINS), ("en", "es", "fr")) in card
