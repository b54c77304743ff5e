"""The comparison table: every scorer's agreement with the human scores, and its renderings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hdeval.baselines.llm import AVERAGE
from hdeval.baselines.registry import TextScorer
from hdeval.metrics import CORRELATIONS, agreement

LEVELS: tuple[str, ...] = ("dataset", "summary", "system")
COMPARE_COLUMNS = ["scorer", "aspect", "level", "correlation", "value", "ci_low", "ci_high", "n"]
PAIRED_COLUMNS = [
    "scorer",
    "against",
    "level",
    "correlation",
    "difference",
    "ci_low",
    "ci_high",
    "n",
]


def entries(name: str, scores: pd.DataFrame, aspects: list[str]) -> dict[str, pd.DataFrame]:
    """The predicted-score frames a scorer's table gives, one column per aspect: ``name`` for
    its columns named after aspects, then ``name:column`` for each other column, which then
    predicts every aspect (``likelihood:pmi``)."""
    out: dict[str, pd.DataFrame] = {}
    matched = [a for a in aspects if a in scores.columns]
    if matched:
        out[name] = scores[matched].astype(float)
    for column in scores.columns:
        if column not in aspects:
            single = scores[column].astype(float)
            out[f"{name}:{column}"] = pd.DataFrame({a: single for a in aspects})
    return out


def _ci(values: dict, name: str) -> tuple[float, float]:
    ci = values.get(name + "_ci")
    return (float(ci[0]), float(ci[1])) if ci else (float("nan"), float("nan"))


def compare(
    scorers: Sequence[TextScorer] | Mapping[str, TextScorer | pd.DataFrame],
    samples: pd.DataFrame,
    human_targets: pd.DataFrame,
    docs: pd.Series | None = None,
    systems: pd.Series | None = None,
    n_boot: int = 200,
    seed: int = 0,
) -> pd.DataFrame:
    """Agreement of every scorer with the human scores, one row per figure.

    ``scorers`` are TextScorers (scored on ``samples`` here) or, in a mapping, precomputed score
    tables keyed by name. ``docs`` and ``systems`` default to the samples' ``doc_id`` and
    ``system_id``. Rows with a NaN score of an entry are left out of that entry (``n`` counts the
    rows used); the ``average`` aspect is the mean correlation over the aspects the entry scores.
    Columns: scorer, aspect, level, correlation, value, ci_low, ci_high, n.
    """
    aspects = [str(a) for a in human_targets.columns]
    docs = samples["doc_id"] if docs is None else docs
    if systems is None and "system_id" in samples.columns:
        systems = samples["system_id"]
    named: list[tuple[str, TextScorer | pd.DataFrame]] = (
        list(scorers.items()) if isinstance(scorers, Mapping) else [(s.name, s) for s in scorers]
    )
    rows: list[dict[str, Any]] = []
    for name, scorer in named:
        scores = scorer if isinstance(scorer, pd.DataFrame) else scorer.score(samples)
        scores = scores.reindex(samples.index)
        for entry, predicted in entries(name, scores, aspects).items():
            used = predicted.dropna(how="any")
            result = agreement(
                used,
                human_targets.loc[used.index, list(predicted.columns)],
                docs.loc[used.index],
                None if systems is None else systems.loc[used.index],
                n_boot,
                seed,
            )
            for aspect in [*predicted.columns, AVERAGE]:
                for level in LEVELS:
                    values = result[aspect][level]
                    for corr in CORRELATIONS:
                        low, high = _ci(values, corr)
                        rows.append(
                            {
                                "scorer": entry,
                                "aspect": aspect,
                                "level": level,
                                "correlation": corr,
                                "value": float(values[corr]),
                                "ci_low": low,
                                "ci_high": high,
                                "n": len(used),
                            }
                        )
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


def _layout(
    table: pd.DataFrame, levels: Sequence[str] | None, correlations: Sequence[str] | None
) -> tuple[pd.DataFrame, list[str]]:
    """Filtered rows and the aspect column order (human aspects, then average)."""
    keep = table
    if levels is not None:
        keep = keep[keep["level"].isin(levels)]
    if correlations is not None:
        keep = keep[keep["correlation"].isin(correlations)]
    aspects = [a for a in dict.fromkeys(keep["aspect"]) if a != AVERAGE] + [AVERAGE]
    return keep, aspects


def _cells(
    table: pd.DataFrame, ci: bool, digits: int
) -> tuple[list[tuple[str, str, str, int]], dict[tuple, str], set[tuple]]:
    """Row keys, formatted cells and the keys of the best value per (level, corr, aspect)."""
    keys = list(
        dict.fromkeys(
            zip(table["scorer"], table["level"], table["correlation"], table["n"], strict=True)
        )
    )
    text: dict[tuple, str] = {}
    best: set[tuple] = set()
    for row in table.itertuples(index=False):
        cell = "-" if np.isnan(row.value) else f"{row.value:.{digits}f}"
        if ci and not np.isnan(row.value) and not np.isnan(row.ci_low):
            cell += f" [{row.ci_low:.{digits}f}, {row.ci_high:.{digits}f}]"
        text[(row.scorer, row.level, row.correlation, row.aspect)] = cell
    for (level, corr, aspect), group in table.groupby(["level", "correlation", "aspect"]):
        if group["value"].notna().any():
            top = group.loc[group["value"].idxmax()]
            best.add((top["scorer"], level, corr, aspect))
    return keys, text, best


def render_markdown(
    table: pd.DataFrame,
    *,
    levels: Sequence[str] | None = None,
    correlations: Sequence[str] | None = None,
    ci: bool = True,
    digits: int = 3,
) -> str:
    """A :func:`compare` table as one markdown table: a row per scorer, level and correlation,
    a column per aspect and the average; the best value of each column and block in bold."""
    keep, aspects = _layout(table, levels, correlations)
    keys, text, best = _cells(keep, ci, digits)
    lines = [
        "| scorer | level | correlation | n | " + " | ".join(aspects) + " |",
        "|---|---|---|---:|" + "---:|" * len(aspects),
    ]
    for scorer, level, corr, n in keys:
        cells = []
        for aspect in aspects:
            cell = text.get((scorer, level, corr, aspect), "")
            cells.append(f"**{cell}**" if (scorer, level, corr, aspect) in best else cell)
        lines.append(f"| {scorer} | {level} | {corr} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_rich(
    table: pd.DataFrame,
    *,
    levels: Sequence[str] | None = None,
    correlations: Sequence[str] | None = None,
    ci: bool = True,
    digits: int = 3,
    title: str = "Agreement with human scores",
):
    """The same table as a ``rich.table.Table`` (print it with a rich Console)."""
    from rich.table import Table

    keep, aspects = _layout(table, levels, correlations)
    keys, text, best = _cells(keep, ci, digits)
    out = Table(title=title)
    for column in ("scorer", "level", "correlation"):
        out.add_column(column)
    out.add_column("n", justify="right")
    for aspect in aspects:
        out.add_column(aspect, justify="right")
    previous = None
    for scorer, level, corr, n in keys:
        if previous is not None and scorer != previous:
            out.add_section()
        previous = scorer
        cells = []
        for aspect in aspects:
            cell = text.get((scorer, level, corr, aspect), "")
            cells.append(f"[bold]{cell}[/bold]" if (scorer, level, corr, aspect) in best else cell)
        out.add_row(scorer, level, corr, str(n), *cells)
    return out
