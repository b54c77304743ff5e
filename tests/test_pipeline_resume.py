"""Real DVC, real `train` stage: a `dvc repro` killed while tuning keeps the previous bundle and
every finished Optuna trial. The layer features are written by the test (the LLM stages are
covered by test_pipeline.py); `dvc repro --single-item train` runs only the stage under test."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest

from hdeval.export.evaluator import Evaluator
from hdeval.llm.judge import CachedJudge
from hdeval.llm.server.backend import OpenAICompatibleBackend
from hdeval.params import Params
from hdeval.scoring.columns import Profile, feature_columns
from hdeval.tree.criteria import CriteriaTree
from tests.dvc_project import DVC, jsonl_ids, make_project, run, summeval_rows, write_params
from tests.processes import kill_when
from tests.test_openai_faults import FaultServer


def _completed(storage) -> int:
    if not storage.is_file():
        return 0
    with sqlite3.connect(f"file:{storage}?mode=ro", uri=True, timeout=5) as db:
        try:
            return db.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
        except sqlite3.OperationalError:  # tables not created yet
            return 0


def _write_layer(root, identity: str) -> None:
    """work/layers/3 as the layer stage writes it (tree, features of the tree's rows, report) and
    work/evaluate as evaluate does (every row of the run on the final tree, the cross-fitted
    predictions)."""
    layer = root / "work" / "layers" / "3"
    layer.mkdir(parents=True)
    tree = CriteriaTree.from_yaml(root / "aspects.yaml")
    tree.to_yaml(layer / "tree.yaml")
    ids = jsonl_ids(root / "work" / "prepared" / "rows.jsonl")
    columns = feature_columns(
        [c.id for c in tree], ["prompt", "likelihood"], True, Profile.of(Params().hierarchy)
    )
    rng = np.random.default_rng(0)
    features = pd.DataFrame(rng.normal(size=(len(ids), len(columns))), index=ids, columns=columns)
    tree_rows = jsonl_ids(root / "work" / "prepared" / "train.jsonl")
    features.loc[tree_rows].to_csv(layer / "features.csv")
    evaluate = root / "work" / "evaluate"
    (evaluate / "predictions").mkdir(parents=True)
    features.to_csv(evaluate / "features.csv")
    predicted = pd.DataFrame({"coherence": rng.uniform(1, 5, len(ids))}, index=ids)
    predicted.to_csv(evaluate / "predictions" / "hdeval.csv")  # the interval widths' errors
    report = {"llm_identity": identity, "modes": ["prompt", "likelihood"]}
    (layer / "report.json").write_text(json.dumps(report))


@pytest.fixture()
def judge() -> Iterator[CachedJudge]:
    """A server judge named by llm.identity; a scripted server on 127.0.0.1 answers its one
    GET /models, and it is never asked for a score."""
    with FaultServer() as server:
        yield CachedJudge(OpenAICompatibleBackend(server.base_url, model="fault", identity="t"))


def test_killed_tuning_keeps_the_bundle_and_the_finished_trials(tmp_path, judge):
    root = tmp_path / "project"
    root.mkdir()
    env, params = make_project(
        root,
        summeval_rows(64),
        {"data": {"test_fraction": 0.25}, "aggregator": {"n_trials": 3, "cv_folds": 2}},
    )
    run([DVC, "repro", "prepare"], root, env)
    _write_layer(root, judge.identity)
    storage = root / "work" / "tune" / "optuna.sqlite"
    bundle = root / "models" / "evaluator"

    run([DVC, "repro", "--single-item", "train"], root, env)
    card = (bundle / "card.json").read_text()
    assert _completed(storage) == 3

    n_trials = 40
    params["aggregator"]["n_trials"] = n_trials
    write_params(root, params)
    repro = subprocess.Popen(
        [DVC, "repro", "--single-item", "train"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    kill_when(repro, lambda: _completed(storage) >= 6, timeout=300, group=True)
    done = _completed(storage)
    assert 6 <= done < n_trials
    assert (bundle / "card.json").read_text() == card  # the previous bundle, untouched
    assert Evaluator.load(bundle, judge).aspects == ["coherence"]

    resumed = run([DVC, "repro", "--single-item", "train"], root, env)
    assert "Running stage 'train'" in resumed
    assert _completed(storage) == n_trials  # only the missing trials ran
    assert Evaluator.load(bundle, judge).aspects == ["coherence"]
    assert not list(bundle.parent.glob(".evaluator.*"))  # the killed export's leftovers are gone
