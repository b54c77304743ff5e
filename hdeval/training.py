"""HD-Eval's iterative alignment training (Algorithm 1 of the paper).

Layer 1 holds the human aspects. Layer 2 expands every layer-1 node into at most ``children``
criteria; every later layer expands only the ``top_k`` criteria of the newest layer that a proxy
aggregator, trained on all criteria so far, finds most important by held-out permutation
importance. Every LLM call goes through the result cache, so re-running costs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from hdeval.cache import ResultCache
from hdeval.criteria import CriteriaTree
from hdeval.data import LabelledData
from hdeval.decompose import decompose
from hdeval.llm.types import LLMBackend
from hdeval.pruning import criterion_importances, permutation_importances, select_for_decomposition
from hdeval.scoring import UNCONDITIONED, CriterionScorer, Mode, ScoringRun
from hdeval.tuning import cv_score

log = logging.getLogger(__name__)


class HierarchyParams(BaseModel):
    """How the criteria tree grows and how scores become features."""

    model_config = ConfigDict(extra="forbid")

    layers: int = Field(3, ge=1, le=6)
    children: int = Field(4, ge=1, le=12)
    top_k: int = Field(3, ge=0)
    modes: list[Mode] = Field(default_factory=lambda: ["prompt"], min_length=1)
    unconditioned: bool = True
    proxy_aggregator: str = "linear"
    cv_folds: int = Field(5, ge=2)
    importance_repeats: int = Field(5, ge=1)
    seed: int = 0


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


def criteria_to_expand(tree: CriteriaTree, layer: int, selected: Sequence[str]) -> list[str]:
    """Layer 2 expands every aspect; later layers expand what pruning selected."""
    if layer == 2:
        return [c.id for c in tree.layer(1)]
    return list(selected)


def grow(
    tree: CriteriaTree,
    layer: int,
    selected: Sequence[str],
    backend: LLMBackend,
    cache: ResultCache,
    task_description: str,
    children: int,
) -> CriteriaTree:
    """Decompose the nodes that make up ``layer`` (cached; hand-edited nodes are kept)."""
    return decompose(
        tree, criteria_to_expand(tree, layer, selected), backend, cache, task_description, children
    )


def make_scorer(
    backend: LLMBackend, cache: ResultCache, task, params: HierarchyParams
) -> CriterionScorer:
    return CriterionScorer(backend, cache, task, params.modes, params.unconditioned)


def score(
    scorer: CriterionScorer, tree: CriteriaTree, data: LabelledData, progress: bool = True
) -> ScoringRun:
    """Features of every sample on every criterion of the tree."""
    return scorer.score(data.samples, tree, progress=progress)


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
    selected = (
        select_for_decomposition(importances, newest, params.top_k)
        if layer < params.layers and newest
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


def train_hierarchy(
    tree: CriteriaTree,
    train: LabelledData,
    backend: LLMBackend,
    cache: ResultCache,
    task,
    task_description: str,
    params: HierarchyParams,
    progress: bool = True,
) -> tuple[CriteriaTree, ScoringRun, list[LayerReport]]:
    """Algorithm 1 end to end: grow, score and prune layer by layer."""
    scorer = make_scorer(backend, cache, task, params)
    reports: list[LayerReport] = []
    selected: list[str] = []
    run = score(scorer, tree, train, progress)
    reports.append(proxy_report(run.features, train, tree, 1, params))
    for layer in range(2, params.layers + 1):
        tree = grow(tree, layer, selected, backend, cache, task_description, params.children)
        run = score(scorer, tree, train, progress)
        report = proxy_report(run.features, train, tree, layer, params)
        reports.append(report)
        selected = report.selected
    return tree, run, reports


def fit_aggregator(
    kind: str, params: dict, features: pd.DataFrame, targets: pd.DataFrame, seed: int
):
    """Fit the final aggregator on all training rows."""
    from hdeval.aggregators import make_aggregator

    model = make_aggregator(kind, random_state=seed, **params)
    return model.fit(features.to_numpy(dtype=float), targets.to_numpy(dtype=float))


def feature_subsets(tree: CriteriaTree, columns: Sequence[str]) -> dict[str, list[str]]:
    """Feature sets of the ablations: all layers, without layer 3, layer 1 only, and per mode.

    Columns not tied to a criterion (``lik:_text``) are kept in every layer set. With both modes,
    ``prompt_only`` and ``likelihood_only`` are HD-Eval on one mode's columns; with likelihood,
    ``unconditioned_likelihood_only`` is the likelihood features without the tree.
    """
    from hdeval.aggregators import criterion_of

    known = {c.id: c.layer for c in tree}

    def up_to(depth: int) -> list[str]:
        return [c for c in columns if known.get(criterion_of(c), 0) <= depth]

    subsets = {"hdeval": list(columns)}
    if tree.depth >= 3:
        subsets["without_layer_3"] = up_to(2)
    if tree.depth >= 2:
        subsets["without_layers_2_3"] = up_to(1)
    prompt_columns = [c for c in columns if c.startswith("prompt:")]
    likelihood_columns = [c for c in columns if c.startswith("lik:")]
    if prompt_columns and likelihood_columns:
        subsets["prompt_only"] = prompt_columns
        subsets["likelihood_only"] = likelihood_columns
    if UNCONDITIONED in columns:
        subsets["unconditioned_likelihood_only"] = [UNCONDITIONED]
    return subsets
