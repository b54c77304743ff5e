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


def level_correlations(
    pred: np.ndarray, human: np.ndarray, docs: np.ndarray, systems: np.ndarray | None
) -> dict[str, dict[str, float]]:
    """Correlations of one aspect at the three levels."""
    out: dict[str, dict[str, float]] = {"dataset": {}, "summary": {}, "system": {}}
    for name in CORRELATIONS:
        out["dataset"][name] = _corr(name, pred, human)
        per_doc = [_corr(name, pred[docs == d], human[docs == d]) for d in pd.unique(docs)]
        per_doc = [v for v in per_doc if not np.isnan(v)]
        out["summary"][name] = float(np.mean(per_doc)) if per_doc else float("nan")
        if systems is not None and len(pd.unique(systems)) >= 3:
            frame = pd.DataFrame({"p": pred, "h": human, "s": systems}).groupby("s").mean()
            out["system"][name] = _corr(name, frame["p"].to_numpy(), frame["h"].to_numpy())
        else:
            out["system"][name] = float("nan")
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
    rng = np.random.default_rng(seed)
    unique = pd.unique(docs)
    rows_of = {d: np.flatnonzero(docs == d) for d in unique}
    aspects = list(predicted.columns)
    draws: dict = {}
    for b in range(n_boot):
        chosen = rng.choice(unique, size=len(unique), replace=True)
        rows = np.concatenate([rows_of[d] for d in chosen])
        # relabel documents so that a document drawn twice counts as two documents
        boot_docs = np.concatenate([np.full(len(rows_of[d]), i) for i, d in enumerate(chosen)])
        boot_sys = None if systems is None else systems[rows]
        per = {
            a: level_correlations(
                predicted[a].to_numpy(float)[rows],
                human[a].to_numpy(float)[rows],
                boot_docs,
                boot_sys,
            )
            for a in aspects
        }
        per["average"] = _average(per, aspects)
        for key, levels in per.items():
            for level, values in levels.items():
                for name, value in values.items():
                    draws.setdefault((key, level, name), []).append(value)
        del b
    for (key, level, name), values in draws.items():
        arr = np.asarray(values, dtype=float)
        arr = arr[~np.isnan(arr)]
        ci = [float(np.percentile(arr, 2.5)), float(np.percentile(arr, 97.5))] if len(arr) else None
        result[key][level][name + "_ci"] = ci
