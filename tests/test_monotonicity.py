"""An aggregator that scores a text higher when every criterion score falls is not shipped under
``aggregator.nonnegative``: the share is measured on real scikit-learn fits, and selection skips
such a candidate even when its CV is the best."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hdeval.data import LabelledData
from hdeval.errors import ConfigError
from hdeval.params import AggregatorParams, HierarchyParams, Params
from hdeval.report.results import selection_markdown
from hdeval.training.aggregators import constraints, make_aggregator
from hdeval.training.fit import select_and_fit
from hdeval.training.monotonicity import rising_share
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.test_selection import MEANS_ONLY, grouped_samples

TREE = CriteriaTree([Criterion("coh", "coherence", "d"), Criterion("flu", "fluency", "d")])


def _data(target, n_docs: int = 12, per_doc: int = 10, seed: int = 0):
    """Likelihood features of two aspects; both aspects' human scores are ``target(features)``."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    ids = [f"r{i}" for i in range(n)]
    features = pd.DataFrame(
        rng.normal(size=(n, 3)), index=ids, columns=["lik:coh", "lik:flu", "lik:_text"]
    )
    score = target(features) + 0.05 * rng.normal(size=n)
    targets = pd.DataFrame({"coherence": score, "fluency": score}, index=ids)
    return features, LabelledData(grouped_samples(ids, per_doc), targets)


def _fit(kind: str, X: np.ndarray, y: np.ndarray, **params):
    return make_aggregator(kind, 0, **params).fit(X, y)


def test_nonnegative_ridge_never_rises_and_an_inverse_one_always_does() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    X[rng.random(X.shape) < 0.1] = np.nan  # failed scores stay missing
    y = np.nan_to_num(X) @ [1.0, 0.5, 0.2]
    assert rising_share(_fit("linear", X, y, orientation=(1, 1, 1)), X) == 0.0
    assert rising_share(_fit("linear", X, -y), X) == 1.0


def test_a_tree_on_a_non_monotone_target_rises_for_part_of_the_texts() -> None:
    X = np.random.default_rng(2).normal(size=(300, 2))
    share = rising_share(_fit("tree", X, np.abs(X[:, 0]), max_depth=4), X)
    assert 0.5 < share < 1.0  # a text left of the dip scores higher for being worse


def test_a_forest_under_nonnegative_is_monotone_per_aspect_where_a_free_one_rises() -> None:
    """scikit-learn's monotone constraints hold for one output: under ``nonnegative`` the
    forest is one monotone forest per aspect, so it never rises even on a target with a dip."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 2))
    Y = np.column_stack([np.abs(X[:, 0]) + X[:, 1], X[:, 1] - X[:, 0] ** 2])
    fixed = constraints("forest", True, ["lik:a", "lik:b"])
    assert fixed == {"monotonic_cst": [1, 1]}
    monotone = _fit("forest", X, Y, n_estimators=20, **fixed)
    assert monotone.predict(X[:5]).shape == (5, 2)
    assert rising_share(monotone, X) == 0.0
    assert rising_share(_fit("forest", X, Y, n_estimators=20), X) > 0.2
    assert constraints("forest", False, ["lik:a"]) == {}


def test_selection_ships_the_best_candidate_that_does_not_rise(tmp_path) -> None:
    """The tree wins the CV on a U-shaped target but scores texts higher when worse: under
    ``nonnegative`` the linear aggregator ships; without the check the tree does."""
    features, data = _data(lambda f: np.abs(f["lik:coh"]) + 0.3 * f["lik:flu"])

    def ship(**search):
        aggregator = AggregatorParams(
            kinds=["linear", "tree"], feature_layers=[1], n_trials=0, cv_folds=4, **search
        )
        params = Params(
            hierarchy=HierarchyParams(modes=["likelihood"], **MEANS_ONLY), aggregator=aggregator
        )
        return select_and_fit(params, TREE, features, data, tmp_path)

    checked = ship()
    top = checked.table.iloc[0]
    assert top["kind"] == "tree" and top["rising_share"] > 0
    assert checked.kind == "linear"
    assert checked.table.loc[checked.table["kind"] == "linear", "rising_share"].eq(0).all()
    assert checked.summary()["max_rising_share"] == 0.0
    text = selection_markdown(checked.summary())
    assert "rises when worse" in text and "aggregator.max_rising_share (0) allows" in text
    assert ship(max_rising_share=None).kind == "tree"
    unchecked = ship(nonnegative=False)  # the check keeps nonnegative's promise only
    assert unchecked.kind == "tree" and unchecked.summary()["max_rising_share"] is None
    # without the check, a shipped candidate that is not the CV-best was chosen for simplicity
    simpler = ship(max_rising_share=None, prefer_simpler_within=1.0)
    assert simpler.kind == "linear" and simpler.summary()["max_rising_share"] is None
    text = selection_markdown(simpler.summary())
    assert "not the CV-best" in text and "max_rising_share" not in text.split("Shipped:")[1]


def test_no_candidate_that_keeps_the_promise_is_a_clear_error(tmp_path) -> None:
    features, data = _data(lambda f: np.abs(f["lik:coh"]))
    aggregator = AggregatorParams(kinds=["tree"], n_trials=0, cv_folds=4)
    params = Params(
        hierarchy=HierarchyParams(modes=["likelihood"], **MEANS_ONLY), aggregator=aggregator
    )
    with pytest.raises(ConfigError, match="max_rising_share"):
        select_and_fit(params, TREE, features, data, tmp_path)


def test_worse_follows_each_columns_orientation() -> None:
    """A lower-is-better column (share of surprising tokens) is raised, a column that is no
    quality judgement (length) is left as it is: the oriented ridge never rises, while reading
    every column as higher-is-better finds rises that are not there."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3))
    y = X[:, 0] - X[:, 1] - 2.0 * X[:, 2]  # longer texts score lower here
    signs = (1, -1, 0)
    model = _fit("linear", X, y, orientation=signs)
    coef = model.named_steps["model"].coef_
    assert coef[0] > 0 and coef[1] < 0 and coef[2] < 0
    assert rising_share(model, X, signs) == 0.0
    assert rising_share(model, X) == 1.0  # lowering length as if it were a quality raises it
