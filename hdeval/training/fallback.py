"""A bundle is never worse than its own input: per aspect, where one of the aggregator's input
columns alone (an oriented straight line) has a higher grouped-CV Pearson r than the whole
aggregator, that aspect's output of a linear aggregator becomes that line.

Both figures come from the same document-grouped folds of the training rows, so the choice is
made by CV inside the training documents, as every other choice of model selection is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.model_selection import cross_val_predict
from sklearn.pipeline import Pipeline

from hdeval.scoring.columns import orientation
from hdeval.training.aggregators import make_aggregator
from hdeval.training.pruning import group_folds


@dataclass(frozen=True)
class Fallback:
    """One aspect's choice: the aggregator's CV r, its best single column and that column's."""

    aspect: str
    model_cv: float
    column: str
    column_cv: float

    @property
    def replaced(self) -> bool:
        """Whether the column does better than the aggregator."""
        return self.column_cv > self.model_cv

    def to_dict(self) -> dict:
        return {
            "aspect": self.aspect,
            "model_cv_pearson": self.model_cv,
            "column": self.column,
            "column_cv_pearson": self.column_cv,
            "replaced": self.replaced,
        }


def _pearson(truth: np.ndarray, predicted: np.ndarray) -> float:
    if np.std(truth) == 0 or np.std(predicted) == 0:
        return float("-inf")  # a constant prediction ranks nothing
    return float(np.corrcoef(truth, predicted)[0, 1])


def _line(x: np.ndarray, y: np.ndarray, sign: int) -> tuple[float, float]:
    """Least-squares slope and intercept of ``y`` on ``x``; a slope against ``sign`` (+1: higher
    is better, -1: lower, 0: either) is 0."""
    centred = x - x.mean()
    spread = float(centred @ centred)
    slope = float(centred @ (y - y.mean())) / spread if spread > 0 else 0.0
    if sign * slope < 0:
        slope = 0.0
    return slope, float(y.mean() - slope * x.mean())


def _impute(train: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both with missing values replaced by ``train``'s column medians (0 for an empty one)."""
    with np.errstate(all="ignore"):
        medians = np.nan_to_num(np.nanmedian(train, axis=0))
    return np.where(np.isnan(train), medians, train), np.where(np.isnan(other), medians, other)


def column_cv(
    X: pd.DataFrame, Y: pd.DataFrame, folds: Sequence[tuple[np.ndarray, np.ndarray]]
) -> pd.DataFrame:
    """Grouped-CV Pearson r of every column of ``X`` alone (an oriented line) for every aspect
    of ``Y``: columns x aspects."""
    values, targets = X.to_numpy(dtype=float), Y.to_numpy(dtype=float)
    signs = [orientation(c) for c in X.columns]
    out = np.empty((values.shape[1], targets.shape[1]))
    for j, sign in enumerate(signs):
        predicted = np.empty_like(targets)
        for train, test in folds:
            fit_x, test_x = _impute(values[train, j : j + 1], values[test, j : j + 1])
            for a in range(targets.shape[1]):
                slope, intercept = _line(fit_x[:, 0], targets[train, a], sign)
                predicted[test, a] = intercept + slope * test_x[:, 0]
        out[j] = [_pearson(targets[:, a], predicted[:, a]) for a in range(targets.shape[1])]
    return pd.DataFrame(out, index=X.columns, columns=Y.columns)


def choose_fallbacks(
    kind: str,
    params: dict,
    X: pd.DataFrame,
    Y: pd.DataFrame,
    groups: Sequence | np.ndarray,
    n_splits: int,
    seed: int,
) -> list[Fallback]:
    """Per aspect: the aggregator's grouped-CV r (``kind`` with ``params``) beside its best
    single column's, on the same folds."""
    folds = group_folds(groups, n_splits, seed)
    estimator = make_aggregator(kind, random_state=seed, **params)
    targets = Y.to_numpy(dtype=float)
    predicted = cross_val_predict(estimator, X.to_numpy(dtype=float), targets, cv=folds)
    predicted = predicted.reshape(len(targets), -1)
    singles = column_cv(X, Y, folds)
    return [
        Fallback(
            aspect,
            _pearson(targets[:, a], predicted[:, a]),
            str(singles[aspect].idxmax()),
            float(singles[aspect].max()),
        )
        for a, aspect in enumerate(Y.columns)
    ]


def apply_fallbacks(
    model: Pipeline, X: pd.DataFrame, Y: pd.DataFrame, fallbacks: Sequence[Fallback]
) -> list[str]:
    """Make each replaced aspect's output of the fitted linear ``model`` its column's line, fit
    on all rows of ``X`` in the model's own scaled space; returns the aspects replaced. The model
    keeps its kind and shape, so its export and explanations are unchanged in form."""
    final = model.named_steps["model"]
    coef = np.atleast_2d(np.asarray(final.coef_, dtype=float)).copy()
    intercept = np.atleast_1d(np.asarray(final.intercept_, dtype=float)).copy()
    scaled = model[:-1].transform(X.to_numpy(dtype=float))
    replaced = []
    for fallback in fallbacks:
        if not fallback.replaced:
            continue
        a, j = list(Y.columns).index(fallback.aspect), list(X.columns).index(fallback.column)
        targets = Y[fallback.aspect].to_numpy(dtype=float)
        slope, intercept[a] = _line(scaled[:, j], targets, orientation(fallback.column))
        coef[a] = 0.0
        coef[a, j] = slope
        replaced.append(fallback.aspect)
    one_output = np.ndim(final.coef_) == 1
    final.coef_ = coef[0] if one_output else coef
    final.intercept_ = float(intercept[0]) if one_output else intercept
    return replaced
