"""Stage ``single_study`` on real MEDLINE records (local PubmedSource over data/crossgenre/medline).

The gold pages go through journal_links first (rows built from gold.jsonl, see
test_journal_links.py); small pages written here cover the rules one by one. The LLM is
tests/fakes/llm_server.py's FakeChat behind the ``openai`` engine. PMIDs, first authors and
journal issues named here were read from the MEDLINE XML by hand.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from irforge.config import validate_config
from irforge.errors import ConfigError
from tasks.common.llm.config import LLMConfig, close_local_servers
from tasks.common.pubmed.config import PubmedConfig
from tasks.crossgenre.report_cues import not_a_study, work_evidence
from tasks.crossgenre.roundup import roundup_wording, two_claims
from tasks.crossgenre.single_study_llm import load_prompt, parse_reply
from tasks.crossgenre.stages.extract import SCHEMA as EXTRACT
from tasks.crossgenre.stages.extract import SPEC as EXTRACT_SPEC
from tasks.crossgenre.stages.extract import ExtractConfig
from tasks.crossgenre.stages.journal_links import SPEC as LINKS
from tasks.crossgenre.stages.journal_links import JournalLinksConfig
from tasks.crossgenre.stages.single_study import SPEC, SingleStudyConfig
from tasks.crossgenre.works import decide
from tests.common.test_llama_server import needs_gemma, needs_llama
from tests.crossgenre.conftest import MEDLINE, NEWS, artifact_of, run_one
from tests.crossgenre.test_journal_links import by_file, extract_row, gold
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, last_user_text

PUBMED = PubmedConfig(engine="local", medline=["."])
EARLOBE = "https://doi.org/10.2169/internalmedicine.3943-19"  # PMID 31839659, first author Wakasugi M
WATER = "https://doi.org/10.29219/fnr.v63.3515"  # PMID 31839789, first author Wasserfurth P


def pubmed(pmid: str) -> str:
    return f"https://pubmed.ncbi.nlm.nih.gov/{pmid}/"


def run_pages(root: Path, rows: list[dict[str, Any]], **config: Any) -> Any:
    """journal_links then single_study on extract-shaped ``rows``."""
    extract = artifact_of(root, "extract", pa.Table.from_pylist(rows, schema=EXTRACT))
    links = run_one(root, LINKS, JournalLinksConfig(), {"extract": extract}).artifact
    cfg = SingleStudyConfig(pubmed=PUBMED, **config)
    return run_one(root, SPEC, cfg, {"journal_links": links}, base_dir=MEDLINE)


def by_headline(table: pa.Table) -> dict[str, dict[str, Any]]:
    return {r.get("headline") or r["url"]: r for r in table.to_pylist()}


INGEST = pa.schema(
    [
        *(
            pa.field(n, pa.string(), nullable=False)
            for n in ("page_id", "url", "site", "fetched_at", "sha256")
        ),
        pa.field("html", pa.large_string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
    ]
)


def saved_pages() -> list[dict[str, Any]]:
    """The 15 saved pages as ingest rows (URL on gold's site host)."""
    rows = []
    for g in gold():
        raw = (NEWS / g["file"]).read_bytes()
        url = f"https://{g['site_host']}/{g['file'].removesuffix('.html')}"
        rows.append(
            {
                "page_id": hashlib.sha256(url.encode()).hexdigest()[:16],
                "url": url,
                "site": g["site_host"],
                "fetched_at": "2025-01-01T00:00:00Z",
                "sha256": hashlib.sha256(raw).hexdigest(),
                "html": raw.decode("utf-8"),
                "source": g["file"],
            }
        )
    return rows


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The saved pages through extract, journal_links and single_study."""
    root = tmp_path_factory.mktemp("single")
    ingest = artifact_of(root, "ingest", pa.Table.from_pylist(saved_pages(), schema=INGEST))
    extract = run_one(root, EXTRACT_SPEC, ExtractConfig(), {"ingest": ingest})
    assert extract.artifact.excluded().num_rows == 0
    links = run_one(root, LINKS, JournalLinksConfig(), {"extract": extract.artifact})
    single = run_one(
        root, SPEC, SingleStudyConfig(pubmed=PUBMED), {"journal_links": links.artifact}, base_dir=MEDLINE
    )
    return links, single


@pytest.fixture(scope="module")
def gold_run(real_run: tuple[Any, Any]) -> Any:
    return real_run[1]


def test_every_gold_claim_page_is_kept_with_one_work_and_the_gold_pmid(gold_run: Any) -> None:
    kept = by_file(gold_run.artifact.read())
    claims = {
        g["file"][:3]: g["pmid"]
        for g in gold()
        if g["expected_outcome"] == "claim" and g.get("decided_by") != "llm"  # no LLM here: undecided
    }
    assert sorted(kept) == sorted(claims)
    for page, pmid in claims.items():
        row = kept[page]
        assert row["works"] == 1, page
        assert row["decided_by"] == "one_work", page
        assert [(c["id_kind"], c["id_value"]) for c in row["cited"]] == [("pmid", pmid)], page
    # p14: the publisher page and the PubMed record of one study are one work.
    assert len(kept["p14"]["study_links"]) == 2
    assert (
        kept["p14"]["cited"][0]["url"]
        == "https://jamanetwork.com/journals/jamanetworkopen/fullarticle/2844426"
    )
    # p10's headline ends in "meta-analysis finds": not a round-up.
    assert kept["p10"]["decision"].startswith("one cited work (pmid:31839552")


def test_the_real_pages_through_extract_journal_links_and_single_study(real_run: tuple[Any, Any]) -> None:
    links, single = real_run
    outcome = {r["url"].rsplit("/", 1)[1][:3]: r["reason"] for r in links.artifact.excluded().to_pylist()}
    outcome |= {r["url"].rsplit("/", 1)[1][:3]: r["reason"] for r in single.artifact.excluded().to_pylist()}
    kept = by_file(single.artifact.read())
    outcome |= {page: "claim" for page in kept}
    for g in gold():
        page = g["file"][:3]
        expected = g["expected_outcome"].removeprefix("excluded:")
        if g.get("decided_by") == "llm":  # the rules alone leave it to an LLM, and there is none here
            expected = "undecided"
        assert outcome[page] in ({expected, "roundup"} if page == "p09" else {expected}), page
        if page in kept:
            assert [c["id_value"] for c in kept[page]["cited"]] == [g["pmid"]], page
            assert kept[page]["works"] == 1, page


def test_the_gold_roundup_is_excluded_and_the_advice_column_left_undecided(gold_run: Any) -> None:
    p09, p15 = sorted(gold_run.artifact.excluded().to_pylist(), key=lambda r: r["url"].rsplit("/", 1)[1])
    assert p09["url"].endswith("p09_two_studies_roundup_earlobe_mineral_water")
    assert (p09["reason"], p09["decided_by"], p09["works"]) == ("roundup", "roundup_wording", 2)
    assert "roundup: 'roundup'" in p09["detail"]
    # p15 links its one trial with no reporting words near it: the rules cannot tell.
    assert p15["url"].endswith("p15_ask_the_expert_periodontal_treatment_diabetes")
    assert (p15["reason"], p15["decided_by"], p15["works"]) == ("undecided", "no_report_cue", 1)
    counts = gold_run.manifest["counts"]
    assert (counts["units_in"], counts["units_kept"], counts["units_excluded"]) == (13, 11, 2)


def test_the_rules_one_by_one(tmp_path: Path) -> None:
    rows = [
        extract_row(
            "Doctors weigh a decade of sleep research", [pubmed(str(p)) for p in range(31839364, 31839376)]
        ),
        extract_row("7 foods that keep your heart young", [pubmed("31839957")]),
        extract_row("Review of 40 studies finds exercise eases low mood", [pubmed("31839552")]),
        extract_row("Two lung and liver papers from one lab", [pubmed("31097920"), pubmed("31839416")]),
        extract_row("Nurses reshape ward rounds and peer feedback", [pubmed("31809449"), pubmed("31809450")]),
        extract_row("Earlobe creases flag risk; mineral water eases acid load", [EARLOBE, WATER]),
        extract_row("An old heart sign gets a second look", [EARLOBE, WATER]),
    ]
    outcome = run_pages(tmp_path, rows)
    kept, excluded = by_headline(outcome.artifact.read()), by_headline(outcome.artifact.excluded())
    listicle = excluded[rows[0]["url"]]
    assert (listicle["reason"], listicle["decided_by"], listicle["works"]) == (
        "multiple_studies",
        "too_many_works",
        12,
    )
    numbered = excluded[rows[1]["url"]]
    assert (numbered["reason"], numbered["decided_by"]) == ("roundup", "roundup_wording")
    assert "listicle" in numbered["detail"]
    assert kept["Review of 40 studies finds exercise eases low mood"]["decided_by"] == "one_work"
    same_author = kept["Two lung and liver papers from one lab"]
    assert same_author["decided_by"] == "related_series"
    assert same_author["decision"] == "2 works of one series: same first author (Zhao J)"
    assert [c["id_value"] for c in same_author["cited"]] == ["31097920", "31839416"]
    same_issue = kept["Nurses reshape ward rounds and peer feedback"]
    assert same_issue["decision"].endswith("same journal issue (The Journal of nursing administration 50(1))")
    assert excluded[rows[5]["url"]]["decided_by"] == "two_claims"
    undecided = excluded[rows[6]["url"]]
    assert (undecided["reason"], undecided["decided_by"]) == ("undecided", "unrelated_works")
    assert undecided["detail"] == "2 works not one series (pmid:31839659, pmid:31839789)"


def test_what_the_page_says_tells_a_report_from_a_citation(tmp_path: Path) -> None:
    passing = "Previous studies have linked poor sleep to heart disease."
    reporting = "The trial, published this week in JAMA, followed 1,200 adults."
    product = extract_row("Our best-selling sleep tracker", [pubmed("31839957")])
    product["page_types"] = ["product"]
    listicle = extract_row("How to sleep better tonight", [pubmed("31839957")])
    listicle["headings"] = [f"{i}. Tip number {i}" for i in range(1, 6)]
    # Two works: the reported one and one background citation (the anchors differ).
    two = extract_row("Night shifts raise blood pressure, trial finds", [pubmed("31839957"), EARLOBE])
    two["links"][0]["context"] = reporting
    two["links"][1]["context"] = passing
    rows = [
        extract_row("Why sleep matters", [pubmed("31839957")], context=passing),
        extract_row("Sleep and the heart", [pubmed("31839957")], context="See also the link."),
        product,
        listicle,
        two,
    ]
    outcome = run_pages(tmp_path, rows)
    kept, excluded = by_headline(outcome.artifact.read()), by_headline(outcome.artifact.excluded())
    decided = {r["url"]: (r["reason"], r["decided_by"]) for r in excluded.values()}
    assert decided[rows[0]["url"]] == ("not_a_report", "cited_in_passing")
    assert decided[rows[1]["url"]] == ("undecided", "no_report_cue")  # neither: the LLM's question
    assert decided[rows[2]["url"]] == ("not_a_report", "page_kind")
    assert "'product'" in excluded[rows[2]["url"]]["detail"]
    assert decided[rows[3]["url"]] == ("not_a_report", "page_kind")
    assert "listicle: 5 numbered section headings" in excluded[rows[3]["url"]]["detail"]
    reported = kept["Night shifts raise blood pressure, trial finds"]
    assert (reported["decided_by"], reported["works"]) == ("reported_work", 2)
    assert [c["id_value"] for c in reported["cited"]] == ["31839957"]  # the background one is not cited
    assert "reporting words" in reported["decision"]


def test_max_works_is_config(tmp_path: Path) -> None:
    rows = [extract_row("Sleep research in 2019", [pubmed(str(p)) for p in range(31839364, 31839368)])]
    assert run_pages(tmp_path / "3", rows).artifact.excluded().to_pylist()[0]["reason"] == "multiple_studies"
    # Four unrelated works under max_works 4: no rule decides.
    assert (
        run_pages(tmp_path / "4", rows, max_works=4).artifact.excluded().to_pylist()[0]["reason"]
        == "undecided"
    )


def test_an_unresolved_reference_is_its_own_work(tmp_path: Path) -> None:
    rows = [
        extract_row("A trial nobody indexed", ["https://doi.org/10.5555/not-in-pubmed"]),
        extract_row(
            "A publisher page without an id", ["https://academic.oup.com/eurheartj/article/41/3/407/5556728"]
        ),
    ]
    kept = by_headline(run_pages(tmp_path, rows).artifact.read())
    assert kept["A trial nobody indexed"]["cited"] == [
        {
            "id_kind": "doi",
            "id_value": "10.5555/not-in-pubmed",
            "url": "https://doi.org/10.5555/not-in-pubmed",
        }
    ]
    url = "https://academic.oup.com/eurheartj/article/41/3/407/5556728"
    assert kept["A publisher page without an id"]["cited"] == [
        {"id_kind": "url", "id_value": url, "url": url}
    ]


@pytest.mark.parametrize(
    ("headline", "pattern"),
    [
        ("Weekend health roundup: earlobes and mineral water", "roundup"),
        ("Health round-up: what we learned this week", "roundup"),
        ("News in brief: vaccines, statins and sleep", "in_brief"),
        ("Our weekly digest of cancer research", "digest"),
        ("5 studies that changed how we treat asthma", "count_of_studies"),
        ("Three new trials point the same way on aspirin", "count_of_studies"),
        ("10 ways to sleep better, according to science", "listicle"),
        ("Wochenrückblick: Neues aus der Herzmedizin", "roundup_de"),
        ("En bref : trois nouvelles du front du diabète", "roundup_fr"),
        ("Resumen semanal de salud: vacunas y sueño", "roundup_es"),
    ],
)
def test_roundup_wording(headline: str, pattern: str) -> None:
    assert (roundup_wording(headline) or "").startswith(f"{pattern}:")


@pytest.mark.parametrize(
    "headline",
    [
        "Longer pauses and slower speech stand out in schizophrenia, meta-analysis finds",
        "Review of 25 studies finds no benefit of vitamin D for falls",
        "Systematic review of 12 trials backs early mobilisation",
        "Eight silent days of meditation changed how two brain networks talk to each other",
        "Twenty years of Japanese stroke data: ischaemic stroke outcomes improved",
        "Two studies from one cohort link sleep to memory",
    ],
)
def test_review_and_number_wording_is_not_a_roundup(headline: str) -> None:
    assert roundup_wording(headline) is None


def test_two_claims_and_extra_patterns() -> None:
    assert two_claims("Earlobe creases and heart risk; bicarbonate water and dietary acid")
    assert not two_claims("Statins: yes; aspirin: no")  # parts under three words
    assert roundup_wording("Gesundheit kompakt: drei Meldungen", ["kompakt"]) == "config[0]: 'kompakt'"


def test_reply_parser() -> None:
    assert parse_reply('```json\n{"single_study": true, "reason": "one trial"}\n```') == (True, "one trial")
    for bad in ('{"single_study": "yes", "reason": "x"}', '{"single_study": true}', "Sure, one study.", "[]"):
        with pytest.raises(ValueError):
            parse_reply(bad)


# -- the LLM for undecided pages ------------------------------------------------------------

HEADLINE = re.compile(r"^Headline: (.*)$", re.MULTILINE)
LLM_PAGES = {
    "An old heart sign gets a second look": True,
    "Two findings from Japan and Germany": False,
    "A page the model cannot read": True,
}


def answer(body: dict[str, Any]) -> str:
    match = HEADLINE.search(last_user_text(body))
    assert match is not None
    single = LLM_PAGES[match.group(1)]
    return json.dumps({"single_study": single, "reason": f"scripted for {match.group(1)}"})


def _llm(server: FakeChat) -> LLMConfig:
    return LLMConfig(
        engine="openai",
        base_url=server.base_url,
        model=DEFAULT_MODEL,
        max_attempts=2,
        max_invalid_retries=1,
        timeout_s=5.0,
    )


@pytest.fixture(scope="module")
def llm_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Three runs on one cache: faults; a rerun (a rule setting changed); another rerun."""
    root = tmp_path_factory.mktemp("single-llm")
    rows = [extract_row(h, [EARLOBE, WATER]) for h in LLM_PAGES]
    with FakeChat(answer=answer) as server:
        server.inject("bad_json", 2, when="A page the model cannot read")  # asked, re-asked, malformed
        out: dict[str, Any] = {}
        for i, patterns in enumerate([[], ["zzz-first"], ["zzz-second"]]):
            server.clear()
            outcome = run_pages(root, rows, llm=_llm(server), roundup_patterns=patterns)
            out[f"run{i}"] = outcome
            out[f"asked{i}"] = server.asked()
        yield out


def test_the_llm_decides_undecided_pages(llm_runs: dict[str, Any]) -> None:
    first = llm_runs["run0"]
    [kept] = first.artifact.read().to_pylist()
    assert (kept["headline"], kept["decided_by"]) == ("An old heart sign gets a second look", "llm")
    assert kept["decision"] == f"LLM ({DEFAULT_MODEL}): scripted for An old heart sign gets a second look"
    excluded = {r["url"]: r for r in first.artifact.excluded().to_pylist()}
    refused = excluded[extract_row("Two findings from Japan and Germany", [])["url"]]
    assert (refused["reason"], refused["decided_by"]) == ("multiple_studies", "llm")
    failed = excluded[extract_row("A page the model cannot read", [])["url"]]
    assert (failed["reason"], failed["decided_by"], failed["attempts"]) == ("invalid_reply", "llm", 2)
    assert failed["raw_reply"] == "Sure! The passage is relevant, score 2."
    # The prompt shows the headline, the cited records and the text.
    [prompt, *_] = llm_runs["asked0"]
    assert "The Association between Earlobe Creases" in prompt
    assert "first author Wasserfurth P" in prompt
    assert "The article text." in prompt


def test_llm_replies_are_cached_and_their_cost_counted(llm_runs: dict[str, Any]) -> None:
    assert len(llm_runs["asked0"]) == 4  # three pages, the malformed one asked twice
    assert llm_runs["run0"].manifest["cost"]["requests_sent"] == 3
    assert llm_runs["run0"].manifest["cost"]["cache_hits"] == 0
    assert llm_runs["run0"].manifest["cost"]["prompt_tokens"] > 0
    # A rerun asks only what was never answered (the fault is used up now) ...
    assert [HEADLINE.search(t).group(1) for t in llm_runs["asked1"]] == ["A page the model cannot read"]  # type: ignore[union-attr]
    assert llm_runs["run1"].manifest["cost"]["cache_hits"] == 2
    assert len(llm_runs["run1"].artifact.read()) == 2
    # ... and a third run asks nothing.
    assert llm_runs["asked2"] == []
    assert llm_runs["run2"].manifest["cost"]["requests_sent"] == 0
    assert llm_runs["run2"].manifest["cost"]["cache_hits"] == 3


def test_bad_settings_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"roundup_patterns.*not a regular expression"):
        validate_config(SingleStudyConfig, {"roundup_patterns": ["(unclosed"]}, "crossgenre.yaml")
    prompt = tmp_path / "mine.md"
    prompt.write_text("<!-- mine -->\nIs $headline about one study?", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"mine\.md: placeholders must be exactly"):
        load_prompt(tmp_path, "mine.md")
    with pytest.raises(ConfigError, match=r"no prompt file 'absent\.md'"):
        load_prompt(tmp_path, "absent.md")
    assert decide("A page", [], {}, SingleStudyConfig().max_works).rule == "no_works"


@pytest.mark.slow
@needs_llama
@needs_gemma
def test_the_embedded_model_decides_undecided_pages_and_its_verdict_is_stored(tmp_path: Path) -> None:
    """The demo's LLM path (flows/configs/crossgenre-real-pages.yaml): Gemma 3 270M behind
    llama.cpp's server. Its verdicts may be wrong; every undecided page gets one, with a reason."""
    rows = [
        extract_row("Sleep and the heart", [pubmed("31839957")], context="See the link."),
        extract_row("An old heart sign gets a second look", [EARLOBE, WATER]),
    ]
    llm = LLMConfig(engine="llama-cpp", sampling={"temperature": 0, "max_tokens": 120}, max_invalid_retries=0)
    try:
        outcome = run_pages(tmp_path, rows, llm=llm)
    finally:
        close_local_servers()
    kept, excluded = outcome.artifact.read().to_pylist(), outcome.artifact.excluded().to_pylist()
    assert len(kept) + len(excluded) == 2
    for row in kept:
        assert row["decided_by"] == "llm" and row["decision"]  # the model's reason
    for row in excluded:
        assert row["decided_by"] == "llm"
        assert row["reason"] in ("multiple_studies", "invalid_reply", "truncated")
        assert row["detail"] or row["raw_reply"]


@pytest.mark.parametrize(
    ("context", "reported"),
    [
        ("And their olfactory ratios soared, the team reports online today in the Proceedings.", True),
        ("Funded by the ministry. Reference: Park, S., et al. (2020) VRK-1 extends life span.", True),
        ("This advance, to be published in the journal PLoS Genetics, offers an insight.", True),
        ("Die Ergebnisse sind im Fachjournal Nature erschienen.", True),
        ("Les résultats sont publiés dans la revue Nature Medicine.", True),
        ("Los resultados fueron publicados en la revista The Lancet.", True),
        ("They used data from the published literature and new CT scans.", False),
        ("Previous studies have linked poor sleep to heart disease.", False),
    ],
)
def test_reporting_words_near_a_link(context: str, reported: bool) -> None:
    evidence = work_evidence([{"block": "main", "context": context, "anchor": "link"}], "A headline")
    assert evidence.reported is reported, evidence.why


def test_a_lead_that_reports_a_perspective_or_guidelines_is_no_study_report() -> None:
    assert not_a_study("… according to a new perspective authored by faculty from the University") == (
        "a new perspective"
    )
    assert not_a_study("The society released new clinical guidelines for the treatment of AML.") == (
        "new clinical guidelines"
    )
    assert not_a_study("A new study finds that current guidelines miss half of cases.") is None


def test_a_work_dated_years_before_the_page_is_history_not_news() -> None:
    old = {"block": "main", "anchor": "Deterministic Nonperiodic Flow"}
    old["context"] = (
        "Lorenz's epochal paper. Published in 1963, it has since attracted thousands of citations."
    )
    assert not work_evidence([old], "The hidden heroines of chaos", 2019).reported
    assert work_evidence([old], "The hidden heroines of chaos", 1964).reported
    # A year elsewhere in the paragraph is not the work's date.
    new = {
        "block": "main",
        "anchor": "paper",
        "context": "Hansen, who testified in 1988, published in a journal today.",
    }
    assert work_evidence([new], "Hansen warns", 2023).reported
