"""Systems compared on the same documents: each system's mean score with a bootstrap CI over
documents, every pair's paired difference with its CI and a Wilcoxon signed-rank test over
documents, Holm-corrected over the pairs, and a ranking that ties what it cannot separate.

The evaluator's own error is propagated from the per-text prediction intervals: in each
bootstrap draw every text's score moves by a normal error whose central ``level`` interval is
the text's interval (standard deviation = half width / z). A draw is thus a human score the
evaluator's prediction and its calibrated error allow, on a resampled set of documents; the CIs
cover both the choice of documents and the evaluator's error. Per-text errors are drawn
independently per text; an evaluator that favours one system's style on every text is covered by
the system-level error (:mod:`hdeval.systems.system_error`): each draw also moves every system's
mean by a normal offset of that standard deviation, so that a pair closer than the evaluator's
bias between systems can be is not called different however many documents there are.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: Bootstrap draws computed at once (memory: draws x documents x systems floats).
CHUNK = 250


@dataclass(frozen=True)
class SystemMean:
    """One system's mean score over the shared documents, its CI and its rank (1 = best;
    systems no paired comparison separates share a rank)."""

    system: str
    mean: float
    low: float
    high: float
    rank: int


@dataclass(frozen=True)
class PairDifference:
    """``first`` minus ``second``: the mean paired difference, its CI, the Wilcoxon p-value and
    the Holm-corrected one; ``significant``: Holm p < alpha and the CI excludes 0."""

    first: str
    second: str
    difference: float
    low: float
    high: float
    p: float
    p_holm: float
    significant: bool


@dataclass(frozen=True)
class Comparison:
    """One aspect's comparison over ``n_documents`` shared documents."""

    aspect: str
    n_documents: int
    systems: list[SystemMean]
    pairs: list[PairDifference]
    propagated: bool
    confidence: float
    alpha: float
    system_sd: float | None = None


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error over all of ``p``)."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p)
    scaled = (len(p) - np.arange(len(p))) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return adjusted


def error_sd(half_widths: np.ndarray, level: float | None) -> np.ndarray | None:
    """Standard deviations of the evaluator's error from interval half widths at ``level``
    (a normal error with that central interval); None where there are no intervals."""
    if level is None or not np.isfinite(half_widths).all():
        return None
    return half_widths / float(stats.norm.ppf((1 + level) / 2))


def bootstrap_means(
    scores: np.ndarray,
    sd: np.ndarray | None,
    n_boot: int,
    seed: int,
    system_sd: float | None = None,
) -> np.ndarray:
    """``n_boot`` draws (rows) of every system's mean (columns) over resampled documents
    (``scores``: documents x systems), each score moved by a normal error of ``sd`` and each
    system's mean by a normal offset of ``system_sd``."""
    rng = np.random.default_rng(seed)
    n_docs, n_systems = scores.shape
    draws = np.empty((n_boot, n_systems))
    for start in range(0, n_boot, CHUNK):
        size = min(CHUNK, n_boot - start)
        chosen = rng.integers(0, n_docs, (size, n_docs))
        values = scores[chosen]
        if sd is not None:
            values = values + sd[chosen] * rng.standard_normal(values.shape)
        draws[start : start + size] = values.mean(axis=1)
    if system_sd:
        draws += system_sd * rng.standard_normal(draws.shape)
    return draws


def paired_p(differences: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of per-document differences (1 when they are
    all zero)."""
    if not np.any(differences != 0):
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(stats.wilcoxon(differences).pvalue)


def compare(
    aspect: str,
    systems: Sequence[str],
    scores: np.ndarray,
    sd: np.ndarray | None = None,
    *,
    system_sd: float | None = None,
    n_boot: int = 2000,
    confidence: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
) -> Comparison:
    """Compare ``systems`` on one aspect: ``scores`` holds each shared document's (rows) mean
    score of each system (columns), ``sd`` the evaluator's error of it (None: not propagated),
    ``system_sd`` its error of a system's mean (None: not propagated)."""
    draws = bootstrap_means(scores, sd, n_boot, seed, system_sd)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(draws, [tail, 100 - tail], axis=0)
    means = scores.mean(axis=0)
    pairs_at = list(itertools.combinations(range(len(systems)), 2))
    p = [paired_p(scores[:, i] - scores[:, j]) for i, j in pairs_at]
    adjusted = holm(p) if p else np.array([])
    pairs = []
    for (i, j), p_value, p_holm in zip(pairs_at, p, adjusted, strict=True):
        a, b = (i, j) if means[i] >= means[j] else (j, i)  # the higher first
        spread = draws[:, a] - draws[:, b]
        lo, hi = np.percentile(spread, [tail, 100 - tail])
        pairs.append(
            PairDifference(
                systems[a],
                systems[b],
                float(means[a] - means[b]),
                float(lo),
                float(hi),
                p_value,
                float(p_holm),
                bool(p_holm < alpha and lo > 0),
            )
        )
    beaten = {s: sum(p.significant and p.second == s for p in pairs) for s in systems}
    ranked = sorted(range(len(systems)), key=lambda k: -means[k])
    rows = [
        SystemMean(
            systems[k], float(means[k]), float(low[k]), float(high[k]), 1 + beaten[systems[k]]
        )
        for k in ranked
    ]
    return Comparison(
        aspect, len(scores), rows, pairs, sd is not None, confidence, alpha, system_sd
    )
