"""Hyper-parameter search: seeded, resumable from sqlite, grouped CV objective."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from hdeval.errors import ConfigError
from hdeval.training.aggregators import search_space
from hdeval.training.tuning import completed_trials, cv_score, mean_pearson, open_study, tune
from tests.processes import kill_when, start_worker


def synthetic(n_docs: int = 20, per_doc: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    X = pd.DataFrame(rng.uniform(1, 5, size=(n, 5)), columns=[f"prompt:c{i}" for i in range(5)])
    Y = pd.DataFrame(
        {
            "coh": X["prompt:c0"] + 0.5 * X["prompt:c1"] + rng.normal(scale=0.3, size=n),
            "flu": np.where(X["prompt:c2"] > 3, 4.0, 2.0) + rng.normal(scale=0.3, size=n),
        }
    )
    groups = np.repeat(np.arange(n_docs), per_doc)
    return X, Y, groups


REPO = Path(__file__).resolve().parents[1]


def test_mean_pearson() -> None:
    truth = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    assert mean_pearson(truth, truth) == pytest.approx(1.0)
    assert mean_pearson(truth, -truth) == pytest.approx(-1.0)
    constant = np.array([[1.0, 2.0], [1.0, 1.0], [1.0, 3.0]])  # first column constant -> 0
    assert mean_pearson(truth, constant) == pytest.approx((0.0 + 0.5) / 2)


def test_cv_score_is_grouped_and_informative() -> None:
    X, Y, groups = synthetic()
    assert cv_score("linear", {}, X, Y, groups, n_splits=4) > 0.6
    shuffled = Y.sample(frac=1.0, random_state=0).reset_index(drop=True)
    assert cv_score("linear", {}, X, shuffled, groups, n_splits=4) < 0.3


def test_tune_is_seeded_and_returns_aggregator_params(tmp_path) -> None:
    X, Y, groups = synthetic()
    runs = [
        tune("tree", X, Y, groups, 4, 7, tmp_path / f"run{i}.sqlite", "tree", n_splits=3)
        for i in range(2)
    ]
    assert runs[0] == runs[1]
    assert set(runs[0]) == {"max_depth", "min_samples_leaf", "max_features"}
    studies = [open_study(tmp_path / f"run{i}.sqlite", "tree") for i in range(2)]
    values = [[t.value for t in s.trials] for s in studies]
    assert values[0] == values[1] and len(values[0]) == 4
    assert studies[0].best_value == max(values[0]) > 0.3


def test_mlp_params_rebuild_hidden_layers(tmp_path) -> None:
    X, Y, groups = synthetic(n_docs=8, per_doc=5)
    params = tune("mlp", X, Y, groups, 1, 0, tmp_path / "mlp.sqlite", "mlp", n_splits=2)
    hidden = params["hidden_layer_sizes"]
    assert isinstance(hidden, tuple) and len(hidden) == 2


def test_resume_counts_only_completed_trials(tmp_path) -> None:
    X, Y, groups = synthetic()
    path = tmp_path / "study.sqlite"
    tune("linear", X, Y, groups, 2, 0, path, "lin", n_splits=3)

    # Simulate a run killed mid-trial and a failed trial: neither may count as done.
    study = open_study(path, "lin")
    study.ask()  # left RUNNING forever, as after kill -9
    failed = study.ask()
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert completed_trials(study) == 2

    tune("linear", X, Y, groups, 5, 0, path, "lin", n_splits=3)
    study = open_study(path, "lin")
    assert completed_trials(study) == 5
    assert len(study.trials) == 7  # 5 complete + 1 running + 1 failed

    # Already enough completed trials: nothing runs.
    tune("linear", X, Y, groups, 3, 0, path, "lin", n_splits=3)
    assert len(open_study(path, "lin").trials) == 7


def test_resume_refuses_other_kind_or_data(tmp_path) -> None:
    X, Y, groups = synthetic()
    path = tmp_path / "study.sqlite"
    tune("linear", X, Y, groups, 1, 0, path, "s", n_splits=3)
    with pytest.raises(ConfigError, match="'linear'"):
        tune("tree", X, Y, groups, 1, 0, path, "s", n_splits=3)
    with pytest.raises(ConfigError, match="other data"):
        tune("linear", X, Y * 2, groups, 2, 0, path, "s", n_splits=3)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_optuna_trial_logging_is_silenced(tmp_path) -> None:
    X, Y, groups = synthetic(n_docs=6, per_doc=4)
    level = optuna.logging.get_verbosity()
    records = _Records()
    logging.getLogger("optuna").addHandler(records)
    try:
        tune("linear", X, Y, groups, 2, 0, tmp_path / "q.sqlite", "quiet", n_splits=2)
        assert not [m for m in records.messages if "Trial" in m]
        assert optuna.logging.get_verbosity() == level
        tune("linear", X, Y, groups, 1, 0, tmp_path / "v.sqlite", "loud", n_splits=2, verbose=True)
        assert [m for m in records.messages if "Trial 0 finished" in m]  # the check can fail
        assert optuna.logging.get_verbosity() == level
    finally:
        logging.getLogger("optuna").removeHandler(records)


def _completed_in_sqlite(path: Path) -> int:
    """Completed trials, read straight from the study's sqlite while another process writes it."""
    try:
        with sqlite3.connect(path, timeout=30) as conn:
            query = "SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'"
            return conn.execute(query).fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def test_kill_minus_nine_mid_study_then_resume(tmp_path) -> None:
    """A tuning process killed with SIGKILL mid-study: the next run keeps its completed trials."""
    path = tmp_path / "study.sqlite"
    n_trials = 30
    worker = start_worker("tuning_worker", str(path), str(n_trials))
    kill_when(worker, lambda: _completed_in_sqlite(path) >= 3)

    study = open_study(path, "killed")
    before = {
        t.number: (t.params, t.value)
        for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    }
    assert 3 <= len(before) < n_trials  # killed mid-study

    X, Y, groups = synthetic()
    params = tune("tree", X, Y, groups, n_trials, 0, path, "killed", n_splits=3)

    study = open_study(path, "killed")
    assert study.user_attrs["kind"] == "tree"
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == n_trials
    after = {t.number: (t.params, t.value) for t in complete}
    assert {n: after[n] for n in before} == before  # kept, not redone
    others = [t for t in study.trials if t.state != optuna.trial.TrialState.COMPLETE]
    assert len(others) <= 1 and all(t.state == optuna.trial.TrialState.RUNNING for t in others)
    assert len(study.trials) == n_trials + len(others)
    assert params == search_space("tree", optuna.trial.FixedTrial(study.best_trial.params))
    assert study.best_value == max(v for _, v in after.values())
