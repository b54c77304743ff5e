"""The report's check of what users score texts for: the prediction intervals' coverage on
held-out texts, and the evaluator's system ranking against the humans', both on the
cross-fitted predictions.

Ranking: per aspect, Kendall τ between the evaluator's and the humans' per-system means (over
the documents every system has), and pairwise agreement: the share of system pairs the
evaluator orders as the humans do, and, of the pairs ``hdeval compare-systems`` calls
different, the share in the humans' order. Where the run has intervals, a pair is called as the
tool calls it with a bundle's error of a system's mean, that error measured on the other
systems only (the pair's own offsets never widen or narrow its own CI).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from hdeval.errors import ConfigError
from hdeval.report.coverage import coverage, held_out_widths
from hdeval.report.record import PREDICTIONS, _held_out, _table
from hdeval.systems.statistics import PairDifference, compare, error_sd
from hdeval.systems.system_error import system_error_sd
from hdeval.workspace import ROWS

log = logging.getLogger(__name__)

#: Document folds of the coverage check.
FOLDS = 5


def _per_document(values: pd.Series, docs: pd.Series, systems: pd.Series) -> pd.DataFrame:
    """Documents (rows) x systems: the mean of ``values``, documents every system has only."""
    table = pd.DataFrame({"v": values, "doc": docs, "system": systems}).dropna()
    return table.groupby(["doc", "system"])["v"].mean().unstack("system").dropna()


def system_agreement(
    predicted: pd.DataFrame,
    human: pd.DataFrame,
    docs: pd.Series,
    systems: pd.Series,
    widths: pd.DataFrame | None = None,
    level: float | None = None,
    *,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, dict]:
    """Per aspect: systems, documents, Kendall τ of the per-system means, the pairs ordered as
    the humans order them, and of those called different, the share in the humans' order."""
    out = {}
    for aspect in predicted.columns:
        ours = _per_document(predicted[aspect], docs, systems)
        theirs = _per_document(human.loc[predicted.index, aspect], docs, systems)
        shared = ours.index.intersection(theirs.index)
        names = [str(s) for s in ours.columns]
        ours, theirs = ours.loc[shared, names], theirs.loc[shared, names]
        sd = None
        if widths is not None:
            spread = _per_document(widths[aspect], docs, systems).reindex_like(ours)
            sd = error_sd(spread.to_numpy(float), level)
        scores = ours.to_numpy(float)
        found = compare(aspect, names, scores, sd, n_boot=n_boot, alpha=alpha, seed=seed)
        called_pairs = [p.significant for p in found.pairs]
        if sd is not None:  # as the tool does with such a bundle: the system error added too
            pair_rows = (predicted[aspect], human.loc[predicted.index, aspect], systems)
            called_pairs = [
                _called(p, names, scores, sd, pair_rows, n_boot, alpha, seed) for p in found.pairs
            ]
        truth = theirs.mean()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tau = float(stats.kendalltau(ours.mean(), truth).statistic)
        right = [
            np.sign(truth[p.first] - truth[p.second]) for p in found.pairs
        ]  # +1: the evaluator's higher system is the humans' higher one
        called = [r for r, c in zip(right, called_pairs, strict=True) if c]
        out[str(aspect)] = {
            "systems": len(names),
            "documents": len(shared),
            "kendall_tau": tau,
            "pairs": len(found.pairs),
            "pairs_right": _share(right),
            "called_different": len(called),
            "called_right": _share(called),
            "errors_propagated": found.propagated,
        }
    return out


def _called(
    pair: PairDifference,
    names: list[str],
    scores: np.ndarray,
    sd: np.ndarray,
    rows: tuple[pd.Series, pd.Series, pd.Series],
    n_boot: int,
    alpha: float,
    seed: int,
) -> bool:
    """Whether ``compare-systems`` calls ``pair`` different with the error of a system's mean
    measured on the other systems' rows only (``rows``: predicted, human, system per text), as
    it would be for two systems the bundle was not trained on: Holm p < alpha over all pairs,
    and the pair's CI, with that error, excludes 0."""
    predicted, human, systems = rows
    others = ~systems.isin([pair.first, pair.second])
    system_sd = system_error_sd(predicted[others], human[others], systems[others])
    columns = [names.index(pair.first), names.index(pair.second)]
    alone = compare("", [pair.first, pair.second], scores[:, columns], sd[:, columns],
                    system_sd=system_sd, n_boot=n_boot, alpha=alpha, seed=seed)  # fmt: skip
    return bool(pair.p_holm < alpha and alone.pairs[0].low > 0)


def _share(signs: Sequence[float]) -> float | None:
    """The share of +1 among the pairs the humans order (a human tie counts as neither)."""
    ordered = [s for s in signs if s != 0]
    return float(np.mean(np.asarray(ordered) > 0)) if ordered else None


def run_checks(root: Path, level: float | None, bins: int, ranges: Mapping, seed: int) -> dict:
    """The run's interval coverage (``intervals``) and, where the rows name two systems or
    more, its system-level agreement (``systems``); empty without cross-fitted predictions."""
    predicted, rows = _table(root / PREDICTIONS), _held_out(root / ROWS)
    if predicted is None or rows is None:
        return {}
    human = pd.DataFrame(list(rows.loc[predicted.index, "scores"]), index=predicted.index)
    docs = rows.loc[predicted.index, "doc_id"].astype(str)
    found: dict = {}
    widths = None
    folds = min(FOLDS, docs.nunique())
    try:
        if level is not None and folds >= 2:
            widths = held_out_widths(predicted, human, docs, level, bins, folds, seed)
    except ConfigError as exc:  # too few texts for the level: no intervals to check
        log.warning("prediction intervals not checked: %s", exc)
    if widths is not None:
        found["intervals"] = {
            "level": level,
            "method": f"cross-conformal over {folds} document folds",
            "aspects": coverage(predicted, human, widths, ranges),
        }
    systems = rows.get("system_id")
    if systems is not None and systems.loc[predicted.index].nunique() >= 2:
        found["systems"] = system_agreement(
            predicted, human, docs, systems.loc[predicted.index].astype(str), widths, level,
            seed=seed,
        )  # fmt: skip
    return found
