"""Fingerprints cover what changes a result, never how it is reached (issue 14 §8).

Config fields declared ``Transport[...]`` (irforge/fingerprint.py) are left out of a
stage's material: moving the LLM server, raising a timeout or a batch size keeps every
artifact fresh; changing the model, the sampling or a truncation length does not.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pydantic import BaseModel, Field

from flows.registry import PIPELINES, get_pipeline
from irforge.artifacts import ArtifactStore
from irforge.config import StrictModel, validate_config
from irforge.engine import StagePlan, run_stage
from irforge.fingerprint import Transport, fingerprint_view, is_transport
from irforge.pipeline import FlowConfig, Pipeline
from irforge.stage import ChunkResult, StageSpec, TableSource, exclusion_schema
from irforge.status import flow_status
from tasks.common.llm.config import LLMConfig

# Names that only ever say how a result is reached: marked Transport wherever they appear.
TRANSPORT_NAMES = {
    "base_url", "api_key_env", "timeout_s", "max_attempts", "max_concurrency", "requests_per_second",
    "max_network_retries", "max_request_bytes", "batch_command", "device", "batch_size", "batch_pairs",
    "batch_rows", "batch_queries", "chunk_rows", "part_rows", "price_per_million_input",
    "price_per_million_output", "base_urls", "server_cooldown_s", "runner", "workers", "ray_address",
}  # fmt: skip
# Names that change results: never marked.
RESULT_NAMES = {
    "engine", "model", "sampling", "structured_output", "grammar_field", "max_invalid_retries",
    "batch_extra_args", "gguf", "n_ctx", "max_length", "max_seq_length", "precision", "revision",
    "trust_remote_code", "query_prefix", "passage_prefix", "shards", "index_type",
}  # fmt: skip


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def all_config_models() -> set[type[BaseModel]]:
    """Every config class reachable from the registered flows' config types."""
    seen: set[type[BaseModel]] = set()
    todo: list[type[BaseModel]] = [p.config_type for p in PIPELINES.values()]
    while todo:
        model = todo.pop()
        if model not in seen:
            seen.add(model)
            for field in model.model_fields.values():
                todo += _models_in(field.annotation)
    return seen


def test_every_transport_field_of_every_flow_config_is_marked() -> None:
    models = all_config_models()
    assert {m.__name__ for m in models} >= {"LLMConfig", "EncoderConfig", "RerankerConfig", "ExecutionConfig"}
    unmarked, marked = [], []
    for model in models:
        for name, field in model.model_fields.items():
            looks_transport = name in TRANSPORT_NAMES or name.endswith(("base_url", "_key_env", "timeout_s"))
            if looks_transport and not is_transport(field):
                unmarked.append(f"{model.__name__}.{name}")
            if name in RESULT_NAMES and is_transport(field):
                marked.append(f"{model.__name__}.{name}")
    assert unmarked == [], f"declare these Transport[...] (irforge/fingerprint.py): {sorted(unmarked)}"
    assert marked == [], f"these change results and must stay fingerprinted: {sorted(marked)}"


def test_the_view_drops_marked_fields_at_any_depth() -> None:
    class Inner(StrictModel):
        url: Transport[str] = "http://a"
        size: int = 1

    class Outer(StrictModel):
        one: Inner = Inner()
        many: tuple[Inner, ...] = (Inner(), Inner(size=2))
        named: dict[str, Inner] = Field(default_factory=lambda: {"x": Inner()})
        maybe: Inner | None = None
        timeout_s: Transport[float] = 3.0

    view = fingerprint_view(Outer(maybe=Inner(url="http://b")))
    assert view == {
        "one": {"size": 1},
        "many": [{"size": 1}, {"size": 2}],
        "named": {"x": {"size": 1}},
        "maybe": {"size": 1},
    }


# -- the real flows: which keys move which fingerprints ----------------------------------


def cure_fingerprints(**changes: Any) -> dict[str, str]:
    """Stage fingerprints of the bundled CURE config with ``changes`` ({"judge.llm": {...}})."""
    pipeline = get_pipeline("cure")
    data = yaml.safe_load(pipeline.default_config.read_text("utf-8"))
    for where, values in changes.items():
        node = data["stages"]
        for part in where.split("."):
            node = node.setdefault(part, {})
        node.update(values)
    config = validate_config(pipeline.config_type, data, "cure.yaml")
    return {
        name: plan.fingerprint for name, plan in pipeline.plan(config, pipeline.default_config.parent).items()
    }


OPENAI = {"engine": "openai", "model": "Qwen/Qwen2.5-72B-Instruct-AWQ", "base_url": "http://gpu-a:8000/v1"}


@pytest.mark.parametrize(
    ("where", "transport"),
    [
        ("judge.llm", {"base_url": "http://gpu-b:9000/v1", "timeout_s": 900, "max_attempts": 2,
                       "max_concurrency": 64, "requests_per_second": 5, "api_key_env": "VLLM_KEY",
                       "price_per_million_input": 0.5}),
        ("translate.llm", {"base_url": "http://gpu-b:9000/v1", "timeout_s": 900}),
        ("translate.deepl", {"max_network_retries": 1}),
        ("embed.encoder", {"batch_size": 7, "device": "cpu"}),
        ("pool", {"batch_pairs": 99}),
        ("mine", {"batch_queries": 3}),
        ("index", {"batch_rows": 10}),
    ],
)  # fmt: skip
def test_transport_keys_keep_every_fingerprint(where: str, transport: dict[str, Any]) -> None:
    base = {"judge.llm": OPENAI, "translate.llm": OPENAI}
    before = cure_fingerprints(**base)
    after = cure_fingerprints(**{**base, where: {**base.get(where, {}), **transport}})
    assert after == before


@pytest.mark.parametrize(
    ("where", "result", "stale"),
    [
        ("judge.llm", {"model": "Qwen/Qwen2.5-7B-Instruct"}, "judge"),
        ("judge.llm", {"sampling": {"temperature": 0.7}}, "judge"),
        ("judge.llm", {"max_invalid_retries": 5}, "judge"),
        ("judge.llm", {"structured_output": "none"}, "judge"),
        ("embed.encoder", {"max_seq_length": 64}, "embed"),
        ("pool.reranker", {"max_length": 128}, "pool"),
    ],
)
def test_result_keys_change_that_stage_and_its_descendants(
    where: str, result: dict[str, Any], stale: str
) -> None:
    base = {"judge.llm": OPENAI, "translate.llm": OPENAI}
    before = cure_fingerprints(**base)
    after = cure_fingerprints(**{**base, where: {**base.get(where, {}), **result}})
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {stale} | get_pipeline("cure").descendants(stale)


# -- irforge status on a stage whose config holds an LLM config --------------------------


class AskConfig(StrictModel):
    llm: LLMConfig = LLMConfig(base_url="http://gpu-a:8000/v1")


class AskStages(StrictModel):
    ask: AskConfig = AskConfig()


class AskFlow(FlowConfig):
    stages: AskStages = AskStages()


ROWS = pa.schema([pa.field("id", pa.int64(), nullable=False)])
ASK: StageSpec[AskConfig] = StageSpec(
    name="ask",
    version=1,
    config_type=AskConfig,
    upstream=(),
    schema=ROWS,
    excluded_schema=exclusion_schema(pa.field("id", pa.int64(), nullable=False)),
    key=("id",),
    source=lambda _ctx, _inputs: TableSource(pa.table({"id": pa.array([1, 2, 3], pa.int64())})),
    process=lambda chunk, _ctx: ChunkResult(chunk, pa.table({"reason": [], "detail": [], "id": []}).cast(
        exclusion_schema(pa.field("id", pa.int64(), nullable=False)))),
)  # fmt: skip
ASK_FLOW = Pipeline(name="askflow", config_type=AskFlow, stages=(ASK,), default_config=Path("unused.yaml"))


def ask_config(**llm: Any) -> AskFlow:
    data = {"stages": {"ask": {"llm": {"base_url": "http://gpu-a:8000/v1", **llm}}}}
    return validate_config(AskFlow, data, "flow.yaml")


def test_status_stays_fresh_when_only_transport_keys_change(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    plan: StagePlan = ASK_FLOW.plan(ask_config(), tmp_path)["ask"]
    outcome = run_stage(plan, store, "askflow", ask_config().execution)
    (tmp_path / "askflow" / "latest.json").write_text(json.dumps({"ask": outcome.artifact.fingerprint}))
    assert "base_url" not in json.dumps(outcome.manifest)  # where the model ran is not recorded

    moved = ask_config(base_url="http://gpu-b:9000/v1", timeout_s=999, max_attempts=1, max_concurrency=2)
    (status,) = flow_status(ASK_FLOW, moved, tmp_path, store)
    assert status.state == "fresh" and status.fingerprint == outcome.artifact.fingerprint
    assert (
        run_stage(ASK_FLOW.plan(moved, tmp_path)["ask"], store, "askflow", moved.execution).state == "reused"
    )

    (status,) = flow_status(ASK_FLOW, ask_config(model="other-model"), tmp_path, store)
    assert status.state == "stale"
    assert status.changed == ["config llm.model: 'Qwen/Qwen2.5-72B-Instruct-AWQ' -> 'other-model'"]


def test_vllm_batch_command_is_transport_and_its_extra_args_are_not(tmp_path: Path) -> None:
    def fp(**llm: Any) -> str:
        data = {"stages": {"ask": {"llm": {"engine": "vllm-batch", "model": "m", **llm}}}}
        return ASK_FLOW.plan(validate_config(AskFlow, data, "flow.yaml"), tmp_path)["ask"].fingerprint

    command = ["vllm", "run-batch", "-i", "{input}", "-o", "{output}", "--gpu-memory-utilization", "0.8"]
    assert fp(batch_command=command, timeout_s=7200, max_attempts=1) == fp()
    assert fp(batch_extra_args=["--dtype", "half"]) != fp()
