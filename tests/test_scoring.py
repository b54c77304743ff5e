"""Cached criterion scoring on the real embedded model: results, cache hits, kill -9 resume."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hdeval.cache import ResultCache
from hdeval.criteria import CriteriaTree, Criterion
from hdeval.scoring import UNCONDITIONED, CriterionScorer

REPO = Path(__file__).resolve().parents[1]
ASPECTS = ["coherence", "consistency", "fluency", "relevance"]
TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "the collective quality of all sentences", None, 1),
        Criterion("consistency", "consistency", "the factual alignment with the article", None, 1),
    ]
)


def labels_path() -> Path:
    return REPO / "data" / "summeval" / "summeval.jsonl"


@pytest.fixture(scope="module")
def samples():
    from hdeval.data import load_labels

    return load_labels(labels_path(), ASPECTS, (1.0, 5.0)).samples


@pytest.mark.model
def test_two_samples_two_criteria_both_modes_then_all_cached(embedded_backend, samples, tmp_path):
    cache = ResultCache(tmp_path / "cache.sqlite")
    scorer = CriterionScorer(embedded_backend, cache, modes=("prompt", "likelihood"))
    first = scorer.score(samples.iloc[:2], TREE, progress=False)
    assert list(first.features.columns) == [
        "prompt:coherence",
        "prompt:consistency",
        "lik:coherence",
        "lik:consistency",
        UNCONDITIONED,
    ]
    assert first.failures == []
    assert first.computed == 2 * 5 and first.cached == 0
    prompt = first.features.filter(like="prompt:").to_numpy()
    assert ((prompt >= 1) & (prompt <= 5)).all()
    assert (first.features.filter(like="lik:").to_numpy() < 0).all()

    again = CriterionScorer(
        embedded_backend, ResultCache(cache.path), modes=("prompt", "likelihood")
    )
    second = again.score(samples.iloc[:2], TREE, progress=False)
    assert second.computed == 0 and second.cached == 10
    assert second.features.equals(first.features)


@pytest.mark.model
def test_failures_are_recorded_not_cached_and_retried(embedded_backend, samples, tmp_path):
    cache = ResultCache(tmp_path / "cache.sqlite")
    strict = CriterionScorer(embedded_backend, cache)
    embedded_backend.min_digit_mass, saved = 1.01, embedded_backend.min_digit_mass
    try:
        run = strict.score(samples.iloc[:1], TREE, progress=False)
    finally:
        embedded_backend.min_digit_mass = saved
    assert len(run.failures) == 2 and "digit mass" in run.failures[0].reason
    assert run.features.isna().all().all()
    assert len(cache.failures()) == 2
    retry = strict.score(samples.iloc[:1], TREE, progress=False)
    assert retry.computed == 2 and retry.failures == []
    assert cache.failures() == {}


def _stored(path: Path) -> int:
    try:
        with sqlite3.connect(path, timeout=30) as conn:
            return conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.mark.model
def test_resume_after_kill_minus_nine_loses_no_completed_score(embedded_backend, samples, tmp_path):
    path = tmp_path / "cache.sqlite"
    n_samples = 6
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.scoring_worker", str(path), str(n_samples)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while _stored(path) < 4 and worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert worker.poll() is None, worker.stderr.read().decode()[-2000:]
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    stored = _stored(path)
    assert 4 <= stored < 2 * n_samples

    resumed = CriterionScorer(embedded_backend, ResultCache(path)).score(
        samples.iloc[:n_samples], TREE, progress=False
    )
    assert resumed.cached == stored
    assert resumed.computed == 2 * n_samples - stored
    assert not any(math.isnan(v) for v in resumed.features.to_numpy().ravel())
