"""Attribution pruning (HD-Eval §2.3): which criteria deserve a deeper decomposition.

The saliency g(.) is permutation importance (Altmann et al., 2010), measured on held-out data:
for each fold of a :class:`~sklearn.model_selection.GroupKFold` (samples of one source document
never sit in both the training and the test part), an aggregator is fitted on the training part
and each feature column of the test part is shuffled in turn; the drop of the score, averaged over
the outputs (aspects), over repeats and then over folds, is the column's importance.

Feature columns may be named ``"<source>:<criterion id>"`` (for instance ``prompt:coh.ord`` and
``lik:coh.ord``): a criterion's importance is the sum over its columns, and the criteria with the
top-k importances are selected (Algorithm 1, line 17).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sklearn.inspection import permutation_importance
from sklearn.model_selection import GroupKFold

from hdeval.errors import ConfigError
from hdeval.scoring.columns import criterion_of
from hdeval.training.aggregators import make_aggregator

__all__ = [
    "criterion_importances",
    "group_folds",
    "permutation_importances",
    "select_for_decomposition",
]

Model = str | BaseEstimator | Callable[[], BaseEstimator]


def _factory(model: Model, params: Mapping[str, Any] | None, seed: int) -> Callable[[], Any]:
    """A function returning a fresh unfitted estimator for ``model``."""
    if isinstance(model, str):
        return lambda: make_aggregator(model, random_state=seed, **dict(params or {}))
    if params:
        raise ConfigError("params= applies to an aggregator kind, not to an estimator or factory")
    if isinstance(model, BaseEstimator):
        return lambda: clone(model)
    return model


def group_folds(
    groups: Sequence | np.ndarray, n_splits: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) index arrays of a shuffled, seeded GroupKFold; ``n_splits`` is capped at the
    number of distinct groups, which must be at least 2."""
    groups = np.asarray(groups)
    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ConfigError(f"grouped cross-validation needs at least 2 groups, got {n_groups}")
    splitter = GroupKFold(n_splits=min(n_splits, n_groups), shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros((len(groups), 1)), groups=groups))


def _check_shapes(X: pd.DataFrame, Y: pd.DataFrame, groups: Sequence | np.ndarray) -> None:
    if not (len(X) == len(Y) == len(groups)):
        raise ConfigError(f"X, Y and groups differ in length: {len(X)}, {len(Y)}, {len(groups)}")


def permutation_importances(
    model: Model,
    X: pd.DataFrame,
    Y: pd.DataFrame,
    groups: Sequence | np.ndarray,
    *,
    params: Mapping[str, Any] | None = None,
    n_splits: int = 5,
    seed: int = 0,
    n_repeats: int = 5,
    scoring: str = "r2",
    n_jobs: int | None = None,
) -> pd.Series:
    """Held-out permutation importance of every column of ``X``, averaged over folds.

    ``model`` is an aggregator kind (with ``params``), an unfitted estimator (cloned per fold) or a
    function returning one. ``scoring`` is a scikit-learn scorer name; "r2" and
    "neg_mean_squared_error" average uniformly over the outputs. Returns a Series indexed by the
    columns of ``X`` (in their order), named "importance".
    """
    _check_shapes(X, Y, groups)
    make = _factory(model, params, seed)
    X_values, Y_values = X.to_numpy(dtype=float), Y.to_numpy(dtype=float)
    per_fold = []
    for fold, (train, test) in enumerate(group_folds(groups, n_splits, seed)):
        estimator = make().fit(X_values[train], Y_values[train])
        result = permutation_importance(
            estimator,
            X_values[test],
            Y_values[test],
            scoring=scoring,
            n_repeats=n_repeats,
            random_state=seed + fold,
            n_jobs=n_jobs,
        )
        per_fold.append(result.importances_mean)
    return pd.Series(np.mean(per_fold, axis=0), index=X.columns, name="importance")


def criterion_importances(importances: pd.Series) -> pd.Series:
    """Sum column importances per criterion id (order of first appearance kept)."""
    ids = [criterion_of(str(c)) for c in importances.index]
    summed = importances.groupby(ids, sort=False).sum(min_count=1)
    return summed.rename("importance")


def select_for_decomposition(
    importances: pd.Series,
    candidate_columns: Iterable[str],
    top_k: int,
    min_importance: float | None = None,
) -> list[str]:
    """The criterion ids among the candidates with the ``top_k`` largest importances.

    ``importances`` is indexed by feature column (summed per criterion first) or by criterion id;
    ``candidate_columns`` are columns or criterion ids (for instance those of the newest layer).
    Ties keep the order of ``importances``; NaN ranks last. With ``min_importance`` set, criteria
    at or below it are never selected.
    """
    if top_k < 0:
        raise ConfigError(f"top_k must be >= 0, got {top_k}")
    per_criterion = criterion_importances(importances)
    wanted = {criterion_of(str(c)) for c in candidate_columns}
    missing = sorted(wanted - set(per_criterion.index))
    if missing:
        raise ConfigError(f"no importance for candidate criteria {missing}")
    ranked = [
        (position, criterion_id, value)
        for position, (criterion_id, value) in enumerate(per_criterion.items())
        if criterion_id in wanted
    ]
    ranked.sort(key=lambda item: (np.isnan(item[2]), -np.nan_to_num(item[2]), item[0]))
    chosen = [
        cid
        for _, cid, v in ranked
        if min_importance is None or (not np.isnan(v) and v > min_importance)
    ]
    return chosen[:top_k]
