"""Cross-fitted evaluation on synthetic feature tables: nested selection leaks nothing from a
fold's held-out rows, every row gets one out-of-fold prediction, too few documents are refused,
and an aspect whose single input column beats the aggregator gets that column's line."""

from __future__ import annotations

import json

import joblib
import numpy as np
import pandas as pd
import pytest

from hdeval.data import LabelledData
from hdeval.data.splitting import load_split
from hdeval.errors import ConfigError
from hdeval.params import AggregatorParams, DataParams, EvaluateParams, HierarchyParams, Params
from hdeval.training.aggregators import make_aggregator
from hdeval.training.crossfit import cross_fit, outer_folds
from hdeval.training.fallback import Fallback, apply_fallbacks, column_cv
from hdeval.training.fit import select_and_fit
from hdeval.training.pruning import group_folds
from tests.test_selection import MEANS_ONLY, TREE, _data

PLANTED = "lik:coh_b"  # noise in _data's targets, unless planted


def _params(folds: int = 5) -> Params:
    return Params(
        data=DataParams(aspects=["coherence", "fluency"], score_range=(-50.0, 50.0)),
        hierarchy=HierarchyParams(**MEANS_ONLY),
        aggregator=AggregatorParams(kinds=["linear"], n_trials=2, cv_folds=3),
        evaluate=EvaluateParams(folds=folds),
    )


def _planted(features: pd.DataFrame, data: LabelledData, rows: pd.Index) -> LabelledData:
    """``data`` whose targets on ``rows`` only also follow the planted column, strongly."""
    targets = data.targets.copy()
    for aspect in targets.columns:
        targets.loc[rows, aspect] += 3.0 * features.loc[rows, PLANTED]
    return LabelledData(data.samples, targets)


def test_out_of_fold_predictions_cannot_use_a_signal_planted_in_their_own_fold(tmp_path) -> None:
    features, data = _data(n_docs=15)
    groups = data.samples["doc_id"].to_numpy()
    _, held = outer_folds(groups, 5, seed=0)[0]
    rows = features.index[held]
    planted = _planted(features, data, rows)
    fitted = cross_fit(_params(), TREE, features, planted)
    oof = fitted.predictions["hdeval"].loc[rows, "coherence"]
    signal = features.loc[rows, PLANTED]
    # a model that had seen these rows' labels (selection and fit on every row) uses the signal
    leaky = select_and_fit(_params(), TREE, features, planted, tmp_path)
    seen = leaky.model.predict(features.loc[rows, list(leaky.features.columns)].to_numpy())[:, 0]
    assert np.corrcoef(seen, signal)[0, 1] > 0.5
    assert abs(np.corrcoef(oof, signal)[0, 1]) < 0.3


def test_every_row_is_predicted_once_by_a_model_that_never_saw_its_document() -> None:
    features, data = _data(n_docs=10)
    fitted = cross_fit(_params(folds=4), TREE, features, data)
    assert len(fitted.folds) == 4
    documents = [set(f["documents"]) for f in fitted.folds]
    assert set().union(*documents) == set(data.samples["doc_id"])
    assert sum(len(d) for d in documents) == data.samples["doc_id"].nunique()  # disjoint
    assert sum(f["test_rows"] for f in fitted.folds) == len(features)
    for name, table in fitted.predictions.items():
        assert table.index.equals(features.index) and not table.isna().any().any(), name
    assert {"hdeval", "without_layer_3", "without_layers_2_3"} <= set(fitted.predictions)
    # the informative signal carries over to documents never seen
    oof = fitted.predictions["hdeval"]
    assert np.corrcoef(oof["fluency"], data.targets["fluency"])[0, 1] > 0.8


def test_folds_fit_side_by_side_give_the_figures_of_one_after_the_other() -> None:
    features, data = _data(n_docs=10)
    params = _params(folds=4).model_copy(
        update={"aggregator": AggregatorParams(kinds=["linear", "tree"], n_trials=3, cv_folds=3)}
    )
    side_by_side = cross_fit(params, TREE, features, data)
    with joblib.parallel_config(backend="sequential"):
        in_turn = cross_fit(params, TREE, features, data)
    assert side_by_side.folds == in_turn.folds
    for name, table in in_turn.predictions.items():
        pd.testing.assert_frame_equal(side_by_side.predictions[name], table, check_exact=True)


def test_fewer_documents_than_folds_is_refused_saying_how_many_it_needs() -> None:
    features, data = _data(n_docs=3)
    with pytest.raises(ConfigError, match=r"3 documents: evaluate.folds=5 needs at least 5"):
        cross_fit(_params(folds=5), TREE, features, data)


def test_a_single_column_that_beats_the_aggregator_replaces_it_for_its_aspect() -> None:
    features, data = _data(n_docs=12)
    columns = ["lik:coh", "lik:coh_a", "lik:flu_a"]
    X, Y = features[columns], data.targets
    groups = data.samples["doc_id"].to_numpy()
    singles = column_cv(X, Y, group_folds(groups, 3, 0))
    assert singles.loc["lik:coh_a", "fluency"] > singles.loc["lik:coh", "fluency"]
    model = make_aggregator("linear", orientation=(1, 1, 1)).fit(X.to_numpy(), Y.to_numpy())
    before = model.predict(X.to_numpy())
    replaced = apply_fallbacks(
        model,
        X,
        Y,
        [Fallback("coherence", 0.1, "lik:coh", 0.5), Fallback("fluency", 0.9, "lik:coh", 0.2)],
    )
    after = model.predict(X.to_numpy())
    assert replaced == ["coherence"]
    assert np.corrcoef(after[:, 0], X["lik:coh"])[0, 1] == pytest.approx(1.0)
    assert np.allclose(after[:, 1], before[:, 1])  # the other aspect keeps the aggregator


def test_documents_file_keeps_its_documents_and_refuses_an_unknown_one(tmp_path) -> None:
    rows = [
        {"id": f"{d}#{s}", "doc_id": d, "source": "s", "output": f"o {s}", "scores": {"a": 1.0}}
        for d in ("d1", "d2", "d3", "d4", "d5")
        for s in range(2)
    ]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    listed = tmp_path / "documents.txt"
    listed.write_text("d1\nd2\nd4\n")
    config = DataParams(path=labels, aspects=["a"], n_docs=None, documents=listed)
    train, test = load_split(config)
    assert set(train.samples["doc_id"]) | set(test.samples["doc_id"]) == {"d1", "d2", "d4"}
    listed.write_text("d1\nd9\n")
    with pytest.raises(ConfigError, match=r"data.documents .*no document 'd9'"):
        load_split(config)
