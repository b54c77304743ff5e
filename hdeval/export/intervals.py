"""Per-text prediction intervals: split-conformal quantiles of the cross-fitted errors.

Each labelled text's cross-fitted prediction was made by a model that never saw its document, so
its absolute error |human - predicted| is a draw of the error the bundle makes on a new text. The
interval of a new prediction is the prediction plus or minus the ⌈(n + 1) level⌉-th smallest of
the n errors (split-conformal), taken per bin of the predicted score (Mondrian conformal: the
predicted score is the difficulty estimate, since texts predicted near a scale's end err less),
and clipped to the aspect's range. Where the rows name three systems or more, each aspect also
keeps the error of a system's mean (:mod:`hdeval.systems.system_error`), which
``hdeval compare-systems`` adds to its CIs. Numpy and pydantic only: production scoring applies
what the card stores.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from hdeval.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

#: How the card names the method.
METHOD = "split-conformal |human - predicted| of cross-fitted predictions, per predicted-score bin"


class AspectIntervals(BaseModel):
    """One aspect's interval widths: the inner ``edges`` of its predicted-score bins, each bin's
    half width and the cross-fitted texts it was measured on; the error of a system's mean
    (``system_sd``, :mod:`hdeval.systems.system_error`; None: fewer than 3 systems labelled)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    edges: list[float]
    half_widths: list[float] = Field(min_length=1)
    rows: list[int]
    system_sd: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> AspectIntervals:
        if not len(self.half_widths) == len(self.rows) == len(self.edges) + 1:
            raise ValueError("one half width and one row count per bin, one edge between bins")
        if self.edges != sorted(self.edges):
            raise ValueError("bin edges must rise")
        if not all(0 <= w < float("inf") for w in self.half_widths):
            raise ValueError("half widths must be finite and non-negative")
        return self


class Intervals(BaseModel):
    """The card's prediction intervals (:mod:`hdeval.export.intervals`)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    level: float = Field(gt=0, lt=1)
    method: str
    aspects: dict[str, AspectIntervals]


def conformal_quantile(errors: np.ndarray, level: float) -> float:
    """The ⌈(n + 1) level⌉-th smallest of ``errors``; infinite when n is too small for it."""
    errors = np.sort(np.asarray(errors, dtype=float))
    rank = math.ceil((len(errors) + 1) * level - 1e-9)
    return float(errors[rank - 1]) if rank <= len(errors) else math.inf


def least_rows(level: float) -> int:
    """The fewest errors whose conformal quantile at ``level`` is finite."""
    return math.ceil(level / (1 - level) - 1e-9)


def bin_edges(predicted: np.ndarray, bins: int, level: float) -> list[float]:
    """Inner edges of at most ``bins`` bins of equal count of ``predicted``, each holding at
    least :func:`least_rows` values (fewer bins where there are too few, or values repeat)."""
    n = len(predicted)
    bins = max(1, min(bins, n // least_rows(level)))
    while bins > 1:
        cuts = np.quantile(predicted, np.arange(1, bins) / bins)
        edges = sorted({float(c) for c in cuts})
        counts = np.bincount(np.searchsorted(edges, predicted, side="right"), minlength=bins)
        if len(edges) == bins - 1 and counts.min() >= least_rows(level):
            return edges
        bins -= 1
    return []


def fit_intervals(
    predicted: pd.DataFrame,
    human: pd.DataFrame,
    level: float,
    bins: int = 3,
    systems: pd.Series | None = None,
) -> dict:
    """The card's ``intervals`` of cross-fitted ``predicted`` scores and the ``human`` ones
    (same index; one column per aspect): per aspect the bins' inner ``edges``, each bin's
    ``half_widths`` and its number of ``rows``, and with the rows' ``systems`` the error of a
    system's mean (``system_sd``). Rows without both scores are left out."""
    import pandas as pd

    from hdeval.systems.system_error import system_error_sds

    system_sds = {} if systems is None else system_error_sds(predicted, human, systems)

    aspects: dict[str, dict] = {}
    for aspect in predicted.columns:
        both = pd.concat([predicted[aspect], human.loc[predicted.index, aspect]], axis=1).dropna()
        p, y = both.iloc[:, 0].to_numpy(float), both.iloc[:, 1].to_numpy(float)
        if len(p) < least_rows(level):
            raise ConfigError(
                f"prediction intervals at evaluate.interval_level={level:g} need at least "
                f"{least_rows(level)} cross-fitted texts of {aspect!r}, there are {len(p)}; "
                "lower the level or label more texts"
            )
        edges = bin_edges(p, bins, level)
        which = np.searchsorted(edges, p, side="right")
        errors = np.abs(y - p)
        aspects[str(aspect)] = {
            "edges": edges,
            "half_widths": [
                conformal_quantile(errors[which == k], level) for k in range(len(edges) + 1)
            ],
            "rows": [int(np.sum(which == k)) for k in range(len(edges) + 1)],
            "system_sd": system_sds.get(str(aspect)),
        }
    return {"level": float(level), "method": METHOD, "aspects": aspects}


def bundle_intervals(
    predictions: Path,
    human: pd.DataFrame,
    level: float | None,
    bins: int,
    systems: pd.Series | None = None,
) -> dict | None:
    """The card's ``intervals`` from a cross-fitted predictions table (CSV indexed by id) and
    the rows' ``systems``; None when ``level`` is None, or, with a warning, when there are too
    few texts for it."""
    if level is None:
        return None
    import pandas as pd

    predicted = pd.read_csv(predictions, index_col=0)
    predicted.index = predicted.index.astype(str)
    try:
        return fit_intervals(predicted, human, level, bins, systems)
    except ConfigError as exc:
        log.warning("the bundle gets no prediction intervals: %s", exc)
        return None


def half_widths(intervals: Mapping, aspects: Sequence[str], predicted: np.ndarray) -> np.ndarray:
    """Each prediction's half width (rows x ``aspects``); NaN where the prediction is NaN."""
    predicted = np.asarray(predicted, dtype=float).reshape(-1, len(aspects))
    out = np.full(predicted.shape, np.nan)
    for j, aspect in enumerate(aspects):
        spec = intervals["aspects"][aspect]
        column = predicted[:, j]
        known = np.isfinite(column)
        which = np.searchsorted(spec["edges"], column[known], side="right")
        out[known, j] = np.asarray(spec["half_widths"], dtype=float)[which]
    return out


def bounds(
    intervals: Mapping,
    aspects: Sequence[str],
    predicted: np.ndarray,
    ranges: Mapping[str, Sequence[float]] | None = None,
) -> np.ndarray:
    """Each prediction's interval, rows x ``aspects`` x (low, high), clipped to each aspect's
    range; NaN where the prediction is NaN."""
    predicted = np.asarray(predicted, dtype=float).reshape(-1, len(aspects))
    width = half_widths(intervals, aspects, predicted)
    out = np.stack([predicted - width, predicted + width], axis=-1)
    for j, aspect in enumerate(aspects):
        if ranges and aspect in ranges:
            low, high = (float(v) for v in ranges[aspect])
            out[:, j] = np.clip(out[:, j], low, high)
    return out


def system_sds(intervals: Mapping, aspects: Sequence[str]) -> dict[str, float | None]:
    """Each aspect's error of a system's mean (None where the card has none)."""
    return {aspect: intervals["aspects"][aspect].get("system_sd") for aspect in aspects}
