"""params.yaml validation (hdeval.config): unknown and retired keys, backend fields."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hdeval.config import LLMConfig, load_yaml_model
from hdeval.errors import ConfigError


def _load(tmp_path: Path, llm: dict) -> LLMConfig:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"llm": llm}))
    return load_yaml_model(path, LLMConfig, "llm")


def test_defaults_and_a_valid_section(tmp_path: Path) -> None:
    config = _load(tmp_path, {"backend": "embedded", "pack_tokens": 128})
    assert config.pack_tokens == 128 and config.dtype == "auto"


def test_a_typo_is_an_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"llm\.pack_token: Extra inputs are not permitted"):
        _load(tmp_path, {"pack_token": 128})


def test_a_retired_key_names_its_replacement(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"llm\.max_batch was replaced by llm\.pack_tokens"):
        _load(tmp_path, {"max_batch": 32})


def test_backend_fields_are_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"llm\.base_url and llm\.model are required"):
        _load(tmp_path, {"backend": "openai"})
    with pytest.raises(ConfigError, match=r"llm\.pack_tokens: Input should be greater"):
        _load(tmp_path, {"pack_tokens": 0})
