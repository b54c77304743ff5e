"""The evaluator's error at the level of systems: how far a system's mean predicted score strays
from where the humans' mean for that system puts it, beyond what the choice of documents explains.

An evaluator can favour one system's style on every text (a length, a phrasing the judge likes).
Per-text intervals do not cover that: averaged over many documents their errors shrink, and a
biased pair of systems would be called different with ever more confidence. On labelled
(cross-fitted) predictions it is measured so: fit the systems' mean predictions on their mean
human scores by least squares (the evaluator may compress the scale; that keeps the order and
is no error), and take the variance of the systems' departures from that line, less the part
that the documents' sampling noise gives each system's mean (a method-of-moments estimate, as
for the between-study variance of a meta-analysis). Its square root, in predicted-score units,
is the standard deviation of a new system's own offset; ``compare`` adds such an offset to every
system in every bootstrap draw.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

#: Fewest systems whose line and spread can be estimated (a line through 2 leaves no spread).
LEAST_SYSTEMS = 3


def system_error_sd(predicted: pd.Series, human: pd.Series, systems: pd.Series) -> float | None:
    """The standard deviation of a system's mean predicted score about the line through the
    humans' system means, less the documents' sampling noise (0 where noise explains it all);
    None with fewer than :data:`LEAST_SYSTEMS` systems. The three series share an index; rows
    without both scores are left out."""
    table = pd.DataFrame({"p": predicted, "h": human, "s": systems}).dropna()
    groups = table.groupby("s")
    means = groups[["p", "h"]].mean()
    if len(means) < LEAST_SYSTEMS or means["h"].nunique() < 2:
        return None
    slope, intercept = np.polyfit(means["h"], means["p"], 1)
    departure = means["p"] - (intercept + slope * means["h"])
    spread = float((departure**2).sum() / (len(means) - 2))
    residual = table["p"] - slope * table["h"]
    noise = residual.groupby(table["s"]).var(ddof=1) / groups.size()
    return math.sqrt(max(0.0, spread - float(noise.fillna(0).mean())))


def system_error_sds(
    predicted: pd.DataFrame, human: pd.DataFrame, systems: pd.Series
) -> dict[str, float | None]:
    """:func:`system_error_sd` of every aspect (column) of ``predicted``."""
    return {
        str(aspect): system_error_sd(predicted[aspect], human.loc[predicted.index, aspect], systems)
        for aspect in predicted.columns
    }
