"""Fitting, tuning, exporting and checking the aggregator on the final layer's features.

The DVC pipeline's ``train`` and ``evaluate`` stages call these; :mod:`hdeval.end_to_end` runs the
same functions in one process for users who do not use DVC (``hdeval train``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from hdeval.aggregators import averaged_baseline
from hdeval.bundle import export_bundle
from hdeval.columns import UNCONDITIONED, criterion_of, of_mode
from hdeval.criteria import CriteriaTree
from hdeval.data import (
    LabelledData,
)
from hdeval.metrics import agreement
from hdeval.params import Params
from hdeval.scales import clip_to_ranges

log = logging.getLogger(__name__)


def fit_aggregator(
    kind: str, params: dict, features: pd.DataFrame, targets: pd.DataFrame, seed: int
):
    """Fit an aggregator of ``kind`` with ``params`` on all rows."""
    from hdeval.aggregators import make_aggregator

    model = make_aggregator(kind, random_state=seed, **params)
    return model.fit(features.to_numpy(dtype=float), targets.to_numpy(dtype=float))


def feature_subsets(tree: CriteriaTree, columns: Sequence[str]) -> dict[str, list[str]]:
    """Feature sets of the ablations: all layers, without layer 3, layer 1 only, and per mode.

    Columns not tied to a criterion (``lik:_text``) are kept in every layer set. With both modes,
    ``prompt_only`` and ``likelihood_only`` are HD-Eval on one mode's columns; with likelihood,
    ``unconditioned_likelihood_only`` is the likelihood features without the tree.
    """
    known = {c.id: c.layer for c in tree}

    def up_to(depth: int) -> list[str]:
        return [c for c in columns if known.get(criterion_of(c), 0) <= depth]

    subsets = {"hdeval": list(columns)}
    if tree.depth >= 3:
        subsets["without_layer_3"] = up_to(2)
    if tree.depth >= 2:
        subsets["without_layers_2_3"] = up_to(1)
    prompt_columns, likelihood_columns = of_mode(columns, "prompt"), of_mode(columns, "likelihood")
    if prompt_columns and likelihood_columns:
        subsets["prompt_only"] = prompt_columns
        subsets["likelihood_only"] = likelihood_columns
    if UNCONDITIONED in columns:
        subsets["unconditioned_likelihood_only"] = [UNCONDITIONED]
    return subsets


def tune_and_fit(
    params: Params, features: pd.DataFrame, train: LabelledData, work_dir: Path
) -> tuple[object, dict]:
    """Tune the aggregator with document-grouped CV, fit it on all rows.

    The Optuna study lives in ``work_dir`` (kept across runs), named by the aggregator kind and a
    fingerprint of the features, so a killed run resumes with only the missing trials and other
    features start a study of their own.
    """
    from hdeval.tuning import data_fingerprint, tune

    targets = train.targets.loc[features.index]
    groups = train.samples.loc[features.index, "doc_id"].to_numpy()
    kind, seed = params.aggregator.kind, params.hierarchy.seed
    work_dir.mkdir(parents=True, exist_ok=True)
    best: dict = {}
    if params.aggregator.n_trials:
        best = tune(
            kind,
            features,
            targets,
            groups,
            params.aggregator.n_trials,
            seed,
            work_dir / "optuna.sqlite",
            f"{kind}-{data_fingerprint(features, targets, groups)[:16]}",
            n_splits=min(params.aggregator.cv_folds, len(set(groups))),
        )
    return fit_aggregator(kind, best, features, targets, seed), best


def ablation_predictions(
    tree: CriteriaTree,
    train_x: pd.DataFrame,
    train: LabelledData,
    test_x: pd.DataFrame,
    kind: str,
    params: dict,
    seed: int,
    ranges: dict[str, tuple[float, float]] | None = None,
) -> dict[str, pd.DataFrame]:
    """Held-out predictions of every ablation (:func:`feature_subsets`) and of averaged scores.

    ``hdeval`` uses the tuned ``params``; the ablations use the aggregator's defaults. Predictions
    are clipped to each aspect's ``ranges``, as the exported bundle's are.
    """
    predictions = {}
    for name, columns in feature_subsets(tree, list(train_x.columns)).items():
        model = fit_aggregator(
            kind, params if name == "hdeval" else {}, train_x[columns], train.targets, seed
        )
        predictions[name] = pd.DataFrame(
            clip_to_ranges(
                model.predict(test_x[columns].to_numpy(dtype=float)).reshape(len(test_x), -1),
                train.aspects,
                ranges,
            ),
            index=test_x.index,
            columns=train.aspects,
        )
    prompt_columns = of_mode(test_x.columns, "prompt")
    if prompt_columns:
        averaged = averaged_baseline(test_x[prompt_columns], tree, source="prompt")
        averaged.columns = train.aspects
        predictions["averaged_scores"] = averaged
    return predictions


def agreements(
    predictions: dict[str, pd.DataFrame], test: LabelledData, n_boot: int, seed: int
) -> dict:
    """Agreement with the human scores of each named prediction table."""
    return {
        name: agreement(
            predicted.dropna(),
            test.targets,
            test.samples["doc_id"],
            test.samples["system_id"],
            n_boot,
            seed,
        )
        for name, predicted in predictions.items()
    }


def export_evaluator(
    out_dir: Path,
    model,
    tree: CriteriaTree,
    features: pd.DataFrame,
    train: LabelledData,
    params: Params,
    llm_identity: str,
    metrics: dict | None = None,
) -> Path:
    """Write the bundle of a fitted aggregator, with a parity sample and SHAP background."""
    from hdeval.explain.runtime import make_background

    return export_bundle(
        out_dir,
        model,
        tree,
        list(features.columns),
        train.aspects,
        llm_identity=llm_identity,
        task=params.task,
        modes=list(params.hierarchy.modes),
        unconditioned=params.hierarchy.unconditioned,
        training_data=train.fingerprint(),
        metrics=metrics,
        sample=features.to_numpy(dtype=float),
        background=make_background(features),
        score_ranges={a: params.data.ranges()[a] for a in train.aspects},
    )
