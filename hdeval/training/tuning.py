"""Hyper-parameter search for an aggregator with optuna, resumable from a sqlite file.

The objective is the mean over aspects (outputs) of the Pearson r between human scores and
cross-validated predictions, with folds grouped by source document. The sampler is a seeded TPE;
the study lives in sqlite and is opened with ``load_if_exists=True``, so a killed run resumes and
only *completed* trials count toward ``n_trials``. A study remembers the aggregator kind and a
fingerprint of the data it was run on, and refuses to resume on anything else.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
from sklearn.model_selection import cross_val_predict

from hdeval.errors import ConfigError
from hdeval.training.aggregators import make_aggregator, search_space
from hdeval.training.pruning import group_folds


@contextlib.contextmanager
def _optuna_verbosity(verbose: bool) -> Iterator[None]:
    """Silence optuna's per-trial log lines unless ``verbose``; restore the level afterwards."""
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO if verbose else optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(previous)


def mean_pearson(Y_true: np.ndarray, Y_pred: np.ndarray) -> float:
    """Mean over columns of Pearson r; a column where either side is constant counts as 0."""
    Y_true = np.asarray(Y_true, dtype=float).reshape(len(Y_true), -1)
    Y_pred = np.asarray(Y_pred, dtype=float).reshape(len(Y_pred), -1)
    rs = []
    for t, p in zip(Y_true.T, Y_pred.T, strict=True):
        if np.std(t) == 0 or np.std(p) == 0:
            rs.append(0.0)
        else:
            rs.append(float(np.corrcoef(t, p)[0, 1]))
    return float(np.mean(rs))


def cv_score(
    kind: str,
    params: dict[str, Any],
    X: pd.DataFrame,
    Y: pd.DataFrame,
    groups: Sequence | np.ndarray,
    n_splits: int = 5,
    seed: int = 0,
) -> float:
    """Mean Pearson r of grouped cross-validated predictions of one aggregator configuration."""
    folds = group_folds(groups, n_splits, seed)
    estimator = make_aggregator(kind, random_state=seed, **params)
    Y_values = Y.to_numpy(dtype=float)
    predictions = cross_val_predict(estimator, X.to_numpy(dtype=float), Y_values, cv=folds)
    return mean_pearson(Y_values, predictions)


def data_fingerprint(X: pd.DataFrame, Y: pd.DataFrame, groups: Sequence | np.ndarray) -> str:
    """sha256 over column names and values of X, Y and the groups."""
    digest = hashlib.sha256()
    for frame in (X, Y):
        digest.update(repr(list(map(str, frame.columns))).encode())
        digest.update(np.ascontiguousarray(frame.to_numpy(dtype=float)).tobytes())
    digest.update(repr(list(map(str, groups))).encode())
    return digest.hexdigest()


def _storage_url(storage_path: Path) -> str:
    storage_path = Path(storage_path)
    storage_path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{storage_path.resolve()}"


def open_study(storage_path: Path, study_name: str, seed: int = 0) -> optuna.Study:
    """Create or load a maximising study in sqlite, with a seeded TPE sampler."""
    return optuna.create_study(
        study_name=study_name,
        storage=_storage_url(storage_path),
        sampler=optuna.samplers.TPESampler(seed=seed),
        direction="maximize",
        load_if_exists=True,
    )


def _check_study(study: optuna.Study, kind: str, fingerprint: str) -> None:
    """Stamp a new study with kind and data fingerprint; refuse a mismatching old one."""
    attrs = study.user_attrs
    if not attrs:
        study.set_user_attr("kind", kind)
        study.set_user_attr("data_fingerprint", fingerprint)
        return
    if attrs.get("kind") != kind:
        raise ConfigError(
            f"study {study.study_name!r} was run for aggregator {attrs.get('kind')!r}, not {kind!r}"
        )
    if attrs.get("data_fingerprint") != fingerprint:
        raise ConfigError(
            f"study {study.study_name!r} was run on other data; use a new study name or file"
        )


def completed_trials(study: optuna.Study) -> int:
    """Number of trials of ``study`` that completed (failed or interrupted ones do not count)."""
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def best_params(
    kind: str, study: optuna.Study, fixed: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The best trial's parameters, rebuilt into ``make_aggregator`` keyword arguments."""
    return search_space(kind, optuna.trial.FixedTrial(study.best_trial.params), fixed)


def tune(
    kind: str,
    X: pd.DataFrame,
    Y: pd.DataFrame,
    groups: Sequence | np.ndarray,
    n_trials: int,
    seed: int,
    storage_path: Path,
    study_name: str,
    *,
    n_splits: int = 5,
    verbose: bool = False,
    fixed: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Search ``kind``'s hyper-parameters; returns the best ones as ``make_aggregator`` kwargs.

    ``fixed`` parameters (:func:`~hdeval.training.aggregators.constraints`) are not searched; a
    study
    holds one search space, so give each ``fixed`` its own ``study_name``.

    Runs as many trials as the study lacks to hold ``n_trials`` completed ones (none if it already
    does); trials that failed or were cut off by a killed run do not count. An error in a trial
    propagates (the trial is stored as failed). The best value and every trial stay in the sqlite
    file (see :func:`open_study`).
    """
    if n_trials < 1:
        raise ConfigError(f"n_trials must be >= 1, got {n_trials}")
    if not (len(X) == len(Y) == len(groups)):
        raise ConfigError(f"X, Y and groups differ in length: {len(X)}, {len(Y)}, {len(groups)}")

    def objective(trial: optuna.Trial) -> float:
        return cv_score(kind, search_space(kind, trial, fixed), X, Y, groups, n_splits, seed)

    with _optuna_verbosity(verbose):
        study = open_study(storage_path, study_name, seed)
        _check_study(study, kind, data_fingerprint(X, Y, groups))
        remaining = n_trials - completed_trials(study)
        if remaining > 0:
            study.optimize(objective, n_trials=remaining)
        return best_params(kind, study, fixed)
