"""What real ``dvc status`` re-runs in the real dvc.yaml when one param changes: a project whose
every stage has outs (placeholders, written by no stage) and a dvc.lock that records them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from hdeval.params import load_params
from hdeval.pipeline.project_state import dvc_state
from hdeval.pipeline.registry import STAGES
from tests.dvc_project import DVC, REPO, run, write_params

LAYERS = ("layer@1", "layer@2", "layer@3")


def _placeholder(root: Path, path: str) -> None:
    """A file at ``path``, or, for a path without a suffix, a folder holding one."""
    target = root / path
    if target.exists():
        return
    if target.suffix:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("placeholder\n")
    else:
        target.mkdir(parents=True, exist_ok=True)
        (target / "placeholder.txt").write_text("placeholder\n")


@pytest.fixture
def committed(tmp_path: Path) -> Path:
    """The project with every stage's outs in place and recorded in dvc.lock, as after a run."""
    for name in ("dvc.yaml", ".dvcignore", "params.yaml", "pipelines", "hdeval", "data"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    layers = load_params(REPO / "params.yaml").hierarchy.layers
    for stage in STAGES:
        keys = [str(n) for n in range(1, layers + 1)] if stage.per_layer else [""]
        for key in keys:
            for path in stage.out_paths(key) + [m.path for m in stage.metrics]:
                _placeholder(tmp_path, path)
    for stage in STAGES:
        for dep in stage.inputs(layers):
            if "${" not in dep:  # data.path and data.criteria: the shipped files
                _placeholder(tmp_path, dep)
    env = {"PATH": str(Path(DVC).parent) + ":/usr/bin:/bin", "HOME": str(tmp_path)}
    run([DVC, "init", "--no-scm", "-q"], tmp_path, env)
    run([DVC, "commit", "-f", "-q"], tmp_path, env)
    return tmp_path


def _change(root: Path, section: str, key: str, value: object) -> None:
    params = yaml.safe_load((root / "params.yaml").read_text())
    params[section][key] = value
    write_params(root, params)


def test_a_recorded_run_has_nothing_to_re_run(committed: Path) -> None:
    assert dvc_state(committed, {"labels"}).rerun == ("labels",)


def test_the_family_gain_re_runs_model_selection_and_what_follows_not_the_layers(
    committed: Path,
) -> None:
    _change(committed, "hierarchy", "min_family_gain", 0.5)
    rerun = set(dvc_state(committed, {"labels"}).rerun)
    assert {"evaluate", "train", "explain", "report"} <= rerun
    assert not rerun & {"prepare", *LAYERS}


def test_a_layer_param_re_runs_the_layers(committed: Path) -> None:
    _change(committed, "hierarchy", "children", 3)
    rerun = set(dvc_state(committed, {"labels"}).rerun)
    assert {*LAYERS, "evaluate", "train"} <= rerun
    assert "prepare" not in rerun
