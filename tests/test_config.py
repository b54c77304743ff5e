"""params.yaml validation (hdeval.params): unknown and retired keys, backend fields, missing
files, and how the CLI finds the params file (defaults = params.yaml: tests/test_dvc_deps.py)."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
import yaml

from hdeval.errors import ConfigError
from hdeval.params import LLMConfig, load_params, load_yaml_model


def _load(tmp_path: Path, llm: dict) -> LLMConfig:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"llm": llm}))
    return load_yaml_model(path, LLMConfig, "llm")


def test_defaults_and_a_valid_section(tmp_path: Path) -> None:
    config = _load(tmp_path, {"backend": "embedded", "concurrency": 2})
    assert config.concurrency == 2 and config.dtype == "auto"


def test_a_typo_is_an_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"llm\.concurency: Extra inputs are not permitted"):
        _load(tmp_path, {"concurency": 2})


def test_a_retired_key_says_it_is_no_longer_used(tmp_path: Path) -> None:
    for key in ("max_batch", "pack_tokens"):
        with pytest.raises(ConfigError, match=rf"llm\.{key} is no longer used .*delete the key"):
            _load(tmp_path, {key: 32})


def test_every_backend_has_a_builder_and_an_unknown_one_is_refused_naming_them(
    tmp_path: Path,
) -> None:
    from hdeval.llm.factory import BACKENDS, make_backend

    assert list(BACKENDS) == list(get_args(LLMConfig.model_fields["backend"].annotation))
    message = r"llm\.backend: Input should be 'embedded', 'transformers' or 'openai'"
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, {"backend": "vllm"})
    with pytest.raises(ConfigError, match=message):  # a config that skipped validation
        make_backend(LLMConfig().model_copy(update={"backend": "vllm"}))


def test_backend_fields_are_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"llm\.base_url and llm\.model are required"):
        _load(tmp_path, {"backend": "openai"})
    with pytest.raises(ConfigError, match=r"llm\.concurrency: Input should be greater"):
        _load(tmp_path, {"concurrency": 0})


def test_a_missing_file_is_an_error_not_the_defaults(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"cannot read .*nope\.yaml"):
        load_yaml_model(missing, LLMConfig, "llm")
    with pytest.raises(ConfigError, match=r"cannot read .*nope\.yaml"):
        load_params(missing)


def test_cli_reads_params_yaml_of_the_working_directory_and_refuses_a_missing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--params defaults to ./params.yaml when present; a named file that is missing is an error.

    Both are reported before any judge is loaded.
    """
    from typer.testing import CliRunner

    from hdeval.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HDEVAL_CACHE", str(tmp_path / "cache.sqlite"))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("")
    command = ["dhp", str(labels), "--scorer", "rouge", "--out", str(tmp_path / "out")]
    runner = CliRunner()

    missing = runner.invoke(app, [*command, "--params", str(tmp_path / "nope.yaml")])
    assert isinstance(missing.exception, ConfigError), missing.output
    assert "nope.yaml" in str(missing.exception)

    (tmp_path / "params.yaml").write_text("llm: {backend: openai}\n")  # invalid: no base_url
    default = runner.invoke(app, command)
    assert isinstance(default.exception, ConfigError), default.output
    assert "llm.base_url and llm.model are required" in str(default.exception)


@pytest.mark.parametrize(
    ("section", "old", "new"),
    [
        ("dhp", {"threshold": 2.0}, r"dhp\.threshold was replaced by acceptance\.dhp_threshold"),
        ("dhp", {"on_failure": "fail"}, r"dhp\.on_failure was replaced by acceptance\.on_failure"),
        ("aggregator", {"kind": "tree"}, r"aggregator\.kind was replaced by aggregator\.kinds"),
    ],
)
def test_moved_gate_and_aggregator_keys_name_their_replacement(
    tmp_path: Path, section: str, old: dict, new: str
) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({section: old}))
    with pytest.raises(ConfigError, match=new):
        load_params(path)


def test_embedded_model_is_one_of_the_pinned_weights(tmp_path: Path) -> None:
    from hdeval.llm.local import embedded

    config = _load(tmp_path, {"model": "qwen2.5-coder-1.5b-instruct-q4_k_m"})
    assert embedded.embedded_model(config.model) is embedded.QWEN_15B
    assert embedded.embedded_model(None) is embedded.QWEN_05B
    with pytest.raises(ConfigError, match=r"llm\.model 'qwen-7b' is not an embedded model"):
        _load(tmp_path, {"model": "qwen-7b"})


def test_decomposer_is_an_llm_config(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    server = {"backend": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "big"}
    path.write_text(yaml.safe_dump({"hierarchy": {"decomposer": server}}))
    assert load_params(path).hierarchy.decomposer.model == "big"
    path.write_text(yaml.safe_dump({"hierarchy": {"decomposer": {"backend": "openai"}}}))
    with pytest.raises(ConfigError, match=r"hierarchy\.decomposer: llm\.base_url and llm\.model"):
        load_params(path)


def test_quantize_is_checked_against_backend_dtype_and_device(tmp_path: Path) -> None:
    assert _load(tmp_path, {}).quantize == "auto"
    assert _load(tmp_path, {"quantize": "int8"}).quantize == "int8"
    assert _load(tmp_path, {"quantize": "int8", "dtype": "float32"}).quantize == "int8"
    assert _load(tmp_path, {"quantize": "int8_fbgemm"}).quantize == "int8_fbgemm"
    assert _load(tmp_path, {"quantize": "auto", "dtype": "bfloat16"}).quantize == "auto"
    with pytest.raises(ConfigError, match=r"llm\.quantize: Input should be 'none', 'int8', 'int8_"):
        _load(tmp_path, {"quantize": "int4"})
    with pytest.raises(ConfigError, match=r"set llm\.dtype to auto or float32, not bfloat16"):
        _load(tmp_path, {"quantize": "int8", "dtype": "bfloat16"})
    with pytest.raises(ConfigError, match=r"int8 runs on the CPU only"):
        _load(tmp_path, {"quantize": "int8", "device": "cuda"})
    with pytest.raises(ConfigError, match=r"llm\.quantize applies to the local backends"):
        _load(tmp_path, {"quantize": "int8", "backend": "openai", "base_url": "u", "model": "m"})


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("http://user:s3cret@127.0.0.1:8000/v1", "user:password@"),
        ("https://only-user@host/v1", "user:password@"),
        ("https://host/v1?api_key=k3y&model=m", "?api_key="),
        ("https://host/v1#access_token=abcd", "#access_token="),
        ("https://host/v1/sk-proj-Ab12Cd34/chat", "a key-like path segment"),
        ("https://host/v1?model=m;api_key=k3y", "?api_key="),
        ("https://host/v1;token=abcd", ";token="),
        ("https://host/v1#sk-ant-abcd", "a key-like value after '#'"),
        ("https://host/v1?q=" + "aB3" * 11, "a key-like value after '?'"),
    ],
)
def test_credentials_in_the_base_url_are_refused_pointing_to_api_key_env(
    tmp_path: Path, url: str, named: str
) -> None:
    """dvc.yaml tracks the whole llm section: a key in the URL would be written to dvc.lock."""
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, {"backend": "openai", "base_url": url, "model": "m"})
    message = str(caught.value)
    assert f"llm.base_url: holds credentials ({named}" in message and "llm.api_key_env" in message
    for secret in ("s3cret", "k3y", "abcd", "Ab12Cd34", "aB3aB3"):
        assert secret not in message
    decomposer = {"hierarchy": {"decomposer": {"backend": "openai", "base_url": url, "model": "m"}}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(decomposer))
    with pytest.raises(ConfigError, match=r"hierarchy\.decomposer\.base_url: holds credentials"):
        load_params(path)
    for fine in (
        "https://h/v1?m=1",
        "https://gateway.ai.cloudflare.com/v1/0123456789abcdef0123456789abcdef/gw/openai",
        "https://x.openai.azure.com/openai/deployments/gpt-4o-mini;v=2",
        "http://127.0.0.1:8000/v1#part",
    ):
        assert _load(tmp_path, {"backend": "openai", "base_url": fine, "model": "m"}), fine
