"""Production scoring without a model: a stand-in backend behind the cached judge, a real bundle.

Samples go in as a table or as a list of ``Sample``; scores come out as numpy arrays with
DataFrame views; a failed criterion score is NaN in the arrays and None in ``Evaluator.score``.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pandas as pd
import pytest

from hdeval.export.bundle import export_bundle
from hdeval.export.evaluator import Evaluator
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.llm.types import DigitScore
from hdeval.params import TaskSpec
from hdeval.scoring.columns import feature_columns
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.run import Sample
from hdeval.training.aggregators import make_aggregator
from hdeval.tree.criteria import CriteriaTree, Criterion

ASPECTS = ["coherence", "fluency"]
TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "well organized"),
        Criterion("fluency", "fluency", "grammatical"),
        Criterion("coherence.order", "order", "logical order", "coherence", 2),
    ]
)
FAIL = "UNREADABLE"


class HashBackend:
    """Digit distributions from a hash of the prompt; a text containing FAIL gets no digit."""

    identity = "hash-stand-in:v1"

    def __init__(self) -> None:
        self.calls = 0

    def digit_scores(self, segments, suffixes):
        self.calls += len(suffixes)
        prompt = "".join(segments)
        out = []
        for suffix in suffixes:
            if FAIL in prompt:
                out.append(DigitScore(mass=0.01, failure="digit mass 0.010 below 0.5"))
                continue
            digest = hashlib.sha256((prompt + suffix).encode()).digest()
            probs = np.random.default_rng(int.from_bytes(digest[:4], "little")).dirichlet(
                np.ones(5)
            )
            out.append(DigitScore(probs=tuple(float(p) for p in probs), mass=0.9))
        return out


@pytest.fixture()
def judge(tmp_path) -> CachedJudge:
    return CachedJudge(HashBackend(), ResultCache(tmp_path / "cache.sqlite"))


@pytest.fixture()
def bundle(tmp_path):
    names = feature_columns([c.id for c in TREE], ["prompt"])
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 5, (60, len(names)))
    Y = np.c_[X[:, 0] + 0.5 * X[:, 2], X[:, 1]]
    return export_bundle(
        tmp_path / "bundle",
        make_aggregator("linear").fit(X, Y),
        TREE,
        names,
        ASPECTS,
        llm_identity=HashBackend.identity,
        task=TaskSpec(),
        modes=["prompt"],
        unconditioned=False,
        training_data="synthetic",
        sample=X,
    )


SAMPLES = [
    Sample("a", "d1", "An article.", "One."),
    Sample("b", "d1", "An article.", f"Two. {FAIL}"),
    Sample("c", "d2", "Another article.", "Three."),
]


def _table(samples: list[Sample]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "doc_id": [s.doc_id for s in samples],
            "source": [s.source for s in samples],
            "output": [s.output for s in samples],
        },
        index=pd.Index([s.id for s in samples]),
    )


def test_scoring_run_stores_arrays_and_builds_the_table(judge) -> None:
    scorer = CriterionScorer(judge)
    run = scorer.score(SAMPLES, TREE, progress=False)
    assert run.ids == ["a", "b", "c"]
    assert run.columns == ["prompt:coherence", "prompt:fluency", "prompt:coherence.order"]
    assert isinstance(run.values, np.ndarray) and run.values.shape == (3, 3)
    assert np.isnan(run.values[1]).all() and np.isfinite(run.values[[0, 2]]).all()
    assert {(f.sample_id, f.column) for f in run.failures} == {("b", c) for c in run.columns}
    features = run.features
    assert list(features.index) == run.ids and list(features.columns) == run.columns
    np.testing.assert_array_equal(features.to_numpy(), run.values)

    # the same samples as a table score the same, all from the cache
    again = scorer.score(_table(SAMPLES), TREE, progress=False)
    assert again.cached == 2 * 3 and again.ids == run.ids
    np.testing.assert_array_equal(again.values, run.values)


def test_table_ids_become_strings(judge) -> None:
    table = _table(SAMPLES[:1])
    table.index = pd.Index([7])
    run = CriterionScorer(judge).score(table, TREE, progress=False)
    assert run.ids == ["7"] and list(run.features.index) == ["7"]


def test_score_samples_nan_for_a_failed_row_and_views_by_id(bundle, judge) -> None:
    evaluator = Evaluator.load(bundle, judge)
    scores = evaluator.score_samples(SAMPLES, progress=False)
    assert scores.ids == ["a", "b", "c"]
    assert scores.aspect_names == ASPECTS and scores.criterion_names == evaluator.feature_names
    assert scores.aspect_values.shape == (3, 2) and scores.criterion_values.shape == (3, 3)
    assert np.isnan(scores.aspect_values[1]).all()  # a failed criterion: no imputed prediction
    assert np.isfinite(scores.aspect_values[[0, 2]]).all()
    assert {f.sample_id for f in scores.failures} == {"b"}
    assert list(scores.aspects.index) == scores.ids and list(scores.aspects.columns) == ASPECTS
    assert list(scores.criteria.columns) == evaluator.feature_names
    predicted = evaluator.aggregator.predict(scores.criterion_values[[0, 2]])
    np.testing.assert_allclose(scores.aspect_values[[0, 2]], predicted)

    row = scores.row(1)
    assert row["aspects"] == {"coherence": None, "fluency": None}
    assert all(v is None for v in row["criteria"].values())
    assert all(isinstance(v, float) for v in scores.row(0)["aspects"].values())

    table_scores = evaluator.score_samples(_table(SAMPLES), progress=False)
    np.testing.assert_array_equal(table_scores.aspect_values, scores.aspect_values)


def test_score_one_text_gives_none_for_failed_scores(bundle, judge) -> None:
    evaluator = Evaluator.load(bundle, judge)
    good = evaluator.score("An article.", "One.")
    assert set(good["aspects"]) == set(ASPECTS)
    assert all(isinstance(v, float) and math.isfinite(v) for v in good["aspects"].values())
    assert set(good["criteria"]) == set(evaluator.feature_names)
    assert good["failures"] == [] and good["truncated"] is False

    bad = evaluator.score("An article.", f"One. {FAIL}")
    assert bad["aspects"] == {"coherence": None, "fluency": None}
    assert bad["criteria"] == dict.fromkeys(evaluator.feature_names)
    assert len(bad["failures"]) == 3 and all("digit mass" in f for f in bad["failures"])
