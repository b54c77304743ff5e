"""Statistics of a text's token log-probabilities: what a likelihood feature column holds.

GPTScore scores a text by the mean log-probability of its tokens. The mean hides where a text
goes wrong: an invented name or a broken sentence is a few very unlikely tokens in an otherwise
likely text. Each statistic reads another part of the distribution; ``hierarchy.likelihood_stats``
picks them, and since the judge's per-token values are cached, a new choice costs no LLM call.
numpy only (the production path imports this).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: A token less likely than this (nats; p < 0.018) is a surprising one.
SURPRISE_NATS = -4.0


@dataclass(frozen=True)
class Statistic:
    """One statistic of a text's token log-probabilities."""

    name: str
    words: str  # what it measures, for explanations
    higher_is_better: bool
    compute: Callable[[np.ndarray], float]


def _share_surprising(tokens: np.ndarray) -> float:
    return float(np.mean(tokens < SURPRISE_NATS))


STATISTICS: dict[str, Statistic] = {
    s.name: s
    for s in (
        Statistic("mean", "mean token log-probability", True, lambda t: float(np.mean(t))),
        Statistic("min", "least likely token", True, lambda t: float(np.min(t))),
        Statistic("p10", "10th-percentile token", True, lambda t: float(np.percentile(t, 10))),
        Statistic("p25", "25th-percentile token", True, lambda t: float(np.percentile(t, 25))),
        Statistic(
            "surprise",
            f"share of surprising tokens (below {SURPRISE_NATS:g} nats)",
            False,
            _share_surprising,
        ),
    )
}


def statistics(tokens: Sequence[float], names: Sequence[str]) -> dict[str, float]:
    """Each statistic of ``names`` over ``tokens`` (at least one token)."""
    values = np.asarray(tokens, dtype=np.float64)
    return {name: STATISTICS[name].compute(values) for name in names}
