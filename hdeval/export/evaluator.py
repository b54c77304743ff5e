"""Production scoring with a trained bundle: the LLM judge + the ONNX aggregator, nothing else.

This path imports neither scikit-learn nor optuna. A bundle is refused when its card was edited,
when its criteria, its feature order, its aspect names, its prompt templates or its judge do not
match what is loaded now: criterion scores from another judge or prompt are not what the
aggregator learned from. A judge that differs only in precision (a bundle trained in bfloat16,
scored in float32) is a warning, or a refusal with ``strict_precision``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hdeval.errors import DataValidationError, ModelIntegrityError
from hdeval.export.bundle import AGGREGATOR, CRITERIA, read_card, split_precision
from hdeval.export.intervals import bounds, system_sds
from hdeval.export.onnx_runtime import OnnxAggregator
from hdeval.llm.judge import CachedJudge
from hdeval.params import TaskSpec
from hdeval.scales import clip_to_ranges
from hdeval.scoring.columns import Profile, feature_columns
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.family_columns import reads_references
from hdeval.scoring.prompts import TEMPLATE_VERSION
from hdeval.scoring.run import Sample, ScoringFailure, Truncation, samples_of
from hdeval.tree.criteria import CriteriaTree

log = logging.getLogger(__name__)


@dataclass
class Scores:
    """Predicted human scores per aspect (``aspect_values``, one row per id) with the criterion
    scores they came from (``criterion_values``); NaN where a score failed. ``intervals`` (rows x
    aspects x (low, high)) holds each score's prediction interval at ``interval_level``, None for
    a bundle trained without intervals."""

    ids: list[str]
    aspect_names: list[str]
    aspect_values: np.ndarray
    criterion_names: list[str]
    criterion_values: np.ndarray
    failures: list[ScoringFailure]
    truncations: list[Truncation] = field(default_factory=list)
    intervals: np.ndarray | None = None
    interval_level: float | None = None
    system_sd: dict[str, float | None] | None = None  # per aspect: the error of a system's mean

    @property
    def aspects(self):
        """Aspect scores as a pandas DataFrame indexed by id."""
        return _frame(self.aspect_values, self.ids, self.aspect_names)

    @property
    def criteria(self):
        """Criterion scores as a pandas DataFrame indexed by id."""
        return _frame(self.criterion_values, self.ids, self.criterion_names)

    def row(self, i: int) -> dict[str, dict]:
        """Row ``i`` as JSON-ready dicts (a failed score is None); with ``intervals``, each
        aspect's ``[low, high]`` (None where the score failed)."""
        row: dict[str, dict] = {
            "aspects": dict(zip(self.aspect_names, _finite(self.aspect_values[i]), strict=True)),
            "criteria": dict(
                zip(self.criterion_names, _finite(self.criterion_values[i]), strict=True)
            ),
        }
        if self.intervals is not None:
            row["intervals"] = {
                aspect: None if np.isnan(pair).any() else [float(pair[0]), float(pair[1])]
                for aspect, pair in zip(self.aspect_names, self.intervals[i], strict=True)
            }
        return row


def _frame(values: np.ndarray, ids: list[str], columns: list[str]):
    import pandas as pd

    return pd.DataFrame(values, index=pd.Index(ids), columns=columns)


def _finite(values: np.ndarray) -> list[float | None]:
    """JSON-safe values: NaN (a failed score) becomes None."""
    return [float(v) if np.isfinite(v) else None for v in values]


@dataclass(frozen=True)
class Bundle:
    """A bundle checked against itself (card, criteria, aggregator), not yet bound to a judge."""

    path: Path
    card: dict
    tree: CriteriaTree
    aggregator: OnnxAggregator


def open_bundle(path: str | Path) -> Bundle:
    """Open a bundle and check it against itself; no judge is needed (nor loaded) for this."""
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
    expected = feature_columns(
        [c.id for c in tree], card["modes"], card["unconditioned"], profile_of(card)
    )
    if expected != card["feature_names"]:
        unknown = [name for name in card["feature_names"] if name not in expected]
        if unknown:
            raise ModelIntegrityError(
                f"{path} reads feature columns this hdeval does not compute ({unknown}; it "
                f"computes {expected}); retrain the evaluator"
            )
        raise ModelIntegrityError(f"{path}: feature order in the card does not match its criteria")
    aggregator = OnnxAggregator(path / AGGREGATOR, expected_sha256=card["aggregator_sha256"])
    if aggregator.n_features != len(expected):
        raise ModelIntegrityError(
            f"{path / AGGREGATOR} takes {aggregator.n_features} features, the card lists "
            f"{len(expected)}"
        )
    if aggregator.n_outputs not in (None, len(card["aspects"])):
        raise ModelIntegrityError(
            f"{path / AGGREGATOR} predicts {aggregator.n_outputs} aspects, the card lists "
            f"{len(card['aspects'])}"
        )
    stored = {"aspects": aggregator.output_names, "feature_names": aggregator.feature_names}
    for key, names in stored.items():
        if names != card[key]:
            raise ModelIntegrityError(
                f"{path}: the card's {key} {card[key]} are not the aggregator's {names}; "
                "retrain instead of editing a bundle"
            )
    return Bundle(path, card, tree, aggregator)


def profile_of(card: dict) -> Profile:
    """How the bundle's likelihoods become columns, as its card records it."""
    return Profile(
        tuple(card["likelihood_stats"]),
        card["source_free"],
        card["length"],
        tuple(card.get("families", ())),
        card.get("end_of_text", False),
    )


def check_references(path: Path, card: dict, samples: Sequence[Sample]) -> None:
    """Refuse rows without references when the bundle reads them (the references family)."""
    if not reads_references(card.get("families", ())):
        return
    missing = [s.id for s in samples if not any(r.strip() for r in s.references)]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise DataValidationError(
            f"row {missing[0]!r}{more} has no references: {path} was trained with the "
            "references family and reads a reference of every text (add 'references' to the "
            "rows)"
        )


def check_judge(bundle: Bundle, judge: CachedJudge, strict_precision: bool = False) -> None:
    """Refuse a judge other than the bundle's; another precision warns (strict: refuses)."""
    card, path = bundle.card, bundle.path
    model, precision = split_precision(judge.identity)
    if card["llm_identity"] != model:
        raise ModelIntegrityError(
            f"{path} was trained with judge {card['llm_identity']!r} but the loaded judge is "
            f"{model!r}; criterion scores of another judge are not what its aggregator learned"
        )
    if card["llm_precision"] != precision:
        message = (
            f"{path} was trained with the judge in {card['llm_precision']}, the loaded judge "
            f"runs in {precision}: criterion scores move slightly (about 0.02 on the 1-5 scale "
            f"between bfloat16 and float32); set llm.dtype: {card['llm_precision']} to match"
        )
        if strict_precision:
            raise ModelIntegrityError(f"{message} (refused: llm.strict_precision is on)")
        log.warning(message)


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

    @property
    def reads_references(self) -> bool:
        """Whether it reads every text's references (trained with the references family)."""
        return reads_references(self.card.get("families", ()))

    @classmethod
    def load(
        cls, path: str | Path | Bundle, judge: CachedJudge, strict_precision: bool = False
    ) -> Evaluator:
        """Open a bundle (or take an :func:`open_bundle` one) and check it against ``judge``."""
        bundle = path if isinstance(path, Bundle) else open_bundle(path)
        check_judge(bundle, judge, strict_precision)
        card = bundle.card
        task = TaskSpec.model_validate(card["task"])
        scorer = CriterionScorer(
            judge, task, card["modes"], card["unconditioned"], profile_of(card)
        )
        return cls(bundle.path, card, bundle.tree, bundle.aggregator, scorer)

    def score_samples(self, samples: Any, progress: bool = True) -> Scores:
        """Score samples: a list of :class:`~hdeval.scoring.criterion_scorer.Sample` or a table
        indexed
        by id with columns doc_id, source, output.

        A row with a failed criterion score gets NaN aspect scores (and its failures listed):
        a failure is never hidden behind an imputed feature.
        """
        rows = samples_of(samples)
        check_references(self.path, self.card, rows)
        run = self.scorer.score(rows, self.tree, progress=progress)
        order = [run.columns.index(name) for name in self.feature_names]
        features = run.values[:, order]
        predicted = self.aggregator.predict(features) if len(rows) else np.empty((0, 0))
        predicted = np.asarray(predicted, dtype=float).reshape(len(rows), len(self.aspects))
        ranges = self.card.get("score_ranges")
        predicted = clip_to_ranges(predicted, self.aspects, ranges)
        predicted[np.isnan(features).any(axis=1)] = np.nan
        intervals = self.card.get("intervals")
        return Scores(
            run.ids,
            self.aspects,
            predicted,
            self.feature_names,
            features,
            run.failures,
            run.truncations,
            None if intervals is None else bounds(intervals, self.aspects, predicted, ranges),
            None if intervals is None else float(intervals["level"]),
            None if intervals is None else system_sds(intervals, self.aspects),
        )

    def score(self, source: str, text: str, references: Sequence[str] = ()) -> dict:
        """One text: ``{"aspects": {...}, "criteria": {...}, "failures": [...], "truncated"}``,
        and ``"intervals": {aspect: [low, high]}`` where the bundle has them.

        A failed score is None; ``truncated`` is True when the prompt was cut to fit the
        judge's context. ``references`` are needed by a bundle trained with them.
        """
        sample = Sample("text", "doc", source, text, tuple(references))
        result = self.score_samples([sample], progress=False)
        return {
            **result.row(0),
            "failures": [f.reason for f in result.failures],
            "truncated": bool(result.truncations),
        }
