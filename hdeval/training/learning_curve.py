"""The cross-fitted learning curve: the bundle's cross-fitted r against the number of training
documents. Each draw re-runs :func:`~hdeval.training.crossfit.cross_fit` over the same outer
folds, every fold's nested selection and fit narrowed to ``size`` documents drawn among that
fold's training documents; its held-out rows are predicted as in ``evaluate``, so the largest
size (every fold's whole training set) reproduces ``evaluate``'s figure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from hdeval.data import LabelledData
from hdeval.params import Params
from hdeval.training.crossfit import Chooser, cross_fit, outer_folds
from hdeval.training.fit import agreements
from hdeval.tree.criteria import CriteriaTree

log = logging.getLogger(__name__)

#: The tidy table's columns and their types: one row per size and draw.
COLUMNS = {"documents": int, "texts": float, "draw": int, "pearson": float, "ci_low": float,
           "ci_high": float}  # fmt: skip


def learning_curve(
    params: Params,
    tree: CriteriaTree,
    features: pd.DataFrame,
    data: LabelledData,
    sizes: Sequence[int],
    draws: int,
    seed: int = 0,
) -> pd.DataFrame:
    """Rows of (documents, texts, draw, pearson, ci_low, ci_high): for each size and draw, the
    aspect-averaged dataset Pearson r of the out-of-fold predictions over all rows, with its
    document-bootstrap CI (``evaluate.bootstrap`` draws), as ``evaluate``'s headline; ``texts``
    is the training rows per fold, averaged over folds. A draw's documents come from a numpy
    generator seeded by (``seed``, size), so a size draws the same documents whichever other
    sizes are asked for. A size above some fold's training documents is skipped; one where
    every fold trains on all its documents is drawn once."""
    groups = data.samples.loc[features.index, "doc_id"].to_numpy()
    folds = outer_folds(groups, params.evaluate.folds, params.hierarchy.seed)
    available = [len(np.unique(groups[train])) for train, _ in folds]
    rows = []
    for size in sizes:
        if size > min(available):
            log.warning("%d documents skipped: a fold trains on %d", size, min(available))
            continue
        choose = _drawing(np.random.default_rng([seed, size]), size)
        for draw in range(1 if size == max(available) else draws):
            fitted = cross_fit(params, tree, features, data, choose, ablations=False)
            figure = agreements(
                {"hdeval": fitted.predictions["hdeval"]}, data, params.evaluate.bootstrap,
                params.hierarchy.seed,
            )["hdeval"]["average"]["dataset"]  # fmt: skip
            low, high = figure.get("pearson_ci", (np.nan, np.nan))
            texts = float(np.mean([f["train_rows"] for f in fitted.folds]))
            rows.append(
                {"documents": size, "texts": texts, "draw": draw, "pearson": figure["pearson"],
                 "ci_low": low, "ci_high": high}
            )  # fmt: skip
            log.info("%d documents, draw %d: r %.3f", size, draw, figure["pearson"])
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype(COLUMNS)


def _drawing(rng: np.random.Generator, size: int) -> Chooser:
    """A fold's ``size`` training documents, drawn without replacement."""
    return lambda _, documents: list(rng.choice(documents, size, replace=False))


def summarise(table: pd.DataFrame, folds: int) -> pd.DataFrame:
    """A row per size of :func:`learning_curve`'s table: the mean r and its range over draws,
    the first draw's CI, the number of draws and of outer ``folds`` (what
    ``docs/learning_curve.csv`` holds)."""
    summary = table.groupby("documents").agg(
        texts=("texts", "mean"), mean=("pearson", "mean"), low=("pearson", "min"),
        high=("pearson", "max"), ci_low=("ci_low", "first"), ci_high=("ci_high", "first"),
        draws=("draw", "count"),
    )  # fmt: skip
    return summary.assign(folds=folds).reset_index()
