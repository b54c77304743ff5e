"""The report's charts: matplotlib figures as self-contained SVG data URIs (text drawn as paths,
no font or file to fetch), and the PNGs other stages wrote, inlined."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

#: Colours: the bundle, the best same-judge baseline, the published peer, every other scorer.
BUNDLE, BASELINE, PEER, OTHER = "#1f5fa8", "#d9822b", "#7a3fa0", "#9aa3ad"


def png_uri(path: Path) -> str:
    """A PNG file as a data URI."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def _svg_uri(figure) -> str:
    """A matplotlib figure as an SVG data URI, the same bytes for the same figure."""
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "hdeval", "svg.fonttype": "path"}):
        figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode()


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def scatter_chart(predicted: pd.DataFrame, human: pd.DataFrame) -> str:
    """Predicted against human score per text (cross-fitted), one panel per aspect, with the
    diagonal (a perfect evaluator) and each aspect's dataset-level Pearson r."""
    aspects = list(predicted.columns)
    columns = min(4, len(aspects))
    rows = math.ceil(len(aspects) / columns)
    figure = _figure(3.2 * columns, 3.1 * rows)
    axes = np.atleast_1d(figure.subplots(rows, columns, squeeze=False)).ravel()
    for ax, aspect in zip(axes, aspects, strict=False):
        both = pd.concat([human[aspect], predicted[aspect]], axis=1, join="inner").dropna()
        x, y = both.iloc[:, 0].to_numpy(float), both.iloc[:, 1].to_numpy(float)
        low, high = (min(x.min(), y.min()), max(x.max(), y.max())) if len(x) else (0, 1)
        ax.plot([low, high], [low, high], color="#bbbbbb", linewidth=1, zorder=1)
        ax.scatter(x, y, s=12, alpha=0.55, color=BUNDLE, edgecolors="none", zorder=2)
        r = float(np.corrcoef(x, y)[0, 1]) if len(x) > 2 and x.std() and y.std() else math.nan
        margin = 0.05 * (high - low or 1)
        ax.set_xlim(low - margin, high + margin)
        ax.set_ylim(low - margin, high + margin)
        ax.set_aspect("equal")
        ax.set_title(f"{aspect}  (r = {r:.2f}, n = {len(x)})", fontsize=10)
        ax.set_xlabel("human score")
        ax.set_ylabel("predicted score")
        ax.grid(alpha=0.3)
    for ax in axes[len(aspects) :]:
        ax.set_visible(False)
    return _svg_uri(figure)


@dataclass(frozen=True)
class ScorerPoint:
    """One scorer's aspect-averaged correlation and its 95 % CI, and how it is drawn."""

    label: str
    value: float
    low: float
    high: float
    colour: str = OTHER


def scorers_chart(points: Sequence[ScorerPoint], what: str) -> str:
    """Every scorer's correlation with its 95 % CI, best at the top."""
    ordered = sorted(points, key=lambda p: p.value)
    figure = _figure(8.5, 0.32 * len(ordered) + 1.0)
    ax = figure.subplots()
    y = np.arange(len(ordered))
    for i, point in enumerate(ordered):
        if not math.isnan(point.low):
            ax.plot([point.low, point.high], [i, i], color=point.colour, linewidth=2)
        ax.plot(point.value, i, "o", color=point.colour, markersize=6)
    ax.set_yticks(y, [p.label for p in ordered], fontsize=8)
    ax.axvline(0, color="#888888", linewidth=0.8)
    ax.set_xlabel(what)
    ax.grid(axis="x", alpha=0.3)
    return _svg_uri(figure)


def dhp_chart(table: pd.DataFrame, aspects: Sequence[str], threshold: float) -> str:
    """DHP discernment D = log_0.05(p) per perturbation (rows) and aspect (columns), and the
    expert-weighted D^EW; cells below ``threshold`` are marked as not discerned."""
    with np.errstate(divide="ignore"):
        columns = {a: np.log(table[f"p:{a}"].astype(float)) / np.log(0.05) for a in aspects}
    values = pd.DataFrame(columns, index=table.index)
    values["weighted D$^{EW}$"] = table["D_ew"].astype(float)
    labels = [f"{p} (probe)" if table.at[p, "probe"] else str(p) for p in table.index]
    figure = _figure(1.05 * values.shape[1] + 2.8, 0.3 * len(values) + 1.0)
    ax = figure.subplots()
    shown = values.clip(upper=5.0).to_numpy(float)
    image = ax.imshow(shown, cmap="RdYlGn", vmin=0, vmax=2 * threshold, aspect="auto")
    for (i, j), value in np.ndenumerate(values.to_numpy(float)):
        text = "n/a" if math.isnan(value) else f"{value:.2f}"
        mark = "" if math.isnan(value) or value >= threshold else " ✗"
        ax.text(j, i, text + mark, ha="center", va="center", fontsize=8)
    ax.set_xticks(range(values.shape[1]), list(values.columns), fontsize=8)
    ax.set_yticks(range(len(values)), labels, fontsize=8)
    ax.xaxis.tick_top()
    figure.colorbar(image, ax=ax, label=f"D (≥ {threshold:g}: discerned)", shrink=0.8)
    return _svg_uri(figure)
