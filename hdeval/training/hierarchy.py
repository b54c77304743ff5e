"""HD-Eval's iterative alignment training (Algorithm 1 of the paper).

Layer 1 holds the human aspects. Layer 2 expands every layer-1 node into at most ``children``
criteria; every later layer expands only the ``top_k`` criteria of the newest layer that a proxy
aggregator, trained on all criteria so far, finds most important by held-out permutation
importance. Every LLM call goes through the cached judge, so re-running costs nothing.
:func:`run_layer` is the one step; the DVC ``layer`` stage and :func:`train_hierarchy` both run it.

With ``min_mode_gain`` set, each layer also measures what every scoring mode adds to the proxy's
grouped CV; later layers score only the modes that add enough, and the tree stops growing when
none does (:func:`next_layer`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence, Set
from dataclasses import asdict, dataclass, replace

import pandas as pd

from hdeval.data import LabelledData
from hdeval.errors import ConfigError
from hdeval.llm.judge import CachedJudge
from hdeval.params import HierarchyParams, Mode, TaskSpec
from hdeval.scoring.columns import Profile, check_failed_shares, is_text_signal, of_mode
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.run import ScoringRun
from hdeval.training.pruning import (
    criterion_importances,
    permutation_importances,
    select_for_decomposition,
)
from hdeval.training.tuning import cv_score
from hdeval.tree.criteria import CriteriaTree, apply_overrides, pinned
from hdeval.tree.decompose import decompose, undecomposed

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
    modes: list[str]
    mode_gains: dict[str, float]
    modes_next: list[str]
    stopped: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def next_layer(report: dict) -> tuple[list[Mode], bool]:
    """The modes the layer after ``report`` (a :class:`LayerReport` dict) scores, and whether it
    grows the tree: the modes the report kept, or, when it kept none, its own modes and no
    growth (the tree stopped)."""
    if report["modes_next"]:
        return list(report["modes_next"]), True
    return list(report["modes"]), False


def mode_gains(
    features: pd.DataFrame,
    targets: pd.DataFrame,
    groups,
    modes: Sequence[Mode],
    params: HierarchyParams,
    folds: int,
    pearson: float,
) -> dict[str, float]:
    """What each mode's criterion columns add to the proxy's grouped-CV Pearson ``pearson``:
    ``pearson`` minus the CV Pearson without them (the text's own signals, ``lik:_text`` and
    what comes with it, are kept as the reference).
    Both are floored at 0: a negative CV correlation is no more use than none."""
    gains: dict[str, float] = {}
    for mode in modes:
        dropped = {c for c in of_mode(features.columns, mode) if not is_text_signal(c)}
        rest = [c for c in features.columns if c not in dropped]
        without = 0.0
        if rest:
            kind, seed = params.proxy_aggregator, params.seed
            without = cv_score(kind, {}, features[rest], targets, groups, folds, seed)
        gains[mode] = max(pearson, 0.0) - max(without, 0.0)
    return gains


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
    modes: Sequence[Mode],
    grown: bool = True,
) -> LayerReport:
    """Fit the proxy aggregator on all features, rank criteria, pick the next ones to expand and
    the modes the next layer scores (``grown``: False when this layer did not grow the tree)."""
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
    last = layer == params.layers or not grown
    gains, kept, stopped = {}, list(modes), None
    if params.min_mode_gain is not None and not last:
        gains = mode_gains(features, targets, groups, modes, params, folds, pearson)
        kept = [m for m in modes if gains[m] >= params.min_mode_gain]
        if not kept:
            stopped = (
                f"no scoring mode adds hierarchy.min_mode_gain={params.min_mode_gain:g} to the "
                f"CV Pearson at layer {layer}: the tree stops growing"
            )
            log.info("layer %d: %s (gains %s)", layer, stopped, gains)
    selected = (
        select_for_decomposition(importances, candidates, params.top_k)
        if not last and kept and candidates
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
        modes=list(modes),
        mode_gains={m: float(g) for m, g in gains.items()},
        modes_next=[] if last else kept,
        stopped=stopped if stopped else (None if grown else "the tree stopped growing earlier"),
    )


def usable_modes(params: HierarchyParams, problem: str | None) -> tuple[HierarchyParams, dict]:
    """``params`` without the likelihood mode when ``problem`` says the judge has none, and
    ``{what was left out: why}``; an error when no mode is left."""
    if problem is None or "likelihood" not in params.modes:
        return params, {}
    modes = [m for m in params.modes if m != "likelihood"]
    if not modes:
        raise ConfigError(
            f"hierarchy.modes is [likelihood] but the judge cannot score likelihoods: {problem}; "
            "write hierarchy.modes: [prompt] to score with prompts only"
        )
    why = f"the judge cannot score likelihoods: {problem}"
    return params.model_copy(update={"modes": modes}), {"likelihood features": why}


def layer_scorer(
    judge: CachedJudge,
    task: TaskSpec,
    params: HierarchyParams,
    modes: Sequence[Mode],
    families: Sequence[str] | None = None,
) -> CriterionScorer:
    """The scorer of a layer's texts in ``modes``; ``families`` instead of the params' signal
    families. The text's own likelihood stays when pruning drops the criterion-conditioned
    ones: the mode gains are measured with it kept (see mode_gains)."""
    profile = Profile.of(params)
    if families is not None:
        profile = replace(profile, families=tuple(families))
    return CriterionScorer(judge, task, modes, scores_unconditioned(params), profile)


def scores_unconditioned(params: HierarchyParams) -> bool:
    """Whether the layers score the text's own likelihood, unconditioned by a criterion."""
    return params.unconditioned and "likelihood" in params.modes


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
    modes: Sequence[Mode] | None = None,
    grow: bool = True,
) -> Layer:
    """Layer ``number`` of Algorithm 1: grow ``tree`` (the previous layer's, or the aspects for
    layer 1) by decomposing what ``selected`` names (a person's pins excepted), apply the
    person's overrides (``params.overrides``), score the training texts on every
    criterion in ``modes`` (default ``params.modes``), fit the proxy aggregator and pick what
    the next layer decomposes and scores (see :func:`next_layer`).

    ``decomposer`` writes the criteria (default: ``judge``, which scores every text). With
    ``grow`` False the tree is kept as it is (an earlier layer stopped it)."""
    modes = list(params.modes if modes is None else modes)
    expand = criteria_to_expand(tree, number, selected, pinned(params.overrides)) if grow else []
    if number > 1 and grow:
        writer = judge if decomposer is None else decomposer
        tree = decompose(tree, expand, writer, task.description, params.children)
    leaves = undecomposed(tree, expand) if number > 1 else []
    final = number == params.layers
    tree = apply_overrides(tree, params.overrides, decomposed=expand, final=final)
    run = layer_scorer(judge, task, params, modes).score(train.samples, tree, progress=progress)
    check_failed_shares(run.features, params.max_failed_share)
    report = proxy_report(run.features, train, tree, number, params, modes, grow)
    return Layer(tree, run, report, leaves)


def train_hierarchy(
    tree: CriteriaTree,
    train: LabelledData,
    judge: CachedJudge,
    task: TaskSpec,
    params: HierarchyParams,
    progress: bool = True,
    open_decomposer: Callable[[], CachedJudge | None] | None = None,
) -> list[Layer]:
    """Algorithm 1 end to end: every layer in turn, each growing the one before.

    ``open_decomposer`` gives the LLM that writes the criteria (None: the judge); it is called
    once, when a layer first grows the tree, so a tree that stops at layer 1 loads nothing."""
    layers: list[Layer] = []
    selected: list[str] = []
    modes, grow = list(params.modes), True
    writer = functools.cache(open_decomposer or (lambda: None))
    for number in range(1, params.layers + 1):
        decomposer = writer() if number > 1 and grow else None
        layer = run_layer(
            number, tree, selected, train, judge, task, params, progress, decomposer, modes, grow
        )
        layers.append(layer)
        tree, selected = layer.tree, layer.report.selected
        modes, grow = next_layer(layer.report.to_dict())
    return layers
