"""The cross-fitted learning curve on a synthetic feature table: every fold's selection sees
exactly the drawn number of its own training documents, never a held-out one, every row is
predicted, r rises with more documents, a size no fold can draw is skipped, and the benchmark
writes from a run folder the table docs/results.md shows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest
import yaml

from hdeval import workspace as ws
from hdeval.data import LabelledData
from hdeval.params import AggregatorParams, DataParams, EvaluateParams, HierarchyParams, Params
from hdeval.report.results_page import LEARNING_TITLE, learning_curve_section
from hdeval.training import crossfit
from hdeval.training.crossfit import cross_fit, outer_folds
from hdeval.training.learning_curve import COLUMNS, learning_curve, summarise
from tests.code_deps import REPO
from tests.test_selection import MEANS_ONLY, TREE, _data

FOLDS = 4


def _params() -> Params:
    return Params(
        data=DataParams(aspects=["coherence", "fluency"], score_range=(-50.0, 50.0)),
        hierarchy=HierarchyParams(**MEANS_ONLY),
        aggregator=AggregatorParams(kinds=["linear"], n_trials=0, cv_folds=2),
        evaluate=EvaluateParams(folds=FOLDS, bootstrap=50),
    )


def _noisy(n_docs: int = 20):
    """_data's features, with targets that follow the layer-2 signal plus as much noise."""
    features, data = _data(n_docs=n_docs)
    rng = np.random.default_rng(1)
    signal = features["lik:coh_a"] + features["lik:flu_a"]
    targets = data.targets.copy()
    for aspect in targets.columns:
        targets[aspect] = signal + 1.5 * rng.normal(size=len(signal))
    return features, LabelledData(data.samples, targets)


@pytest.fixture
def fits(monkeypatch) -> Iterator[list[dict]]:
    """Every select_and_fit call of cross_fit: the documents it trained on and its seconds."""
    calls: list[dict] = []
    real = crossfit.select_and_fit

    def spy(params, tree, features, train, work_dir):
        start = time.perf_counter()
        selected = real(params, tree, features, train, work_dir)
        documents = set(train.samples.loc[features.index, "doc_id"])
        calls.append({"documents": documents, "seconds": time.perf_counter() - start})
        return selected

    monkeypatch.setattr(crossfit, "select_and_fit", spy)
    with joblib.parallel_config(backend="sequential"):  # the spy sees the folds in this process
        yield calls


def test_each_fold_trains_on_the_chosen_documents_of_its_own_and_predicts_every_row(fits):
    features, data = _noisy()
    groups = data.samples["doc_id"].to_numpy()
    held = [set(groups[test]) for _, test in outer_folds(groups, FOLDS, seed=0)]
    picked: list[set] = []

    def first_three(number: int, documents: np.ndarray) -> list:
        assert not set(documents) & held[number]
        picked.append(set(documents[:3]) | held[number])  # a held-out one is never used
        return list(picked[-1])

    fitted = cross_fit(_params(), TREE, features, data, first_three, ablations=False)
    assert [f["train_documents"] for f in fitted.folds] == [3] * FOLDS
    assert [len(c["documents"]) for c in fits] == [3] * FOLDS
    for number, call in enumerate(fits):
        assert call["documents"] <= picked[number] and not call["documents"] & held[number]
    assert set(fitted.predictions) == {"hdeval"}
    assert not fitted.predictions["hdeval"].isna().any().any()
    assert fitted.predictions["hdeval"].index.equals(features.index)


def test_cross_fitted_r_rises_with_the_training_documents(fits):
    features, data = _noisy()
    table = learning_curve(_params(), TREE, features, data, [2, 5, 15, 16], draws=3)
    assert list(table.columns) == list(COLUMNS)
    # 15 documents is every fold's whole training set: drawn once; no fold holds 16
    assert table.groupby("documents").size().to_dict() == {2: 3, 5: 3, 15: 1}
    sizes = [len(c["documents"]) for c in fits]
    assert sizes == [2] * 3 * FOLDS + [5] * 3 * FOLDS + [15] * FOLDS
    assert (table["texts"] == table["documents"] * 8).all()  # 8 texts a document
    assert ((table["ci_low"] <= table["pearson"]) & (table["pearson"] <= table["ci_high"])).all()
    mean = table.groupby("documents")["pearson"].mean()
    assert mean[2] < mean[5] < mean[15]
    assert mean[15] - mean[2] > 0.1
    # the whole training set reproduces cross_fit's own figure
    whole = cross_fit(_params(), TREE, features, data, ablations=False).predictions["hdeval"]
    r = np.mean([np.corrcoef(whole[a], data.targets[a])[0, 1] for a in data.aspects])
    assert table.loc[table["documents"] == 15, "pearson"].item() == pytest.approx(r)
    summary = summarise(table, FOLDS)
    assert summary["draws"].tolist() == [3, 3, 1] and (summary["folds"] == FOLDS).all()
    seconds = [c["seconds"] for c in fits]
    print(f"\nselect_and_fit: {np.mean(seconds):.2f} s mean, {max(seconds):.2f} s max")


def test_a_size_draws_the_same_documents_whichever_other_sizes_are_asked_for(fits):
    features, data = _noisy()
    alone = learning_curve(_params(), TREE, features, data, [5], draws=1)
    together = learning_curve(_params(), TREE, features, data, [2, 5], draws=1)
    assert alone["pearson"].item() == together.loc[together["documents"] == 5, "pearson"].item()


def _run_folder(root: Path, features: pd.DataFrame, data: LabelledData) -> None:
    """A finished run as the benchmark reads it: params, rows, final tree and its modes, and
    evaluate's features."""
    params = _params()
    root.mkdir()
    (root / "params.yaml").write_text(yaml.safe_dump(params.model_dump(mode="json")))
    fields = ["doc_id", "system_id", "source", "output"]
    lines = [
        json.dumps({"id": i, **sample, "scores": data.targets.loc[i].to_dict()})
        for i, sample in data.samples[fields].iterrows()
    ]
    (root / ws.ROWS).parent.mkdir(parents=True)
    (root / ws.ROWS).write_text("\n".join(lines) + "\n")
    final = root / ws.layer_dir(params.hierarchy.layers)
    final.mkdir(parents=True)
    TREE.to_yaml(final / "tree.yaml")
    ws.write_json(final / "report.json", {"modes": ["prompt", "likelihood"]})
    (root / ws.EVALUATE).mkdir(parents=True)
    features.to_csv(root / ws.EVALUATE / "features.csv")


def test_the_benchmark_writes_the_table_the_results_page_shows_as_cross_fitted(tmp_path):
    features, data = _noisy()
    _run_folder(tmp_path / "run", features, data)
    chart = tmp_path / "docs" / "learning_curve.png"
    chart.parent.mkdir()
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "learning_curve.py"), "--run", "run",
         "--sizes", "2", "15", "16", "--draws", "2", "--out", str(chart)],
        capture_output=True, text=True, cwd=tmp_path, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "2 documents: 2 draws in" in result.stdout
    assert "15 documents: 1 draw in" in result.stdout
    assert "16 documents: skipped" in result.stdout
    assert chart.stat().st_size > 0
    written = pd.read_csv(chart.with_suffix(".csv"))
    assert written["documents"].tolist() == [2, 15] and written["draws"].tolist() == [2, 1]
    section = learning_curve_section(tmp_path)
    assert section.startswith(f"## {LEARNING_TITLE}\n") and "over its 4 outer" in section
    assert "| 15 | 120 |" in section and "cross-fitted r, mean of draws" in section
