"""Model selection on the training documents: which feature groups enter the aggregator, and which
aggregator kind.

A candidate is a feature set (the modes scored, the deepest layer of the tree, with or without the
text's own signals: ``lik:_text`` and what comes with it, see :mod:`hdeval.scoring.columns`) and an
aggregator kind. Every candidate gets the same
document-grouped CV as tuning (:func:`hdeval.training.tuning.cv_score`) with the kind's defaults;
the
CV-best one (or the simplest within ``aggregator.prefer_simpler_within`` of it) is then tuned and
shipped. A candidate fit on all training rows that scores texts higher when every criterion score
falls (:func:`~hdeval.training.monotonicity.rising_share` above ``aggregator.max_rising_share``) is
not
shipped. Only the documents of ``features`` are seen here (a cross-fitting fold's training
documents, or every document for the shipped bundle).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from sklearn.exceptions import ConvergenceWarning

from hdeval.errors import ConfigError
from hdeval.params import AggregatorParams, HierarchyParams, Mode
from hdeval.scoring.columns import Profile, feature_columns, orientation
from hdeval.scoring.family_columns import FAMILY_COLUMNS
from hdeval.training.aggregators import constraints, make_aggregator
from hdeval.training.monotonicity import rising_share
from hdeval.training.tuning import cv_score
from hdeval.tree.criteria import CriteriaTree

TABLE_COLUMNS = [
    "features",
    "modes",
    "layers",
    "unconditioned",
    "kind",
    "n_features",
    "cv_pearson",
    "rising_share",
]


@dataclass(frozen=True)
class FeatureSet:
    """The feature columns of criteria down to layer ``depth``, scored in ``modes``, with the
    text's own signals when ``unconditioned``; likelihoods summarised as ``profile`` says."""

    modes: tuple[Mode, ...]
    depth: int
    unconditioned: bool
    profile: Profile = field(default_factory=Profile)

    @property
    def name(self) -> str:
        layers = "1" if self.depth == 1 else f"1-{self.depth}"
        text = "+text" if self.unconditioned else ""
        return f"{'+'.join(self.modes)} L{layers}{text}"

    def tree(self, tree: CriteriaTree) -> CriteriaTree:
        """``tree`` cut below layer ``depth`` (a cut node is a leaf again)."""
        return CriteriaTree(
            [
                replace(c, decomposed=False) if c.layer == self.depth else c
                for c in tree
                if c.layer <= self.depth
            ]
        )

    def columns(self, tree: CriteriaTree) -> list[str]:
        """The columns, in the order the bundle's scorer writes them."""
        ids = [c.id for c in self.tree(tree)]
        return feature_columns(ids, list(self.modes), self.unconditioned, self.profile)


def candidate_feature_sets(
    hierarchy: HierarchyParams, search: AggregatorParams, depth: int, unconditioned: bool
) -> list[FeatureSet]:
    """The feature sets of ``search`` that a tree of ``depth`` scored in ``hierarchy.modes``
    can give; ``unconditioned``: whether the text's own signals were scored (they can be
    without the likelihood mode, which mode pruning may have dropped)."""
    profile = Profile.of(hierarchy)
    textless = replace(profile, families=())  # the families come with the text's own signals
    out: list[FeatureSet] = []
    for choice in search.feature_modes:
        modes: tuple[Mode, ...] = ("prompt", "likelihood") if choice == "both" else (choice,)
        if not set(modes) <= set(hierarchy.modes):
            continue
        for layers in search.feature_layers:
            if layers > depth:
                continue
            for text in search.unconditioned:
                if text and not unconditioned:
                    continue
                candidate = FeatureSet(modes, layers, text, profile if text else textless)
                if candidate not in out:
                    out.append(candidate)
    if not out:
        raise ConfigError(
            f"aggregator.feature_modes {search.feature_modes} / feature_layers "
            f"{search.feature_layers} leave no feature set that hierarchy.modes "
            f"{hierarchy.modes} with {depth} layers scored"
        )
    return out


def select_families(
    tree: CriteriaTree,
    features: pd.DataFrame,
    targets: pd.DataFrame,
    groups: Sequence | np.ndarray,
    hierarchy: HierarchyParams,
    n_splits: int,
    seed: int,
    nonnegative: bool = False,
) -> tuple[list[str], list[dict]]:
    """The signal families (``hierarchy.families``) that earn their place, and the steps that
    decided it: forward selection by the grouped-CV Pearson of the proxy aggregator on every
    criterion column and the text's signals, adding the family that gains most while it gains at
    least ``hierarchy.min_family_gain``. Each step row: family, cv_pearson with it, gain, kept."""
    scored = set(features.columns)  # a family the layer could not score (no likelihoods) is out
    families = [f for f in hierarchy.families if set(FAMILY_COLUMNS[f]) <= scored]
    if hierarchy.min_family_gain is None or not families:
        return families, []
    kind, modes = hierarchy.proxy_aggregator, tuple(hierarchy.modes)

    def score(chosen: list[str]) -> float:
        profile = replace(Profile.of(hierarchy), families=tuple(chosen))
        columns = FeatureSet(modes, tree.depth, True, profile).columns(tree)
        columns = [c for c in columns if c in features.columns]
        fixed = constraints(kind, nonnegative, columns)
        return cv_score(kind, fixed, features[columns], targets, groups, n_splits, seed)

    kept: list[str] = []
    current, steps = score(kept), []
    while len(kept) < len(families):
        trials = {f: score([*kept, f]) for f in families if f not in kept}
        best = max(trials, key=trials.__getitem__)
        gain = trials[best] - current
        earns = gain >= hierarchy.min_family_gain
        steps += [
            {"family": f, "with": list(kept), "cv_pearson": value, "gain": value - current,
             "kept": earns and f == best}
            for f, value in trials.items()
        ]  # fmt: skip
        if not earns:
            break
        kept.append(best)
        current = trials[best]
    return kept, steps


def selection_table(
    tree: CriteriaTree,
    features: pd.DataFrame,
    targets: pd.DataFrame,
    groups: Sequence | np.ndarray,
    candidates: Sequence[FeatureSet],
    kinds: Sequence[str],
    n_splits: int,
    seed: int,
    nonnegative: bool = False,
) -> pd.DataFrame:
    """Grouped-CV mean Pearson r of every (feature set, kind), best first (ties: listed order),
    and the :func:`~hdeval.training.monotonicity.rising_share` of the kind fit on all rows; each
    kind with
    its defaults and :func:`~hdeval.training.aggregators.constraints`."""
    rows = []
    with warnings.catch_warnings():  # an MLP that has not converged is still a fair candidate
        warnings.simplefilter("ignore", ConvergenceWarning)
        for candidate in candidates:
            columns = candidate.columns(tree)
            fixed = {kind: constraints(kind, nonnegative, columns) for kind in kinds}
            rows.extend(_rows(tree, features, targets, groups, candidate, fixed, n_splits, seed))
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    return table.sort_values("cv_pearson", ascending=False, kind="stable").reset_index(drop=True)


def _rows(
    tree: CriteriaTree,
    features: pd.DataFrame,
    targets: pd.DataFrame,
    groups: Sequence | np.ndarray,
    candidate: FeatureSet,
    fixed: dict[str, dict],
    n_splits: int,
    seed: int,
) -> list[dict]:
    """The CV rows of one feature set, a row per kind of ``fixed`` (kind: its constraints)."""
    columns = candidate.columns(tree)
    missing = [c for c in columns if c not in features.columns]
    if missing:
        raise ConfigError(f"feature set {candidate.name}: no feature column {missing[0]!r}")
    chosen = features[columns]
    X, Y = chosen.to_numpy(dtype=float), targets.to_numpy(dtype=float)
    signs = [orientation(c) for c in columns]
    return [
        {
            "features": candidate.name,
            "modes": "+".join(candidate.modes),
            "layers": candidate.depth,
            "unconditioned": candidate.unconditioned,
            "kind": kind,
            "n_features": len(columns),
            "cv_pearson": cv_score(kind, params, chosen, targets, groups, n_splits, seed),
            "rising_share": rising_share(make_aggregator(kind, seed, **params).fit(X, Y), X, signs),
        }
        for kind, params in fixed.items()
    ]


#: Aggregator kinds from the simplest up: a linear model stays monotone outside the training
#: range (a perturbed text's features often lie there), a tree or forest is flat there, and an
#: MLP may turn around (DHP measures exactly that).
SIMPLICITY = ("linear", "tree", "forest", "boosting", "mlp")


def best_candidate(
    table: pd.DataFrame,
    candidates: Sequence[FeatureSet],
    within: float = 0.0,
    max_rising: float | None = None,
) -> tuple[FeatureSet, str, float]:
    """The simplest (feature set, kind) of the table whose CV Pearson is within ``within`` of the
    best (kinds in :data:`SIMPLICITY` order, then fewer features; ties: the table's order), and
    its CV Pearson. ``within`` 0 gives the table's top row. With ``max_rising``, only rows whose
    ``rising_share`` is at most that are considered."""
    if max_rising is not None:
        table = table[table["rising_share"] <= max_rising]
        if table.empty:
            raise ConfigError(
                f"every candidate scores texts higher when all their criterion scores fall "
                f"(rising_share above aggregator.max_rising_share {max_rising}); add linear to "
                "aggregator.kinds with aggregator.nonnegative: true, or raise the share"
            )
    best = float(table["cv_pearson"].iloc[0])
    near = table[table["cv_pearson"] >= best - within]
    ranked = near.assign(_rank=near["kind"].map(SIMPLICITY.index)).sort_values(
        ["_rank", "n_features"], kind="stable"
    )
    row = ranked.iloc[0] if within > 0 and len(near) else table.iloc[0]
    by_name = {c.name: c for c in candidates}
    return by_name[row["features"]], str(row["kind"]), float(row["cv_pearson"])
