"""Tree ensembles fitted one output (aspect) at a time, each monotone in every column as
``monotonic_cst`` says (+1 rising, -1 falling, 0 free): scikit-learn's monotone constraints hold
for a single output only. With ``aggregator.nonnegative`` they carry each column's orientation,
so a text scored lower on every criterion is never scored higher, as with the oriented ridge."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.utils.validation import check_is_fitted, validate_data


class PerOutput(RegressorMixin, BaseEstimator):
    """One single-output ensemble per output; subclasses say which (:meth:`_estimator`)."""

    def _estimator(self, settings: dict):
        raise NotImplementedError

    def fit(self, X, y):
        X, Y = validate_data(self, X, y, multi_output=True, y_numeric=True)
        targets = Y.reshape(len(Y), -1)
        settings = self.get_params()
        self.estimators_ = [self._estimator(settings).fit(X, column) for column in targets.T]
        self.n_outputs_ = targets.shape[1]
        self._single = Y.ndim == 1
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def predict(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        out = np.column_stack([e.predict(X) for e in self.estimators_])
        return out[:, 0] if self._single else out


class MonotoneBoosting(PerOutput):
    """Gradient-boosted trees per output (scikit-learn's ``HistGradientBoostingRegressor``)."""

    def __init__(
        self,
        learning_rate: float = 0.05,
        max_iter: int = 150,
        max_leaf_nodes: int = 8,
        min_samples_leaf: int = 20,
        l2_regularization: float = 1.0,
        monotonic_cst: Sequence[int] | None = None,
        random_state: int = 0,
    ) -> None:
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.monotonic_cst = monotonic_cst
        self.random_state = random_state

    def _estimator(self, settings: dict):
        return HistGradientBoostingRegressor(early_stopping=False, **settings)


class MonotoneForest(PerOutput):
    """A random forest per output (scikit-learn's ``RandomForestRegressor``): every tree is
    monotone, so their mean is."""

    def __init__(
        self,
        n_estimators: int = 100,
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        max_features: float | str | None = 1.0,
        monotonic_cst: Sequence[int] | None = None,
        random_state: int = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.max_features = max_features
        self.monotonic_cst = monotonic_cst
        self.random_state = random_state

    def _estimator(self, settings: dict):
        return RandomForestRegressor(**settings)
