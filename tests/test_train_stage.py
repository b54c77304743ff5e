"""Stage ``train`` as ``dvc repro`` runs it, in a fresh workspace (no ``work/tune`` yet)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from tests.dvc_project import write_jsonl
from tests.test_selection import MEANS_ONLY, TREE, _data

REPO = Path(__file__).resolve().parents[1]


def test_train_stage_without_tuning_writes_its_outs_in_a_fresh_workspace(tmp_path) -> None:
    """``aggregator.n_trials: 0`` (the Topical-Chat preset) opens no Optuna study, and the stage
    still writes ``work/tune/best_params.json`` and the bundle on a first run."""
    features, data = _data()
    targets = data.targets
    scaled = 1 + 4 * (targets - targets.min()) / (targets.max() - targets.min())
    prepared = tmp_path / "work" / "prepared"
    prepared.mkdir(parents=True)
    rows = [
        {
            "id": i,
            **data.samples.loc[i, ["doc_id", "system_id", "source", "output"]].to_dict(),
            "scores": scaled.loc[i].to_dict(),
        }
        for i in data.samples.index
    ]
    write_jsonl(prepared / "rows.jsonl", rows)  # every row of the run: the bundle is fit on all
    layer = tmp_path / "work" / "layers" / "3"
    layer.mkdir(parents=True)
    TREE.to_yaml(layer / "tree.yaml")
    evaluated = tmp_path / "work" / "evaluate"
    evaluated.mkdir(parents=True)
    features.to_csv(evaluated / "features.csv")
    (evaluated / "predictions").mkdir()
    noise = np.random.default_rng(0).normal(0, 0.3, scaled.shape)
    (scaled + noise).clip(1, 5).to_csv(evaluated / "predictions" / "hdeval.csv")  # cross-fitted
    report = {"modes": ["prompt", "likelihood"], "llm_identity": "test-judge"}
    (layer / "report.json").write_text(json.dumps(report))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update(aspects=["coherence", "fluency"], score_range=[1.0, 5.0], documents=None)
    params["hierarchy"].update(modes=["prompt", "likelihood"], **MEANS_ONLY)
    params["aggregator"].update(kinds=["linear"], n_trials=0, cv_folds=4)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, str(REPO / "pipelines" / "train.py")], cwd=tmp_path, env=env, check=True
    )
    best = json.loads((tmp_path / "work" / "tune" / "best_params.json").read_text())
    assert best["kind"] == "linear" and "likelihood" in best["modes"]
    assert not (tmp_path / "work" / "tune" / "optuna.sqlite").exists()
    card = json.loads((tmp_path / "models" / "evaluator" / "card.json").read_text())
    intervals = card["intervals"]  # from the cross-fitted errors, per aspect
    assert intervals["level"] == 0.9 and sorted(intervals["aspects"]) == ["coherence", "fluency"]
    for spec in intervals["aspects"].values():
        assert sum(spec["rows"]) == len(rows) and 0.3 < max(spec["half_widths"]) < 1.0
