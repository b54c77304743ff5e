"""Aggregators: each kind learns a known multi-output signal despite NaNs; the averaged baseline."""

from __future__ import annotations

import warnings

import numpy as np
import optuna
import pandas as pd
import pytest
from sklearn.metrics import r2_score
from sklearn.pipeline import Pipeline

from hdeval.errors import ConfigError
from hdeval.training.aggregators import (
    KINDS,
    OrientedRidge,
    averaged_baseline,
    constraints,
    make_aggregator,
    search_space,
)
from hdeval.tree.criteria import CriteriaTree, Criterion

# Small forests keep the suite fast; the kinds are otherwise built with their defaults.
FAST = {"forest": {"n_estimators": 30}}


def synthetic(n: int = 300, n_features: int = 8, seed: int = 0, nan_rate: float = 0.0):
    """Criterion-like scores in [1, 5] and three outputs that depend on them (one non-linearly)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(1, 5, size=(n, n_features))
    Y = np.column_stack(
        [
            0.6 * X[:, 0] + 0.3 * X[:, 1],
            0.5 * X[:, 2] - 0.2 * X[:, 3] + 2.0,
            np.where(X[:, 4] > 3, 4.0, 2.0) + 0.2 * X[:, 0],
        ]
    ) + rng.normal(scale=0.1, size=(n, 3))
    if nan_rate:
        X[rng.random(X.shape) < nan_rate] = np.nan
    return X, Y


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("nan_rate", [0.0, 0.1])
def test_each_kind_beats_constant_on_held_out_rows(kind: str, nan_rate: float) -> None:
    X, Y = synthetic(nan_rate=nan_rate)
    train, test = slice(0, 220), slice(220, None)
    model = make_aggregator(kind, random_state=0, **FAST.get(kind, {})).fit(X[train], Y[train])
    predicted = model.predict(X[test])
    assert predicted.shape == Y[test].shape
    assert np.isfinite(predicted).all()
    constant = np.tile(Y[train].mean(axis=0), (len(Y[test]), 1))
    mse_model = ((predicted - Y[test]) ** 2).mean(axis=0)
    mse_constant = ((constant - Y[test]) ** 2).mean(axis=0)
    assert (mse_model < 0.8 * mse_constant).all(), (kind, mse_model, mse_constant)
    assert r2_score(Y[test], predicted) > 0.3


@pytest.mark.parametrize("kind", KINDS)
def test_pipeline_layout_and_determinism(kind: str) -> None:
    model = make_aggregator(kind, random_state=3)
    assert isinstance(model, Pipeline)
    names = [name for name, _ in model.steps]
    assert names[0] == "impute" and names[-1] == "model"
    assert model.named_steps["impute"].strategy == "median"
    assert ("scale" in names) == (kind in ("linear", "mlp"))
    X, Y = synthetic(n=120, nan_rate=0.05)
    a = make_aggregator(kind, random_state=3, **FAST.get(kind, {})).fit(X, Y).predict(X)
    b = make_aggregator(kind, random_state=3, **FAST.get(kind, {})).fit(X, Y).predict(X)
    np.testing.assert_array_equal(a, b)


def test_mlp_is_two_hidden_relu_layers_without_early_stopping() -> None:
    mlp = make_aggregator("mlp", alpha=0.01).named_steps["model"]
    assert len(mlp.hidden_layer_sizes) == 2
    assert mlp.activation == "relu" and mlp.early_stopping is False and mlp.alpha == 0.01


@pytest.mark.parametrize("kind", KINDS)
def test_all_nan_column_and_rows_still_predict(kind: str) -> None:
    X, Y = synthetic(n=200)
    X[:, 7] = np.nan  # a criterion whose every score failed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = make_aggregator(kind, **FAST.get(kind, {})).fit(X, Y)
    assert model[:-1].transform(X).shape == X.shape  # the empty column is kept, not dropped
    rows = np.full((2, X.shape[1]), np.nan)
    assert np.isfinite(model.predict(rows)).all()


def test_unknown_kind() -> None:
    with pytest.raises(ConfigError, match="svm"):
        make_aggregator("svm")


@pytest.mark.parametrize("kind", KINDS)
def test_search_space_builds_valid_aggregators(kind: str) -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    params = search_space(kind, trial)
    X, Y = synthetic(n=80)
    make_aggregator(kind, **params).fit(X, Y)
    rebuilt = search_space(kind, optuna.trial.FixedTrial(trial.params))
    assert rebuilt == params


def _tree() -> CriteriaTree:
    return CriteriaTree(
        [
            Criterion("coh", "Coherence", "d"),
            Criterion("flu", "Fluency", "d"),
            Criterion("coh.ord", "Order", "d", "coh", 2),
            Criterion("coh.ord.time", "Time", "d", "coh.ord", 3),
            Criterion("flu.gram", "Grammar", "d", "flu", 2),
        ]
    )


def test_averaged_baseline_means_scores_under_each_aspect() -> None:
    features = pd.DataFrame(
        {
            "prompt:coh": [1.0, 5.0],
            "prompt:coh.ord": [3.0, np.nan],
            "prompt:coh.ord.time": [5.0, 3.0],
            "prompt:flu.gram": [2.0, 4.0],
            "lik:coh": [-30.0, -10.0],
        },
        index=["a", "b"],
    )
    baseline = averaged_baseline(features, _tree(), source="prompt")
    assert list(baseline.columns) == ["coh", "flu"]
    assert list(baseline.index) == ["a", "b"]
    np.testing.assert_allclose(baseline["coh"], [3.0, 4.0])
    np.testing.assert_allclose(baseline["flu"], [2.0, 4.0])
    with pytest.raises(ConfigError, match="mix sources"):
        averaged_baseline(features, _tree())
    with pytest.raises(ConfigError, match="'flu'"):
        averaged_baseline(features[["prompt:coh"]], _tree(), source="prompt")


def test_nonnegative_linear_keeps_weights_nonnegative_and_is_not_searched() -> None:
    """Two nearly collinear criteria, the target following their difference: a signed ridge
    weighs one of them negatively; with ``aggregator.nonnegative`` no weight is below zero and
    Optuna never proposes another orientation."""
    columns = ["lik:a", "lik:b", "prompt:c"]
    assert constraints("linear", True, columns) == {"orientation": (1, 1, 1)}
    assert constraints("linear", False, columns) == {}
    assert constraints("tree", True, columns) == {}  # forests: test_monotonicity.py
    rng = np.random.default_rng(0)
    base = rng.normal(size=300)
    X = np.column_stack([base, base + 0.1 * rng.normal(size=300), rng.normal(size=300)])
    y = np.column_stack([X[:, 1] - X[:, 0] + 0.3 * X[:, 2], X[:, 2]])
    signed = make_aggregator("linear", alpha=0.01).fit(X, y).named_steps["model"].coef_
    assert (signed < -0.1).any()
    fixed = constraints("linear", True, columns)
    kept = make_aggregator("linear", alpha=0.01, **fixed).fit(X, y).named_steps["model"].coef_
    assert (kept >= 0).all()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(10):
        trial = study.ask()
        params = search_space("linear", trial, fixed)
        assert params["orientation"] == (1, 1, 1) and set(trial.params) == {"alpha"}
        assert search_space("linear", optuna.trial.FixedTrial(trial.params), fixed) == params


def test_oriented_ridge_is_ridge_with_each_weight_signed_by_its_column() -> None:
    """All columns higher-is-better: the same fit as scikit-learn's Ridge(positive=True). A
    lower-is-better column gets a weight <= 0, a column that is no quality judgement (length)
    any sign, and the bundle's ONNX export reproduces its predictions."""
    from sklearn.linear_model import Ridge

    from hdeval.export.onnx_export import to_onnx_model

    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 4))
    Y = np.column_stack([X @ [1.0, -0.5, 0.8, -1.2], X @ [0.2, 0.4, -0.3, 0.5]])
    Y += 0.1 * rng.normal(size=Y.shape)
    positive = Ridge(alpha=3.0, positive=True).fit(X, Y[:, 0])
    oriented = OrientedRidge(alpha=3.0, orientation=(1, 1, 1, 1)).fit(X, Y[:, 0])
    np.testing.assert_allclose(oriented.coef_, positive.coef_, atol=1e-3)  # lbfgs' tolerance

    def objective(model) -> float:
        residual = Y[:, 0] - model.predict(X)
        return float(residual @ residual + 3.0 * model.coef_ @ model.coef_)

    assert objective(oriented) <= objective(positive) + 1e-9  # solved exactly
    model = OrientedRidge(alpha=3.0, orientation=(1, -1, 1, 0)).fit(X, Y)
    assert model.coef_.shape == (2, 4)
    assert (model.coef_[:, 0] >= 0).all() and (model.coef_[:, 1] <= 0).all()
    assert (model.coef_[:, 2] >= 0).all() and model.coef_[0, 3] < -0.5  # free: negative
    assert model.coef_[1, 2] == 0.0  # its unconstrained fit would be negative
    pipeline = make_aggregator("linear", alpha=3.0, orientation=(1, -1, 1, 0)).fit(X, Y)
    import onnxruntime

    session = onnxruntime.InferenceSession(to_onnx_model(pipeline, 4).SerializeToString())
    onnx = session.run(None, {"features": X[:16].astype(np.float32)})[0]
    np.testing.assert_allclose(onnx, pipeline.predict(X[:16].astype(np.float32)), atol=1e-5)


def test_oriented_ridge_passes_scikit_learns_estimator_checks() -> None:
    """Every check of ``check_estimator`` that applies; ``check_array_api_input`` skips itself
    (it needs SciPy's array API mode, which the bounded least squares solver does not use)."""
    from sklearn.utils.estimator_checks import check_estimator

    results = check_estimator(OrientedRidge(), on_fail=None)
    failed = [
        (r["check_name"], str(r["exception"])[:200]) for r in results if r["status"] == "failed"
    ]
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    assert not failed and skipped <= {"check_array_api_input"}, (failed, skipped)


def test_oriented_ridge_predict_checks_it_is_fitted_and_the_input_shape() -> None:
    from sklearn.exceptions import NotFittedError

    X, y = np.random.default_rng(0).normal(size=(20, 3)), np.arange(20.0)
    with pytest.raises(NotFittedError):
        OrientedRidge(orientation=(1, 1, 0)).predict(X)
    model = OrientedRidge(orientation=(1, 1, 0)).fit(X, y)
    with pytest.raises(ValueError, match="3 features"):
        model.predict(X[:, :2])
