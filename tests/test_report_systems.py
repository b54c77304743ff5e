"""The report's interval coverage and system ranking against the humans, on synthetic
cross-fitted predictions whose system order is known (model-free)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from hdeval.report.render import write_report
from hdeval.report.systems import run_checks, system_agreement
from hdeval.report.systems_view import intervals_markdown, systems_markdown
from tests.report_run import synthetic_run


def systems_data(order: int = 1, n_docs: int = 40, n_systems: int = 8, seed: int = 0):
    """Human scores: system k is 0.25 k above system 0, plus document and text noise; the
    predictions follow them (``order`` 1) or the reversed system order (-1), with noise."""
    rng = np.random.default_rng(seed)
    ids, docs, systems, human, predicted = [], [], [], [], []
    for d in range(n_docs):
        base = rng.normal(3, 0.4)
        for k in range(n_systems):
            truth = base + 0.25 * k + rng.normal(0, 0.3)
            ids.append(f"d{d}#S{k}")
            docs.append(f"d{d}")
            systems.append(f"S{k}")
            human.append(truth)
            shown = truth if order == 1 else base + 0.25 * (n_systems - 1 - k)
            predicted.append(shown + rng.normal(0, 0.3))
    index = pd.Index(ids)
    return (
        pd.DataFrame({"coherence": predicted}, index=index),
        pd.DataFrame({"coherence": human}, index=index),
        pd.Series(docs, index=index),
        pd.Series(systems, index=index),
    )


def test_a_faithful_evaluator_ranks_the_systems_as_the_humans_do() -> None:
    predicted, human, docs, systems = systems_data()
    widths = pd.DataFrame({"coherence": 0.5}, index=predicted.index)
    found = system_agreement(predicted, human, docs, systems, widths, 0.9, n_boot=500)["coherence"]
    assert found["systems"] == 8 and found["documents"] == 40 and found["pairs"] == 28
    assert found["kendall_tau"] > 0.85 and found["pairs_right"] > 0.9
    assert found["called_different"] >= 14 and found["called_right"] == 1.0
    assert found["errors_propagated"]


def test_a_reversed_evaluator_is_caught() -> None:
    predicted, human, docs, systems = systems_data(order=-1)
    found = system_agreement(predicted, human, docs, systems, n_boot=500)["coherence"]
    assert found["kendall_tau"] < -0.85 and found["pairs_right"] < 0.1
    assert found["called_right"] == 0.0 and not found["errors_propagated"]


def test_the_run_checks_land_in_metrics_results_and_the_page(tmp_path) -> None:
    root = synthetic_run(tmp_path / "run")
    ranges = {"coherence": (1.0, 5.0), "fluency": (1.0, 5.0)}
    checks = run_checks(root, 0.5, 1, ranges, seed=0)  # 12 texts: enough at 0.5
    assert checks["intervals"]["level"] == 0.5
    assert set(checks["intervals"]["aspects"]) == {"coherence", "fluency"}
    assert all(f["n"] == 12 for f in checks["intervals"]["aspects"].values())
    assert checks["systems"]["coherence"]["systems"] == 3
    assert checks["systems"]["coherence"]["documents"] == 4
    assert "## Prediction intervals (50 %" in intervals_markdown(checks["intervals"])
    assert "| coherence | 3 | 4 |" in systems_markdown(checks["systems"])
    assert intervals_markdown(None) == "" == systems_markdown(None)

    # 9 texts of the other folds' documents: too few for 95 % (19), enough for 90 % (9)
    assert "intervals" not in run_checks(root, 0.95, 3, ranges, seed=0)
    assert "systems" in run_checks(root, 0.95, 3, ranges, seed=0)
    assert "intervals" in run_checks(root, 0.9, 3, ranges, seed=0)

    metrics = json.loads((root / "metrics.json").read_text())
    (root / "metrics.json").write_text(json.dumps({**metrics, **checks}))
    html = write_report(root).read_text(encoding="utf-8")
    assert 'id="systems"' in html and "Kendall τ" in html and "50 % prediction intervals" in html
