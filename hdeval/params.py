"""Every params model in one place: the sections of ``params.yaml``, validated.

Unknown keys are errors, so a typo never falls back to a default. The defaults here are the
defaults of ``params.yaml`` (a test keeps the two equal).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hdeval.errors import ConfigError

Mode = Literal["prompt", "likelihood"]
AggregatorKind = Literal["linear", "tree", "forest", "mlp"]
DHPTask = Literal["summarization", "story", "qa", "translation"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskSpec(_Section):
    """What is being evaluated, in words the judge reads."""

    description: str = (
        "text summarization. A summary is a shorter passage that covers the key details of the "
        "original article"
    )
    source_label: str = "News article"
    output_label: str = "Summary"
    output_noun: str = "summary"
    source_noun: str = "news article"


class LLMConfig(_Section):
    """Which judge to use.

    - ``embedded``: the pinned Qwen2.5-Coder-0.5B weights (``hdeval model pull``), run locally.
    - ``transformers``: any local Hugging Face directory or GGUF file (``model_path``).
    - ``openai``: any OpenAI-compatible server (``base_url`` + ``model``); the API key is read
      from the environment variable named by ``api_key_env``, never from a file.

    ``max_context`` (local backends) lowers the context length prompts are fitted to, below the
    model's own; a server enforces its own context, and a longer prompt is a recorded failure.

    ``quantize: int8`` (local backends, CPU) runs the judge's Linear layers, the vocabulary
    projection included, with dynamic int8 weights (torch, fbgemm/x86): for CPUs without bf16,
    where ``dtype: auto`` picks fp32. Its scores differ slightly from fp32 ones, so it is part of
    the judge's identity and never shares cache entries with them (benchmarks/README.md has its
    speed and agreement).

    ``max_consecutive_failures`` and ``max_failure_share`` (openai) stop a run whose server is
    down or mostly failing: after that many items in a row got no usable answer from the server,
    or once more than that share of all items failed (after at least 20 items).
    """

    backend: Literal["embedded", "transformers", "openai"] = "embedded"
    model_path: str | None = None
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    quantize: Literal["none", "int8"] = "none"
    device: str = "cpu"
    pack_tokens: int = Field(256, ge=1)
    concurrency: int = Field(4, ge=1)
    timeout: float = Field(120.0, gt=0)
    max_retries: int = Field(5, ge=0)
    min_digit_mass: float = Field(0.5, ge=0, le=1)
    max_context: int | None = Field(None, ge=1)
    max_consecutive_failures: int = Field(8, ge=1)
    max_failure_share: float = Field(0.5, gt=0, le=1)

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
        if self.quantize != "none" and self.backend == "openai":
            raise ValueError("llm.quantize applies to the local backends, not to a server")
        if self.quantize == "int8" and self.dtype not in ("auto", "float32"):
            raise ValueError(
                f"llm.quantize: int8 runs the rest of the model in float32; set llm.dtype to "
                f"auto or float32, not {self.dtype}"
            )
        if self.quantize == "int8" and self.device != "cpu":
            raise ValueError("llm.quantize: int8 runs on the CPU only; set llm.device to cpu")
        if self.backend == "openai" and self.max_context is not None:
            raise ValueError(
                "llm.max_context applies to the local backends; the server enforces its own"
            )
        return self


class DataParams(_Section):
    """Which human labels, which documents, and how they are split."""

    path: Path = Path("data/summeval/summeval.jsonl")
    new_labels: list[Path] = Field(default_factory=list)
    aspects: list[str] = Field(
        default_factory=lambda: ["coherence", "consistency", "fluency", "relevance"]
    )
    score_range: tuple[float, float] = (1.0, 5.0)
    criteria: Path = Path("data/summeval/aspects.yaml")
    n_docs: int | None = Field(8, ge=2)
    test_fraction: float = Field(0.3, gt=0, lt=1)
    seed: int = 0


class HierarchyParams(_Section):
    """How the criteria tree grows (Algorithm 1) and how scores become features."""

    layers: int = Field(3, ge=1, le=6)
    children: int = Field(2, ge=1, le=12)
    top_k: int = Field(2, ge=0)
    modes: list[Mode] = Field(default_factory=lambda: ["prompt", "likelihood"], min_length=1)
    unconditioned: bool = True
    proxy_aggregator: AggregatorKind = "linear"
    cv_folds: int = Field(5, ge=2)
    importance_repeats: int = Field(5, ge=1)
    seed: int = 0


class AggregatorParams(_Section):
    """The final aggregator and its Optuna search."""

    kind: AggregatorKind = "linear"
    n_trials: int = Field(20, ge=0)
    cv_folds: int = Field(5, ge=2)


class EvaluateParams(_Section):
    bootstrap: int = Field(200, ge=0)


class DHPParams(_Section):
    """DHP settings (section ``dhp``).

    ``task`` picks DHP's perturbation set and the default expert weights: summarization, story
    (completion), qa or translation. ``llm_perturbations`` adds DHP's LLM-made perturbations
    (fictional entities, grammar errors, and for summaries rewriting + insertion), generated by
    ``perturber`` (default: the judge). The embedded 0.5B judge cannot make them (most come back
    unchanged and are dropped), so they are off by default; point ``perturber`` at a 7B+ instruct
    model to run them. ``weights`` replaces the task's built-in expert weights.
    """

    task: DHPTask = "summarization"
    n_texts: int = Field(5, ge=2)
    seed: int = 0
    llm_perturbations: bool = False
    perturber: LLMConfig | None = None
    probes: bool = True
    threshold: float = 1.0
    on_failure: Literal["fail", "warn"] = "warn"
    weights: dict[str, dict[str, float]] | None = None


class Params(_Section):
    """The whole of ``params.yaml``: what the pipeline and ``hdeval train`` run on."""

    data: DataParams = Field(default_factory=DataParams)
    task: TaskSpec = Field(default_factory=TaskSpec)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    hierarchy: HierarchyParams = Field(default_factory=HierarchyParams)
    aggregator: AggregatorParams = Field(default_factory=AggregatorParams)
    evaluate: EvaluateParams = Field(default_factory=EvaluateParams)
    dhp: DHPParams = Field(default_factory=DHPParams)


def load_yaml_model(path: Path, model: type[BaseModel], section: str | None = None) -> BaseModel:
    """Validate a YAML file (or one section of it) against ``model``, naming the bad field.

    A missing file is an error: a typo in a params path never falls back to the defaults.
    """
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections, got {type(data).__name__}")
    if section is not None:
        data = data.get(section) or {}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_problem(section, e) for e in exc.errors())
        raise ConfigError(f"{path}: {problems}") from exc


def load_params(path: str | Path = "params.yaml") -> Params:
    """The validated params file."""
    return load_yaml_model(Path(path), Params)  # type: ignore[return-value]


def _problem(section: str | None, error: dict) -> str:
    """``section.field: message`` of one pydantic error (a whole-section check names no field)."""
    where = ".".join(filter(None, [section, *(str(p) for p in error["loc"])]))
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
