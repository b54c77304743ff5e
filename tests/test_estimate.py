"""`hdeval estimate`: its LLM call counts against a real run's on the embedded judge."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hdeval.data import load_labels
from hdeval.data.splitting import load_split
from hdeval.dhp.runner import rule_perturbed_samples
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.params import Params
from hdeval.pipeline.estimate import calibrate, estimate, render
from hdeval.training.hierarchy import run_layer
from hdeval.tree.criteria import CriteriaTree
from tests.conftest import REPO
from tests.dvc_project import summeval_rows, write_jsonl


def _tiny_params(tmp_path: Path) -> Params:
    """Three SummEval documents x 2 summaries, coherence only, two layers."""
    rows = [r for r in summeval_rows(48, {"M0", "M8"})]  # 3 documents x 2 summaries
    write_jsonl(tmp_path / "labels.jsonl", rows)
    shipped = CriteriaTree.from_yaml(REPO / "data/summeval/aspects.yaml")
    CriteriaTree([shipped.get("coherence")]).to_yaml(tmp_path / "aspects.yaml")
    params = Params.model_validate(
        {
            "data": {
                "path": str(tmp_path / "labels.jsonl"),
                "criteria": str(tmp_path / "aspects.yaml"),
                "aspects": ["coherence"],
                "n_docs": None,
                "test_fraction": 0.25,
            },
            "hierarchy": {
                "layers": 2, "children": 2, "top_k": 1, "cv_folds": 2, "importance_repeats": 1,
                "min_mode_gain": None,
            },
            "dhp": {"n_texts": 2},
        }
    )  # fmt: skip
    return params


@pytest.mark.model
def test_estimated_calls_match_the_real_run(embedded_backend, tmp_path):
    params = _tiny_params(tmp_path)
    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))

    calibration = calibrate(judge, params)
    assert calibration["calls_done"] > 0
    assert set(calibration["seconds_per_call"]) == {"digits", "loglik", "generate"}
    assert set(calibration["seconds_per_token"]) == {"digits", "loglik"}  # a local judge
    stages = {s.stage: s for s in estimate(params, judge)}
    assert list(stages) == ["layer@1", "layer@2", "evaluate", "baselines", "dhp"]
    assert stages["layer@2"].exact  # the decomposition was made by the calibration
    table = render(list(stages.values()), calibration, judge.identity)
    assert "layer@2" in table and "min" in table and "calibration:" in table

    train, _ = load_split(params.data)
    tree = CriteriaTree.from_yaml(tmp_path / "aspects.yaml")
    selected: list[str] = []
    for number in (1, 2):
        embedded_backend.forget()  # each stage is a fresh process
        computed = judge.tokens.prompt
        layer = run_layer(
            number, tree, selected, train, judge, params.task, params.hierarchy, progress=False
        )
        computed = judge.tokens.prompt - computed
        tree, selected = layer.tree, layer.report.selected
        stage = stages[f"layer@{number}"]
        expected = stage.total_calls
        assert abs(layer.run.computed - expected) <= 0.1 * max(expected, 1), (number, expected)
        assert expected > 0
        # the tokens the model computes: each shared prefix once, then every request's row
        assert abs(computed - stage.prompt_tokens) <= 0.1 * stage.prompt_tokens, (number, computed)


@pytest.mark.model
def test_estimate_command_prints_every_stage(embedded_dir, tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(_tiny_params(tmp_path).model_dump(mode="json")))
    hdeval = str(Path(sys.executable).parent / "hdeval")
    done = subprocess.run(
        [hdeval, "estimate", "--params", str(path), "--no-calibrate"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for stage in ("layer@1", "layer@2", "evaluate", "baselines", "dhp", "total"):
        assert re.search(rf"^{re.escape(stage)}\s+\d+", done.stdout, re.M), done.stdout


@pytest.mark.model
def test_dhp_estimate_counts_only_the_baselines_it_is_given(embedded_backend, tmp_path):
    params = _tiny_params(tmp_path)
    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))

    def dhp_calls(baselines: list[str]) -> int:
        params.dhp.baselines = baselines
        return {s.stage: s for s in estimate(params, judge)}["dhp"].total_calls

    bundle_alone = dhp_calls([])
    assert bundle_alone > 0
    assert dhp_calls(["likelihood"]) == bundle_alone  # it reads what the bundle reads
    texts = rule_perturbed_samples(
        load_labels(params.data.path, params.data.aspects, params.data.score_range), params.dhp
    )
    prompts = texts["output"].nunique() * len(params.data.aspects)  # one digit prompt each
    assert dhp_calls(["direct-prompt", "likelihood"]) == bundle_alone + prompts
