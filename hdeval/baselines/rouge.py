"""ROUGE-1/2/L F1 against the references (best over several), with the ``rouge-score`` package."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hdeval.errors import ConfigError


# ====================================================================== ROUGE
def _references(value: Any) -> list[str]:
    """A sample's references as a list of non-blank strings."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    if isinstance(value, str):
        value = [value]
    return [str(r) for r in value if str(r).strip()]


class RougeScorer:
    """ROUGE F1 against the ``references`` column; NaN for a sample without references."""

    def __init__(
        self,
        rouge_types: Sequence[str] = ("rouge1", "rouge2", "rougeL"),
        use_stemmer: bool = True,
        name: str = "rouge",
    ) -> None:
        try:
            from rouge_score import rouge_scorer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError(
                "RougeScorer needs the 'rouge-score' package: pip install rouge-score"
            ) from exc
        self.name = name
        self.metrics = list(rouge_types)
        self._scorer = rouge_scorer.RougeScorer(self.metrics, use_stemmer=use_stemmer)

    def score_one(self, output: str, references: Iterable[str]) -> dict[str, float]:
        """F1 per ROUGE type, best over the references."""
        refs = _references(list(references))
        if not refs:
            return dict.fromkeys(self.metrics, float("nan"))
        result = self._scorer.score_multi(refs, output)
        return {m: float(result[m].fmeasure) for m in self.metrics}

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        if "references" not in samples.columns:
            raise ConfigError("ROUGE needs a 'references' column in the samples")
        rows = [
            self.score_one(str(output), _references(refs))
            for output, refs in zip(samples["output"], samples["references"], strict=True)
        ]
        return pd.DataFrame(rows, index=samples.index, columns=self.metrics, dtype=float)
