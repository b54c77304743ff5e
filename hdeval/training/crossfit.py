"""Cross-fitted evaluation: every labelled text gets an out-of-fold prediction from a model whose
whole selection (signal families, feature set, aggregator kind, Optuna tuning, the single-column
fallback) saw only the other outer folds' documents: nested selection, as scikit-learn's
``cross_val_predict`` over a grouped search. The figure estimates the bundle that the same
selection fits on every document.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import joblib
import numpy as np
import pandas as pd

from hdeval.data import LabelledData
from hdeval.errors import ConfigError
from hdeval.params import Params
from hdeval.scales import clip_to_ranges
from hdeval.training.fit import Selected, ablation_predictions, select_and_fit
from hdeval.training.pruning import group_folds
from hdeval.tree.criteria import CriteriaTree

log = logging.getLogger(__name__)


@dataclass
class CrossFit:
    """Out-of-fold predictions of the bundle (``hdeval``) and of each ablation, and each outer
    fold's documents and selection."""

    predictions: dict[str, pd.DataFrame]
    folds: list[dict]


def outer_folds(groups: np.ndarray, n_folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The outer document-grouped folds; fewer documents than folds is an error saying how many
    are needed."""
    n_documents = len(np.unique(groups))
    if n_documents < n_folds:
        raise ConfigError(
            f"cross-fitting over {n_documents} documents: evaluate.folds={n_folds} needs at "
            f"least {n_folds} documents; use more documents or fewer folds (at least 2)"
        )
    return group_folds(groups, n_folds, seed)


def predict(
    selected: Selected, features: pd.DataFrame, aspects: list[str], ranges: dict
) -> pd.DataFrame:
    """``selected``'s predictions of ``features``' rows per aspect (its outputs' order), clipped
    to each aspect's range."""
    values = selected.model.predict(features[list(selected.features.columns)].to_numpy(float))
    return pd.DataFrame(
        clip_to_ranges(values.reshape(len(features), -1), aspects, ranges),
        index=features.index,
        columns=aspects,
    )


#: Picks an outer fold's training documents: called with the fold's number and its training
#: documents (sorted), it returns those the fold's selection and fit may use.
Chooser = Callable[[int, np.ndarray], Sequence]


def cross_fit(
    params: Params,
    tree: CriteriaTree,
    features: pd.DataFrame,
    data: LabelledData,
    choose: Chooser | None = None,
    ablations: bool = True,
) -> CrossFit:
    """Nested, document-grouped cross-fitting of :func:`select_and_fit` over ``data``'s rows
    (``evaluate.folds`` outer folds): each outer fold's selection and tuning run on the other
    folds' rows only, in a fresh Optuna storage. ``choose`` narrows each fold's training rows
    to the documents it picks (the learning curve; default: every training document), and
    ``ablations=False`` predicts the bundle only. The folds are fit side by side, one process
    per core this process may use (each fold's work is seeded and its own, so the figures are
    those of one after the other); ``choose`` is asked in fold order, here."""
    groups = data.samples.loc[features.index, "doc_id"].to_numpy()
    plans = []
    for number, (train, test) in enumerate(
        outer_folds(groups, params.evaluate.folds, params.hierarchy.seed)
    ):
        if choose is not None:
            chosen = list(choose(number, np.unique(groups[train])))
            train = train[np.isin(groups[train], chosen)]  # never a held-out document
        plans.append((number, train, test))
    jobs = min(len(plans), joblib.cpu_count())  # the cores this process may use
    fit = joblib.delayed(_fit_fold)
    fitted = joblib.Parallel(n_jobs=jobs)(
        fit(params, tree, features.iloc[train], data.subset(features.index[train]),
            features.iloc[test], ablations)
        for _, train, test in plans
    )  # fmt: skip
    parts: dict[str, list[pd.DataFrame]] = {}
    folds = []
    for (number, train, test), (tables, summary) in zip(plans, fitted, strict=True):
        for name, table in tables.items():
            parts.setdefault(name, []).append(table)
        folds.append(
            {
                "fold": number,
                "documents": sorted(set(groups[test])),
                "train_documents": len(set(groups[train])),
                "train_rows": len(train),
                "test_rows": len(test),
                **{k: v for k, v in summary.items() if k != "cv_table"},
            }
        )
        log.info("outer fold %d: %s on %s", number, summary["kind"], summary["features"])
    predictions = {
        name: pd.concat(tables).reindex(features.index) for name, tables in parts.items()
    }
    return CrossFit(predictions, folds)


def _fit_fold(
    params: Params,
    tree: CriteriaTree,
    train_x: pd.DataFrame,
    part: LabelledData,
    test_x: pd.DataFrame,
    ablations: bool,
) -> tuple[dict[str, pd.DataFrame], dict]:
    """One outer fold: the selection and fit on its training rows (``train_x``, labelled in
    ``part``), and the predictions of its ``test_x`` rows by the bundle (``hdeval``) and, with
    ``ablations``, by each ablation. Each process gets its fold's rows only."""
    seed, ranges = params.hierarchy.seed, params.data.ranges()
    with tempfile.TemporaryDirectory() as work_dir:
        selected = select_and_fit(params, tree, train_x, part, Path(work_dir))
    tables = {}
    if ablations:
        tables = ablation_predictions(
            tree, train_x, part, test_x, selected.kind, selected.params, seed, ranges,
            params.aggregator.nonnegative,
        )  # fmt: skip
    tables["hdeval"] = predict(selected, test_x, part.aspects, ranges)
    return tables, selected.summary()
