"""Does an aggregator score a text higher when every criterion score of it gets worse?

A perturbed text (a typo, a deleted word, a shuffled sentence) usually lowers every criterion
score, and often below anything seen in training. An aggregator that then predicts a *higher*
human score inverts exactly what DHP tests: an MLP extrapolates there, a tree or forest can sit in
a leaf that scores higher, a non-negative linear model cannot. :func:`rising_share` measures it
on the training rows themselves, so model selection can refuse such a candidate before DHP does.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

#: How far every criterion score is lowered, in training standard deviations of its column.
SHIFTS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)


def rising_share(
    model,
    X: np.ndarray,
    orientation: Sequence[int] | None = None,
    shifts: tuple[float, ...] = SHIFTS,
) -> float:
    """The largest share, over aspects and ``shifts``, of the rows of ``X`` whose prediction
    rises when every column of the row is made worse by ``shift`` times the column's standard
    deviation in ``X``: lowered where higher is better (``orientation`` +1, the default),
    raised where lower is better (-1), and left as it is where the column is no quality
    judgement (0, such as length). 0 means no row of ``X`` is ever scored higher for being
    worse on every criterion; a missing score (NaN) stays missing."""
    X = np.asarray(X, dtype=float)
    with warnings.catch_warnings():  # a column with no observed score has no deviation
        warnings.simplefilter("ignore", RuntimeWarning)
        spread = np.nan_to_num(np.nanstd(X, axis=0))
    if orientation is not None:
        spread = spread * np.asarray(orientation, dtype=float)
    base = _predict(model, X)
    tolerance = 1e-9 * max(1.0, float(np.nanmax(np.abs(base))))
    worst = 0.0
    for shift in shifts:
        rises = _predict(model, X - shift * spread) - base > tolerance
        worst = max(worst, float(rises.mean(axis=0).max()))
    return worst


def _predict(model, X: np.ndarray) -> np.ndarray:
    return np.asarray(model.predict(X), dtype=float).reshape(len(X), -1)
