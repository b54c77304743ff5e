"""White-box aggregators: criterion scores (features) -> human scores (one output per aspect).

HD-Eval (Appendix C.3) uses scikit-learn's linear regression, decision tree, random forest and a
shallow 3-layer ReLU MLP; "boosting" adds gradient-boosted trees (``HistGradientBoostingRegressor``
per aspect), which can keep each column's orientation as a monotone constraint, as the forest
does under the same constraint (one per aspect, :mod:`hdeval.training.monotone_trees`). Our linear
regression is ridge regression (ordinary least squares as
``alpha`` -> 0): a few hundred labelled texts and dozens of correlated criterion scores make plain
least squares fit noise. Each is wrapped in a :class:`~sklearn.pipeline.Pipeline` that first
imputes missing criterion scores with the training median (a failed LLM score arrives as NaN) and,
for the models that depend on feature scale, standardises them. All four are multi-output
natively (boosting through one model per aspect), so one pipeline predicts every aspect at once.

:func:`search_space` gives the optuna search space of each kind; :func:`averaged_baseline` is the
paper's "w/o aggregator" ablation (Table 4): the plain mean of the criterion scores under each
aspect.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import RandomForestRegressor
from sklearn.impute import SimpleImputer
from sklearn.linear_model import Ridge
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeRegressor
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from hdeval.errors import ConfigError
from hdeval.scoring.columns import criterion_of, orientation, source_of
from hdeval.training.monotone_trees import MonotoneBoosting, MonotoneForest

KINDS: tuple[str, ...] = ("linear", "tree", "forest", "mlp", "boosting")

#: Defaults of the linear aggregator: ridge penalty on standardised criterion scores.
LINEAR_DEFAULTS: dict[str, Any] = {"alpha": 10.0}

#: Defaults of the MLP: two hidden ReLU layers (input -> hidden -> hidden -> output).
MLP_DEFAULTS: dict[str, Any] = {
    "hidden_layer_sizes": (64, 32),
    "activation": "relu",
    "alpha": 1e-3,
    "learning_rate_init": 1e-3,
    "max_iter": 1000,
    "early_stopping": False,
}

#: Defaults of gradient boosting: small trees, a slow learning rate, a few hundred rows' worth.
BOOSTING_DEFAULTS: dict[str, Any] = {
    "learning_rate": 0.05,
    "max_iter": 150,
    "max_leaf_nodes": 8,
    "min_samples_leaf": 20,
    "l2_regularization": 1.0,
}


class OrientedRidge(RegressorMixin, BaseEstimator):
    """Ridge regression whose weight on each feature keeps the sign the feature's orientation
    allows: at least 0 for +1 (higher is better), at most 0 for -1 (lower is better), any for 0
    (a feature that is not a quality judgement, such as length). scikit-learn's
    ``Ridge(positive=True)`` bounds every weight alike; with every orientation +1 this is that
    model. Same objective as :class:`~sklearn.linear_model.Ridge` (squared error plus ``alpha``
    times the squared weights, unpenalised intercept), solved exactly by bounded-variable least
    squares on the centred data augmented with ``sqrt(alpha) * I``.
    """

    def __init__(self, alpha: float = 1.0, orientation: tuple[int, ...] | None = None) -> None:
        self.alpha = alpha
        self.orientation = orientation

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, features) and ``y`` (n,) or (n, outputs); ``orientation`` None
        leaves every weight free (plain ridge). ``sample_weight`` weighs rows."""
        X, Y = validate_data(self, X, y, multi_output=True, y_numeric=True)
        targets = Y.reshape(len(Y), -1)
        n_features = X.shape[1]
        signs = np.zeros(n_features) if self.orientation is None else np.asarray(self.orientation)
        if signs.shape != (n_features,):
            raise ConfigError(
                f"OrientedRidge has {signs.size} orientations for {n_features} features"
            )
        weights = _check_sample_weight(sample_weight, X)
        x_mean, y_mean = weights @ X / weights.sum(), weights @ targets / weights.sum()
        root = np.sqrt(weights)[:, None]
        design = np.vstack([(X - x_mean) * root, np.sqrt(self.alpha) * np.eye(n_features)])
        low = np.where(signs > 0, 0.0, -np.inf)
        high = np.where(signs < 0, 0.0, np.inf)
        coef = np.array(
            [
                lsq_linear(
                    design,
                    np.concatenate([column * root[:, 0], np.zeros(n_features)]),
                    bounds=(low, high),
                    method="bvls",
                ).x
                for column in (targets - y_mean).T
            ]
        )
        self.coef_ = coef if Y.ndim > 1 else coef[0]
        self.intercept_ = (
            y_mean - coef @ x_mean if Y.ndim > 1 else float(y_mean[0] - coef[0] @ x_mean)
        )
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # one weight vector per aspect
        return tags

    def predict(self, X) -> np.ndarray:
        """Predictions for ``X``; refused before :meth:`fit` or with another number of
        features than it was fit on."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return X @ np.asarray(self.coef_).T + self.intercept_


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigError(f"unknown aggregator kind {kind!r}; choose one of {', '.join(KINDS)}")


def _model(kind: str, random_state: int, params: dict[str, Any]):
    """The final estimator of a pipeline, with ``params`` on top of the defaults."""
    if kind == "linear":
        settings = {**LINEAR_DEFAULTS, **params}
        return OrientedRidge(**settings) if "orientation" in settings else Ridge(**settings)
    if kind == "tree":
        return DecisionTreeRegressor(random_state=random_state, **params)
    if kind == "forest":
        forest = MonotoneForest if "monotonic_cst" in params else RandomForestRegressor
        return forest(random_state=random_state, **params)
    if kind == "boosting":
        return MonotoneBoosting(random_state=random_state, **{**BOOSTING_DEFAULTS, **params})
    return MLPRegressor(random_state=random_state, **{**MLP_DEFAULTS, **params})


def make_aggregator(kind: str, random_state: int = 0, **params: Any) -> Pipeline:
    """An unfitted pipeline ``impute(median) [-> scale] -> model`` for an aggregator ``kind``.

    ``kind`` is one of "linear" (ridge, see :data:`LINEAR_DEFAULTS`), "tree", "forest"
    (scikit-learn defaults, as in the paper; one monotone forest per aspect when ``params``
    hold ``monotonic_cst``), "boosting" (gradient boosting per aspect, see
    :data:`BOOSTING_DEFAULTS`) or "mlp" (two hidden ReLU layers, see :data:`MLP_DEFAULTS`).
    ``params`` go to the final estimator. Tree models are scale-invariant and get no scaler.
    The steps are named "impute", "scale" and "model". A column with no observed value at all
    (a criterion whose every score failed) is kept and imputed with 0, so the feature count
    never changes.
    """
    _check_kind(kind)
    imputer = SimpleImputer(strategy="median", keep_empty_features=True)
    steps: list[tuple[str, Any]] = [("impute", imputer)]
    if kind in ("linear", "mlp"):
        steps.append(("scale", StandardScaler()))
    steps.append(("model", _model(kind, random_state, params)))
    return Pipeline(steps)


def constraints(kind: str, nonnegative: bool, columns: Sequence[str] = ()) -> dict[str, Any]:
    """Parameters fixed for every fit of ``kind`` (``aggregator.nonnegative``): a linear
    aggregator (an :class:`OrientedRidge`) whose weight on each of ``columns`` has the sign of
    the column's :func:`~hdeval.scoring.columns.orientation`, so a text scored worse on every
    criterion is never scored higher; forests and gradient boosting get the same orientations
    as monotone constraints. Single trees and MLPs take no constraint."""
    _check_kind(kind)
    if kind == "linear" and nonnegative:
        return {"orientation": tuple(orientation(c) for c in columns)}
    if kind in ("boosting", "forest") and nonnegative:
        return {"monotonic_cst": [orientation(c) for c in columns]}
    return {}


def search_space(kind: str, trial, fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sample estimator parameters for ``kind`` from an optuna ``trial`` (pass to make_aggregator).

    ``fixed`` (see :func:`constraints`) is merged in and not searched. Ranges:

    - linear: ``alpha`` 1e-3..1e3 (log).
    - tree: ``max_depth`` 2..12, ``min_samples_leaf`` 1..50 (log), ``max_features`` 0.3..1.0.
    - forest: ``n_estimators`` 50..400 (log), ``max_depth`` 2..16, ``min_samples_leaf`` 1..20
      (log), ``max_features`` 0.2..1.0.
    - mlp: hidden sizes 8..128 and 4..64 (log), ``alpha`` 1e-6..1e-1 (log),
      ``learning_rate_init`` 1e-4..1e-2 (log).
    - boosting: ``learning_rate`` 0.01..0.3, ``max_iter`` 30..400, ``max_leaf_nodes`` 3..31,
      ``min_samples_leaf`` 5..60, ``l2_regularization`` 1e-3..10 (all log).

    Works with an ``optuna.trial.FixedTrial`` too, to rebuild parameters from stored values.
    """
    _check_kind(kind)
    fixed = fixed or {}
    return {**_searched(kind, trial, fixed), **fixed}


def _searched(kind: str, trial, fixed: dict[str, Any]) -> dict[str, Any]:
    if kind == "linear":
        return {"alpha": trial.suggest_float("alpha", 1e-3, 1e3, log=True)}
    if kind == "tree":
        return {
            "max_depth": trial.suggest_int("max_depth", 2, 12),
            "min_samples_leaf": trial.suggest_int("min_samples_leaf", 1, 50, log=True),
            "max_features": trial.suggest_float("max_features", 0.3, 1.0),
        }
    if kind == "forest":
        return {
            "n_estimators": trial.suggest_int("n_estimators", 50, 400, log=True),
            "max_depth": trial.suggest_int("max_depth", 2, 16),
            "min_samples_leaf": trial.suggest_int("min_samples_leaf", 1, 20, log=True),
            "max_features": trial.suggest_float("max_features", 0.2, 1.0),
        }
    if kind == "boosting":
        return {
            "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
            "max_iter": trial.suggest_int("max_iter", 30, 400, log=True),
            "max_leaf_nodes": trial.suggest_int("max_leaf_nodes", 3, 31, log=True),
            "min_samples_leaf": trial.suggest_int("min_samples_leaf", 5, 60, log=True),
            "l2_regularization": trial.suggest_float("l2_regularization", 1e-3, 10.0, log=True),
        }
    hidden1 = trial.suggest_int("hidden1", 8, 128, log=True)
    hidden2 = trial.suggest_int("hidden2", 4, 64, log=True)
    return {
        "hidden_layer_sizes": (hidden1, hidden2),
        "alpha": trial.suggest_float("alpha", 1e-6, 1e-1, log=True),
        "learning_rate_init": trial.suggest_float("learning_rate_init", 1e-4, 1e-2, log=True),
    }


def averaged_baseline(features: pd.DataFrame, tree, source: str | None = None) -> pd.DataFrame:
    """The "averaged scores instead of the aggregator" ablation.

    For each layer-1 aspect of ``tree`` (a :class:`hdeval.tree.criteria.CriteriaTree`), the row-wise
    mean of the feature columns whose criterion is the aspect or descends from it; NaN scores are
    skipped. ``source`` keeps only columns named ``"<source>:<criterion id>"`` (scores of different
    sources, such as prompt scores and log-likelihoods, have different scales and must not be
    averaged together). Returns one column per aspect id, in tree order.
    """
    columns = [c for c in features.columns if source is None or source_of(str(c)) == source]
    sources = {source_of(str(c)) for c in columns}
    if source is None and len(sources) > 1:
        raise ConfigError(
            f"features mix sources {sorted(map(str, sources))}; pass source= to average one of them"
        )
    known = {c.id for c in tree}
    by_aspect: dict[str, list[str]] = {a.id: [] for a in tree.layer(1)}
    for column in columns:
        criterion_id = criterion_of(str(column))
        if criterion_id in known:
            by_aspect[tree.root(tree.get(criterion_id)).id].append(column)
    out = {}
    for aspect_id, cols in by_aspect.items():
        if not cols:
            raise ConfigError(f"averaged baseline: no feature column scores aspect {aspect_id!r}")
        values = features[cols].to_numpy(dtype=float)
        with warnings.catch_warnings():  # a row whose scores all failed stays NaN, quietly
            warnings.simplefilter("ignore", RuntimeWarning)
            out[aspect_id] = np.nanmean(values, axis=1)
    return pd.DataFrame(out, index=features.index)
