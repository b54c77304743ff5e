"""HD-Eval's iterative alignment training (Algorithm 1 of the paper).

Layer 1 holds the human aspects. Layer 2 expands every layer-1 node into at most ``children``
criteria; every later layer expands only the ``top_k`` criteria of the newest layer that a proxy
aggregator, trained on all criteria so far, finds most important by held-out permutation
importance. Every LLM call goes through the cached judge, so re-running costs nothing.
:func:`run_layer` is the one step; the DVC ``layer`` stage and :func:`train_hierarchy` both run it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence, Set
from dataclasses import asdict, dataclass

import pandas as pd

from hdeval.columns import check_failed_shares
from hdeval.criteria import CriteriaTree, apply_overrides, pinned
from hdeval.criterion_scorer import CriterionScorer, ScoringRun
from hdeval.data import LabelledData
from hdeval.decompose import decompose, undecomposed
from hdeval.errors import ConfigError
from hdeval.judge import CachedJudge
from hdeval.params import HierarchyParams, TaskSpec
from hdeval.pruning import criterion_importances, permutation_importances, select_for_decomposition
from hdeval.tuning import cv_score

log = logging.getLogger(__name__)


@dataclass
class LayerReport:
    """What the proxy aggregator of one layer saw and chose."""

    layer: int
    criteria: list[str]
    n_features: int
    cv_pearson: float
    importances: dict[str, float]
    selected: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def criteria_to_expand(
    tree: CriteriaTree, layer: int, selected: Sequence[str], keep: Set[str] = frozenset()
) -> list[str]:
    """Layer 2 expands every aspect; later layers expand what pruning selected. Criteria in
    ``keep`` (pinned by a person) are never expanded."""
    wanted = [c.id for c in tree.layer(1)] if layer == 2 else list(selected)
    return [c for c in wanted if c not in keep]


def proxy_report(
    features: pd.DataFrame,
    data: LabelledData,
    tree: CriteriaTree,
    layer: int,
    params: HierarchyParams,
) -> LayerReport:
    """Fit the proxy aggregator on all features, rank criteria, pick the next ones to expand."""
    targets = data.targets.loc[features.index]
    groups = data.samples.loc[features.index, "doc_id"].to_numpy()
    folds = min(params.cv_folds, len(set(groups)))
    pearson = cv_score(params.proxy_aggregator, {}, features, targets, groups, folds, params.seed)
    importances = permutation_importances(
        params.proxy_aggregator,
        features,
        targets,
        groups,
        n_splits=folds,
        seed=params.seed,
        n_repeats=params.importance_repeats,
    )
    newest = [c.id for c in tree.layer(layer)]
    candidates = [c for c in newest if c not in pinned(params.overrides)]
    selected = (
        select_for_decomposition(importances, candidates, params.top_k)
        if layer < params.layers and candidates
        else []
    )
    per_criterion = criterion_importances(importances)
    log.info(
        "layer %d: %d features, CV Pearson %.3f, next: %s",
        layer,
        features.shape[1],
        pearson,
        selected,
    )
    return LayerReport(
        layer=layer,
        criteria=newest,
        n_features=features.shape[1],
        cv_pearson=pearson,
        importances={str(k): float(v) for k, v in per_criterion.items()},
        selected=selected,
    )


def usable_modes(params: HierarchyParams, problem: str | None) -> tuple[HierarchyParams, dict]:
    """``params`` without the likelihood mode when ``problem`` says the judge has none, and
    ``{what was left out: why}``; an error when no mode is left."""
    if problem is None or "likelihood" not in params.modes:
        return params, {}
    modes = [m for m in params.modes if m != "likelihood"]
    if not modes:
        raise ConfigError(
            f"hierarchy.modes is [likelihood] but the judge cannot score likelihoods: {problem}"
        )
    why = f"the judge cannot score likelihoods: {problem}"
    return params.model_copy(update={"modes": modes}), {"likelihood features": why}


@dataclass
class Layer:
    """One iteration of Algorithm 1: the grown tree, its features, the proxy's report."""

    tree: CriteriaTree
    run: ScoringRun
    report: LayerReport
    not_decomposed: list[str]


def run_layer(
    number: int,
    tree: CriteriaTree,
    selected: Sequence[str],
    train: LabelledData,
    judge: CachedJudge,
    task: TaskSpec,
    params: HierarchyParams,
    progress: bool = True,
    decomposer: CachedJudge | None = None,
) -> Layer:
    """Layer ``number`` of Algorithm 1: grow ``tree`` (the previous layer's, or the aspects for
    layer 1) by decomposing what ``selected`` names (a person's pins excepted), apply the
    person's overrides (``params.overrides``), score the training texts on every
    criterion, fit the proxy aggregator and pick what the next layer decomposes.

    ``decomposer`` writes the criteria (default: ``judge``, which scores every text)."""
    expand = criteria_to_expand(tree, number, selected, pinned(params.overrides))
    if number > 1:
        writer = judge if decomposer is None else decomposer
        tree = decompose(tree, expand, writer, task.description, params.children)
    leaves = undecomposed(tree, expand) if number > 1 else []
    final = number == params.layers
    tree = apply_overrides(tree, params.overrides, decomposed=expand, final=final)
    scorer = CriterionScorer(judge, task, params.modes, params.unconditioned)
    run = scorer.score(train.samples, tree, progress=progress)
    check_failed_shares(run.features, params.max_failed_share)
    report = proxy_report(run.features, train, tree, number, params)
    return Layer(tree, run, report, leaves)


def train_hierarchy(
    tree: CriteriaTree,
    train: LabelledData,
    judge: CachedJudge,
    task: TaskSpec,
    params: HierarchyParams,
    progress: bool = True,
    decomposer: CachedJudge | None = None,
) -> list[Layer]:
    """Algorithm 1 end to end: every layer in turn, each growing the one before."""
    layers: list[Layer] = []
    selected: list[str] = []
    for number in range(1, params.layers + 1):
        layer = run_layer(number, tree, selected, train, judge, task, params, progress, decomposer)
        layers.append(layer)
        tree, selected = layer.tree, layer.report.selected
    return layers
