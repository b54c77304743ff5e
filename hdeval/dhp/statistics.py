"""DHP's statistics: one-sided Wilcoxon per metric, the harmonic mean p-value, D = log_0.05(p)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

ALPHA = 0.05


# --------------------------------------------------------------------------- statistics


def wilcoxon_p(original: Sequence[float], perturbed: Sequence[float]) -> float:
    """One-sided Wilcoxon signed-rank p-value for "original scores higher than perturbed".

    ``scipy.stats.wilcoxon`` with ``alternative="greater"`` and its defaults (zero differences
    dropped; exact distribution for small samples without ties). Pairs with a NaN on either side
    are dropped; no pair left gives NaN. When every remaining pair is equal there is no evidence
    that the original is better, and the p-value is 1.0 (scipy itself would return NaN).
    """
    from scipy.stats import wilcoxon

    a = np.asarray(original, dtype=float)
    b = np.asarray(perturbed, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.shape} vs {b.shape}")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if a.size == 0:
        return math.nan
    if np.all(a == b):
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # small-sample normal approximation
        return float(wilcoxon(a, b, alternative="greater").pvalue)


def harmonic_mean_p(pvalues: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Weighted harmonic mean p-value (Wilson 2019): ``sum(w) / sum(w / p)``, weights summing to 1.

    ``scipy.stats.combine_pvalues`` has no harmonic method, so this is ``scipy.stats.hmean``
    with weights normalised to sum 1; equal weights when ``weights`` is None. NaN p-values are
    left out with their weights; nothing left (or zero total weight) gives NaN.

    The DHP paper prints the unweighted form as ``1 / sum(1 / p)``, which is M times smaller; we
    use Wilson's definition for both forms, so one metric's p is returned unchanged.
    """
    from scipy.stats import hmean

    p = np.asarray(pvalues, dtype=float)
    w = np.ones_like(p) if weights is None else np.asarray(weights, dtype=float)
    if p.shape != w.shape:
        raise ValueError(f"{p.size} p-values but {w.size} weights")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be finite and non-negative, got {w.tolist()}")
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {p.tolist()}")
    keep = np.isfinite(p)
    p, w = p[keep], w[keep]
    if p.size == 0 or w.sum() <= 0:
        return math.nan
    w = w / w.sum()
    if np.any((p == 0) & (w > 0)):
        return 0.0
    return float(hmean(p[w > 0], weights=w[w > 0]))


def discernment(p: float) -> float:
    """``D = log_0.05(p) = log(p) / log(0.05)``: 1 at p = 0.05, 2 at p = 0.0025, 0 at p = 1."""
    if p is None or not math.isfinite(p):
        return math.nan
    if p <= 0:
        return math.inf
    return math.log(p) / math.log(ALPHA) + 0.0


def missed_and_rewarded(
    table: pd.DataFrame, threshold: float = 1.0, probe_threshold: float = 1.0
) -> tuple[list[str], list[str]]:
    """What a scorer failed in its DHP ``table`` (a row per perturbation: ``probe``, ``D_ew``,
    ``D_reward_ew``): the DHP perturbations it did not discern (``D_ew < threshold``), and the
    probes it rewarded (``D_reward_ew >= probe_threshold``: the perturbed text scored
    significantly higher). A row with no usable pairs (NaN) is in neither: it was not tested."""
    probes = table["probe"].astype(bool)
    missed = table[~probes & (table["D_ew"] < threshold)].index
    rewarded = table[probes & (table["D_reward_ew"] >= probe_threshold)].index
    return [str(name) for name in missed], [str(name) for name in rewarded]


def level_weighted_average(values: Sequence[float], levels: Sequence[str]) -> float:
    """Mean over levels of the mean within each level: every level present counts equally.

    Non-finite values (perturbations with no usable pairs) are left out; none left gives NaN.
    """
    if len(values) != len(levels):
        raise ValueError(f"{len(values)} values but {len(levels)} levels")
    by_level: dict[str, list[float]] = {}
    for value, level in zip(values, levels, strict=True):
        if value is not None and math.isfinite(value):
            by_level.setdefault(level, []).append(float(value))
    if not by_level:
        return math.nan
    return float(np.mean([np.mean(v) for v in by_level.values()]))


def _finite_min(values: Sequence[float]) -> float:
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    return min(finite) if finite else math.nan
