"""Attribution pruning: held-out permutation importance finds the columns that matter."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression

import hdeval.training.pruning as pruning
from hdeval.errors import ConfigError
from hdeval.scoring.columns import criterion_of
from hdeval.training.pruning import (
    criterion_importances,
    group_folds,
    permutation_importances,
    select_for_decomposition,
)

COLUMNS = ["prompt:a", "prompt:b", "prompt:c", "prompt:d", "prompt:e", "prompt:f"]


def synthetic(n_docs: int = 30, per_doc: int = 8, seed: int = 0):
    """Six criterion scores; the two outputs depend only on columns b and e."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    X = pd.DataFrame(rng.uniform(1, 5, size=(n, 6)), columns=COLUMNS)
    noise = rng.normal(scale=0.1, size=(n, 2))
    Y = pd.DataFrame(
        {
            "coherence": 0.8 * X["prompt:b"] + 0.4 * X["prompt:e"] + noise[:, 0],
            "fluency": 0.3 * X["prompt:b"] + 0.9 * X["prompt:e"] + noise[:, 1],
        }
    )
    groups = np.repeat([f"doc{i}" for i in range(n_docs)], per_doc)
    return X, Y, groups


@pytest.mark.parametrize(
    ("model", "params"),
    [("linear", None), ("forest", {"n_estimators": 25}), (LinearRegression(), None)],
)
def test_only_informative_columns_rank_top(model, params) -> None:
    X, Y, groups = synthetic()
    importances = permutation_importances(
        model, X, Y, groups, params=params, n_splits=3, seed=0, n_repeats=3
    )
    assert list(importances.index) == COLUMNS
    assert set(importances.nlargest(2).index) == {"prompt:b", "prompt:e"}
    noise_columns = importances.drop(["prompt:b", "prompt:e"])
    assert importances[["prompt:b", "prompt:e"]].min() > 10 * noise_columns.abs().max()
    assert sorted(select_for_decomposition(importances, COLUMNS, top_k=2)) == ["b", "e"]


def test_mse_scoring_and_factory_agree_on_ranking() -> None:
    X, Y, groups = synthetic(seed=1)
    importances = permutation_importances(
        lambda: LinearRegression(), X, Y, groups, scoring="neg_mean_squared_error", n_splits=4
    )
    assert set(importances.nlargest(2).index) == {"prompt:b", "prompt:e"}


def test_folds_never_share_a_group() -> None:
    _, _, groups = synthetic(n_docs=11, per_doc=3)
    folds = group_folds(groups, n_splits=5, seed=7)
    assert len(folds) == 5
    seen_test = []
    for train, test in folds:
        assert not set(groups[train]) & set(groups[test])
        seen_test.extend(test)
    assert sorted(seen_test) == list(range(len(groups)))  # every row held out exactly once
    assert [t.tolist() for _, t in folds] == [t.tolist() for _, t in group_folds(groups, 5, 7)]


def test_importances_use_only_held_out_folds(monkeypatch) -> None:
    X, Y, groups = synthetic(n_docs=6, per_doc=4)
    calls = []
    real = pruning.permutation_importance

    def spy(estimator, X_test, Y_test, **kwargs):
        calls.append(X_test.shape[0])
        return real(estimator, X_test, Y_test, **kwargs)

    monkeypatch.setattr(pruning, "permutation_importance", spy)
    permutation_importances("linear", X, Y, groups, n_splits=3, n_repeats=2)
    assert len(calls) == 3 and sum(calls) == len(X)  # each row scored once, in its test fold


def test_groups_are_required() -> None:
    X, Y, _ = synthetic(n_docs=2, per_doc=4)
    with pytest.raises(ConfigError, match="at least 2 groups"):
        permutation_importances("linear", X, Y, ["same"] * len(X))
    with pytest.raises(ConfigError, match="differ in length"):
        permutation_importances("linear", X, Y, ["g"] * 3)


def test_criterion_mapping_and_summing() -> None:
    assert criterion_of("lik:coh.ord") == "coh.ord"
    importances = pd.Series({"prompt:x": 0.1, "lik:y": 0.2, "lik:x": 0.15, "prompt:y": 0.01})
    summed = criterion_importances(importances)
    assert list(summed.index) == ["x", "y"]
    np.testing.assert_allclose(summed.to_numpy(), [0.25, 0.21])
    assert select_for_decomposition(importances, ["prompt:y", "lik:x"], top_k=1) == ["x"]


def test_selection_ties_nan_threshold_and_candidates() -> None:
    importances = pd.Series({"p:a": 0.2, "p:b": 0.5, "p:c": 0.2, "p:d": np.nan, "p:e": -0.1})
    everything = list(importances.index)
    assert select_for_decomposition(importances, everything, top_k=3) == ["b", "a", "c"]
    assert select_for_decomposition(importances, everything, top_k=5) == ["b", "a", "c", "e", "d"]
    assert select_for_decomposition(importances, ["c", "a"], top_k=1) == ["a"]
    assert select_for_decomposition(importances, everything, 5, min_importance=0.0) == [
        "b",
        "a",
        "c",
    ]
    assert select_for_decomposition(importances, everything, top_k=0) == []
    with pytest.raises(ConfigError, match="zzz"):
        select_for_decomposition(importances, ["zzz"], top_k=1)
