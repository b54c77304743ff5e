"""Agreement with human scores at dataset, summary (per document) and system level.

Summary level is the mean over documents of the per-document correlation (documents whose
human or predicted scores are constant are skipped). System level correlates per-system means.
95 % confidence intervals come from a bootstrap over documents, so rows of one document move
together.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats

CORRELATIONS = {
    "pearson": lambda a, b: stats.pearsonr(a, b)[0],
    "spearman": lambda a, b: stats.spearmanr(a, b)[0],
    "kendall": lambda a, b: stats.kendalltau(a, b)[0],
}


def _corr(name: str, a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(CORRELATIONS[name](a, b))


def _system_corr(name: str, pred: np.ndarray, human: np.ndarray, systems: np.ndarray) -> float:
    """Correlation of per-system means (NaN with fewer than 3 systems)."""
    keys, inverse = np.unique(systems, return_inverse=True)
    if len(keys) < 3:
        return float("nan")
    counts = np.bincount(inverse)
    return _corr(name, np.bincount(inverse, pred) / counts, np.bincount(inverse, human) / counts)


def _mean_or_nan(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(np.mean(values)) if len(values) else float("nan")


def level_correlations(
    pred: np.ndarray, human: np.ndarray, docs: np.ndarray, systems: np.ndarray | None
) -> dict[str, dict[str, float]]:
    """Correlations of one aspect at the three levels."""
    out: dict[str, dict[str, float]] = {"dataset": {}, "summary": {}, "system": {}}
    for name in CORRELATIONS:
        out["dataset"][name] = _corr(name, pred, human)
        out["summary"][name] = _mean_or_nan(_per_document(name, pred, human, docs))
        out["system"][name] = (
            float("nan") if systems is None else _system_corr(name, pred, human, systems)
        )
    return out


def agreement(
    predicted: pd.DataFrame,
    human: pd.DataFrame,
    docs: pd.Series,
    systems: pd.Series | None = None,
    n_boot: int = 200,
    seed: int = 0,
) -> dict:
    """Per aspect and averaged: ``{aspect: {level: {corr: value, corr+"_ci": [lo, hi]}}}``."""
    index = predicted.index
    docs_arr = docs.loc[index].to_numpy()
    sys_arr = None if systems is None or systems.isna().all() else systems.loc[index].to_numpy()
    aspects = list(predicted.columns)
    result = {
        a: level_correlations(
            predicted[a].to_numpy(float), human.loc[index, a].to_numpy(float), docs_arr, sys_arr
        )
        for a in aspects
    }
    result["average"] = _average(result, aspects)
    if n_boot:
        _add_bootstrap_ci(result, predicted, human.loc[index], docs_arr, sys_arr, n_boot, seed)
    return result


def _average(result: dict, aspects: list[str]) -> dict:
    avg: dict[str, dict[str, float]] = {}
    for level in ("dataset", "summary", "system"):
        avg[level] = {
            name: float(np.nanmean([result[a][level][name] for a in aspects]))
            if any(not np.isnan(result[a][level][name]) for a in aspects)
            else float("nan")
            for name in CORRELATIONS
        }
    return avg


def _add_bootstrap_ci(result, predicted, human, docs, systems, n_boot, seed) -> None:
    """Percentile CIs over ``n_boot`` draws of whole documents (a document drawn twice counts
    twice). A document's own correlation is the same in every draw, so the summary level reuses
    the per-document values; the dataset and system levels are recomputed on each draw's rows."""
    aspects = list(predicted.columns)
    pred = {a: predicted[a].to_numpy(float) for a in aspects}
    true = {a: human[a].to_numpy(float) for a in aspects}
    per_doc = {
        (a, name): _per_document(name, pred[a], true[a], docs)
        for a in aspects
        for name in CORRELATIONS
    }
    draws: dict[tuple[str, str, str], np.ndarray] = {
        (a, level, name): np.full(n_boot, np.nan)
        for a in aspects
        for level in ("dataset", "summary", "system")
        for name in CORRELATIONS
    }
    for b, (chosen, rows) in enumerate(_document_draws(docs, n_boot, seed)):
        for a in aspects:
            p, h = pred[a][rows], true[a][rows]
            for name in CORRELATIONS:
                draws[a, "dataset", name][b] = _corr(name, p, h)
                draws[a, "summary", name][b] = _mean_or_nan(per_doc[a, name][chosen])
                if systems is not None:
                    draws[a, "system", name][b] = _system_corr(name, p, h, systems[rows])
    for level in ("dataset", "summary", "system"):
        for name in CORRELATIONS:
            stacked = np.stack([draws[a, level, name] for a in aspects])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                draws["average", level, name] = np.nanmean(stacked, axis=0)
    for (key, level, name), values in draws.items():
        values = values[~np.isnan(values)]
        ci = (
            [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
            if len(values)
            else None
        )
        result[key][level][name + "_ci"] = ci


def _document_draws(docs: np.ndarray, n_boot: int, seed: int):
    """``n_boot`` bootstrap draws of whole documents: per draw, the drawn documents (indices
    into ``pd.unique(docs)``; a document drawn twice counts twice) and the rows they hold."""
    rng = np.random.default_rng(seed)
    unique = pd.unique(docs)
    rows_of = [np.flatnonzero(docs == d) for d in unique]
    for _ in range(n_boot):
        chosen = rng.choice(len(unique), size=len(unique), replace=True)
        yield chosen, np.concatenate([rows_of[i] for i in chosen])


def _per_document(name: str, pred: np.ndarray, human: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """The correlation within each document, in ``pd.unique(docs)`` order."""
    return np.array([_corr(name, pred[docs == d], human[docs == d]) for d in pd.unique(docs)])


def paired_difference(
    first: pd.DataFrame,
    second: pd.DataFrame,
    human: pd.DataFrame,
    docs: pd.Series,
    systems: pd.Series | None = None,
    level: str = "dataset",
    correlation: str = "pearson",
    n_boot: int = 200,
    seed: int = 0,
) -> dict[str, float]:
    """The aspect-averaged ``correlation`` at ``level`` of ``first`` minus that of ``second``,
    on the rows both scored, with a 95 % CI from a paired bootstrap over documents (both are
    measured on the same drawn documents, so what they share does not widen the interval).

    Returns ``{"difference", "ci_low", "ci_high", "n"}``.
    """
    rows = first.dropna(how="any").index.intersection(second.dropna(how="any").index)
    aspects = [a for a in first.columns if a in second.columns]
    doc_arr = docs.loc[rows].to_numpy()
    sys_arr = None if systems is None or systems.isna().all() else systems.loc[rows].to_numpy()
    true = {x: human.loc[rows, x].to_numpy(float) for x in aspects}
    scorers = [
        {x: table.loc[rows, x].to_numpy(float) for x in aspects} for table in (first, second)
    ]
    per_doc = [
        {x: _per_document(correlation, pred[x], true[x], doc_arr) for x in aspects}
        for pred in scorers
    ]

    def averaged(which: int, take: np.ndarray, chosen: np.ndarray) -> float:
        pred, values = scorers[which], []
        for x in aspects:
            if level == "summary":
                values.append(_mean_or_nan(per_doc[which][x][chosen]))
            elif level == "dataset":
                values.append(_corr(correlation, pred[x][take], true[x][take]))
            elif sys_arr is not None:
                values.append(
                    _system_corr(correlation, pred[x][take], true[x][take], sys_arr[take])
                )
        return _mean_or_nan(np.asarray(values, dtype=float))

    every, documents = np.arange(len(rows)), np.arange(len(pd.unique(doc_arr)))
    difference = averaged(0, every, documents) - averaged(1, every, documents)
    draws = np.array(
        [
            averaged(0, take, chosen) - averaged(1, take, chosen)
            for chosen, take in _document_draws(doc_arr, n_boot, seed)
        ],
        dtype=float,
    )
    draws = draws[~np.isnan(draws)]
    low, high = (
        (float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5)))
        if len(draws)
        else (float("nan"), float("nan"))
    )
    return {"difference": float(difference), "ci_low": low, "ci_high": high, "n": len(rows)}
