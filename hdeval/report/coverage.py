"""How often the prediction intervals hold, measured where they were not fit: each document
fold's intervals come from the cross-fitted errors of the other folds' documents only
(cross-conformal), so a text's own error never sets its width."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from hdeval.export.intervals import fit_intervals, half_widths


def document_folds(docs: np.ndarray, folds: int, seed: int) -> list[np.ndarray]:
    """Row indices of ``folds`` groups of whole documents, in a seeded order."""
    unique = np.random.default_rng(seed).permutation(pd.unique(docs))
    return [np.flatnonzero(np.isin(docs, part)) for part in np.array_split(unique, folds)]


def held_out_widths(
    predicted: pd.DataFrame,
    human: pd.DataFrame,
    docs: pd.Series,
    level: float,
    bins: int,
    folds: int = 5,
    seed: int = 0,
) -> pd.DataFrame:
    """Each row's interval half width per aspect, fit on the other folds' documents."""
    aspects = list(predicted.columns)
    out = pd.DataFrame(np.nan, index=predicted.index, columns=aspects)
    groups = docs.loc[predicted.index].to_numpy()
    for rows in document_folds(groups, folds, seed):
        rest = np.setdiff1d(np.arange(len(predicted)), rows)
        intervals = fit_intervals(predicted.iloc[rest], human, level, bins)
        out.iloc[rows] = half_widths(intervals, aspects, predicted.iloc[rows].to_numpy(float))
    return out


def coverage(
    predicted: pd.DataFrame,
    human: pd.DataFrame,
    widths: pd.DataFrame,
    ranges: Mapping[str, Sequence[float]],
) -> dict[str, dict[str, float]]:
    """Per aspect the share of texts whose human score lies in its interval, the mean width of
    the interval (clipped to the range) and the range's width."""
    figures = {}
    for aspect in predicted.columns:
        p, w = predicted[aspect], widths[aspect]
        y = human.loc[predicted.index, aspect]
        known = p.notna() & w.notna() & y.notna()
        low, high = (float(v) for v in ranges[aspect])
        lo, hi = (p - w).clip(low, high)[known], (p + w).clip(low, high)[known]
        figures[str(aspect)] = {
            "coverage": float(((y[known] >= lo) & (y[known] <= hi)).mean()),
            "mean_width": float((hi - lo).mean()),
            "range_width": high - low,
            "n": int(known.sum()),
        }
    return figures
