"""Flow configs: unknown keys and bad values fail with the key's path."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.registry import get_pipeline
from irforge.errors import ConfigError, IrforgeError

CURE = get_pipeline("cure")


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "flow.yaml"
    path.write_text(text)
    return CURE.load(path)


def test_bundled_demo_config_loads() -> None:
    config, base = CURE.load(None)
    assert base == CURE.default_config.parent
    assert config.stages.filter.min_words == 10  # type: ignore[attr-defined]


def test_unknown_key_is_named_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"stages\.filter\.min_wrods: Extra inputs are not permitted"):
        load(tmp_path, "stages:\n  ingest: {sources: [x]}\n  filter: {min_wrods: 3}\n")


def test_bad_value_is_named_with_its_path_and_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"stages\.segment\.split_above_words: .*integer.*got 'many'"):
        load(tmp_path, "stages:\n  ingest: {sources: [x]}\n  segment: {split_above_words: many}\n")


def test_missing_required_and_list_index_paths(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"stages\.ingest: Field required"):
        load(tmp_path, "stages: {}\n")
    with pytest.raises(ConfigError, match=r"stages\.ingest\.sources\[1\]: Input should be a valid string"):
        load(tmp_path, "stages:\n  ingest: {sources: [a, 3]}\n")


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(tmp_path, "stages: [\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load(tmp_path, "- a\n- b\n")


def test_cross_field_rule(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="merge_below_words must be smaller"):
        load(
            tmp_path,
            "stages:\n  ingest: {sources: [x]}\n  segment: {merge_below_words: 400, split_above_words: 300}\n",
        )


def test_unknown_flow_and_stage() -> None:
    with pytest.raises(IrforgeError, match="unknown flow 'curee'"):
        get_pipeline("curee")
    with pytest.raises(IrforgeError, match=r"no stage 'filtr'.*ingest, parse, segment, filter"):
        CURE.spec("filtr")


def test_translate_languages_are_checked_by_the_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"stages\.translate\.languages\[1\]"):
        load(tmp_path, "stages:\n  ingest: {sources: [x]}\n  translate: {languages: [en, de]}\n")


def test_an_llm_key_that_does_not_act_on_its_engine_is_named_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"stages\.judge\.llm: Value error, max_concurrency does not apply to engine vllm-batch",
    ):
        load(
            tmp_path,
            "stages:\n  ingest: {sources: [x]}\n  judge: {llm: {engine: vllm-batch, max_concurrency: 4}}\n",
        )
