"""Tunes an aggregator on test_tuning's synthetic data; the kill -9 test runs it as a process."""

from __future__ import annotations

import sys

from hdeval.training.tuning import tune
from tests.test_tuning import synthetic


def main(storage: str, n_trials: int) -> None:
    X, Y, groups = synthetic()
    tune("tree", X, Y, groups, n_trials, 0, storage, "killed", n_splits=3)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
