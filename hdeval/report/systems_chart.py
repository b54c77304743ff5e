"""The chart of a system comparison (``hdeval compare-systems --plot``), in the report's
style: per aspect, each system's mean with its CI, best at the top, the systems of rank 1 in the
bundle's colour."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hdeval.report.charts import BUNDLE, OTHER
from hdeval.systems.statistics import Comparison


def systems_figure(comparisons: Sequence[Comparison]):
    """A matplotlib figure: one panel per aspect."""
    from matplotlib.figure import Figure

    columns = min(4, len(comparisons))
    rows = math.ceil(len(comparisons) / columns)
    n_systems = len(comparisons[0].systems)
    figure = Figure(figsize=(3.6 * columns, (0.32 * n_systems + 1.2) * rows), layout="constrained")
    axes = np.atleast_1d(figure.subplots(rows, columns, squeeze=False)).ravel()
    for ax, comparison in zip(axes, comparisons, strict=False):
        ordered = comparison.systems[::-1]  # best at the top
        for i, s in enumerate(ordered):
            colour = BUNDLE if s.rank == 1 else OTHER
            ax.plot([s.low, s.high], [i, i], color=colour, linewidth=2)
            ax.plot(s.mean, i, "o", color=colour, markersize=6)
        ax.set_yticks(range(len(ordered)), [f"{s.system} ({s.rank})" for s in ordered], fontsize=8)
        ax.set_title(f"{comparison.aspect}  ({comparison.n_documents} documents)", fontsize=10)
        ax.set_xlabel(f"mean score, {100 * comparison.confidence:g} % CI")
        ax.grid(axis="x", alpha=0.3)
    for ax in axes[len(comparisons) :]:
        ax.set_visible(False)
    return figure


def save_chart(comparisons: Sequence[Comparison], path: Path) -> Path:
    """Write the chart to ``path`` (PNG, SVG or PDF, by its suffix)."""
    figure = systems_figure(comparisons)
    figure.savefig(path, dpi=150, metadata={"Date": None} if path.suffix == ".svg" else None)
    return path
