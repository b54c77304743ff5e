"""Human score scales per aspect: predictions are kept inside each aspect's own range.

The judge rates every criterion on one fixed scale (1-5) and the aggregator regresses onto the
human scores on their own scales, so one aggregator serves aspects rated 0-1, 1-3 or 1-6 alike.
Its outputs are clipped to each aspect's range: a regression may overshoot, a human score cannot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

ScoreRange = tuple[float, float]


def clip_to_ranges(
    values: np.ndarray, aspects: Sequence[str], ranges: Mapping[str, Sequence[float]] | None
) -> np.ndarray:
    """``values`` (rows x aspects, in ``aspects`` order) clipped to each aspect's [low, high].

    Aspects without a range are left as they are; so is everything when ``ranges`` is None
    (a bundle written before ranges were recorded). NaN (a failed score) stays NaN.
    """
    out = np.array(values, dtype=float, copy=True)
    if not ranges:
        return out
    for j, aspect in enumerate(aspects):
        if aspect in ranges:
            low, high = ranges[aspect]
            out[:, j] = np.clip(out[:, j], float(low), float(high))
    return out
