"""``hierarchy.min_mode_gain``: later layers score only the modes that add to the proxy's CV, and
the tree stops growing when none does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hdeval.data import LabelledData
from hdeval.data.reading import load_labels
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.params import HierarchyParams, TaskSpec
from hdeval.training.hierarchy import next_layer, proxy_report, run_layer, train_hierarchy
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.dvc_project import summeval_rows

REPO = Path(__file__).resolve().parents[1]
TREE = CriteriaTree([Criterion("coherence", "coherence", "the summary is well organized")])


def _data(lik_signal: float) -> tuple[pd.DataFrame, LabelledData]:
    """12 documents x 8 texts; ``lik:coherence`` carries ``lik_signal`` of the human score,
    ``prompt:coherence`` and ``lik:_text`` are noise."""
    rng = np.random.default_rng(0)
    n = 96
    ids = [f"r{i}" for i in range(n)]
    y = rng.normal(size=n)
    samples = pd.DataFrame(
        {
            "doc_id": [f"d{i // 8}" for i in range(n)],
            "system_id": None,
            "source": "s",
            "output": "o",
            "references": [[] for _ in range(n)],
        },
        index=ids,
    )
    features = pd.DataFrame(
        {
            "prompt:coherence": rng.normal(size=n),
            "lik:coherence": lik_signal * y + rng.normal(size=n),
            "lik:_text": rng.normal(size=n),
        },
        index=ids,
    )
    return features, LabelledData(samples, pd.DataFrame({"coherence": y}, index=ids))


def _report(lik_signal: float, gain: float | None):
    features, data = _data(lik_signal)
    params = HierarchyParams(layers=3, min_mode_gain=gain, cv_folds=4)
    return proxy_report(features, data, TREE, 1, params, ["prompt", "likelihood"]).to_dict()


def test_a_mode_adding_nothing_is_not_scored_in_later_layers() -> None:
    report = _report(lik_signal=2.0, gain=0.01)
    assert report["mode_gains"]["likelihood"] > 0.3
    assert report["mode_gains"]["prompt"] < 0.01
    assert report["modes_next"] == ["likelihood"]
    assert report["selected"] == ["coherence"] and report["stopped"] is None
    assert next_layer(report) == (["likelihood"], True)


def test_the_tree_stops_growing_when_no_mode_adds_enough() -> None:
    report = _report(lik_signal=0.0, gain=0.01)
    assert report["modes_next"] == [] and report["selected"] == []
    assert "min_mode_gain=0.01" in report["stopped"] and "stops growing" in report["stopped"]
    assert next_layer(report) == (["prompt", "likelihood"], False)  # keeps its own features


def test_without_min_mode_gain_every_mode_is_scored_as_in_the_paper() -> None:
    report = _report(lik_signal=0.0, gain=None)
    assert report["mode_gains"] == {} and report["modes_next"] == ["prompt", "likelihood"]
    assert report["selected"] == ["coherence"]


@pytest.mark.model
def test_a_stopped_tree_costs_no_decomposition_on_the_real_judge(embedded_backend, tmp_path):
    """With a gain no mode can reach, layer 1 is scored and layers 2-3 neither decompose nor
    score anything new; their features are layer 1's."""
    rows = summeval_rows(48, source_words=120)
    rows = [r for r in rows if r["system_id"] in {"M0", "M8"}]  # 3 docs x 2
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train = load_labels(labels, ["coherence"], (1.0, 5.0))
    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))
    params = HierarchyParams(
        layers=3,
        modes=["prompt", "likelihood"],
        min_mode_gain=1.0,
        cv_folds=3,
        importance_repeats=1,
    )
    generated = judge.tokens.completion  # the backend is shared by the session's tests
    layers = train_hierarchy(TREE, train, judge, TaskSpec(), params, progress=False)
    first, *later = layers
    assert set(first.report.mode_gains) == {"prompt", "likelihood"}
    assert first.report.stopped and first.report.modes_next == []
    assert judge.tokens.completion == generated  # nothing was decomposed
    for layer in later:
        assert layer.tree.depth == 1 and layer.report.selected == []
        assert layer.report.stopped == "the tree stopped growing earlier"
        assert layer.run.computed == 0  # every score came from layer 1's cache entries
        pd.testing.assert_frame_equal(layer.run.features, first.run.features)


@pytest.mark.model
def test_pruning_the_likelihood_mode_keeps_the_texts_own_likelihood(embedded_backend, tmp_path):
    """A later layer that scores only prompts keeps ``lik:_text``, the reference the mode gains
    are measured against, from layer 1's cache entries: pruning drops the criterion-conditioned
    likelihoods, not the text's own."""
    rows = summeval_rows(48, source_words=120)
    rows = [r for r in rows if r["system_id"] in {"M0", "M1"}]  # 3 docs x 2
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train = load_labels(labels, ["coherence"], (1.0, 5.0))
    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))
    params = HierarchyParams(
        layers=3, modes=["prompt", "likelihood"], cv_folds=3, importance_repeats=1
    )
    first = run_layer(1, TREE, [], train, judge, TaskSpec(), params, progress=False)
    later = run_layer(
        2, first.tree, [], train, judge, TaskSpec(), params, False, modes=["prompt"], grow=False
    )
    columns = list(first.run.features.columns)
    text_own = [c for c in columns if c.endswith((":_text", ":_free"))]
    assert {"lik:_text", "lik:_free", "pmi:_text", "len.words:_text"} <= set(text_own)
    conditioned = [c for c in columns if c.endswith(":coherence")]
    assert columns == conditioned + text_own and conditioned[:2] == [
        "prompt:coherence",
        "lik:coherence",
    ]
    assert list(later.run.features.columns) == ["prompt:coherence", *text_own]
    assert later.run.computed == 0  # both from layer 1's cache entries
    pd.testing.assert_frame_equal(
        later.run.features, first.run.features[later.run.features.columns]
    )
    without = HierarchyParams(layers=3, modes=["prompt", "likelihood"], unconditioned=False)
    assert run_layer(
        2, first.tree, [], train, judge, TaskSpec(), without, False, modes=["prompt"], grow=False
    ).run.features.columns.tolist() == ["prompt:coherence"]
