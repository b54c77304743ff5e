"""Fitting, tuning and checking the aggregator on the final layer's features: model selection
and the final fit (the ``train`` stage), the ablations and their agreement (``evaluate``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from hdeval.data import (
    LabelledData,
)
from hdeval.metrics import agreement
from hdeval.params import Params
from hdeval.scales import clip_to_ranges
from hdeval.scoring.columns import (
    FREE,
    LIKELIHOOD,
    MEAN,
    PROMPT,
    UNCONDITIONED,
    check_failed_shares,
    criterion_of,
    is_text_signal,
    of_mode,
    orientation,
    source_of,
    stat_of,
)
from hdeval.scoring.family_columns import family_of
from hdeval.training.aggregators import averaged_baseline, constraints, make_aggregator
from hdeval.training.fallback import apply_fallbacks, choose_fallbacks
from hdeval.training.monotonicity import rising_share
from hdeval.training.selection import (
    FeatureSet,
    best_candidate,
    candidate_feature_sets,
    select_families,
    selection_table,
)
from hdeval.tree.criteria import CriteriaTree

log = logging.getLogger(__name__)


def fit_aggregator(
    kind: str, params: dict, features: pd.DataFrame, targets: pd.DataFrame, seed: int
):
    """Fit an aggregator of ``kind`` with ``params`` on all rows."""
    model = make_aggregator(kind, random_state=seed, **params)
    return model.fit(features.to_numpy(dtype=float), targets.to_numpy(dtype=float))


def feature_subsets(tree: CriteriaTree, columns: Sequence[str]) -> dict[str, list[str]]:
    """Feature sets of the ablations: all layers, without layer 3, layer 1 only, per mode, the
    text's own signals only, and means only.

    The text's own signals (``lik:_text`` and what comes with it) are kept in every layer set.
    With both modes, ``prompt_only`` and ``likelihood_only`` are HD-Eval on one mode's columns;
    ``unconditioned_likelihood_only`` is the mean likelihood of the text given the source alone
    (GPTScore, trained), ``text_signals_only`` every signal of the text without the tree, and
    ``means_only`` the features of a judge read as GPTScore reads it: one mean log-probability
    per likelihood (no other statistic, no source-free likelihood, PMI or length).
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
    text = [c for c in columns if is_text_signal(c)]
    if len(text) > 1 and len(text) < len(columns):
        subsets["text_signals_only"] = text
    for family in dict.fromkeys(f for c in columns if (f := family_of(c)) is not None):
        subsets[f"without_{family}"] = [c for c in columns if family_of(c) != family]
    means = [c for c in columns if stat_of(c) == MEAN and source_of(c) in (PROMPT, LIKELIHOOD)]
    means = [c for c in means if criterion_of(c) != FREE]
    if means and len(means) < len(columns):
        subsets["means_only"] = means
    return subsets


@dataclass
class Selected:
    """The shipped aggregator: what model selection chose, its tuned fit, and the CV table."""

    model: Any
    kind: str
    params: dict
    feature_set: FeatureSet
    tree: CriteriaTree
    features: pd.DataFrame
    table: pd.DataFrame
    cv_pearson: float
    rising_limit: float | None = None  # max_rising_share applied, None where the check was off
    family_steps: list[dict] = field(default_factory=list)  # select_families' decisions
    fallbacks: list[dict] = field(default_factory=list)  # per aspect: model or single column

    def summary(self) -> dict:
        """JSON-ready: the choice, its tuned CV figure, the rising limit applied, each aspect's
        single-column fallback and the whole CV table."""
        return {
            "kind": self.kind,
            "params": {k: _jsonable(v) for k, v in self.params.items()},
            "features": self.feature_set.name,
            "modes": list(self.feature_set.modes),
            "layers": self.feature_set.depth,
            "unconditioned": self.feature_set.unconditioned,
            "cv_pearson": self.cv_pearson,
            "max_rising_share": self.rising_limit,
            "families": list(self.feature_set.profile.families),
            "family_steps": self.family_steps,
            "fallbacks": self.fallbacks,
            "cv_table": self.table.to_dict(orient="records"),
        }


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def select_and_fit(
    params: Params, tree: CriteriaTree, features: pd.DataFrame, train: LabelledData, work_dir: Path
) -> Selected:
    """Model selection, tuning and the final fit, all on the training documents.

    Every candidate of ``params.aggregator`` (feature set x kind) gets the document-grouped CV
    with the kind's defaults; the CV-best (or the simplest candidate within
    ``prefer_simpler_within`` of it) is tuned with Optuna (``n_trials``, same folds) and fit on
    all rows with the tuned parameters, or with the defaults if tuning found nothing better.
    The Optuna study lives in ``work_dir`` (kept across runs), named by the kind and a
    fingerprint of the chosen features, so a killed run resumes with only the missing trials.
    Last, an aspect whose best single input column beats the aggregator by the same CV is
    given that column's line (:mod:`hdeval.training.fallback`; linear aggregators).
    """
    from hdeval.training.tuning import cv_score, data_fingerprint, tune

    check_failed_shares(features, params.hierarchy.max_failed_share)
    search, seed = params.aggregator, params.hierarchy.seed
    targets = train.targets.loc[features.index]
    groups = train.samples.loc[features.index, "doc_id"].to_numpy()
    folds = min(search.cv_folds, len(set(groups)))
    kept, family_steps = select_families(
        tree, features, targets, groups, params.hierarchy, folds, seed, search.nonnegative
    )
    hierarchy = params.hierarchy.model_copy(update={"families": kept})
    candidates = candidate_feature_sets(
        hierarchy, search, tree.depth, UNCONDITIONED in features.columns
    )
    table = selection_table(
        tree, features, targets, groups, candidates, search.kinds, folds, seed, search.nonnegative
    )
    feature_set, kind, score = best_candidate(
        table, candidates, search.prefer_simpler_within, search.rising_limit
    )
    chosen = features[feature_set.columns(tree)]
    best = constraints(kind, search.nonnegative, list(chosen.columns))
    model = fit_aggregator(kind, best, chosen, targets, seed)
    if search.n_trials:
        space = "-oriented" if best else ""  # one study per search space
        tuned = tune(
            kind,
            chosen,
            targets,
            groups,
            search.n_trials,
            seed,
            work_dir / "optuna.sqlite",
            f"{kind}{space}-{data_fingerprint(chosen, targets, groups)[:16]}",
            n_splits=folds,
            fixed=best,
        )
        tuned_score = cv_score(kind, tuned, chosen, targets, groups, folds, seed)
        if tuned_score > score:
            tuned_model = fit_aggregator(kind, tuned, chosen, targets, seed)
            if _keeps_rising_limit(tuned_model, kind, chosen, search.rising_limit):
                best, score, model = tuned, tuned_score, tuned_model
    log.info("selected %s on %s (CV Pearson %.3f)", kind, feature_set.name, score)
    fallbacks = choose_fallbacks(kind, best, chosen, targets, groups, folds, seed)
    replaced = apply_fallbacks(model, chosen, targets, fallbacks) if kind == "linear" else []
    return Selected(
        model, kind, best, feature_set, feature_set.tree(tree), chosen, table, score,
        rising_limit=search.rising_limit, family_steps=family_steps,
        fallbacks=[{**f.to_dict(), "applied": f.aspect in replaced} for f in fallbacks],
    )  # fmt: skip


def _keeps_rising_limit(model, kind: str, X: pd.DataFrame, limit: float | None) -> bool:
    """Whether the fitted ``model`` keeps ``limit`` (:func:`rising_share`; None: unchecked)."""
    if limit is None:
        return True
    share = rising_share(model, X.to_numpy(dtype=float), [orientation(c) for c in X.columns])
    if share > limit:
        log.info("tuned %s rises on %.1f %% of texts when worse: kept defaults", kind, 100 * share)
    return share <= limit


def ablation_predictions(
    tree: CriteriaTree,
    train_x: pd.DataFrame,
    train: LabelledData,
    test_x: pd.DataFrame,
    kind: str,
    params: dict,
    seed: int,
    ranges: dict[str, tuple[float, float]] | None = None,
    nonnegative: bool = False,
) -> dict[str, pd.DataFrame]:
    """Predictions of ``test_x`` by every ablation (:func:`feature_subsets`) and of averaged scores.

    ``hdeval`` (every final-layer column) uses the tuned ``params``, the ablations the
    aggregator's defaults; each under :func:`~hdeval.training.aggregators.constraints` of its own
    columns. Predictions are clipped to each aspect's
    ``ranges``, as the exported bundle's are.
    """
    predictions = {}
    for name, columns in feature_subsets(tree, list(train_x.columns)).items():
        tuned = params if name == "hdeval" else {}  # on its own columns' constraints
        settings = {**tuned, **constraints(kind, nonnegative, columns)}
        model = fit_aggregator(kind, settings, train_x[columns], train.targets, seed)
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
