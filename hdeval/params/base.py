"""What every params section shares: strict validation, retired keys, reading a YAML file."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from hdeval.errors import ConfigError
from hdeval.invalid_unicode import unicode_problems

Mode = Literal["prompt", "likelihood"]
FeatureModes = Literal["prompt", "likelihood", "both"]
AggregatorKind = Literal["linear", "tree", "forest", "mlp", "boosting"]
Family = Literal[
    "coverage", "sentences", "repetition", "slots", "wording", "dialogue", "references"
]
#: Statistics of a text's token log-probabilities (see :mod:`hdeval.scoring.likelihood_stats`).
LikelihoodStat = Literal["mean", "min", "p10", "p25", "surprise"]
DHPTask = Literal["summarization", "story", "qa", "translation", "dialogue", "data_to_text"]


class Section(BaseModel):
    """A params section: unknown keys are errors, and each field's docstring is its
    description (docs/configuration.md is generated from them)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


def refuse_retired(
    data: object, section: str, replaced: dict[str, str | None], why: str = ""
) -> object:
    """``data`` as it is, or an error naming each retired key of ``section`` and its successor
    (None: it has none)."""
    if isinstance(data, dict) and (old := [k for k in replaced if k in data]):
        moves = "; ".join(
            f"{section}.{k} is no longer used"
            if replaced[k] is None
            else f"{section}.{k} was replaced by {replaced[k]}"
            for k in old
        )
        raise ValueError(moves + why)
    return data


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
    if problem := unicode_problems(data):
        raise ConfigError(f"{path}: {problem}")
    if section is not None:
        data = data.get(section) or {}
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
