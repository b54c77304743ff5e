"""Typed configuration. Unknown keys are errors: a typo never falls back to a default."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hdeval.errors import ConfigError


class LLMConfig(BaseModel):
    """Which judge to use.

    - ``embedded``: the pinned Qwen2.5-Coder-0.5B weights (``hdeval model pull``), run locally.
    - ``transformers``: any local Hugging Face directory or GGUF file (``model_path``).
    - ``openai``: any OpenAI-compatible server (``base_url`` + ``model``); the API key is read
      from the environment variable named by ``api_key_env``, never from a file.

    ``max_context`` (local backends) lowers the context length prompts are fitted to, below the
    model's own; a server enforces its own context, and a longer prompt is a recorded failure.
    """

    model_config = ConfigDict(extra="forbid")

    backend: Literal["embedded", "transformers", "openai"] = "embedded"
    model_path: str | None = None
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    device: str = "cpu"
    pack_tokens: int = Field(256, ge=1)
    concurrency: int = Field(4, ge=1)
    timeout: float = Field(120.0, gt=0)
    max_retries: int = Field(5, ge=0)
    min_digit_mass: float = Field(0.5, ge=0, le=1)
    max_context: int | None = Field(None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _retired_keys(cls, data: object) -> object:
        if isinstance(data, dict) and "max_batch" in data:
            raise ValueError(
                "llm.max_batch was replaced by llm.pack_tokens (criterion-suffix tokens per "
                "forward pass, default 256); remove max_batch"
            )
        return data

    @model_validator(mode="after")
    def _check_backend_fields(self) -> LLMConfig:
        if self.backend == "transformers" and not self.model_path:
            raise ValueError("llm.model_path is required for the transformers backend")
        if self.backend == "openai" and not (self.base_url and self.model):
            raise ValueError("llm.base_url and llm.model are required for the openai backend")
        if self.backend == "openai" and self.max_context is not None:
            raise ValueError(
                "llm.max_context applies to the local backends; the server enforces its own"
            )
        return self


def load_yaml_model(path: Path, model: type[BaseModel], section: str | None = None) -> BaseModel:
    """Validate a YAML file (or one section of it) against ``model``, naming the bad field."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if section is not None:
        data = data.get(section, {})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_problem(section, e) for e in exc.errors())
        raise ConfigError(f"{path}: {problems}") from exc


def _problem(section: str | None, error: dict) -> str:
    """``section.field: message`` of one pydantic error (a whole-section check names no field)."""
    where = ".".join(filter(None, [section, *(str(p) for p in error["loc"])]))
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
