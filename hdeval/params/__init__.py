"""Every params model: the sections of ``params.yaml``, validated.

Unknown keys are errors, so a typo never falls back to a default. The defaults here are the
defaults of ``params.yaml`` (a test keeps the two equal), and docs/configuration.md is
generated from these models (:mod:`hdeval.params.reference`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from hdeval.params.base import (
    AggregatorKind,
    DHPTask,
    Family,
    FeatureModes,
    LikelihoodStat,
    Mode,
    Section,
    load_yaml_model,
)
from hdeval.params.data import DataParams, TaskSpec
from hdeval.params.evaluation import (
    GATE_BASELINES,
    AcceptanceParams,
    DHPParams,
    EvaluateParams,
    PeerParams,
)
from hdeval.params.judge import EMBEDDED_MODELS, LLMConfig
from hdeval.params.training import AggregatorParams, CriterionOverride, HierarchyParams


class Params(Section):
    """The whole of ``params.yaml``: what the pipeline and ``hdeval train`` run on."""

    data: DataParams = Field(default_factory=DataParams)
    task: TaskSpec = Field(default_factory=TaskSpec)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    hierarchy: HierarchyParams = Field(default_factory=HierarchyParams)
    aggregator: AggregatorParams = Field(default_factory=AggregatorParams)
    evaluate: EvaluateParams = Field(default_factory=EvaluateParams)
    dhp: DHPParams = Field(default_factory=DHPParams)
    acceptance: AcceptanceParams = Field(default_factory=AcceptanceParams)


def load_params(path: str | Path = "params.yaml") -> Params:
    """The validated params file."""
    return load_yaml_model(Path(path), Params)  # type: ignore[return-value]


__all__ = [
    "EMBEDDED_MODELS",
    "GATE_BASELINES",
    "AcceptanceParams",
    "AggregatorKind",
    "AggregatorParams",
    "CriterionOverride",
    "DHPParams",
    "DHPTask",
    "DataParams",
    "EvaluateParams",
    "Family",
    "FeatureModes",
    "HierarchyParams",
    "LLMConfig",
    "LikelihoodStat",
    "Mode",
    "Params",
    "PeerParams",
    "TaskSpec",
    "load_params",
    "load_yaml_model",
]
