"""Production scoring with a trained bundle: the LLM judge + the ONNX aggregator, nothing else.

This path imports neither scikit-learn nor optuna. A bundle is refused when its criteria, its
feature order, its prompt templates or its judge do not match what is loaded now: criterion
scores from another judge or prompt are not what the aggregator learned from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from hdeval.bundle import AGGREGATOR, CRITERIA, read_card
from hdeval.cache import ResultCache
from hdeval.criteria import CriteriaTree
from hdeval.errors import ModelIntegrityError
from hdeval.llm.types import LLMBackend
from hdeval.onnx_runtime import OnnxAggregator
from hdeval.prompts import TEMPLATE_VERSION, TaskSpec
from hdeval.scoring import CriterionScorer, ScoringFailure, Truncation, feature_columns


@dataclass
class Scores:
    """Predicted human scores per aspect, with the criterion scores they came from."""

    aspects: pd.DataFrame
    criteria: pd.DataFrame
    failures: list[ScoringFailure]
    truncations: list[Truncation] = field(default_factory=list)


class Evaluator:
    """A loaded bundle bound to an LLM backend."""

    def __init__(
        self,
        path: Path,
        card: dict,
        tree: CriteriaTree,
        aggregator: OnnxAggregator,
        scorer: CriterionScorer,
    ) -> None:
        self.path, self.card, self.tree = path, card, tree
        self.aggregator, self.scorer = aggregator, scorer

    @property
    def aspects(self) -> list[str]:
        return list(self.card["aspects"])

    @property
    def feature_names(self) -> list[str]:
        return list(self.card["feature_names"])

    @classmethod
    def load(
        cls, path: str | Path, backend: LLMBackend, cache: ResultCache | None = None
    ) -> Evaluator:
        """Open a bundle and check it against itself and against ``backend``."""
        path = Path(path)
        card = read_card(path)
        tree = CriteriaTree.from_yaml(path / CRITERIA)
        if tree.fingerprint() != card["criteria_sha256"]:
            raise ModelIntegrityError(
                f"{path / CRITERIA} does not match the criteria the aggregator was trained on "
                "(criteria hash differs); retrain instead of editing a bundle"
            )
        if card["template_version"] != TEMPLATE_VERSION:
            raise ModelIntegrityError(
                f"{path} was trained with prompt templates {card['template_version']!r}, this "
                f"hdeval uses {TEMPLATE_VERSION!r}; retrain the evaluator"
            )
        if card["llm_identity"] != backend.identity:
            raise ModelIntegrityError(
                f"{path} was trained with judge {card['llm_identity']!r} but the loaded judge is "
                f"{backend.identity!r}; criterion scores of another judge are not what its "
                "aggregator learned"
            )
        expected = feature_columns(list(tree), card["modes"], card["unconditioned"])
        if expected != card["feature_names"]:
            raise ModelIntegrityError(
                f"{path}: feature order in the card does not match its criteria"
            )
        aggregator = OnnxAggregator(path / AGGREGATOR, expected_sha256=card["aggregator_sha256"])
        if aggregator.n_features != len(expected):
            raise ModelIntegrityError(
                f"{path / AGGREGATOR} takes {aggregator.n_features} features, the card lists "
                f"{len(expected)}"
            )
        task = TaskSpec.model_validate(card["task"])
        scorer = CriterionScorer(
            backend, cache or ResultCache(), task, card["modes"], card["unconditioned"]
        )
        return cls(path, card, tree, aggregator, scorer)

    def score_samples(self, samples: pd.DataFrame, progress: bool = True) -> Scores:
        """Score a table indexed by id with columns doc_id, source, output.

        A row with a failed criterion score gets NaN aspect scores (and its failures listed):
        a failure is never hidden behind an imputed feature.
        """
        run = self.scorer.score(samples, self.tree, progress=progress)
        features = run.features[self.feature_names]
        predicted = self.aggregator.predict(features.to_numpy())
        aspects = pd.DataFrame(predicted, index=features.index, columns=self.aspects)
        aspects.loc[features.isna().any(axis=1)] = float("nan")
        return Scores(aspects, features, run.failures, run.truncations)

    def score(self, source: str, text: str) -> dict:
        """One text: ``{"aspects": {...}, "criteria": {...}, "failures": [...], "truncated"}``.

        ``truncated`` is True when the prompt was cut to fit the judge's context.
        """
        samples = pd.DataFrame(
            {"doc_id": ["doc"], "source": [source], "output": [text]}, index=pd.Index(["text"])
        )
        result = self.score_samples(samples, progress=False)
        return {
            "aspects": result.aspects.iloc[0].to_dict(),
            "criteria": result.criteria.iloc[0].to_dict(),
            "failures": [f.reason for f in result.failures],
            "truncated": bool(result.truncations),
        }
