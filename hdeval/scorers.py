"""Anything that turns texts into metric scores: a trained bundle, a baseline, a perturbation test.

A :class:`TextScorer` takes a table of samples (indexed by id, with columns ``doc_id``,
``source``, ``output`` and, where a metric needs them, ``references``) and returns one column per
metric, higher meaning better. Failed scores are NaN. DHP and ``hdeval compare`` work on any
TextScorer, so HD-Eval and every baseline are measured the same way.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import pandas as pd

from hdeval.evaluator import Evaluator


@runtime_checkable
class TextScorer(Protocol):
    name: str
    metrics: list[str]

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        """Scores, indexed like ``samples``, one column per name in ``metrics``."""
        ...


class BundleScorer:
    """A trained HD-Eval bundle: predicted human scores per aspect."""

    def __init__(self, evaluator: Evaluator, name: str = "hdeval") -> None:
        self.evaluator = evaluator
        self.name = name
        self.metrics = evaluator.aspects

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        return self.evaluator.score_samples(samples, progress=False).aspects
