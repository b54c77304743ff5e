"""dvc.yaml declares every dependency a stage reads, code included; params.yaml = code defaults."""

from __future__ import annotations

import yaml

from hdeval.params import Params
from tests.code_deps import REPO, code_closure


def _stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def _script(stage: dict) -> str:
    return stage["cmd"].split()[1]


def test_every_stage_depends_on_its_script_and_exactly_the_code_it_imports() -> None:
    for name, stage in _stages().items():
        stage = stage.get("do", stage)
        script = _script(stage)
        code = {d for d in stage["deps"] if d.startswith("hdeval/")}
        assert script in stage["deps"], name
        assert code == code_closure(REPO / script), name


def test_closure_follows_lazy_imports_and_packages() -> None:
    dhp = code_closure(REPO / "pipelines" / "dhp.py")
    assert {"hdeval/dhp/__init__.py", "hdeval/dhp/rules.py", "hdeval/prompts.py"} <= dhp
    assert "hdeval/prompts.py" not in code_closure(REPO / "pipelines" / "prepare.py")


def test_params_yaml_equals_the_code_defaults() -> None:
    written = yaml.safe_load((REPO / "params.yaml").read_text())
    assert Params.model_validate(written) == Params()
    assert set(written) == set(Params.model_fields)
