"""What every DHP perturbation is: a named way to degrade a text at one level and severity
(:class:`Perturbation`), and a rule that changes ``k`` units of it (:class:`CountedPerturbation`).
The rules are in :mod:`hdeval.dhp.rules` and :mod:`hdeval.dhp.content_rules`, the LLM ones in
:mod:`hdeval.dhp.llm_perturbation`."""

from __future__ import annotations

from typing import ClassVar, Literal

import pandas as pd

from hdeval.dhp.text import Level, Perturbed, Severity
from hdeval.errors import ConfigError
from hdeval.llm.judge import CachedJudge


class Perturbation:
    """A named way to degrade a text. Subclasses implement :meth:`apply`."""

    name: str
    level: Level
    severity: Severity
    method: ClassVar[Literal["rule", "llm"]] = "rule"
    #: An adversarial probe: a robust evaluator scores it *no higher* than the original.
    probe: ClassVar[bool] = False
    description: ClassVar[str] = ""

    @property
    def needs_llm(self) -> bool:
        return self.method == "llm"

    def apply(
        self,
        text: str,
        seed: int,
        judge: CachedJudge | None = None,
    ) -> Perturbed:
        raise NotImplementedError

    def perturb_row(
        self,
        row: pd.Series,
        samples: pd.DataFrame,
        seed: int,
        judge: CachedJudge | None = None,
    ) -> Perturbed:
        """Perturb ``row`` (a row of ``samples``); by default :meth:`apply` to its ``output``."""
        return self.apply(str(row["output"]), seed, judge)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def check_severity(severity: str) -> Severity:
    """``severity``, refused unless it is ``minor`` or ``major``."""
    if severity not in ("minor", "major"):
        raise ConfigError(f"severity must be 'minor' or 'major', got {severity!r}")
    return severity  # type: ignore[return-value]


class CountedPerturbation(Perturbation):
    """A rule perturbation that changes ``k`` units of the text, ``k`` set by its severity."""

    prefix: ClassVar[str]
    #: ``k`` of the minor and of the major degree when none is given.
    default_k: ClassVar[tuple[int, int]]

    def __init__(self, severity: Severity = "minor", k: int | None = None) -> None:
        self.severity = check_severity(severity)
        self.k = k if k is not None else self.default_k[severity == "major"]
        self.name = f"{self.prefix}_{severity}"
