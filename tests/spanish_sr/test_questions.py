"""Stage ``questions`` on the 300 real CT-EBM-SP records (after ingest and clean), on small rows
made here for the exclusions, and with the LLM behind tests/fakes/llm_server.py's FakeChat.

The expected rule questions were checked by reading each title; the English titles are real
MEDLINE titles of data/spanish_sr/sr-screening/Antihistamines.csv.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from irforge.config import validate_config
from irforge.engine import StageOutcome
from irforge.errors import ConfigError
from tasks.common.llm.config import LLMConfig
from tasks.spanish_sr.language import PROFILES
from tasks.spanish_sr.question_llm import load_prompt, parse_reply
from tasks.spanish_sr.question_rules import rule_question
from tasks.spanish_sr.stages.questions import INPUT_COLUMNS, SPEC, QuestionsConfig
from tests.fakes.llm_server import DEFAULT_MODEL, FakeChat, last_user_text
from tests.spanish_sr.conftest import CT_EBM_SP, artifact_of, run_one
from tests.spanish_sr.test_clean import clean
from tests.spanish_sr.test_ingest import ingest

# record id → (shape, question), one or two real titles per Spanish shape.
RULES = {
    "0211-699501013694": (
        "effect",
        "¿Cuál es el efecto beneficioso de las membranas de AN69 sobre la anemia de los pacientes en hemodiálisis?",
    ),
    "S0211-69952011000300009": (
        "effect",
        "¿Cuáles son los efectos de la rapamicina en los angiomiolipomas de pacientes con esclerosis tuberosa?",
    ),
    "S0034-75072007000300008": (
        "efficacy",
        "¿Cuál es la efectividad del uso del propóleo en el tratamiento de la estomatitis aftosa?",
    ),
    "S2448-87712016000200005": (  # "vs" inside an efficacy title: the head noun wins
        "efficacy",
        "¿Cuál es la eficacia de dexmedetomidina como medicación anestésica vs midazolam en pacientes pediátricos?",
    ),
    "S0365-66912007000700004": (
        "association",
        "¿Existe correlación entre los índices globales de la perimetría automatizada convencional y los "
        "parámetros topográficos papilares (Heidelberg Retina Tomograph II)?",
    ),
    "S0104-11692016000100435": (
        "factors",
        "¿Cuáles son los factores de riesgo para complicaciones en el catéter venoso periférico en adultos: "
        "análisis secundario de ensayo clínico aleatorizado?",
    ),
    "S0034-70942013000400001": (
        "comparison",
        "¿Qué muestra la comparación de lornoxicam y fentanilo adicionados a la lidocaína en la anestesia "
        "regional intravenosa?",
    ),
    "S0025-76802012000300008": (
        "versus",
        "¿Qué diferencia hay entre régimen con insulina lispro mix 25 y insulina glargina para la diabetes tipo 2?",
    ),
    "S0025-76802004000100001": (
        "treatment",
        "¿Es útil el tratamiento de Chagas con benznidazol y ácido tióctico?",
    ),
    "S0036-36342004000400008": (
        "evaluation",
        "¿Qué muestra la evaluación de la nitazoxanida en dosis única y por tres días en parasitosis intestinal?",
    ),
    "S0210-48062011000400006": (
        "question",
        "¿Debe emplearse de manera sistemática el cateterismo ureteral en los implantes renales?",
    ),
    "S0009-741115002261": (  # a question in the subtitle: the title is kept as written
        "question",
        "Aplicación de sellante de fibrina en pacientes operados por cáncer diferenciado de tiroides. ¿Qué mejoramos?",
    ),
    "0211-699504016634": (
        "other",
        "¿Qué se sabe sobre mejoría del estado nutricional con hemodiafiltración en línea diaria?",
    ),
}


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StageOutcome]:
    root = tmp_path_factory.mktemp("questions")
    return root, clean(root, ingest(root, CT_EBM_SP.parent, "ct-ebm-sp"))


def questions(root: Path, upstream: StageOutcome | Any, **config: Any) -> StageOutcome:
    artifact = getattr(upstream, "artifact", upstream)
    cfg = validate_config(QuestionsConfig, config, "test")
    return run_one(root / "store", SPEC, cfg, {"clean": artifact})


def test_title_mode_pairs_every_real_record_with_its_own_title(cleaned: tuple[Path, StageOutcome]) -> None:
    root, upstream = cleaned
    outcome = questions(root, upstream)
    records = {r["record_id"]: r for r in upstream.artifact.read().to_pylist()}
    pairs = outcome.artifact.read().to_pylist()
    assert outcome.artifact.excluded().num_rows == 0 and len(pairs) == 300
    for pair in pairs:
        record = records[pair["record_id"]]
        assert pair["question"] == " ".join(record["title"].split()).rstrip(" .;:")
        assert (pair["title"], pair["abstract"]) == (record["title"], record["abstract"])
        assert (pair["mode"], pair["shape"], pair["model"]) == ("title", None, None)
    assert {p["question"] for p in pairs} >= {"Ketamina epidural en cirugía de hemiabdomen inferior"}


def test_rule_mode_on_the_real_titles(cleaned: tuple[Path, StageOutcome]) -> None:
    root, upstream = cleaned
    outcome = questions(root, upstream, mode="rule")
    pairs = {r["record_id"]: r for r in outcome.artifact.read().to_pylist()}
    assert len(pairs) == 300
    for record_id, (shape, question) in RULES.items():
        assert (pairs[record_id]["shape"], pairs[record_id]["question"]) == (shape, question), record_id
    for pair in pairs.values():
        if pair["shape"] == "question":
            assert pair["question"] == pair["title"].strip()
        else:  # a Spanish question wrapping the whole title
            assert re.fullmatch(r"¿[^¿?]+\?", pair["question"]), pair["question"]
    shapes = Counter(p["shape"] for p in pairs.values())
    # Measured on the demo: every shape but prevalence occurs (see the next test); what no rule
    # names is asked about generically.
    assert set(shapes) == {r.shape for r in PROFILES["es"].question_rules} - {"prevalence"} | {"other"}
    assert shapes["other"] == 99 and shapes["effect"] == 54 and shapes["question"] == 8


def test_spanish_shapes_the_demo_lacks() -> None:
    spanish = PROFILES["es"]
    assert rule_question("Prevalencia de caries en escolares de Campeche.", spanish) == (
        "¿Cuál es la prevalencia de caries en escolares de Campeche?",
        "prevalence",
    )
    assert rule_question("Asociación entre obesidad y caries en niños mexicanos", spanish) == (
        "¿Existe asociación entre obesidad y caries en niños mexicanos?",
        "association",
    )
    # An acronym keeps its capitals; "frente a" in a subtitle does not make a versus title.
    assert rule_question("DMEK frente a DSAEK", spanish) == (
        "¿Qué diferencia hay entre DMEK y DSAEK?",
        "versus",
    )
    assert rule_question("Queratoplastia endotelial: DMEK frente a DSAEK", spanish)[1] == "other"


def test_english_rules_on_real_medline_titles() -> None:
    english = PROFILES["en"]
    cases = {
        "Effect of loratadine, an H1 antihistamine, on induced cough in non-asthmatic patients with chronic cough.": (
            "What is the effect of loratadine, an H1 antihistamine, on induced cough in non-asthmatic patients "
            "with chronic cough?",
            "effect",
        ),
        "The effect of cetirizine on symptoms and wealing in dermographic urticaria.": (
            "What is the effect of cetirizine on symptoms and wealing in dermographic urticaria?",
            "effect",
        ),
        "Once daily loratadine versus astemizole once daily.": (
            "What is the difference between once daily loratadine and astemizole once daily?",
            "versus",
        ),
        "Do antihistamines impair school performance in children?": (
            "Do antihistamines impair school performance in children?",
            "question",
        ),
        "[Efficacy and safety of loratadine vs terfenadine in the treatment of children with perennial allergic rhinitis]": (
            "What is the efficacy and safety of loratadine vs terfenadine in the treatment of children with "
            "perennial allergic rhinitis?",
            "efficacy",
        ),
    }
    for title, expected in cases.items():
        assert rule_question(title, english) == expected


def _row(record_id: str, title: str | None, abstract: str) -> dict[str, Any]:
    return {"record_id": record_id, "source": "made.jsonl", "record": 1, "title": title, "abstract": abstract}


INPUT = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("record", pa.int32(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("abstract", pa.large_string()),
    ]
)
assert INPUT.names == INPUT_COLUMNS


def test_no_title_and_title_equal_to_abstract_are_excluded_with_their_place(tmp_path: Path) -> None:
    text = "Efecto de la aspirina en la mortalidad del síndrome de distrés respiratorio agudo."
    rows = [
        _row("a", None, text),
        _row("b", "  ", text),
        _row("c", "¿?", text),
        _row("d", "EFECTO DE LA ASPIRINA en la  mortalidad del síndrome de distrés respiratorio agudo", text),
        _row("e", "Efecto de la aspirina", text),
    ]
    upstream = artifact_of(tmp_path, "clean", pa.Table.from_pylist(rows, schema=INPUT))
    outcome = questions(tmp_path, upstream, mode="rule")
    excluded = {r["record_id"]: r for r in outcome.artifact.excluded().to_pylist()}
    assert {k: r["reason"] for k, r in excluded.items()} == {
        "a": "no_title",
        "b": "no_title",
        "c": "no_title",
        "d": "title_equals_abstract",
    }
    assert excluded["d"]["detail"].startswith("made.jsonl#1 (d): title and abstract read")
    [kept] = outcome.artifact.read().to_pylist()
    assert (kept["record_id"], kept["question"]) == ("e", "¿Cuál es el efecto de la aspirina?")


# -- mode llm -----------------------------------------------------------------------------

TITLE = re.compile(r"^Title: (.*)$", re.MULTILINE)
BROKEN = "Ketamina epidural en cirugía de hemiabdomen inferior"


def answer(body: dict[str, Any]) -> str:
    match = TITLE.search(last_user_text(body))
    assert match is not None
    return json.dumps({"question": f"¿Qué aporta: {match.group(1).lower()}?"}, ensure_ascii=False)


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
def llm_runs(cleaned: tuple[Path, StageOutcome]) -> Iterator[dict[str, Any]]:
    """Two runs on one cache over 20 real records: the first with one malformed reply, then a rerun."""
    root, upstream = cleaned
    table = upstream.artifact.read(columns=INPUT_COLUMNS).sort_by("record_id")
    chosen = [r for r in table.to_pylist() if r["title"] != BROKEN][:19]
    chosen += [r for r in table.to_pylist() if r["title"] == BROKEN]
    rows = artifact_of(root / "llm-input", "clean", pa.Table.from_pylist(chosen, schema=table.schema))
    out: dict[str, Any] = {}
    with FakeChat(answer=answer) as server:
        server.inject("bad_json", 2, when=BROKEN)  # asked, re-asked, still malformed
        for i in range(2):
            server.clear()
            if i:  # a fresh artifact store sharing the first run's reply cache
                (root / "llm1" / "store").mkdir(parents=True)
                (root / "llm1" / "store" / "cache").symlink_to(root / "llm0" / "store" / "cache")
            out[f"run{i}"] = questions(root / f"llm{i}", rows, mode="llm", llm=_llm(server))
            out[f"asked{i}"] = server.asked()
        yield out


def test_the_llm_writes_questions_and_a_malformed_reply_is_excluded(llm_runs: dict[str, Any]) -> None:
    first = llm_runs["run0"]
    pairs = first.artifact.read().to_pylist()
    assert len(pairs) == 19
    for pair in pairs:
        assert pair["question"] == f"¿Qué aporta: {pair['title'].lower()}?"
        assert (pair["mode"], pair["model"]) == ("llm", DEFAULT_MODEL)
    [failed] = first.artifact.excluded().to_pylist()
    assert (failed["reason"], failed["attempts"]) == ("invalid_reply", 2)
    assert failed["detail"].startswith("ct-ebm-sp/") and "not JSON" in failed["detail"]
    assert failed["raw_reply"] == "Sure! The passage is relevant, score 2."
    prompt = llm_runs["asked0"][0]
    assert "in Spanish" in prompt and "Title: " in prompt and "$" not in prompt
    assert first.manifest["cost"]["requests_sent"] == 20


def test_llm_replies_are_cached(llm_runs: dict[str, Any]) -> None:
    # The rerun (a fresh artifact root, the same cache) asks only the request that never got a valid reply.
    assert [TITLE.search(t).group(1) for t in llm_runs["asked1"]] == [BROKEN]  # type: ignore[union-attr]
    assert llm_runs["run1"].manifest["cost"]["cache_hits"] == 19
    assert len(llm_runs["run1"].artifact.read()) == 20


def test_reply_parsing_and_bad_settings() -> None:
    assert parse_reply('```json\n{"question": "¿Es  útil\\nla ketamina?"}\n```') == "¿Es útil la ketamina?"
    for bad in ('{"question": ""}', '{"question": "¿?"}', '{"q": "x"}', "[1]", '{"question": 3}'):
        with pytest.raises(Exception, match=r"question|JSON"):
            parse_reply(bad)
    with pytest.raises(ConfigError, match="mode llm needs an llm section"):
        validate_config(QuestionsConfig, {"mode": "llm"}, "spanish_sr.yaml")
    with pytest.raises(ConfigError, match="no language profile 'pt'"):
        validate_config(QuestionsConfig, {"language": "pt"}, "spanish_sr.yaml")
    with pytest.raises(ConfigError, match="mode"):
        validate_config(QuestionsConfig, {"mode": "synthetic"}, "spanish_sr.yaml")


def test_prompt_placeholders_are_checked(tmp_path: Path) -> None:
    assert load_prompt(tmp_path, "spanish_sr/question.md").template.get_identifiers() == ["language", "title"]
    mine = tmp_path / "mine.md"
    mine.write_text("<!-- mine -->\nAsk about $title and $abstract", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"mine\.md: placeholders must be exactly"):
        load_prompt(tmp_path, "mine.md")
    with pytest.raises(ConfigError, match=r"no prompt file 'absent\.md'"):
        load_prompt(tmp_path, "absent.md")
